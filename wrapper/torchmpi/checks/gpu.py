"""The ``gpu`` section: CUDA architectures against the GPU model, Cray's GTL and CUDA.

* a ``cuda_arch`` Cray MPICH has no GTL for (``90a``: "no GTL support could be
  found" in the py-torch build), one the site's CUDA cannot compile for, or one
  that is not the GPU model's.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from torchmpi import gpuvendor, paths
from torchmpi.checks.common import Problem, vtuple

#: cuda_arch values builtin cray-mpich's ``gtl_lib`` has Cray's CUDA GTL for
#: (spack-packages v2026.06.0, repos/spack_repo/builtin/packages/cray_mpich/package.py).
CRAY_GTL_ARCHS = ("70", "80", "90")

#: GPU models by the start of their name, and their compute capability
#: (NVIDIA, developer.nvidia.com/cuda-gpus).  Longest names first.
GPU_ARCHS = (
    ("gh200", "90"), ("gb200", "100"), ("h100", "90"), ("h200", "90"), ("b200", "100"),
    ("a100", "80"), ("a30", "80"), ("a40", "86"), ("a10", "86"), ("l40", "89"),
    ("l4", "89"), ("v100", "70"), ("p100", "60"),
)

@cache
def cuda_ranges() -> dict[str, tuple[str, str]]:
    """cuda_arch -> (lowest, highest) CUDA, from builtin's CudaPackage; empty without it.

    Read from ``build_systems/cuda.py`` of the pinned builtin repository
    (``depends_on("cuda@LO:HI", when="cuda_arch=X")``), so the rule follows
    the pin rather than a copy.
    """
    path = paths.builtin_repo() / "build_systems" / "cuda.py"
    try:
        text = path.read_text()
    except OSError:
        return {}
    pattern = r'depends_on\("cuda@([\d.]*):?([\d.]*)", when="cuda_arch=(\w+)"\)'
    out = {}
    for lo, hi, arch in re.findall(pattern, text):
        out[arch] = (lo, hi)
    return out

def cuda_archs(gpu: dict[str, Any]) -> list[str]:
    """``gpu.cuda_arch`` as a list of strings: ``80`` -> ``['80']``; ``[80, 86]`` and
    ``'80,86'`` (Spack's ``cuda_arch=80,86``) -> ``['80', '86']``, for a site with
    several GPU models."""
    value = gpu.get("cuda_arch")
    items = value if isinstance(value, list) else str(value).split(",")
    return list(dict.fromkeys(str(v) for v in items))

#: One GPU model's name anywhere in ``gpu.model``, longest first (a100 before a10).
_GPU_NAMES = re.compile(
    r"\b(" + "|".join(sorted((n for n, _ in GPU_ARCHS), key=len, reverse=True)) + ")")

def _models(model: str) -> list[tuple[str, str]]:
    """(name, compute capability) of each GPU model ``gpu.model`` names, in order."""
    found = dict.fromkeys(m.group(1) for m in _GPU_NAMES.finditer(model.lower()))
    return [(n, dict(GPU_ARCHS)[n]) for n in found]

def _base(arch: str) -> str:
    """The compute capability of an architecture: ``90a`` -> ``90``."""
    found = re.match(r"\d+", arch)
    return found.group() if found else arch

def _cuda_arch(data: dict[str, Any]) -> list[Problem]:
    gpu = data.get("gpu")
    if not isinstance(gpu, dict) or "cuda_arch" not in gpu:
        return []
    archs = cuda_archs(gpu)
    where = ("gpu", "cuda_arch")
    out: list[Problem] = []
    mpi = data.get("mpi") or {}
    for arch in archs:
        if (mpi.get("kind") == "cray-mpich" and mpi["cuda_aware"]
                and arch not in CRAY_GTL_ARCHS):
            base = _base(arch)
            hint = f" ({base} is the same GPU)" if base in CRAY_GTL_ARCHS else ""
            out.append((where, gpuvendor.gtl_refusal(arch, "Cray's CUDA GTL", "cuda_arch",
                                                     list(CRAY_GTL_ARCHS), hint)))
    models = _models(str(gpu.get("model") or ""))
    wanted = list(dict.fromkeys(cc for _, cc in models))
    if len(archs) == 1 and len(models) == 1:
        arch, want = archs[0], wanted[0]
        if _base(arch) != want:
            out.append((where, (
                f"{arch!r} is not the compute capability of the {gpu['model']}"
                f" (NVIDIA: {want}, developer.nvidia.com/cuda-gpus); allowed: {want}")))
    elif models:
        for arch in archs:
            if _base(arch) not in wanted:
                out.append((where, (
                    f"{arch!r} is not the compute capability of any GPU model of"
                    f" {gpu['model']} (NVIDIA: {', '.join(wanted)},"
                    f" developer.nvidia.com/cuda-gpus); allowed: {', '.join(wanted)}")))
        for name, want in models:
            if want not in {_base(a) for a in archs}:
                out.append((where, (
                    f"the NVIDIA {name.upper()} in the model needs {want}, which"
                    f" cuda_arch {','.join(archs)} lacks (developer.nvidia.com/cuda-gpus);"
                    f" allowed: {', '.join(wanted)}")))
    cuda = (gpu.get("cuda") or {}).get("spec", "")
    found = re.match(r"cuda@([\d.]+)", cuda)
    for arch in archs:
        span = cuda_ranges().get(arch)
        if not (found and span):
            continue
        have, (lo, hi) = vtuple(found.group(1)), span
        # A range's end matches every release it prefixes (Spack: @:12.9 takes 12.9.1).
        too_old = lo and have < vtuple(lo)
        too_new = hi and have[:len(vtuple(hi))] > vtuple(hi)
        if too_old or too_new:
            allowed = f"{lo or 'any'} to {hi}" if hi else f"{lo} or newer"
            out.append((where, (
                f"{arch!r} needs CUDA {allowed} (builtin CudaPackage), and the site's CUDA is"
                f" {found.group(1)}; allowed: a cuda_arch this CUDA compiles for, or the"
                " CUDA that does")))
    return out


def problems(data: dict[str, Any], build: bool) -> list[Problem]:
    """``gpu.cuda_arch``'s rules read the pinned builtin repository: ``build`` only."""
    return _cuda_arch(data) if build else []
