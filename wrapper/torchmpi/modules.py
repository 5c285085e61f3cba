"""Module layout and runtime variables of a site, as the templates need them.

One source of truth for what a job sees: the site file's ``runtime.env``.  It
is rendered three times -- ``runtime.sh``, spack.yaml ``env_vars`` (for
``spack env activate``) and modules.yaml ``environment: set`` on py-torch-mpi
(for ``module load``) -- from the one mapping :func:`runtime_env` returns, so
the three cannot drift.  Package run environments (aws-ofi-nccl, nccl-ss11,
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


def runtime_env(data: dict[str, Any]) -> dict[str, str]:
    """The site's runtime variables, strings, in file order; the Cray GPU switch added if implied.

    A site that states a contradicting switch value is rejected earlier, in
    site validation (:func:`torchmpi.site._semantic_errors`).
    """
    env = {k: str(v) for k, v in (data.get("runtime") or {}).get("env", {}).items()}
    switch = cray_gpu_switch(data)
    if switch == "1":
        env.setdefault(GPU_SWITCH, switch)
    return env


def projections(system: str) -> dict[str, str]:
    """Readable module names, no hashes: ``py-torch-mpi/2.9.1-cuda12.2.1``.

    The torch version names py-torch-mpi (its own version is the bundle's).
    Tcl has no hierarchy, so there the MPI is part of the name.  Order matters:
    Spack uses the first key a spec satisfies.
    """
    suffix = "-{^mpi.name}" if system == "tcl" else ""
    return {
        "py-torch-mpi+cuda": "{name}/{^py-torch.version}-cuda{^cuda.version}" + suffix,
        "py-torch-mpi": "{name}/{^py-torch.version}" + suffix,
        "all": "{name}/{version}",
    }


def context(data: dict[str, Any]) -> dict[str, Any]:
    """Template values for modules.yaml (and the shared runtime variables)."""
    install = data.get("install", {})
    system = install.get("module_system", "lmod")
    mpi = data["mpi"]
    hint = mpi["kind"] + (f"/{mpi['version']}" if mpi.get("version") else "")
    compilers = data["compilers"] if isinstance(data["compilers"], list) else []
    return {
        "system": system,
        "root": install.get("modules_root"),
        "core_compilers": [c["spec"] for c in compilers],
        "projections": projections(system),
        "env": runtime_env(data),
        "mpi_hint": f"module load {hint}" if system == "lmod" else f"built against {hint}",
    }
