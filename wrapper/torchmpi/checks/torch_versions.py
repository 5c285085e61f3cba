"""``torch.versions``: releases a site may not choose.

Unknown to the pinned builtin, outside what the site's CUDA can build, or
without ``+cuda_aware_mpi`` where the site asks for it (:mod:`torchmpi.torches`
reads the package files).
"""

from __future__ import annotations

from typing import Any

from torchmpi import cudaaware, torches
from torchmpi.checks.common import Problem


def _releases(data: dict[str, Any]) -> list[Problem]:
    """Releases a site may not choose: unknown to builtin, or without +cuda_aware_mpi."""
    out: list[Problem] = []
    known = torches.builtin_releases()
    current = [v for v, old in known.items() if not old]
    for i, version in enumerate(torches.versions(data)):
        where = ("torch", "versions", i)
        if known and version not in known:
            out.append((where, (
                f"{version!r} is no py-torch release of the pinned builtin spack-packages;"
                f" allowed: {', '.join(current)} (current) or {', '.join(torches.VERIFIED)}"
                " (deprecated, with a ProcessGroupMPI fixture)")))
            continue
        cuda = torches.site_cuda(data)
        needs = torches.cuda_problem(version, cuda) if cuda else None
        if needs:
            can = [v for v in current + list(torches.VERIFIED)
                   if not torches.cuda_problem(v, cuda)]
            out.append((where, (
                f"torch {version} needs cuda@{needs} (builtin py-torch), this site has"
                f" cuda@{cuda} (gpu.cuda.spec); releases it can build:"
                f" {', '.join(can) or 'none'}, or a newer gpu.cuda")))
            continue
        if not cudaaware.torch_variant(data):
            continue
        vt = torches._vt(version)
        gap = torches._CUDA_AWARE_GAP
        if vt[:2] < torches._CUDA_AWARE_FROM or gap[0] <= vt <= gap[1]:
            out.append((where, (
                f"torch {version} cannot be built +cuda_aware_mpi (torchmpi's py-torch: from"
                " 2.6, and not 2.7.0-2.9.0, whose ProcessGroupMPI text was never read);"
                f" allowed: {', '.join(current + list(torches.VERIFIED))},"
                " or mpi.cuda_aware: false")))
    return out


def problems(data: dict[str, Any], build: bool) -> list[Problem]:
    """These read the package repositories: ``build`` only."""
    return _releases(data) if build else []
