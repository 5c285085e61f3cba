"""A ``torchmpi`` verb run through :func:`torchmpi.cli.main` inside the test process.

For tests whose claim is what a verb prints or returns, not the process
boundary: the worker has imported torch already, so only real children (the
doctor's probes, a launcher's ranks) pay for that import, as Spack's own tests
run ``SpackCommand`` in-process.  The console script's exit codes, the launchers
and a crash's flushed output stay proven by the tests that start ``torchmpi``
for real.

Nothing may leak into the next test of the worker: ``os.environ`` is set to
``support.mpi_launch.job_env`` and put back whole afterwards (``allreduce``
publishes RANK, WORLD_SIZE, MASTER_PORT, ... the way torchrun does, into
``os.environ`` itself), and a process group a failed run left initialised is
destroyed.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from torchmpi.cli import main

from support.mpi_launch import job_env


@contextmanager
def job_process(**env: str) -> Iterator[None]:
    """This process as a one-rank job without a launcher: ``job_env(**env)``, then as before."""
    saved, want = dict(os.environ), job_env(**env)
    os.environ.clear()
    os.environ.update(want)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)
        dist = sys.modules.get("torch.distributed")
        if dist is not None and dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str, **env: str
            ) -> tuple[int, str, str]:
    """``main(argv)`` in a :func:`job_process`: (exit status, stdout, stderr)."""
    capsys.readouterr()
    with job_process(**env):
        status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def doctor_in_process(capsys: pytest.CaptureFixture[str], *args: str, **env: str
                      ) -> tuple[int, str]:
    """``torchmpi doctor *args`` in-process: (exit status, stdout)."""
    status, out, _ = run_cli(capsys, "doctor", *args, **env)
    return status, out
