"""Module layout of a site, as the templates need it.

The runtime variables come from :func:`torchmpi.runtime.environment`, the one
mapping runtime.sh, spack.yaml ``env_vars`` and the modules all render.
"""

from __future__ import annotations

from typing import Any

from torchmpi import runtime


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
        "env": runtime.environment(data),
        "mpi_hint": f"module load {hint}" if system == "lmod" else f"built against {hint}",
    }
