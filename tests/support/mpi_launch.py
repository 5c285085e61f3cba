"""How the verification-kit tests start real multi-process jobs on this machine.

Debian's Open MPI refuses to run as root unless told it is wanted, and the CI
machine has two cores, so jobs oversubscribe.  ``torchmpi`` and ``python``
come from the venv that runs the tests, so the job sees the same torch.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent
TORCHMPI = str(BIN / "torchmpi")

#: ``torchmpi`` with a planted fault: rank 1 corrupts the checked result of the
#: 1 KiB size once (256 float32 elements), so the check must say FAIL and exit
#: non-zero.  Run as ``python -c WRONG_ALLREDUCE allreduce ...`` or written to
#: an executable with :func:`wrong_allreduce_torchmpi` (ReFrame's ``torchmpi``).
WRONG_ALLREDUCE = """
import sys, torch.distributed as dist
from torchmpi.cli import main
real, hit = dist.all_reduce, []
def faulty(tensor, *args, **kwargs):
    work = real(tensor, *args, **kwargs)
    if dist.get_rank() == 1 and tensor.numel() == 256 and not hit:
        hit.append(1)
        tensor[3] += 1
    return work
dist.all_reduce = faulty
sys.exit(main(sys.argv[1:]))
"""


#: ``torchmpi`` that also says how each rank read its launch: ``init_distributed`` is
#: wrapped so that, once the group exists, every rank's ``[launcher, rank, world size,
#: local rank, group rank]`` is gathered and rank 0 prints them as one ``VIEWS [...]``
#: line on stderr (stdout stays the verb's own, table or JSON).  One job then proves the
#: launch mapping (tests/test_dist.py) and the verb (tests/test_allreduce.py): a torch
#: import per rank, not two.  Run as ``python -c VIEWED_ALLREDUCE allreduce ...``.
VIEWED_ALLREDUCE = """
import json, sys, torch.distributed as dist
import torchmpi.dist as tdist
from torchmpi.cli import main
real = tdist.init_distributed
def viewed(*args, **kwargs):
    launch = real(*args, **kwargs)
    views = [None] * dist.get_world_size()
    dist.all_gather_object(views, [launch.launcher, launch.rank, launch.world_size,
                                   launch.local_rank, dist.get_rank()])
    if launch.rank == 0:
        print("VIEWS " + json.dumps(views), file=sys.stderr, flush=True)
    return launch
tdist.init_distributed = viewed
sys.exit(main(sys.argv[1:]))
"""

#: The arguments of each launcher's shared job (:func:`viewed_allreduce`): under mpirun a
#: ``--json`` run with a floor any machine meets, under torchrun a plain table.
VIEWED_ARGS = {
    "mpirun": ("--sizes", "8,1K", "--warmup", "0", "--iters", "1", "--min-busbw", "0.000001",
               "--json"),
    "torchrun": ("--sizes", "1K", "--warmup", "0", "--iters", "2"),
}


def viewed_allreduce(launcher: str) -> subprocess.CompletedProcess:
    """One 2-rank :data:`VIEWED_ALLREDUCE` job under ``launcher``: run once a session by
    conftest's ``viewed_mpirun`` / ``viewed_torchrun`` fixtures, which two test modules read."""
    argv = (sys.executable, "-c", VIEWED_ALLREDUCE, "allreduce", *VIEWED_ARGS[launcher])
    if launcher == "torchrun":
        return torchrun(2, "--no-python", *argv)
    return mpirun(2, *argv)


def launch_views(stderr: str) -> list:
    """The ``VIEWS`` line of a :data:`VIEWED_ALLREDUCE` job, parsed."""
    lines = [line for line in stderr.splitlines() if line.startswith("VIEWS ")]
    assert len(lines) == 1, stderr
    return json.loads(lines[0][len("VIEWS "):])


def wrong_allreduce_torchmpi(path: Path) -> Path:
    """Write :data:`WRONG_ALLREDUCE` as an executable ``torchmpi`` at ``path``."""
    path.write_text(f"#!{sys.executable}{WRONG_ALLREDUCE}")
    path.chmod(0o755)
    return path


def job_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    # Launcher variables leaking in from an outer job would confuse the mapping.
    for name in list(env):
        if name.startswith(("OMPI_COMM_WORLD", "PMI_", "PALS_", "SLURM_")) or name in (
            "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"
        ):
            del env[name]
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMP_NUM_THREADS="1", PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}")
    env.update(extra)
    return env


def mpirun(n: int, *argv: str, timeout: float = 180, **extra: str
           ) -> subprocess.CompletedProcess:
    exe = shutil.which("mpirun")
    assert exe, "mpirun not found: run `make setup` (scripts/check-system.sh installs it)"
    if n == 1:
        # Once a rank exits non-zero, Open MPI 4.1 sends the others SIGCONT, waits
        # odls_base_sigkill_timeout (default 1 s), SIGTERM, waits again, SIGKILL: the first
        # wait is a surviving rank's time to finish printing.  One rank has no survivor, yet
        # `mpirun -n 1 false` still took 2.06 s (0.07 s with 0).  Several ranks keep it.
        extra.setdefault("OMPI_MCA_odls_base_sigkill_timeout", "0")
    return subprocess.run([exe, "-n", str(n), "--oversubscribe", *argv], env=job_env(**extra),
                          capture_output=True, text=True, timeout=timeout, check=False)


def torchrun(n: int, *argv: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(n),
         "--standalone", *argv],
        env=job_env(), capture_output=True, text=True, timeout=timeout, check=False,
    )
