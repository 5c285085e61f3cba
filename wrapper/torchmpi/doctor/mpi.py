"""Which MPI is in the process, and whether it can carry CUDA tensors.

The MPI is identified by the libraries the torch import really loaded (or,
failing that, what ``libtorch_cpu.so`` links), not by what happens to be on
``PATH``: a login shell often has a different MPI module than the one torch was
built against.  Cray MPICH names its library after the compiler family it was
built for, so all of these are Cray MPICH (HPE Cray PE ``/opt/cray/pe/lib64``):
``libmpi_cray.so.12`` (CCE), ``libmpi_gnu_<ver>.so.12`` (GNU, e.g. ``_123`` for
GCC 12.3 -- every shipped site uses gcc), ``libmpi_intel*``, ``libmpi_aocc*``,
``libmpi_nvidia*``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from torchmpi.doctor.core import FAIL, PASS, SKIP, WARN, Check, Runner

#: (kind, pattern on a library file name), first match wins; Cray before MPICH
#: because Cray MPICH also ships a libmpich.so.
_LIBRARY_KINDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("cray-mpich", re.compile(r"libmpi_(cray|gnu_\d+|intel\w*|aocc\w*|nvidia\w*)\.so")),
    ("openmpi", re.compile(r"lib(open-pal|open-rte)\.so|libmpi\.so\.40\b")),
    ("mpich", re.compile(r"libmpich\w*\.so|libmpi\.so\.12\b")),
)
_CRAY_FLAVOURS = {"cray": "CCE", "gnu": "GNU", "intel": "Intel", "aocc": "AOCC",
                  "nvidia": "NVIDIA"}


@dataclass
class MpiInfo:
    """The MPI found: kind (openmpi | mpich | cray-mpich | None), version, how we know."""

    kind: str | None
    version: str = ""
    source: str = ""
    library: str = ""  # the file that told us, when a library did


def classify_libraries(names: Iterable[str]) -> tuple[str, str] | None:
    """(kind, library) for the MPI among paths or ``ldd`` lines, else None.

    Kinds are tried in :data:`_LIBRARY_KINDS` order over all names, so Cray
    MPICH's ``libmpich.so`` alias loaded before ``libmpi_gnu_*`` is not plain MPICH.
    """
    names = [n.strip() for n in names if n.strip()]
    for kind, pattern in _LIBRARY_KINDS:
        for name in names:
            if pattern.search(name.split()[0].rsplit("/", 1)[-1]):
                return kind, name
    return None


def _cray_flavour(library: str) -> str:
    match = re.search(r"libmpi_([a-z]+)(?:_(\d+))?", library)
    if not match:
        return ""
    family = _CRAY_FLAVOURS.get(match.group(1), match.group(1))
    return f"{family} {match.group(2)}" if match.group(2) else family


def _path_version(library: str) -> str:
    match = re.search(r"/mpich/(\d+(?:\.\d+)+)/", library)
    return match.group(1) if match else ""


def identify_mpi(runner: Runner, env: Mapping[str, str], torch_ldd: str = "",
                 loaded: Iterable[str] = ()) -> MpiInfo:
    """Which MPI: loaded libraries, then torch's links, then Cray's module, then PATH tools."""
    found = classify_libraries(loaded)
    how = "loaded"
    if found is None:
        found = classify_libraries(torch_ldd.splitlines())
        how = "linked into libtorch_cpu.so"
    kind, library = found if found else (None, "")
    if kind is None and (env.get("CRAY_MPICH_VERSION") or env.get("CRAY_MPICH_DIR")):
        return MpiInfo("cray-mpich", env.get("CRAY_MPICH_VERSION", ""),
                       "cray-mpich module (no MPI library loaded by torch)")
    if kind == "cray-mpich":
        version = _path_version(library) or env.get("CRAY_MPICH_VERSION", "")
        flavour = _cray_flavour(library)
        lib = library.split()[0].rsplit("/", 1)[-1]
        return MpiInfo(kind, version, f"{how}: {lib}" + (f", {flavour} build" if flavour else ""),
                       library)
    ompi = runner(["ompi_info", "--version"]) if kind in (None, "openmpi") else None
    if ompi is not None and ompi.returncode == 0:
        match = re.search(r"Open MPI v?(\S+)", ompi.stdout)
        source = f"{how} + ompi_info" if kind else "ompi_info on PATH"
        return MpiInfo("openmpi", match.group(1) if match else "", source, library)
    mpich = runner(["mpichversion"]) if kind in (None, "mpich") else None
    if mpich is not None and mpich.returncode == 0:
        match = re.search(r"MPICH Version:\s*(\S+)", mpich.stdout)
        source = f"{how} + mpichversion" if kind else "mpichversion on PATH"
        return MpiInfo("mpich", match.group(1) if match else "", source, library)
    if kind:
        return MpiInfo(kind, "", how, library)
    return MpiInfo(None)


def check_mpi_implementation(mpi: MpiInfo) -> Check:
    if mpi.kind is None:
        return Check("mpi.implementation", FAIL,
                     "no MPI found (not loaded by torch; no ompi_info/mpichversion on PATH)",
                     "load the site's MPI module (the one py-torch-mpi was built with)")
    names = {"openmpi": "Open MPI", "mpich": "MPICH", "cray-mpich": "Cray MPICH"}
    version = f" {mpi.version}" if mpi.version else ""
    return Check("mpi.implementation", PASS, f"{names[mpi.kind]}{version} (from {mpi.source})")


_CUDA_SUPPORT = re.compile(
    r"^mca:(?:mpi|opal):base:param:(?:mpi|opal)_built_with_cuda_support:value:(\w+)",
    re.MULTILINE)


def openmpi_cuda_support(ompi_info_all: str) -> bool | None:
    """``ompi_info --parsable --all`` -> whether Open MPI was built with CUDA support."""
    match = _CUDA_SUPPORT.search(ompi_info_all)
    return None if match is None else match.group(1) == "true"


def check_openmpi_cuda_aware(mpi: MpiInfo, runner: Runner, gpu_count: int,
                             design: str | None = None) -> Check:
    """Open MPI's CUDA support; not a failure where ``design`` routes CUDA tensors via NCCL."""
    name = "mpi.cuda_aware"
    if mpi.kind != "openmpi":
        return Check(name, SKIP, "not Open MPI (see mpi.cray_gpu for Cray MPICH)")
    result = runner(["ompi_info", "--parsable", "--all"])
    aware = openmpi_cuda_support(result.stdout) if result is not None else None
    if aware is None:
        return Check(name, WARN, "could not read mpi_built_with_cuda_support from ompi_info",
                     "run: ompi_info --parsable --all | grep mpi_built_with_cuda_support")
    if aware:
        return Check(name, PASS, "Open MPI is CUDA-aware (mpi_built_with_cuda_support=true)")
    detail = ("Open MPI is not CUDA-aware (mpi_built_with_cuda_support=false): "
              "CUDA tensors over the MPI backend will be rejected")
    fix = "use the site's openmpi-cuda (Open MPI +cuda), or NCCL for CUDA tensors"
    if design:
        return Check(name, PASS, f"Open MPI is not CUDA-aware, as designed: {design}")
    return Check(name, FAIL if gpu_count else WARN,
                 detail if gpu_count else detail + "; fine for CPU tensors", fix)


GPU_SWITCH = "MPICH_GPU_SUPPORT_ENABLED"


def gtl_linked(torch_ldd: str, env: Mapping[str, str], loaded: Iterable[str] = ()) -> bool:
    """Is Cray's GPU transport layer in the process: loaded (py-torch ``+cuda_aware_mpi`` loads it
    when torch is imported on a node with a CUDA driver), linked into torch, or preloaded?"""
    return any("libmpi_gtl_cuda" in text
               for text in (torch_ldd, env.get("LD_PRELOAD", ""), *loaded))


def check_cray_gpu_support(mpi: MpiInfo, env: Mapping[str, str], torch_ldd: str,
                           loaded: Iterable[str] = ()) -> Check:
    """Cray MPICH needs GTL in the process *and* MPICH_GPU_SUPPORT_ENABLED=1, or neither."""
    name = "mpi.cray_gpu"
    value = env.get(GPU_SWITCH)
    if mpi.kind != "cray-mpich" and value is None:
        return Check(name, SKIP, "not Cray MPICH")
    gtl = gtl_linked(torch_ldd, env, loaded)
    if value not in (None, "0", "1"):
        return Check(name, WARN,
                     f"{GPU_SWITCH}={value!r} is neither 0 nor 1; GTL is "
                     f"{'loaded' if gtl else 'not loaded'}, so it must be "
                     f"{'1' if gtl else '0 (or unset)'}",
                     f"export {GPU_SWITCH}={'1' if gtl else '0'}")
    enabled = value == "1"
    if enabled and not gtl:
        return Check(
            name, FAIL,
            f"{GPU_SWITCH}=1 but libmpi_gtl_cuda is not loaded (by torch's import, a link or "
            "LD_PRELOAD): MPI_Init aborts ('GTL library is not linked')",
            "use a py-torch-mpi built +cuda_aware_mpi (its torch loads GTL on a GPU node), "
            "or LD_PRELOAD "
            f"$CRAY_MPICH_ROOTDIR/gtl/lib/libmpi_gtl_cuda.so, or set {GPU_SWITCH}=0",
        )
    if gtl and not enabled:
        shown = "unset" if value is None else f"={value}"
        return Check(name, FAIL,
                     f"libmpi_gtl_cuda is loaded but {GPU_SWITCH} is {shown}, not 1: "
                     "CUDA buffers passed to MPI segfault without a message",
                     f"export {GPU_SWITCH}=1 (or 0 and pass only CPU tensors to MPI)")
    if enabled:
        return Check(name, PASS, f"GPU-aware Cray MPICH: GTL loaded and {GPU_SWITCH}=1")
    shown = "unset" if value is None else "0"
    return Check(name, PASS, f"GPU support off (no GTL, {GPU_SWITCH} {shown}): "
                             "MPI carries CPU tensors, NCCL the CUDA ones")
