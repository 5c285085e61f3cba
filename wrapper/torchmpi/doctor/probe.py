"""The real probe: run the failing call itself, one rank, in a child process.

Static checks can pass a torch whose MPI backend still rejects CUDA tensors
("CUDA tensor detected and the MPI used doesn't have CUDA-aware MPI support"
is decided inside ProcessGroupMPI at run time).  So the doctor sends a tensor
through each backend it has -- MPI (CPU and, with a GPU, CUDA), NCCL (one
rank, which also yields the ``NCCL_DEBUG=INFO`` log) and gloo -- in a child
process (a crash or an ``MPI_Init`` abort must not take the report with it)
and reports PyTorch's own error text with the fix.  :func:`judge` turns a
recorded :class:`CommandResult` into a :class:`Check`, so the decision logic
is tested on recorded outputs; the child is started only by :func:`run_probe`.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from typing import Any

from torchmpi.doctor.core import FAIL, PASS, SKIP, Check, CommandResult, Runner
from torchmpi.doctor.gpu import TorchInfo
from torchmpi.doctor.network import NCCL_DEBUG_SUBSYS

OK_MARK = "TORCHMPI-PROBE OK"
#: Before it, the MPI probe prints the MPI libraries it mapped after MPI_Init, one per
#: line: what torch really runs on (mpi.implementation judges these).
MAP_MARK = "TORCHMPI-PROBE MAPPED"

#: One rank, one all-reduce.  MPI: a singleton (no launcher variables), the
#: others: a TCP store on loopback.  Prints OK_MARK only if the sum is right.
_SCRIPT = """
import os, sys, torch, torch.distributed as dist
backend, device = sys.argv[1], sys.argv[2]
if device == 'cuda':
    torch.cuda.set_device(0)
if backend == 'mpi':
    dist.init_process_group('mpi')
else:
    from torchmpi.dist import _free_port
    dist.init_process_group(backend, init_method='tcp://127.0.0.1:%d' % _free_port(),
                            rank=0, world_size=1)
t = torch.full((4,), 3.0, device=device)
if device == 'cuda':
    torch.cuda.synchronize()  # ProcessGroupMPI does not wait on the stream (pytorch#38642)
dist.all_reduce(t)
if device == 'cuda':
    torch.cuda.synchronize()
n = dist.get_world_size()
assert t.tolist() == [3.0 * n] * 4, 'wrong all-reduce result %s' % t.tolist()
if backend == 'mpi':
    with open('/proc/self/maps') as maps:
        libs = {p[5].strip() for p in (line.split(None, 5) for line in maps) if len(p) == 6}
    for lib in sorted(libs):
        if os.path.basename(lib).startswith(('libmpi', 'libopen-', 'libmpich')):
            print('@MAP@ ' + lib, flush=True)
print('@OK@ %s %s world=%d' % (backend, device, n), flush=True)
dist.destroy_process_group()
""".replace("@OK@", OK_MARK).replace("@MAP@", MAP_MARK)

#: Launcher variables a child must not inherit: it is a world of one, not a rank.
#: Open MPI's own settings (OMPI_MCA_btl, OMPI_ALLOW_RUN_AS_ROOT, ...) stay; what
#: mpirun hands a rank (its job, its server, its place) goes.
_LAUNCHER_PREFIXES = ("OMPI_COMM_WORLD", "OMPI_FIRST_RANKS", "OMPI_APP_CTX", "OMPI_NUM_APP",
                      "OMPI_UNIVERSE", "OMPI_FILE_LOCATION", "OMPI_MCA_ess", "OMPI_MCA_orte",
                      "OMPI_MCA_pmix", "OMPI_MCA_prte", "OMPI_MCA_initial_wdir", "PMI_", "PMIX_",
                      "PALS_", "MPI_LOCAL", "HYDRA_", "MPIR_")
_LAUNCHER_NAMES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                   "MASTER_PORT", "SLURM_PROCID")


def probe_env(env: Mapping[str, str], **extra: str) -> dict[str, str]:
    """The environment for a one-rank child: the job's, minus the launcher's rank variables."""
    child = {k: v for k, v in env.items()
             if not k.startswith(_LAUNCHER_PREFIXES) and k not in _LAUNCHER_NAMES}
    if "NCCL_DEBUG" in extra:
        child.pop("NCCL_DEBUG_FILE", None)  # the log must reach the output the doctor reads
    child.update(extra)
    return child


def mapped_mpi(result: CommandResult | None) -> list[str]:
    """The MPI libraries a probe child reported mapping (none if it did not get that far)."""
    if result is None:
        return []
    return [line.split(MAP_MARK, 1)[1].strip() for line in result.stdout.splitlines()
            if line.startswith(MAP_MARK)]


def error_text(output: str) -> str:
    """PyTorch's (or MPI's) own message from a failed child: the last error line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in reversed(lines):
        match = re.match(r"^(?:[\w.]+(?:Error|Exception)):\s*(.+)$", line)
        if match:
            return match.group(1)
    for line in reversed(lines):
        if re.search(r"error|abort|not linked", line, re.IGNORECASE):
            return line
    return lines[-1] if lines else "(no output)"


def judge(name: str, result: CommandResult | None) -> Check:
    """A probe's recorded result -> PASS, or FAIL with PyTorch's own text and the fix."""
    from torchmpi.allreduce import explain

    if result is None:
        return Check(name, FAIL, "could not start the probe (python not found)",
                     "run the doctor with the python that has torch")
    if result.returncode == 0 and OK_MARK in result.stdout:
        line = next(x for x in result.stdout.splitlines() if OK_MARK in x)
        return Check(name, PASS, "one-rank all-reduce correct (" +
                     line.split(OK_MARK, 1)[1].strip() + ")")
    if result.returncode == 124:
        return Check(name, FAIL, "the one-rank all-reduce hung (timed out)",
                     "run with NCCL_DEBUG=INFO / FI_LOG_LEVEL=info and see "
                     "docs/troubleshooting.md")
    text = error_text(result.stdout)
    if "wrong all-reduce result" in text:
        return Check(name, FAIL, f"one-rank all-reduce returned a wrong sum: {text}",
                     "the backend corrupts data: report it to the site admins with "
                     "the output of torchmpi doctor --json")
    hint = explain(result.stdout)
    return Check(name, FAIL, f"one-rank all-reduce failed: {text}",
                 hint or "see docs/troubleshooting.md for this message")


#: Cray MPICH's switch for device buffers (HPE Cray PE intro_mpi man page).
GPU_SWITCH = "MPICH_GPU_SUPPORT_ENABLED"


def cuda_over_mpi_off(env: Mapping[str, str], site_data: Mapping[str, Any] | None,
                      mpi_kind: str | None) -> str | None:
    """Why this job routes CUDA tensors through NCCL, not MPI, by design (None: it does not).

    A site may keep MPI for CPU tensors on purpose: CSCS disables GPU support in
    MPICH for PyTorch because, with NCCL, it "can lead to deadlocks"
    (eth-cscs/cscs-docs docs/software/ml/pytorch.md), which a site file says with
    ``mpi.cuda_aware: false``; a Cray MPICH job says it with the switch at 0.  A
    CUDA-tensor probe over MPI then proves nothing and must not fail the report:
    whether the switch matches GTL is mpi.cray_gpu's verdict.
    """
    mpi = (site_data or {}).get("mpi")
    if isinstance(mpi, Mapping) and mpi.get("cuda_aware") is False:
        return ("the site routes CUDA tensors through NCCL (mpi.cuda_aware: false), "
                "so MPI carries only CPU tensors")
    if mpi_kind in ("cray-mpich", "mpich") and env.get(GPU_SWITCH) == "0":
        return (f"{GPU_SWITCH}=0 in this job: MPI carries only CPU tensors, NCCL the CUDA "
                "ones (see mpi.cray_gpu)")
    return None


def skip_reason(info: TorchInfo, backend: str, device: str, design: str | None = None
                ) -> str | None:
    """Why this probe cannot or need not run here (None: it runs).

    ``design`` is :func:`cuda_over_mpi_off`'s answer for this job.
    """
    if backend == "mpi" and device == "cuda" and design:
        return design
    if info.import_error:
        return "torch does not import"
    if not getattr(info, backend):
        return f"this torch has no {backend.upper() if backend != 'gloo' else 'gloo'} backend"
    if device == "cuda" and not info.gpu_count:
        return "CPU-only node (no GPU visible): the CUDA-tensor probe needs a GPU"
    return None


def run_probe(runner: Runner, env: Mapping[str, str], backend: str, device: str,
              **extra: str) -> CommandResult | None:
    """Start the child for one backend/device and return what it printed."""
    return runner([sys.executable, "-c", _SCRIPT, backend, device],
                  env=probe_env(env, **extra))


def probe_check(name: str, info: TorchInfo, backend: str, device: str,
                result: CommandResult | None, design: str | None = None) -> Check:
    """SKIP with the reason, or the verdict on ``result``."""
    reason = skip_reason(info, backend, device, design)
    if reason:
        return Check(name, SKIP, reason)
    return judge(name, result)


#: (check name, backend, device) in report order; ``device=None``: cuda if a GPU, else cpu.
PROBES: tuple[tuple[str, str, str | None], ...] = (
    ("probe.mpi", "mpi", "cpu"),
    ("probe.mpi_cuda", "mpi", "cuda"),
    ("probe.nccl", "nccl", "cuda"),
    ("probe.gloo", "gloo", None),
)


def probe_device(info: TorchInfo, device: str | None) -> str:
    return device or ("cuda" if info.gpu_count else "cpu")


def run_all(info: TorchInfo, runner: Runner, env: Mapping[str, str],
            design: str | None = None) -> dict[str, CommandResult | None]:
    """Run every probe that can run here; NCCL's with NCCL_DEBUG=INFO (its log is kept).

    With ``design`` (CUDA tensors go through NCCL) the CUDA-over-MPI probe is not
    started: on Cray MPICH without GTL it could only abort or crash.
    """
    results: dict[str, CommandResult | None] = {}
    for name, backend, device in PROBES:
        device = probe_device(info, device)
        if skip_reason(info, backend, device, design):
            continue
        extra = ({"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": NCCL_DEBUG_SUBSYS}
                 if backend == "nccl" else {})
        results[name] = run_probe(runner, env, backend, device, **extra)
    return results


def probe_checks(info: TorchInfo, results: Mapping[str, CommandResult | None] | None,
                 design: str | None = None) -> list[Check]:
    """One check per probe; ``results=None`` means probing was switched off."""
    checks = []
    for name, backend, device in PROBES:
        device = probe_device(info, device)
        if results is None:
            checks.append(Check(name, SKIP, "probes off (--no-probe)"))
        else:
            checks.append(probe_check(name, info, backend, device, results.get(name), design))
    return checks
