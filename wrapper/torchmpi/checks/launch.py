"""``launch``: what starts the ranks, against the launcher and the runtime values."""

from __future__ import annotations

from typing import Any

from torchmpi import runtime
from torchmpi.checks.common import Problem


def _launch_errors(data: dict[str, Any]) -> list[tuple[tuple, str]]:
    """``launch`` (what starts the ranks) where it cannot apply.

    It is Slurm's choice only: PBS sites launch with HPE PALS ``mpiexec`` and
    ``launcher: mpiexec`` is the MPI's own launcher already.  A runtime value
    that needs an srun flag (HPE's alt_read, fabric data ``launcher_flags``)
    cannot be passed by mpirun/mpiexec.
    """
    launch = data.get("launch")
    if launch is None:
        return []
    if data.get("launcher") != "slurm":
        return [(("launch",), (
            f"{launch!r} says what starts the ranks in a Slurm allocation, and launcher is"
            f" {data.get('launcher')}; allowed: no launch key (launcher pbs: PALS mpiexec;"
            " mpiexec: the MPI's own), or launcher: slurm"))]
    if launch == "srun":
        return []
    env = runtime.environment(data)
    for rule in runtime.launcher_flags():
        if env.get(rule["variable"]) == rule["value"]:
            return [(("launch",), (
                f"{launch}: {rule['variable']}={rule['value']} needs `{rule['slurm_flag']}`"
                f" ({rule['source']}), which {launch} cannot pass; allowed: launch: srun, or"
                f" a site without {rule['variable']}={rule['value']}"))]
    return []


def problems(data: dict[str, Any], build: bool) -> list[Problem]:
    """Applied by every loader: a launch flag is the site's runtime, not a build."""
    return _launch_errors(data)
