"""``torchmpi doctor`` run through :func:`torchmpi.cli.main` inside the test process.

For tests whose claim is what the report says, not the process boundary: the
worker has imported torch already, so only the probe children (still real
processes) pay for that import, as Spack's own tests run ``SpackCommand``
in-process.  The environment is the one ``support.mpi_launch.job_env`` gives a
child, set and restored through pytest's ``monkeypatch``, so nothing leaks into
the next test.  The doctor starts no process group in this process (its probes
are children).  The console script's exit codes stay proven by the tests that
start ``torchmpi doctor`` for real.
"""

from __future__ import annotations

import os

import pytest
from torchmpi.cli import main

from support.mpi_launch import job_env


def doctor_in_process(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                      *args: str, **env: str) -> tuple[int, str]:
    """``main(["doctor", *args])`` under ``job_env(**env)``: (exit status, stdout)."""
    want = job_env(**env)
    for name in set(os.environ) - set(want):
        monkeypatch.delenv(name)
    for name, value in want.items():
        monkeypatch.setenv(name, value)
    capsys.readouterr()
    status = main(["doctor", *args])
    return status, capsys.readouterr().out
