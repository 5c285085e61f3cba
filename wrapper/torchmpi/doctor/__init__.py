"""Checks that tell, on a compute node, whether PyTorch's MPI/NCCL stack is right.

One module per concern: :mod:`.gpu` (torch, its backends, GPUs and driver),
:mod:`.mpi` (which MPI is loaded, CUDA-awareness, Cray GTL), :mod:`.nccl`
(plugin rules by version, interfaces, the network in an NCCL log),
:mod:`.probe` (the real one-rank all-reduces), :mod:`.site_env` (the site's
runtime variables and launcher-bound settings) and :mod:`.report` (gather,
run, print).  Nothing heavy is imported here: the doctor runs without Spack,
ruamel.yaml or jsonschema, and reports -- not crashes -- when torch is broken.
"""

from __future__ import annotations

from torchmpi.doctor.core import (
    FAIL,
    PASS,
    SKIP,
    WARN,
    Check,
    CommandResult,
    Runner,
    run_command,
)
from torchmpi.doctor.report import (
    Inputs,
    exit_status,
    format_table,
    gather,
    run_checks,
    to_json,
)

__all__ = ["FAIL", "PASS", "SKIP", "WARN", "Check", "CommandResult", "Inputs", "Runner",
           "exit_status", "format_table", "gather", "run_checks", "run_command", "to_json"]
