"""spack.yaml and packages.yaml of a site, built as data.

One small function per concern -- :func:`roots`, :func:`externals`,
:func:`repos`, :func:`install` -- so each rule (why the target is in the root
specs, why an external is ``name::``) sits next to the code that applies it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from torchmpi import gpuvendor, pairs, paths, torches
from torchmpi.lock import root_name as package_name
from torchmpi.site import Site
from torchmpi.yamltext import Block, Part, comment


def roots(site: Site) -> list[str]:
    """The environment's root specs: py-torch-mpi with the site's settings, then extra_specs.

    With ``torch: {versions: [...]}``, one py-torch-mpi root per release
    (``^py-torch@V``), each its own module; without it one root, whose torch
    is the newest the site allows.
    """
    d = site.data
    root = site.root_spec
    specs = [root, *d["extra_specs"]]
    if not site.is_local:
        # Spack adds a target outside the host's family (neoverse_v2 from an x86
        # host) to its candidates only when a root spec names it, even with
        # host_compatible: false; a packages.yaml requirement is not enough.
        # Named for every site file, not only cross-family ones, so that the
        # rendering does not depend on the machine that renders it.
        specs = [f"{spec} target={d['target']}" for spec in specs]
    releases = torches.versions(d)
    if releases:  # after the target: `^` starts the dependency's constraints
        specs = [f"{specs[0]} ^py-torch@={v}" for v in releases] + specs[1:]
    return specs


def externals(site: Site) -> dict[str, dict[str, Any]]:
    """packages.yaml entries for what the site provides: compilers, MPI, CUDA, libfabric, ...

    Site-provided pieces (compilers, MPI, CUDA, cuDNN, libfabric) are not
    buildable; entries under ``externals:`` are, unless they say otherwise.
    """
    d = site.data
    out: dict[str, dict[str, Any]] = {}

    def add(ext: dict[str, Any], buildable: bool) -> None:
        name = package_name(ext["spec"])
        entry = out.setdefault(name, {"buildable": buildable, "externals": []})
        entry["buildable"] = bool(ext.get("buildable", entry["buildable"]))
        item: dict[str, Any] = {"spec": ext["spec"]}
        if ext.get("prefix"):
            item["prefix"] = ext["prefix"]
        if ext.get("modules"):
            item["modules"] = list(ext["modules"])
        if ext.get("languages"):
            item["extra_attributes"] = {"compilers": dict(ext["languages"])}
        entry["externals"].append(item)

    for comp in d["compilers"]:
        spec = comp["spec"] + " languages=c,c++,fortran"
        for key in ("target", "os"):
            if comp.get(key):
                spec += f" {key}={comp[key]}"
        add(dict(comp, spec=spec), buildable=False)
    mpi = d["mpi"]
    if mpi.get("prefix") or mpi.get("modules"):
        spec = site.mpi_spec
        if mpi["kind"] == "cray-mpich" and site.amdgpu_targets:  # GTL for HSA: ROCmPackage
            spec += f" ~cuda +rocm amdgpu_target={','.join(site.amdgpu_targets)}"
        elif mpi["kind"] == "cray-mpich":  # a CudaPackage: GTL and cuda_arch must match
            spec += f" +cuda cuda_arch={site.cuda_arch}" if site.gpu else " ~cuda"
        elif mpi.get("variants"):  # what the centre's MPI is, e.g. +cuda (docs/sites.md)
            spec += f" {mpi['variants']}"
        add({"spec": spec, "prefix": mpi.get("prefix"), "modules": mpi.get("modules")}, False)
    if site.rocm:  # one prefix, several Spack packages (data/gpu_vendors.yaml)
        for name in gpuvendor.table()["amd"]["rocm_components"]:
            add({"spec": f"{name}@{site.rocm['version']}", "prefix": site.rocm["prefix"],
                 "modules": site.rocm.get("modules")}, buildable=False)
    if site.gpu:
        for key in ("cuda", "cudnn"):
            if site.gpu.get(key):
                add(site.gpu[key], buildable=False)
    if d.get("libfabric"):
        add(d["libfabric"], buildable=False)
    extra = d.get("externals", [])
    if extra == "auto":  # the local site: the host's build tools, found by Spack at render time
        from torchmpi import detect

        extra = detect.build_tools()
    for ext in extra:
        add(ext, buildable=True)
    return out


def repos(outdir: Path) -> dict[str, str]:
    """The torchmpi repository, relative to the environment directory (movable checkouts)."""
    try:
        rel = os.path.relpath(paths.torchmpi_repo(), outdir.resolve())
    except ValueError:  # another drive (Windows); keep it absolute
        rel = str(paths.torchmpi_repo())
    return {"torchmpi": rel}


def develop(outdir: Path) -> dict[str, Any]:
    """The ``develop:`` section: the torchmpi tool (py-torchmpi) from this checkout.

    py-torchmpi has no published release; ``spack develop`` makes Spack build
    it from the checkout and record the path (``dev_path``) in its spec.
    """
    from torchmpi import __version__

    try:
        rel = os.path.relpath(paths.root(), outdir.resolve())
    except ValueError:
        rel = str(paths.root())
    return {"py-torchmpi": {"spec": f"py-torchmpi@={__version__}", "path": rel}}


def mirrors(site: Site) -> dict[str, str]:
    """The ``mirrors:`` section: the site's build caches, from ``install.mirrors``."""
    return dict((site.data.get("install") or {}).get("mirrors") or {})


def install(site: Site) -> dict[str, Any]:
    """The ``config:`` section: the site's install tree, when it names one."""
    root = (site.data.get("install") or {}).get("root")
    return {"install_tree": {"root": root}} if root else {}


def _env_hint(outdir: Path) -> str:
    try:
        return str(outdir.resolve().relative_to(paths.root()))
    except ValueError:
        return str(outdir)


def spack_yaml(site: Site, outdir: Path) -> tuple[list[Part], dict[str, Any]]:
    """spack.yaml text parts and the data they must load back to."""
    env: dict[str, Any] = {
        "include": ["packages.yaml", "modules.yaml"],
        "repos": repos(outdir),
        "specs": roots(site),
        "view": False,
        "develop": develop(outdir),
    }
    site_mirrors = mirrors(site)
    if site_mirrors:
        env["mirrors"] = site_mirrors
    env_vars = site.runtime.spack()
    if env_vars:
        env["env_vars"] = env_vars
    several = len(torches.versions(site.data)) > 1
    # Several torch releases cannot be one DAG; `when_possible` solves what can
    # be shared (NCCL, MPI, Python, ...) once and only the rest per release.
    concretizer: dict[str, Any] = {"unify": "when_possible" if several else True}
    if not site.is_local:
        concretizer["targets"] = {"host_compatible": False}
    # What the requirements already rule out is left out of the problem, as in
    # the container environment (torchmpi.container.image): static analysis
    # prunes providers and conditional dependencies; Spack's own
    # test_static_analysis_in_environments checks the hashes do not change.
    # (Not duplicates: none: Frontier's DAG has two py-setuptools.)
    concretizer["static_analysis"] = True
    concretizer["concretization_cache"] = {"enable": False}
    env["concretizer"] = concretizer
    config = install(site)
    if torches.deprecated(site.data):  # builtin deprecates the releases with a fixture
        config["deprecated"] = True
    if config:
        env["config"] = config
    detected = ", ".join(f"{k}={v or 'none'}" for k, v in sorted(site.detected.items()))
    lines = [f"Spack environment for site '{site.name}': {site.data['description']}"]
    if detected:
        lines.append(f"Detected on the rendering host: {detected}")
    lines += [
        "Activate with the project's Spack (`. ./setup-env.sh`):",
        f"  spack env activate {_env_hint(outdir)} && spack concretize && spack install",
        "",
        "include: packages.yaml (compilers, externals, MPI and target requirements) and",
        "modules.yaml (module files: hierarchy, projections, site runtime variables).",
        "repos: the torchmpi package repository, relative to this directory; the",
        "builtin repository comes from the user scope that setup-env.sh configures.",
        "develop: the torchmpi tool (py-torchmpi) is built from this checkout.",
        "env_vars: the site's runtime variables (fabric defaults and the site file's",
        "`runtime`), set by `spack env activate`; modules.yaml sets the same on",
        "`module load py-torch-mpi` and runtime.sh exports them.",
    ]
    if several:
        lines += [(f"specs: one py-torch-mpi per torch release of the site file"
                  f" ({', '.join(torches.versions(site.data))}), each its own module;"),
                  "concretizer: unify when_possible, one NCCL and MPI where the releases",
                  "allow it, the rest once per release."]
    else:
        lines.append("concretizer: unify, one py-torch, NCCL and MPI for every root.")
    if torches.deprecated(site.data):
        lines.append("config deprecated: builtin deprecates "
                     f"{', '.join(torches.deprecated(site.data))}, which the site file names.")
    lines += [
    ]
    if not site.is_local:
        lines.append("host_compatible false: the compute nodes' CPU may not be this host's.")
    lines.append("static_analysis: what the requirements rule out is left out of the solve.")
    lines += [
        "concretization_cache off: Spack 1.1's cache can return stale solves after a",
        "package edit (spack/spack#51553); an unchanged re-solve is answered from spack.lock.",
    ]
    expected = {"spack": env}
    return [comment(*lines), Block(expected)], expected


def packages_yaml(site: Site) -> tuple[list[Part], dict[str, Any]]:
    """packages.yaml text parts (requirements, then externals) and their data."""
    d = site.data
    compiler = d["compilers"][0]["spec"]
    reqs: dict[str, Any] = {
        "all": {"require": [f"target={d['target']}"]},
        "c": {"require": [compiler]},
        "cxx": {"require": [compiler]},
        "fortran": {"require": [compiler]},
        "mpi": {"require": [site.mpi_spec]},
    }
    nccl = dict(d.get("nccl") or {})
    # An AMD site's RCCL is its ROCm release: the plugin is the one vouched with it.
    chosen = pairs.choose(nccl) if d["fabric"] == "slingshot" and not site.rocm else None
    picked = chosen is not None and (chosen.nccl, chosen.plugin) != (
        nccl.get("version"), nccl.get("plugin"))
    if chosen is not None:
        nccl = {"version": chosen.nccl, "plugin": chosen.plugin}
    pins: dict[str, Any] = {}
    if nccl.get("version"):
        pins["nccl"] = {"require": [f"@{nccl['version']}"]}
    if nccl.get("plugin"):
        pins["aws-ofi-nccl"] = {"require": [f"@{nccl['plugin']}"]}
    rccl = pairs.rccl(site.rocm["version"]) if site.rocm else None
    if rccl and d["fabric"] == "slingshot":
        pins["aws-ofi-nccl"] = {"require": [f"@{rccl.plugin}"]}
    else:
        rccl = None
    optional = {
        "py-networkx": {"require": ["~default"]},
        "py-torch": {"require": ["~valgrind"]},
    }
    # `name::` (quoted key 'name:') replaces what lower scopes say about it.
    ext = {f"{name}:": entry for name, entry in externals(site).items()}
    # Spack reads 'name:' as name, so a package with a site external carries
    # its requirement in that one entry (two keys are a duplicate-key error).
    for wanted in (pins, optional):
        for name in [n for n in wanted if f"{n}:" in ext]:
            entry = ext[f"{name}:"]
            ext[f"{name}:"] = {"buildable": entry["buildable"], **wanted.pop(name),
                               "externals": entry["externals"]}
    parts: list[Part] = [
        comment(f"Site facts for '{site.name}' as Spack package requirements and externals.",
                "Requirements use `require:` so a misspelt variant fails loudly."),
        "packages:\n",
        Block(reqs, 2),
    ]
    if rccl:
        # Worded as the pair's evidence is (a recipe is not a run): pairs.RCCL_EVIDENCE.
        why = [f"The aws-ofi-nccl plugin that {rccl.vouching} RCCL {rccl.rocm}",
               "(ROCm's release) for Slingshot (nccl-ss11's VOUCHED_RCCL_PAIRS,",
               "docs/design.md)."]
        parts += [comment(*why, indent=2), Block(pins, 2)]
    elif pins:
        why = ["The site's NCCL."]
        if nccl.get("plugin"):
            why = ["The site's NCCL and aws-ofi-nccl plugin: a pair a source vouches for",
                   "(nccl-ss11's VOUCHED_PAIRS, docs/design.md)."]
        if picked and chosen is not None:
            # Worded as the pair's evidence is (a deployed environment is not a run).
            why = ["The newest NCCL/aws-ofi-nccl pair vouched for Slingshot that the site",
                   f"file allows ({chosen.label}; nccl-ss11's VOUCHED_PAIRS, docs/design.md);",
                   "`nccl:` in the site file pins another."]
        parts += [comment(*why, indent=2), Block(pins, 2)]
    parts += [
        comment("Optional dependencies that torch does not use, kept out of every build:",
                "networkx's \"default\" extras (matplotlib, scipy, pandas, and through numba",
                "an LLVM build) and torch's Valgrind hooks (a debugging aid).", indent=2),
        Block(optional, 2),
        comment("`name:` (Spack's `name::`) replaces what lower scopes say about the",
                "package: the site file is the only source of its externals (a compiler",
                "that Spack auto-detected on the rendering host must not stand in for",
                "the site's).", indent=2),
        Block(ext, 2),
    ]
    return parts, {"packages": {**reqs, **pins, **optional, **ext}}
