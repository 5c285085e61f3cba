"""Render a site into a Spack environment directory, deterministically.

Each rendered file starts with a header: the tool version, the Spack and
builtin-repo pins, the sha256 of the site file and the sha256 of the body
below the header.  The body hash is how a hand edit is recognised: a file whose
body no longer matches its own recorded hash was changed after rendering, and
is only overwritten with ``--force``.  Files are written to a temporary name in
the same directory and renamed, so an interrupted render never leaves half a
file; all checks run before the first write, so a refused render writes nothing.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
import shlex
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from torchmpi import __version__, paths
from torchmpi import modules as modmod
from torchmpi.errors import UserError
from torchmpi.site import Site

#: Rendered files, in the order they are written and diffed.
FILES = ("spack.yaml", "packages.yaml", "modules.yaml", "runtime.sh")

_BODY_RE = re.compile(r"^# body-sha256: ([0-9a-f]{64})$", re.MULTILINE)


def _q(value: Any) -> str:
    """A YAML scalar: JSON strings are valid YAML and need no escaping rules of their own."""
    return json.dumps(str(value))


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(paths.templates_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters["q"] = _q
    env.filters["sh"] = lambda v: shlex.quote(str(v))
    return env


def _pkg_name(spec: str) -> str:
    return re.split(r"[@%+~ ^]", spec.strip(), maxsplit=1)[0]


def context(site: Site, outdir: Path) -> dict[str, Any]:
    """Everything the templates need, computed here so templates stay declarative."""
    d = site.data
    arch = site.cuda_arch
    mpi = d["mpi"]
    gpu = site.gpu

    root = "py-torch-mpi"
    if gpu:
        root += f" +cuda cuda_arch={arch}"
        # Explicit either way: the solver does not have to honour a variant default.
        root += " +cuda_aware_mpi" if mpi.get("cuda_aware", True) else " ~cuda_aware_mpi"
    else:
        root += " ~cuda"
    root += f" fabric={d['fabric']}"
    specs = [root, *d.get("extra_specs", [])]
    if site.name != "local":
        # Spack adds a target outside the host's family (neoverse_v2 from an x86
        # host) to its candidates only when a root spec names it, even with
        # host_compatible: false; a packages.yaml requirement is not enough.
        specs = [f"{spec} target={d['target']}" for spec in specs]

    externals: dict[str, dict[str, Any]] = {}

    def add(ext: dict[str, Any], buildable: bool) -> None:
        name = _pkg_name(ext["spec"])
        entry = externals.setdefault(name, {"buildable": buildable, "externals": []})
        entry["buildable"] = bool(ext.get("buildable", entry["buildable"]))
        entry["externals"].append({
            "spec": ext["spec"],
            "prefix": ext.get("prefix"),
            "modules": ext.get("modules") or [],
            "languages": ext.get("languages") or {},
        })

    compilers = d["compilers"]
    for comp in compilers:
        spec = comp["spec"] + " languages=c,c++,fortran"
        for key in ("target", "os"):
            if comp.get(key):
                spec += f" {key}={comp[key]}"
        add(dict(comp, spec=spec), buildable=False)

    version = f"@{mpi['version']}" if mpi.get("version") else ""
    mpi_req = mpi["kind"] + version
    if mpi.get("prefix") or mpi.get("modules"):
        spec = mpi_req
        if mpi["kind"] == "cray-mpich":  # a CudaPackage: GTL and cuda_arch must match
            spec += f" +cuda cuda_arch={arch}" if gpu else " ~cuda"
        add({"spec": spec, "prefix": mpi.get("prefix"), "modules": mpi.get("modules")}, False)
    if gpu:
        for key in ("cuda", "cudnn"):
            if gpu.get(key):
                add(gpu[key], buildable=False)
    if d.get("libfabric"):
        add(d["libfabric"], buildable=False)
    for ext in d.get("externals", []):
        add(ext, buildable=True)

    try:
        repo_rel = os.path.relpath(paths.torchmpi_repo(), outdir.resolve())
    except ValueError:  # another drive (Windows); keep it absolute
        repo_rel = str(paths.torchmpi_repo())
    try:
        env_hint = str(outdir.resolve().relative_to(paths.root()))
    except ValueError:
        env_hint = str(outdir)
    detected = ", ".join(f"{k}={v or 'none'}" for k, v in sorted(site.detected.items()))
    return {
        "site": site,
        "specs": specs,
        "externals": externals,
        "compiler_req": compilers[0]["spec"],
        "mpi_req": mpi_req,
        "nccl": d.get("nccl") or {},
        "repo_relpath": repo_rel,
        "env_hint": env_hint,
        "cross_target": site.name != "local",
        "runtime": d.get("runtime"),
        "modules": modmod.context(d),
        "install": {"root": None, "modules_root": None, **d.get("install", {})},
        "detected": detected,
    }


def _site_label(site: Site) -> str:
    try:
        return str(site.path.resolve().relative_to(paths.root()))
    except ValueError:
        return site.path.name


def header(site: Site, body: str) -> str:
    pins = paths.pins()
    return (
        f"# Rendered by torchmpi {__version__} from {_site_label(site)}; do not edit by hand:\n"
        f"# change the site file and run `torchmpi render {site.name}` (docs/sites.md).\n"
        f"# spack {pins.get('TORCHMPI_SPACK_TAG', '?')},"
        f" builtin spack-packages {pins.get('TORCHMPI_SPACK_PACKAGES_TAG', '?')}\n"
        f"# site-sha256: {site.sha256}\n"
        f"# body-sha256: {hashlib.sha256(body.encode()).hexdigest()}\n"
    )


def render(site: Site, outdir: Path) -> dict[str, str]:
    """File name -> full text (header + body) for one site."""
    env = _environment()
    ctx = context(site, outdir)
    out = {}
    for name in FILES:
        body = env.get_template(f"{name}.j2").render(ctx)
        out[name] = header(site, body) + body
    return out


def hand_edited(text: str) -> bool:
    """True if a file is not ours or its body was changed after rendering."""
    match = _BODY_RE.search(text)
    if not match:
        return True
    body = text[match.end() + 1:]
    return hashlib.sha256(body.encode()).hexdigest() != match.group(1)


@dataclass
class Result:
    written: list[str]
    unchanged: list[str]


def diff(outdir: Path, files: dict[str, str]) -> str:
    """Unified diff, committed -> fresh render; empty when they agree."""
    chunks = []
    for name, new in files.items():
        path = outdir / name
        old = path.read_text() if path.is_file() else ""
        if old != new:
            chunks.extend(difflib.unified_diff(
                old.splitlines(keepends=True), new.splitlines(keepends=True),
                fromfile=f"{path} (on disk)" if old else f"{path} (missing)",
                tofile=f"{path} (fresh render)",
            ))
    return "".join(chunks)


def write(outdir: Path, files: dict[str, str], force: bool = False) -> Result:
    """Write the rendered files atomically; refuse to clobber hand edits unless forced."""
    try:
        outdir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"{outdir}: cannot create the output directory: {err.strerror}") from None
    if not os.access(outdir, os.W_OK | os.X_OK):
        raise UserError(f"{outdir}: output directory is not writable")
    changed, unchanged, edited = [], [], []
    for name, text in files.items():
        path = outdir / name
        old = path.read_text() if path.is_file() else None
        if old == text:
            unchanged.append(name)
            continue
        if old is not None and hand_edited(old):
            edited.append(name)
        changed.append(name)
    if edited and not force:
        raise UserError(
            f"{outdir}: {', '.join(edited)} edited by hand since it was rendered;"
            " move the change into the site file, or re-run with --force to overwrite it"
        )
    temps = []
    try:
        for name in changed:
            fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=outdir)
            with os.fdopen(fd, "w") as fh:
                fh.write(files[name])
            os.chmod(tmp, 0o644)
            temps.append((tmp, outdir / name))
    except OSError as err:
        for tmp, _ in temps:
            os.unlink(tmp)
        raise UserError(f"{outdir}: cannot write: {err.strerror}") from None
    for tmp, dest in temps:
        os.replace(tmp, dest)
    return Result(written=changed, unchanged=unchanged)


def default_outdir(site: Site) -> Path:
    return paths.environments_dir() / site.name
