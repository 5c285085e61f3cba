"""A ReFrame job launcher for HPE PALS ``mpiexec`` (PBS Pro on Cray EX).

ReFrame 4.10.4 registers ``mpiexec`` as ``mpiexec -n N`` only, and has no PALS
launcher (its registered launchers: reframe/core/launchers/{local,mpi,rsh}.py).
PALS places ranks per node with ``--ppn`` and gives each ``--depth`` CPUs
(ALCF user guides, "Running Jobs on Aurora": PALS ``mpiexec`` options ``-n``,
``-ppn``, ``--depth``; NCAR/hpc-demos runs Derecho jobs with ``mpiexec --np N
--ppn 4``), so without it every rank lands on the first node.  A configuration
written by ``torchmpi reframe`` for a PBS site imports this module before
ReFrame builds its partitions, which is when the launcher's name is looked up.
"""

from __future__ import annotations

from reframe.core.backends import register_launcher
from reframe.core.exceptions import ConfigError
from reframe.core.launchers import JobLauncher


class PalsLauncher(JobLauncher):
    """``mpiexec -n <tasks> --ppn <tasks per node> [--depth <cpus per task>]``."""

    def command(self, job) -> list[str]:
        cmd = ["mpiexec", "-n", str(job.num_tasks)]
        if job.num_tasks_per_node:
            cmd += ["--ppn", str(job.num_tasks_per_node)]
        if job.num_cpus_per_task:
            cmd += ["--depth", str(job.num_cpus_per_task)]
        return cmd


try:
    register_launcher("pals")(PalsLauncher)
except ConfigError:  # imported twice under another name: the first registration stands
    pass
