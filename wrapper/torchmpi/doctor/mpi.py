"""Which MPI torch loads, and whether it can carry CUDA tensors.

The MPI is identified by the libraries the torch import really loaded (or,
failing that, what ``libtorch_cpu.so`` links), never by what happens to be on
``PATH``: a login shell often has a different MPI module than the one torch was
built against, and a pip torch has no MPI at all (its verdict is backend.mpi's,
once).  Open MPI's version and CUDA support come from the ``ompi_info`` of that
same installation.  Cray MPICH names its library after the compiler family it was
built for, so all of these are Cray MPICH (HPE Cray PE ``/opt/cray/pe/lib64``):
``libmpi_cray.so.12`` (CCE), ``libmpi_gnu_<ver>.so.12`` (GNU, e.g. ``_123`` for
GCC 12.3 -- every shipped site uses gcc), ``libmpi_intel*``, ``libmpi_aocc*``,
``libmpi_nvidia*``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

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
    """The MPI torch loads: kind (openmpi | mpich | cray-mpich | None), version, how we know."""

    kind: str | None
    version: str = ""
    source: str = ""
    library: str = ""  # the file that told us, when a library did
    #: ``ompi_info --parsable --all`` of *that* Open MPI ("" when none was found)
    ompi_all: str = ""


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


def library_path(name: str) -> str:
    """The file of a maps path or an ``ldd`` line (``libmpi.so.40 => /x/libmpi.so.40 (0x..)``)."""
    return name.split("=>", 1)[1].split()[0] if "=>" in name else name.split()[0]


def _cray_flavour(library: str) -> str:
    match = re.search(r"libmpi_([a-z]+)(?:_(\d+))?", library)
    if not match:
        return ""
    family = _CRAY_FLAVOURS.get(match.group(1), match.group(1))
    return f"{family} {match.group(2)}" if match.group(2) else family


def _path_version(library: str) -> str:
    match = re.search(r"/mpich/(\d+(?:\.\d+)+)/", library)
    return match.group(1) if match else ""


def _beside(library: str, tool: str) -> list[str]:
    """``<prefix>/bin/<tool>`` for the library's directory and its real directory."""
    dirs = (os.path.dirname(library), os.path.dirname(os.path.realpath(library)))
    return list(dict.fromkeys(os.path.join(os.path.dirname(d), "bin", tool) for d in dirs))


def same_open_mpi(parsable: str, library: str) -> bool:
    """Is ``library`` the libmpi of the Open MPI whose ``ompi_info --parsable`` this is?

    Its ``path:libdir`` must hold that very file (symlinks resolved): Debian's
    ``/usr/lib/<triplet>/openmpi/lib/libmpi.so`` links to the ``libmpi.so.40`` one
    directory up, which is what a process maps.
    """
    match = re.search(r"^path:libdir:(.+)$", parsable, re.MULTILINE)
    if not match:
        return False
    libdir, real = match.group(1).strip(), os.path.realpath(library)
    if os.path.realpath(libdir) == os.path.dirname(real):
        return True
    names = {"libmpi.so", "libmpi.so.40", os.path.basename(library)}
    return any(os.path.realpath(os.path.join(libdir, n)) == real for n in names)


def _own_ompi_info(library: str, runner: Runner) -> tuple[str, str]:
    """(ompi_info used, its ``--parsable --all``) for *this* Open MPI, or ("", "").

    The one beside the library first, then the one on ``PATH`` -- accepted only
    when its libdir holds the library: an Open MPI module on ``PATH`` that torch
    does not load must not speak for the one it does.
    """
    for tool in (*_beside(library, "ompi_info"), "ompi_info"):
        result = runner([tool, "--parsable", "--all"])
        if result is not None and result.returncode == 0 and same_open_mpi(result.stdout,
                                                                            library):
            return tool, result.stdout
    return "", ""


def identify_mpi(runner: Runner, env: Mapping[str, str], torch_ldd: str = "",
                 loaded: Iterable[str] = ()) -> MpiInfo:
    """The MPI torch loads: the libraries mapped, else those libtorch_cpu.so links.

    Nothing else counts: an MPI module or ``mpirun`` on ``PATH`` says nothing
    about what torch uses (a pip torch uses none).  A version comes from the
    library's path (Cray) or from that same installation's tool.
    """
    found = classify_libraries(loaded)
    how = "loaded"
    if found is None:
        found = classify_libraries(torch_ldd.splitlines())
        how = "linked into libtorch_cpu.so"
    if found is None:
        return MpiInfo(None)
    kind, library = found[0], library_path(found[1])
    lib = library.rsplit("/", 1)[-1]
    if kind == "cray-mpich":
        version = _path_version(library) or env.get("CRAY_MPICH_VERSION", "")
        flavour = _cray_flavour(library)
        return MpiInfo(kind, version, f"{how}: {lib}" + (f", {flavour} build" if flavour else ""),
                       library)
    if kind == "openmpi":
        tool, parsable = _own_ompi_info(library, runner)
        match = re.search(r"^ompi:version:full:(\S+)", parsable, re.MULTILINE)
        source = f"{how}: {library}" + (f", {tool}" if tool else "")
        return MpiInfo(kind, match.group(1) if match else "", source, library, parsable)
    for tool in _beside(library, "mpichversion"):
        result = runner([tool])
        match = re.search(r"MPICH Version:\s*(\S+)", result.stdout) if result else None
        if result is not None and result.returncode == 0 and match:
            return MpiInfo(kind, match.group(1), f"{how}: {library}, {tool}", library)
    return MpiInfo(kind, "", f"{how}: {library}", library)


_NAMES = {"openmpi": "Open MPI", "mpich": "MPICH", "cray-mpich": "Cray MPICH"}
#: Site ``mpi.kind`` -> the kind of library it puts in the process.
_SITE_KINDS = {"openmpi-cuda": "openmpi"}
MISMATCH_FIX = ("use the torch built for the site: load its py-torch-mpi module, or start the "
                "container through the descriptor of `torchmpi container SITE` with injection "
                "on (the host's MPI first on the library path)")


def check_mpi_implementation(mpi: MpiInfo, no_backend: str | None = None,
                             site: Mapping[str, Any] | None = None,
                             container: str | None = None) -> Check:
    """The MPI torch loads, against the site's when one is given.

    ``no_backend``: why there is no MPI to judge (torch does not import, or has no
    MPI backend: backend.mpi says so, once).  ``container``: the runtime this runs
    in, if any.  In a container of a site whose runtime is CSCS's Container Engine
    the image's MPICH is the site's design ("CSCS injects no Cray MPICH into
    containers", docs/containers.md); anywhere else the host's MPI must be there.
    """
    name = "mpi.implementation"
    if no_backend:
        return Check(name, SKIP, f"{no_backend}: no MPI library to judge")
    if mpi.kind is None:
        return Check(name, WARN,
                     "torch has an MPI backend but maps no MPI library the doctor knows "
                     "(none loaded, none linked into libtorch_cpu.so)",
                     "run ldd on torch/lib/libtorch_cpu.so and report the MPI it names")
    version = f" {mpi.version}" if mpi.version else ""
    seen = f"{_NAMES[mpi.kind]}{version} (from {mpi.source})"
    site = site or {}
    site_mpi = site.get("mpi") or {}
    want = _SITE_KINDS.get(site_mpi.get("kind"), site_mpi.get("kind"))
    if want not in _NAMES:
        return Check(name, PASS, seen)
    runtime = (site.get("container") or {}).get("runtime")
    if (container and runtime == "ce" and (want, mpi.kind) == ("cray-mpich", "mpich")):
        return Check(name, PASS, f"{seen}: the image's MPICH, as the site's Container Engine "
                                 "runs it (no Cray MPICH is injected there)")
    if want != mpi.kind:
        wanted = _NAMES[want] + (f" {site_mpi['version']}" if site_mpi.get("version") else "")
        where = f" in a container ({container})" if container else ""
        return Check(name, FAIL, f"torch loads {seen}{where}, not the site's MPI "
                                 f"({site.get('name', 'site')}: {wanted})", MISMATCH_FIX)
    return Check(name, PASS, f"{seen}: the site's MPI")


_CUDA_SUPPORT = re.compile(
    r"^mca:(?:mpi|opal):base:param:(?:mpi|opal)_built_with_cuda_support:value:(\w+)",
    re.MULTILINE)


def openmpi_cuda_support(ompi_info_all: str) -> bool | None:
    """``ompi_info --parsable --all`` -> whether Open MPI was built with CUDA support."""
    match = _CUDA_SUPPORT.search(ompi_info_all)
    return None if match is None else match.group(1) == "true"


def check_openmpi_cuda_aware(mpi: MpiInfo, gpu_count: int, design: str | None = None,
                             no_backend: str | None = None) -> Check:
    """The CUDA support of the Open MPI torch loads, read from that Open MPI's ompi_info;
    not a failure where ``design`` routes CUDA tensors via NCCL."""
    name = "mpi.cuda_aware"
    if no_backend:
        return Check(name, SKIP, f"{no_backend}: no MPI to carry CUDA tensors")
    if mpi.kind != "openmpi":
        return Check(name, SKIP, "not Open MPI (see mpi.cray_gpu for Cray MPICH)")
    aware = openmpi_cuda_support(mpi.ompi_all)
    if aware is None:
        why = ("no ompi_info of that Open MPI (none beside it; the one on PATH, if any, is "
               "another installation's)") if not mpi.ompi_all else "no such field in its ompi_info"
        return Check(name, WARN, f"could not read mpi_built_with_cuda_support of "
                                 f"{mpi.library or 'the Open MPI torch loads'}: {why}",
                     "put that Open MPI's bin directory first on PATH (load its module) and "
                     "run the doctor again")
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
#: Cray's GTL per GPU vendor: CUDA's, and HSA's for AMD GPUs (torchmpi.doctor.rocm).
GTL_LIBRARIES = ("libmpi_gtl_cuda", "libmpi_gtl_hsa")


def gtl_linked(torch_ldd: str, env: Mapping[str, str], loaded: Iterable[str] = ()) -> bool:
    """Is Cray's GPU transport layer in the process: loaded (py-torch ``+cuda_aware_mpi`` loads it
    when torch is imported on a node with a CUDA driver), linked into torch, or preloaded?"""
    return any(gtl in text for text in (torch_ldd, env.get("LD_PRELOAD", ""), *loaded)
               for gtl in GTL_LIBRARIES)


def check_cray_gpu_support(mpi: MpiInfo, env: Mapping[str, str], torch_ldd: str,
                           loaded: Iterable[str] = (), no_backend: str | None = None,
                           gtl_name: str = "libmpi_gtl_cuda") -> Check:
    """Cray MPICH needs GTL in the process *and* MPICH_GPU_SUPPORT_ENABLED=1, or neither.

    ``no_backend``: why torch has no MPI (then the switch concerns no MPI it loads).
    ``gtl_name``: the GTL of torch's GPU vendor (``libmpi_gtl_hsa`` for a ROCm torch).
    """
    buffers = "HIP" if gtl_name == "libmpi_gtl_hsa" else "CUDA"
    name = "mpi.cray_gpu"
    if no_backend:
        return Check(name, SKIP, f"{no_backend}: no MPI to carry CUDA tensors")
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
            f"{GPU_SWITCH}=1 but {gtl_name} is not loaded (by torch's import, a link or "
            "LD_PRELOAD): MPI_Init aborts ('GTL library is not linked')",
            "use a py-torch-mpi built +cuda_aware_mpi (its torch loads GTL on a GPU node), "
            "or LD_PRELOAD "
            f"$CRAY_MPICH_ROOTDIR/gtl/lib/{gtl_name}.so, or set {GPU_SWITCH}=0",
        )
    if gtl and not enabled:
        shown = "unset" if value is None else f"={value}"
        return Check(name, FAIL,
                     f"{gtl_name} is loaded but {GPU_SWITCH} is {shown}, not 1: "
                     f"{buffers} buffers passed to MPI segfault without a message",
                     f"export {GPU_SWITCH}=1 (or 0 and pass only CPU tensors to MPI)")
    if enabled:
        return Check(name, PASS, f"GPU-aware Cray MPICH: GTL loaded and {GPU_SWITCH}=1")
    shown = "unset" if value is None else "0"
    return Check(name, PASS, f"GPU support off (no GTL, {GPU_SWITCH} {shown}): "
                             "MPI carries CPU tensors, NCCL the CUDA ones")
