"""The runtime variables a job on a site sees: one function, every consumer.

:func:`environment` is the single answer to "which variables, with which
values": runtime.sh, spack.yaml ``env_vars``, the py-torch-mpi module's
``environment: set``, ``torchmpi doctor --site`` and the tests all read it, so
they cannot drift apart.  Package run environments (aws-ofi-nccl, nccl-ss11,
py-torch-mpi) are defaults; the py-torch-mpi module sets the site's values
after its autoloaded dependencies have set theirs, so the site wins.
"""

from __future__ import annotations

from typing import Any

#: Cray MPICH moves device buffers only with GTL linked AND this switch on.
GPU_SWITCH = "MPICH_GPU_SUPPORT_ENABLED"


def cray_gpu_switch(data: dict[str, Any]) -> str | None:
    """The value MPICH_GPU_SUPPORT_ENABLED must have on this site, or None if it does not apply.

    ``+cuda_aware_mpi`` links Cray's GTL into torch, which then needs the switch
    at 1 (without it: segfaults on device buffers); ``~cuda_aware_mpi`` links no
    GTL, and 1 would make MPI_Init abort ("GTL library is not linked").
    """
    mpi = data.get("mpi", {})
    if mpi.get("kind") != "cray-mpich" or not isinstance(data.get("gpu"), dict):
        return None
    return "1" if mpi.get("cuda_aware", True) else "0"


def environment(data: dict[str, Any]) -> dict[str, str]:
    """The site's runtime variables, strings, in file order; the Cray GPU switch added if implied.

    A site that states a contradicting switch value is rejected earlier, in
    site validation (:func:`torchmpi.site._semantic_errors`).
    """
    env = {k: str(v) for k, v in (data.get("runtime") or {}).get("env", {}).items()}
    switch = cray_gpu_switch(data)
    if switch == "1":
        env.setdefault(GPU_SWITCH, switch)
    return env
