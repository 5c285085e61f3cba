"""The image recipe: the self-contained container ``spack.yaml`` and the Containerfile.

Both are built as data (the environment as a dict, the Containerfile as a list of
instructions) and parsed back before they are written.
"""

from __future__ import annotations

import copy
import re
import shlex
from typing import Any

from torchmpi import __version__, gpuvendor, paths
from torchmpi.container.plan import (
    ENV_DIR,
    GPU_IMAGES,
    OS_IMAGES,
    PACKAGES_DIR,
    SPACK_DIR,
    SPACK_PYTHON,
    TORCHMPI_DIR,
    Plan,
    _cuda_version,
)
from torchmpi.errors import InternalError, UserError
from torchmpi.site import Site
from torchmpi.yamltext import Block, comment, document

# -- spack.yaml ------------------------------------------------------------------------------


def roots(site: Site, p: Plan) -> list[str]:
    """The container environment's roots: the site's, at the image's generic target, as
    :meth:`Site.image_roots` answers for the image's MPI (``Plan.device_buffers``)."""
    return site.image_roots(p.target, p.device_buffers)


#: The container environment's solver settings.  Every node is required at one
#: generic target and the compiler, MPI and pair are required, so three settings
#: let Spack leave out of the problem what those requirements exclude:
#: ``targets: granularity: generic`` (the ~30 microarchitectures of the family;
#: etc/spack/defaults/base/concretizer.yaml at spack v1.1.0: "the time needed to
#: reach a solution increases noticeably with the number of targets"),
#: ``static_analysis`` (providers and conditional dependencies the requirements
#: rule out; lib/spack/spack/solver/input_analysis.py ``StaticAnalysis``, whose
#: own test, lib/spack/spack/test/env.py ``test_static_analysis_in_environments``,
#: checks the hashes do not change) and ``duplicates: none`` (one node per
#: package, as an image holds one stack: ``unify: true``; "minimal" also weighs a
#: second copy of build tools, which none of the five sites' DAGs has; a solve
#: that would need one fails in tests/test_container_solve.py rather than
#: growing the image).  Measured: the same concrete DAG for every site, about
#: 40 % less solver time together, in the image's build as in the tests
#: (docs/performance.md).  No solver cache (spack/spack#51553).
_CONCRETIZER: dict[str, Any] = {
    "unify": True,
    "targets": {"host_compatible": False, "granularity": "generic"},
    "static_analysis": True,
    "duplicates": {"strategy": "none"},
    "concretization_cache": {"enable": False},
}


def rocm_libraries(site: Site) -> list[str]:
    """Specs of the site file's ``externals`` that live in its ROCm (``gpu.rocm.prefix``):
    ROCm's own libraries a site takes from its ROCm where builtin lacks the release
    (RCCL, rocBLAS, ...).  The image takes the same from its ROCm, the ``complete``
    image's ``rocm-libs``."""
    if not site.rocm:
        return []
    entries = site.data.get("externals")
    home = str(site.rocm["prefix"]).rstrip("/")
    return [str(e["spec"]) for e in (entries if isinstance(entries, list) else [])
            if str(e.get("prefix", "")).rstrip("/") == home]


def spack_env(site: Site, p: Plan) -> dict[str, Any]:
    """The container environment as data (in-image paths only)."""
    gcc = OS_IMAGES[p.os]["gcc"]
    compiler = {
        # The compiler node obeys `all: require: target=...` like every node.
        "spec": f"gcc@{gcc} languages=c,c++,fortran os={p.os} target={p.target}",
        "prefix": "/usr",
        "extra_attributes": {"compilers": {"c": "/usr/bin/gcc", "cxx": "/usr/bin/g++",
                                           "fortran": "/usr/bin/gfortran"}},
    }
    packages: dict[str, Any] = {
        "all": {"require": [f"target={p.target}"]},
        "c": {"require": [f"gcc@{gcc}"]},
        "cxx": {"require": [f"gcc@{gcc}"]},
        "fortran": {"require": [f"gcc@{gcc}"]},
        "mpi": {"require": [p.mpi.split()[0]]},
        "gcc:": {"buildable": False, "externals": [compiler]},
        "py-networkx": {"require": ["~default"]},
        "py-torch": {"require": ["~valgrind"]},
    }
    if p.mpi.startswith("mpich"):
        packages["mpich"] = {"require": [p.mpi]}
    if "+xpmem" in p.mpi.split():
        packages["xpmem"] = {"require": ["~kernel-module"]}
    cuda = _cuda_version(site)
    if cuda:
        packages["cuda:"] = {"buildable": False,
                             "externals": [{"spec": f"cuda@{cuda}", "prefix": "/usr/local/cuda"}]}
    if site.rocm:
        # The image's ROCm, the same components the native AMD site takes from its
        # ROCm (data/gpu_vendors.yaml), at the prefix the ROCm image installs them in.
        rocm = str(site.rocm["version"])
        prefix = str(GPU_IMAGES["amd"]["prefix"]).format(version=rocm)
        for name in gpuvendor.table()["amd"]["rocm_components"]:
            packages[f"{name}:"] = {"buildable": False,
                                    "externals": [{"spec": f"{name}@{rocm}", "prefix": prefix}]}
        for spec in rocm_libraries(site):  # from the `complete` image (base_images)
            packages[f"{spec.split('@')[0]}:"] = {"buildable": False,
                                                  "externals": [{"spec": spec, "prefix": prefix}]}
    if p.nccl.get("rccl"):  # beside the image's external where it has one (one key)
        key = "rccl:" if "rccl:" in packages else "rccl"
        packages[key] = {**packages.get(key, {}), "require": [f"@{p.nccl['rccl']}"]}
    if p.nccl.get("version"):
        packages["nccl"] = {"require": [f"@{p.nccl['version']}"]}
    if p.nccl.get("plugin"):
        packages["aws-ofi-nccl"] = {"require": [f"@{p.nccl['plugin']}"]}
    return {"spack": {
        "specs": roots(site, p),
        "packages": packages,
        "repos": {"torchmpi": f"{TORCHMPI_DIR}/spack_repo/torchmpi",
                  "builtin": f"{PACKAGES_DIR}/repos/spack_repo/builtin"},
        "develop": {"py-torchmpi": {"spec": f"py-torchmpi@={__version__}",
                                    "path": TORCHMPI_DIR}},
        "concretizer": copy.deepcopy(_CONCRETIZER),
        "config": {"install_tree": {"root": "/opt/software"},
                   "shared_linking": {"type": "runpath"}},
        "view": "/opt/views/view",
    }}


def spack_yaml(site: Site, p: Plan) -> str:
    data = spack_env(site, p)
    lines = [
        f"Container environment for site '{site.name}' (runtime {p.runtime}): built in the",
        "image by the Containerfile beside it; every path is a path inside the image.",
        f"target {p.target}: generic for the site's {site.data['target']}, so the image runs",
        "on any node of the family and builds on any host of it.",
        f"mpi {p.mpi}: " + ("MPICH as CSCS builds it for CE; the CXI hook injects"
                            " libfabric and xpmem under it." if p.runtime == "ce"
                            else "an ABI stand-in; the host's Cray MPICH (lib-abi-mpich)"
                            " replaces it at run time." if p.mpi.startswith("mpich")
                            else "the centre's release; the centre's own Open MPI, bound"
                            " in, replaces it at run time." if p.launch
                            else "built in the image, nothing injected."),
        "shared_linking runpath: LD_LIBRARY_PATH (the injected host libraries) outranks",
        "the image's own library paths (DT_RPATH would not let it).",
        ("externals: only the base image's gcc (/usr) and ROCm components"
         f" ({GPU_IMAGES['amd']['prefix'].format(version=site.rocm['version'])})."
         if site.rocm else
         "externals: only the base image's gcc (/usr) and CUDA (/usr/local/cuda)."),
        "concretizer: generic targets, static analysis and no duplicate nodes leave out",
        "of the solve what the requirements exclude (same DAG, faster; docs/performance.md).",
    ]
    return document([comment(*lines), Block(data)], data, "spack.yaml")


# -- Containerfile ---------------------------------------------------------------------------

def _pins() -> tuple[str, str, str]:
    pins = paths.pins()
    clingo = "5.8.3"
    req = paths.root() / "requirements.txt"
    if req.is_file():
        match = re.search(r"^clingo==(\S+)", req.read_text(), re.MULTILINE)
        clingo = match.group(1) if match else clingo
    return pins["TORCHMPI_SPACK_TAG"], pins["TORCHMPI_SPACK_PACKAGES_TAG"], clingo


def base_images(site: Site, p: Plan) -> tuple[str, str]:
    """(build, final) images, pinned: the GPU vendor's images at the site's CUDA or ROCm
    release (data/containers/base_images.yaml), the OS's own image without a GPU."""
    box = site.data["container"]
    cuda = _cuda_version(site)
    release = str(site.rocm["version"]) if site.rocm else cuda
    if release:
        images = GPU_IMAGES[str(site.gpu_vendor)]
        build = images["build"][p.os].format(version=release)
        final = images["final"][p.os].format(version=release)
        if rocm_libraries(site):
            build = final = images["complete"][p.os].format(version=release)
    else:
        build = final = OS_IMAGES[p.os]["cpu"]
    return box.get("base", build), box.get("final", final)


def labels(site: Site, p: Plan) -> dict[str, str]:
    spack, packages, _ = _pins()
    out = {
        "org.torchmpi.version": __version__,
        "org.torchmpi.site": site.name,
        "org.torchmpi.site-sha256": site.sha256,
        "org.torchmpi.spack": spack,
        "org.torchmpi.spack-packages": packages,
        "org.torchmpi.runtime": p.runtime,
        "org.torchmpi.mpi": p.mpi,
        "org.torchmpi.target": p.target,
    }
    if p.nccl.get("rccl"):
        out["org.torchmpi.rccl"] = p.nccl["rccl"]
    if p.nccl.get("version"):
        out["org.torchmpi.nccl"] = p.nccl["version"]
    if p.nccl.get("plugin"):
        out["org.torchmpi.aws-ofi-nccl"] = p.nccl["plugin"]
    return out


Instruction = tuple[str, str]


def containerfile_instructions(site: Site, p: Plan) -> list[Instruction]:
    """The Containerfile as (INSTRUCTION, arguments), the data the text must parse back to."""
    _, _, clingo = _pins()  # the Spack trees come from the build context, at the pins
    build, final = base_images(site, p)
    spack = f"SPACK_PYTHON={SPACK_PYTHON}/bin/python {SPACK_DIR}/bin/spack"
    os_pkgs = ("build-essential gfortran python3 python3-venv git curl ca-certificates"
               " file patch unzip xz-utils bzip2")
    out: list[Instruction] = [
        ("FROM", f"{build} AS bootstrap"),
        ("RUN", ("apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y"
                 f" --no-install-recommends {os_pkgs} && rm -rf /var/lib/apt/lists/*")),
        ("RUN", (f"python3 -m venv {SPACK_PYTHON} && {SPACK_PYTHON}/bin/pip install"
                 f" --no-cache-dir clingo=={clingo}")),
        # Build context (scripts/container-context.sh): the pinned trees, no .git.
        ("COPY", f"spack {SPACK_DIR}"),
        ("COPY", f"spack-packages {PACKAGES_DIR}"),
        ("FROM", "bootstrap AS build"),
        ("COPY", f"torchmpi {TORCHMPI_DIR}"),
        ("COPY", f"spack.yaml {ENV_DIR}/spack.yaml"),
        ("WORKDIR", ENV_DIR),
        ("RUN", (f"{spack} -e . concretize && {spack} -e . install --fail-fast"
                 f" && {spack} -e . gc -y && {spack} -e . env activate --sh -d ."
                 " > activate.sh")),
        ("FROM", f"{final} AS final"),
        ("COPY", "--from=build /opt/software /opt/software"),
        ("COPY", "--from=build /opt/views /opt/views"),
        ("COPY", f"--from=build {ENV_DIR} {ENV_DIR}"),
    ]
    if site.gpu and not site.rocm:
        # CSCS known issue: the cuda-dl plugin dlopens the unversioned libcudart.so
        # (eth-cscs/cscs-docs docs/software/container-engine/known-issue.md).
        lib = "/usr/local/cuda/lib64"
        link = (f'test -e {lib}/libcudart.so || ln -s'
                f' "$(ls {lib}/libcudart.so.* | head -n 1)" {lib}/libcudart.so')
        out.append(("RUN", link))
    out.append(("LABEL", " ".join(f"{k}={shlex.quote(v)}" for k, v in labels(site, p).items())))
    out.append(("ENTRYPOINT", '["/bin/bash", "-c", ". ' + ENV_DIR + '/activate.sh && exec'
                              ' \\"$@\\"", "--"]'))
    out.append(("CMD", '["python", "-c", "import torch; print(torch.__version__)"]'))
    return out


def parse_containerfile(text: str) -> list[Instruction]:
    """(INSTRUCTION, arguments) of a Containerfile: comments dropped, continuations joined."""
    out: list[Instruction] = []
    pending = ""
    for line in text.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1]
            continue
        line, pending = pending + line, ""
        word, _, rest = line.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def check_containerfile(instructions: list[Instruction]) -> list[str]:
    """What makes a Containerfile unfit: unpinned FROM, unknown stages, NCCL/FI ENV."""
    errors, stages = [], set()
    for word, args in instructions:
        if word == "FROM":
            image, _, name = args.partition(" AS ")
            if image not in stages:
                tag = image.rsplit("/", 1)[-1].partition(":")[2]
                if not tag or tag in ("latest", "develop"):
                    errors.append(f"FROM {image}: not pinned to a release tag")
            stages.add(name.strip())
        elif word == "COPY" and args.startswith("--from="):
            stage = args.split()[0].split("=", 1)[1]
            if stage not in stages:
                errors.append(f"COPY {args}: no earlier stage {stage!r}")
        elif word == "ENV" and re.search(r"(^|\s)(NCCL_|FI_)", args):
            errors.append(f"ENV {args}: NCCL/libfabric settings belong to the descriptor")
    return errors


def containerfile(site: Site, p: Plan) -> str:
    instructions = containerfile_instructions(site, p)
    text = comment(
        f"Image for site '{site.name}': bootstrap (pinned Spack + clingo), build (the",
        "container spack.yaml), final ("
        + ("ROCm" if site.rocm else "CUDA runtime") + " + /opt/software, /opt/views).",
        "Build context: `scripts/container-context.sh DIR` puts spack/, spack-packages/",
        "and torchmpi/ beside this file (docs/containers.md).",
        "No NCCL_*/FI_* ENV here: the run-time descriptor sets them (in CE the image's",
        "environment would outrank the host's).",
    ) + "".join(f"{w} {a}\n" for w, a in instructions)
    if parse_containerfile(text) != instructions:
        raise InternalError("Containerfile: the rendered text does not parse back to its"
                        " instructions; nothing was written (a torchmpi bug, please report it)")
    errors = check_containerfile(instructions)
    if errors:
        raise UserError("Containerfile: " + "; ".join(errors))
    return text
