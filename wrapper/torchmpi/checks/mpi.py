"""The ``mpi`` section: its kind, version, the variants of a centre's MPI, Cray's GPU switch.

* ``kind: mpich`` with a version MPICH never had (ParaStation MPI's 5.10.0-1);
* the centre's MPI on a GPU site declared without ``+cuda`` ("py-torch
  +cuda_aware_mpi needs a CUDA-aware MPI" after minutes of solving);
* ``openmpi-cuda`` on a CPU-only site;
* ``MPICH_GPU_SUPPORT_ENABLED`` stated against ``mpi.cuda_aware``.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from torchmpi import cudaaware, paths, runtime
from torchmpi.checks.common import Problem, vtuple


@cache
def mpich_series() -> tuple[tuple[int, int], ...]:
    """MPICH's release series (MAJOR, MINOR), from builtin mpich's ``version()`` lines.

    Read from the pinned builtin repository (``packages/mpich/package.py``), so
    the rule follows the pin; empty without it.  MPICH went from MPICH2 1.5 to
    3.0 (2012), and has had 3.0 to 3.4, 4.0 to 4.3 and 5.0.
    """
    path = paths.builtin_repo() / "packages" / "mpich" / "package.py"
    try:
        text = path.read_text()
    except OSError:
        return ()
    found = {vtuple(v)[:2] for v in re.findall(r'version\("(\d+(?:\.\d+)*)"', text)}
    return tuple(sorted(v if len(v) == 2 else (v[0], 0) for v in found))

def _spans(series: tuple[tuple[int, int], ...]) -> str:
    """``3.0 to 3.4, 4.0 to 4.3, 5.0``: the series, one span per major version."""
    out = []
    for major in dict.fromkeys(m for m, _ in series):
        minors = [n for m, n in series if m == major]
        lo, hi = min(minors), max(minors)
        out.append(f"{major}.{lo}" + (f" to {major}.{hi}" if hi != lo else ""))
    return ", ".join(out)

def _mpich_version(data: dict[str, Any]) -> list[Problem]:
    """``kind: mpich`` with a version MPICH never had, typically an MPICH derivative's.

    ParaStation MPI (JSC; MPICH-based) numbers its releases 5.10.0-1: declared
    as mpich it would render ``mpich@5.10.0-1``, a version the solver takes at
    face value for an external, and every rule about MPICH would apply to it.
    Allowed: a known series, a point release after the pin (4.3.9), the next
    minor series (5.1) or the next major (6.0).
    """
    mpi = data.get("mpi") or {}
    version = mpi.get("version")
    series = mpich_series()
    if mpi.get("kind") != "mpich" or not version or not series:
        return []
    have = vtuple(str(version))[:2]
    have = have if len(have) == 2 else (have[0], 0)
    (top_major, top_minor) = series[-1]
    if "-" not in str(version) and have in (*series, (top_major, top_minor + 1),
                                            (top_major + 1, 0)):
        return []
    return [(("mpi", "version"), (
        f"{version!r} is no MPICH release (builtin mpich: {_spans(series)}); an MPI"
        " derived from MPICH with its own numbering (ParaStation MPI 5.10.0-1, MVAPICH,"
        " Intel MPI) is not mpich to Spack and has no kind here; allowed: an MPICH"
        f" release: {_spans(series)}, or {top_major}.{top_minor + 1} or {top_major + 1}.0"
        " after the pin, as `mpichversion` prints it")),
    ]

def _variant_names(variants: str) -> list[str]:
    """The variant names in ``+cuda ~java fabrics=ucx``: cuda, java, fabrics."""
    return [re.split(r"=", v.lstrip("+~"))[0] for v in variants.split()]

def _mpi_variants(data: dict[str, Any]) -> list[Problem]:
    """The centre's MPI declared without the variants it has, or with some it cannot take.

    A centre's CUDA-aware Open MPI declared under ``mpi:`` without ``+cuda``
    rendered a ``~cuda`` external (the variant's default) and the solve
    stopped after minutes: "py-torch +cuda_aware_mpi needs a CUDA-aware MPI".
    """
    mpi = data.get("mpi") or {}
    where = ("mpi", "variants")
    variants = mpi.get("variants")
    kind = mpi.get("kind")
    external = bool(mpi.get("prefix") or mpi.get("modules"))
    if variants is not None:
        names = _variant_names(variants)
        if kind == "cray-mpich":
            return [(where, (
                "cray-mpich's variants are the tool's: +cuda cuda_arch=<N> from gpu and"
                " mpi.cuda_aware (Cray's GTL must match them); allowed: no variants"))]
        if not external:
            return [(where, (
                "variants describe the centre's MPI external (mpi.prefix or mpi.modules);"
                f" a {kind} Spack builds takes the tool's; allowed: no variants, or the"
                " centre's prefix/modules with the variants its MPI has"))]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            return [(where, f"names {', '.join(twice)} twice; allowed: each variant once")]
    if (cudaaware.torch_variant(data) and external
            and kind in ("openmpi", "openmpi-cuda", "mpich")
            and "+cuda" not in (variants or "").split()):
        said = f"says {variants!r}" if variants else "has no variants, so it renders ~cuda"
        return [(where, (
            f"the centre's {kind} {said}, and py-torch +cuda_aware_mpi needs a CUDA-aware"
            " MPI: the solve would stop after minutes; allowed: variants: +cuda (with the"
            " others it has) where the centre's MPI is CUDA-aware (Open MPI: `ompi_info"
            " --parsable --all | grep mpi_built_with_cuda_support` prints :true), or"
            " mpi.cuda_aware: false"))]
    return []


def _openmpi_cuda(data: dict[str, Any]) -> list[Problem]:
    """``openmpi-cuda`` is the CUDA-aware Open MPI: only on a GPU site."""
    kind = (data.get("mpi") or {}).get("kind")
    if kind == "openmpi-cuda" and data.get("gpu") is None:
        return [(("mpi", "kind"), ("openmpi-cuda is the CUDA-aware Open MPI: it needs a"
                                   " 'gpu' section (use kind: openmpi on a CPU-only site)"))]
    return []


def _gpu_switch(data: dict[str, Any]) -> list[Problem]:
    """Cray MPICH's GPU switch stated against ``mpi.cuda_aware`` (GTL and switch go together)."""
    switch = runtime.cray_gpu_switch(data)
    stated = (data.get("runtime") or {}).get("env", {}).get(runtime.GPU_SWITCH)
    if switch is not None and stated is not None and str(stated) != switch:
        gtl = "loads Cray's GTL" if switch == "1" else "loads no GTL"
        return [(("runtime", "env", runtime.GPU_SWITCH), (
            f"must be {switch} here: mpi.cuda_aware is {str(switch == '1').lower()}, so torch"
            f" {gtl}; the switch and GTL go together or not at all (to run without GPU-aware"
            " MPI, e.g. for CSCS's MPI-with-NCCL deadlock warning, set mpi.cuda_aware: false)"))]
    return []


def problems(data: dict[str, Any], build: bool) -> list[Problem]:
    """The MPI's kind, variants and switch always; its version against builtin mpich
    (which reads the pinned repository) where Spack builds (``build``)."""
    out = [*_openmpi_cuda(data), *_gpu_switch(data), *_mpi_variants(data)]
    return out + _mpich_version(data) if build else out
