"""``container``: a runtime the site's MPI or fabric cannot serve.

Found at load, so every verb refuses the file alike (docs/sites.md: a file one
verb accepts no other rejects).
"""

from __future__ import annotations

from typing import Any

from torchmpi.checks.common import Problem

#: Container runtimes whose descriptor binds the host's Cray MPICH (lib-abi-mpich)
#: and libfabric into the image (NCAR's apptainer bind model, NERSC's podman-hpc
#: ``--mpi`` and shifter's MPICH module); the same list as
#: :data:`torchmpi.container.INJECTS_CRAY` (tests/test_checks_rules.py checks it).
INJECTS_CRAY = ("podman-hpc", "shifter", "apptainer")
#: ``mpi.kind`` values apptainer also binds from the host (a centre's own Open MPI
#: at ``mpi.prefix``); the same list as :data:`torchmpi.container.APPTAINER_HOST_MPI`.
APPTAINER_HOST_MPI = ("openmpi",)

def _container(data: dict[str, Any]) -> list[Problem]:
    """A ``container.runtime`` the site's MPI or fabric cannot serve.

    Found at load, so every verb refuses the file alike (docs/sites.md: a file
    one verb accepts no other rejects); `torchmpi container` alone had refused it.
    """
    box = data.get("container")
    if not isinstance(box, dict):
        return []
    where = ("container", "runtime")
    rt, kind, fabric = box.get("runtime"), (data.get("mpi") or {}).get("kind"), data.get("fabric")
    if rt == "ce" and fabric != "slingshot":
        return [(where, (
            f"ce injects CSCS's Slingshot network stack and fabric is {fabric}; allowed:"
            " podman (nothing injected; the image's own MPI and NCCL)"))]
    host_mpi = rt == "apptainer" and kind in APPTAINER_HOST_MPI
    if rt in INJECTS_CRAY and kind != "cray-mpich" and not host_mpi:
        also = (" (apptainer also binds a centre's own Open MPI: mpi.kind openmpi with"
                " mpi.prefix)" if rt == "apptainer" else "")
        return [(where, (
            f"{rt} injects the host's Cray MPICH (lib-abi-mpich) and libfabric, and mpi.kind"
            f" is {kind}: the hybrid model with this MPI is not supported here{also};"
            " allowed: podman (the image's own MPI; off Slingshot), or ce on Slingshot"
            " (docs/containers.md)"))]
    if rt in INJECTS_CRAY and not (data.get("mpi") or {}).get("prefix"):
        what = "the centre's Open MPI" if host_mpi else "Cray MPICH's lib-abi-mpich"
        return [(where, (
            f"{rt} binds the host's MPI ({what}) from mpi.prefix, which the site file does"
            " not give; allowed: podman, or mpi.prefix"))]
    if rt == "podman" and fabric == "slingshot":
        return [(where, (
            "plain podman injects nothing, so the image's own libfabric runs, and one Spack"
            " builds in an image has no cxi provider (that needs the site's CXI driver):"
            " NCCL_NET='AWS Libfabric' and the FI_CXI_* values of the run script would"
            " reach no Slingshot NIC; allowed: apptainer or podman-hpc (with Cray MPICH:"
            " they bind the host's libfabric) or ce (CSCS)"))]
    if kind == "mpich":
        return [(where, (
            "mpi.kind mpich has no container stand-in (cray-mpich, openmpi-cuda and openmpi"
            " do); allowed: no container key, or one of those MPIs"))]
    return []


def problems(data: dict[str, Any], build: bool) -> list[Problem]:
    """Applied by every loader, an installed tool's doctor included."""
    return _container(data)
