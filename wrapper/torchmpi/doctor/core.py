"""What every doctor check shares: the result type and the command runner.

Checks are functions from explicit inputs to a :class:`Check`, so a test can
feed any failure mode in (a recorded output, an environment mapping, a canned
runner) instead of patching the machine.  Nothing here imports torch, Spack or
the site tooling: the doctor must run on a bare compute node.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass

PASS, WARN, FAIL, SKIP = "PASS", "WARN", "FAIL", "SKIP"


@dataclass
class Check:
    """One line of the doctor's report: a status, what was seen, and the one-line fix."""

    name: str
    status: str
    detail: str
    fix: str = ""


@dataclass
class CommandResult:
    """A finished program: exit status and stdout+stderr together (what a user would see)."""

    returncode: int
    stdout: str


#: Runs argv (optionally with an environment) and returns its result, or
#: ``None`` when the program does not exist.
Runner = Callable[..., "CommandResult | None"]


def run_command(argv: list, timeout: float = 120, env: Mapping[str, str] | None = None
                ) -> CommandResult | None:
    """The real :data:`Runner`: never raises, so one missing tool cannot end the report."""
    try:
        proc = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=timeout,
                              env=None if env is None else dict(env))
    except (FileNotFoundError, PermissionError):
        return None
    except subprocess.TimeoutExpired as err:
        out = err.stdout.decode() if isinstance(err.stdout, bytes) else (err.stdout or "")
        return CommandResult(124, out + f"\n(timed out after {timeout:.0f} s)")
    return CommandResult(proc.returncode, proc.stdout + proc.stderr)


def version_tuple(text: str | None) -> tuple[int, ...] | None:
    """``"1.19.0"`` / ``"v1.13.0-aws"`` / ``"2.27.7-1"`` -> ``(1, 19, 0)``; None if unreadable."""
    if not text:
        return None
    parts = []
    for piece in text.lstrip("v").split("-")[0].split("."):
        if not piece.isdigit():
            break
        parts.append(int(piece))
    return tuple(parts) or None


#: Variables that tell how many nodes the job spans, by launcher.
_NODE_COUNT_VARS = ("SLURM_STEP_NUM_NODES", "SLURM_JOB_NUM_NODES", "SLURM_NNODES",
                    "PBS_NUM_NODES")


def job_nodes(env: Mapping[str, str]) -> int | None:
    """How many nodes this job spans, when the launcher says; ``None`` when unknown."""
    for name in _NODE_COUNT_VARS:
        value = env.get(name, "").strip()
        if value.isdigit():
            return int(value)
    nodefile = env.get("PBS_NODEFILE")
    if nodefile:
        try:
            with open(nodefile) as handle:
                return len({line.strip() for line in handle if line.strip()}) or None
        except OSError:
            return None
    return None
