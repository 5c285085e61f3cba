"""Which torch releases a site may choose (site key ``torch: {versions: [...]}``).

Centres keep a previous and a current release side by side, so a site file
may name several; without the key the solver takes the newest torch the site
allows, as before.  Read here without Spack, in milliseconds:

* the releases builtin ``py-torch`` has, and which it deprecates, from the
  pinned builtin package file;
* the CUDA each release can be built with (builtin's ``depends_on("cuda@...",
  when="@...+cuda")``): a pinned release the site's CUDA cannot build is
  refused when the site file is loaded, not minutes into a solve;
* the releases torchmpi's ``py-torch`` override has no ProcessGroupMPI fixture
  for (``UNVERIFIED_TORCH`` in its package file): where the patch of that file
  runs (``+cuda_aware_mpi`` with an MPICH-family MPI) it may stop the build
  with a PatchError, so they are named at render and concretize time, with
  ``mpi.cuda_aware: false`` as the way out (never a deprecated release).
"""

from __future__ import annotations

import functools
import re
from typing import Any

from torchmpi import cudaaware, paths

#: Releases whose ProcessGroupMPI.cpp text is a fixture of the patch
#: (tests/fixtures/process_group_mpi/v<version>.cpp; tests/test_torches.py
#: ties the two), newest first.  Builtin deprecates both (CVEs), so a pin on
#: them renders ``config: deprecated: true``.
VERIFIED = ("2.9.1", "2.6.0")

#: ``+cuda_aware_mpi`` exists from 2.6 and is refused for 2.7.0-2.9.0
#: (py_torch/package.py: the variant's ``when`` and a ``conflicts``).
_CUDA_AWARE_FROM = (2, 6)
_CUDA_AWARE_GAP = ((2, 7, 0), (2, 9, 0))


def _vt(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".") if p.isdigit())


@functools.cache
def builtin_releases() -> dict[str, bool]:
    """Builtin py-torch's numbered releases -> whether deprecated; empty without the file."""
    path = paths.builtin_repo() / "packages" / "py_torch" / "package.py"
    try:
        text = path.read_text()
    except OSError:
        return {}
    out: dict[str, bool] = {}
    deprecated_indent = None
    for line in text.splitlines():
        indent = len(line) - len(line.lstrip())
        if deprecated_indent is not None and line.strip() and indent <= deprecated_indent:
            deprecated_indent = None
        if "default_args(deprecated=True)" in line:
            deprecated_indent = indent
        found = re.match(r'\s*version\("(\d+(?:\.\d+)+)"', line)
        if found:
            out[found.group(1)] = deprecated_indent is not None
    return out


def _builtin_text() -> str:
    try:
        return (paths.builtin_repo() / "packages" / "py_torch" / "package.py").read_text()
    except OSError:
        return ""


@functools.cache
def cuda_rules() -> tuple[tuple[str, str, str, str], ...]:
    """Builtin py-torch's CUDA bounds: (torch low, torch high, cuda low, cuda high), an
    empty end open, a single version ``X`` as ``X:X`` (Spack: any ``X.*``)."""
    out = []
    for found in re.finditer(r'depends_on\(\s*"cuda@([\d.:]+)"\s*,\s*when="@([\d.:]+)\+cuda"',
                             _builtin_text()):
        cuda, when = found.group(1), found.group(2)
        out.append((*_range(when), *_range(cuda)))
    return tuple(out)


def _range(text: str) -> tuple[str, str]:
    low, colon, high = text.partition(":")
    return (low, high) if colon else (low, low)


def _within(version: str, low: str, high: str) -> bool:
    """Spack's ``low:high`` (inclusive; ``high`` a prefix: ``12.3`` admits 12.3.2)."""
    vt = _vt(version)
    return (not low or vt >= _vt(low)) and (not high or vt[:len(_vt(high))] <= _vt(high))


def cuda_problem(torch: str, cuda: str) -> str | None:
    """The CUDA range builtin requires for ``torch`` that ``cuda`` is outside, or None."""
    for t_low, t_high, c_low, c_high in cuda_rules():
        if _within(torch, t_low, t_high) and not _within(cuda, c_low, c_high):
            return c_low if c_low == c_high else f"{c_low}:{c_high}"
    return None


def site_cuda(data: dict[str, Any]) -> str | None:
    """The version of the site's CUDA (``gpu.cuda.spec``), None without one stated."""
    gpu = data.get("gpu") if isinstance(data.get("gpu"), dict) else {}
    spec = (gpu.get("cuda") or {}).get("spec") if isinstance(gpu.get("cuda"), dict) else None
    found = re.match(r"cuda@=?(\d+(?:\.\d+)*)", str(spec or ""))
    return found.group(1) if found else None


@functools.cache
def unverified() -> tuple[str, ...]:
    """``UNVERIFIED_TORCH`` of torchmpi's py-torch package (read with ast)."""
    try:
        return tuple(paths.package_constant("py_torch", "UNVERIFIED_TORCH"))
    except (OSError, LookupError):
        return ()


def versions(data: dict[str, Any]) -> list[str]:
    """The site's torch releases, in the site file's order; empty: the newest allowed."""
    return list((data.get("torch") or {}).get("versions") or [])


def deprecated(data: dict[str, Any]) -> list[str]:
    """The site's releases that builtin deprecates (they need ``config: deprecated: true``)."""
    known = builtin_releases()
    return [v for v in versions(data) if known.get(v)]


#: ``mpi.kind`` values whose py-torch is not patched: Open MPI is PyTorch's own
#: branch of ``cudaAwareMpiCheck()`` (py_torch/package.py ``mpich_cuda_patch``).
_UNPATCHED_KINDS = ("openmpi", "openmpi-cuda")


def patch_applies(data: dict[str, Any]) -> bool:
    """Whether the site's py-torch build runs the ProcessGroupMPI patch
    (``+cuda_aware_mpi`` with an MPI of the MPICH family, or one not yet known)."""
    return (cudaaware.torch_variant(data)
            and (data.get("mpi") or {}).get("kind") not in _UNPATCHED_KINDS)


def notes(data: dict[str, Any], chosen: list[str] | None = None) -> list[str]:
    """What to tell the admin about ProcessGroupMPI fixtures, one line each.

    Only where the patch runs (:func:`patch_applies`).  ``chosen``: the torch
    releases of a solve (concretize); None before one (render), where an
    unpinned site is told that the newest allowed release is unverified when
    every current release is.  The way out named is ``mpi.cuda_aware: false``,
    never a release: the ones with a fixture are all deprecated by builtin.
    """
    if not patch_applies(data):
        return []
    risk = ("the patch adds its MPICH branch after whatever the check has and is checked"
            " against the MPI headers, but stops the py-torch build with PatchError if"
            " cudaAwareMpiCheck() lost its #if/#else (2.10-2.12 most likely keep the check"
            " unchanged since 2.6: inferred, not read); to avoid that risk, set"
            " mpi.cuda_aware: false")
    risky = set(unverified())
    picked = chosen if chosen is not None else versions(data)
    out = [f"torch {v}: no ProcessGroupMPI fixture for the +cuda_aware_mpi patch: {risk}"
           for v in dict.fromkeys(picked) if v in risky]
    current = [v for v, old in builtin_releases().items() if not old]
    if chosen is None and not picked and current and set(current) <= risky:
        out.append(f"torch: unpinned, so the newest release allowed ({', '.join(current)}"
                   " are current), none with a ProcessGroupMPI fixture for the"
                   f" +cuda_aware_mpi patch: {risk}")
    return out
