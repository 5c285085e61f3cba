"""How the verification-kit tests start real multi-process jobs on this machine.

Debian's Open MPI refuses to run as root unless told it is wanted, and the CI
machine has two cores, so jobs oversubscribe.  ``torchmpi`` and ``python``
come from the venv that runs the tests, so the job sees the same torch.
"""

from __future__ import annotations

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
