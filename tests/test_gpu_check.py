"""scripts/gpu-check.sh: bounded in time, every step reported, GPU steps SKIP with the reason.

The script is run for real here (no GPU): with a short budget it must still end, exit 0,
and write the report with one row per step, the steps past the budget marked as such.
On a GPU node the same script runs the GPU steps (the lead runs it there).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.cli_run import run_cli
from torchmpi.dist import _free_port

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "gpu-check.sh"


def test_script_parses():
    proc = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr


def _has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def test_short_budget_ends_in_time_and_reports_every_step(tmp_path):
    if _has_gpu():
        pytest.skip("a GPU is visible: the no-GPU report is checked on CPU machines")
    # 8 s: the torch step starts (its timeout cut to what is left) and has room to end
    # on a loaded host; every step after it is reported with why it did not run, the
    # budget's or the missing venv's.  A longer budget would only spend CPU on busy steps
    # whose rows this test does not read.
    budget = 8
    env = {**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable,
           "GPU_CHECK_BUDGET": str(budget)}
    start = time.monotonic()
    proc = subprocess.run(["bash", str(SCRIPT)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=budget + 60, check=False)
    took = time.monotonic() - start
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert took < budget + 20, took  # each step's timeout is cut to what is left
    report = (tmp_path / "gpu-report.md").read_text()
    rows = [line for line in report.splitlines() if line.startswith("| ")][1:]
    names = [row.split("|")[1].strip() for row in rows]
    sites = sorted(p.stem for p in (ROOT / "sites").glob("*.yaml"))
    for name in ("nvidia-smi -L", "torch version, CUDA, NCCL",
                 "venv for the tool (wrapper/ on the node's torch)",
                 "Python dependencies (pip --no-index from wheels/)",
                 "allreduce nccl eager (1 rank)", "allreduce nccl --graph 5 (1 rank)",
                 "allreduce nccl --blocking (1 rank)", "GPU tests: allreduce (-k on_a_gpu)",
                 "GPU tests: doctor (tests/test_doctor_gpu.py)", "doctor (no site, with probes)",
                 *(f"doctor --site {site} --no-probe" for site in sites),
                 "allreduce nccl --graph 5 under mpirun -n 1",
                 "allreduce nccl eager under torchrun (1 rank)",
                 "allreduce mpi --device cuda under mpirun -n 1",
                 "nccl-tests all_reduce_perf"):
        assert name in names, report
    status = {row.split("|")[1].strip(): row.split("|")[2].strip() for row in rows}
    assert status["allreduce nccl --graph 5 (1 rank)"] == "SKIP"
    # The GPU is read from the torch step's log: "no GPU" only when it says so; a step cut
    # before printing it (a host too loaded for 8 s) is said to leave the GPU unknown.
    said = "cuda available False" in (tmp_path / "gpu-logs" / "01-torch_version__CUDA__NCCL_.log"
                                      ).read_text()
    reason = ("no GPU: torch.cuda.is_available() is False" if said else
              "GPU unknown: the torch step")
    assert f"| SKIP | 0 | {reason}" in report, report
    assert "no nccl-tests source at hand" in report
    assert f"out of the {budget} s budget" in report, report
    assert (tmp_path / "gpu-logs").is_dir()  # each step's full log beside the report


def test_the_comparison_table_reads_real_allreduce_logs(tmp_path, capsys):
    """The GPU run's summary (time per size, eager / --graph / --blocking, and each
    run's floor) is built from torchmpi allreduce's own output: here real one-rank gloo
    runs in the worker (support.cli_run) stand in for the three NCCL runs the GPU node
    makes.  gloo has no --graph, so the --blocking run's log stands in for both of those
    columns: one run, not two with the same argv."""
    outputs = {}
    for mode, extra in (("eager", []), ("blocking", ["--blocking"])):
        # a port of its own: a single rank's default port may be taken by a concurrent job
        status, out, err = run_cli(capsys, "allreduce", "--sizes", "8,1M", "--warmup", "0",
                                   "--iters", "2", *extra, MASTER_ADDR="127.0.0.1",
                                   MASTER_PORT=str(_free_port()))
        assert status == 0, err
        outputs[mode] = out
    logs = []
    for name, mode in (("01-eager", "eager"), ("02-graph", "blocking"),
                       ("03-blocking", "blocking")):
        logs.append(tmp_path / f"{name}.log")
        logs[-1].write_text(outputs[mode])
    text = SCRIPT.read_text()
    compare = text[text.index("compare() {"):text.index("\n}\n", text.index("compare() {")) + 3]
    proc = subprocess.run(["bash", "-c", compare + 'compare "$@"', "compare",
                           *map(str, logs)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    rows = [line.split("|")[1:-1] for line in proc.stdout.splitlines() if line.startswith("| ")]
    floors = {r[0].strip(): r[1].strip() for r in rows if r[0].strip().startswith("0")}
    assert set(floors) == {"01-eager", "02-graph", "03-blocking"}
    assert all(value.endswith(" us") and float(value.split()[0]) > 0
               for value in floors.values()), proc.stdout
    sizes = {r[0].strip(): [c.strip() for c in r[1:4]] for r in rows
             if r[0].strip().isdigit()}
    assert set(sizes) == {"8", "1048576"}, proc.stdout
    assert all(float(c) > 0 for cells in sizes.values() for c in cells), proc.stdout


def test_a_torch_step_that_prints_nothing_leaves_the_gpu_unknown(tmp_path):
    """An interpreter that fails before torch says anything: the GPU steps are skipped as
    "GPU unknown", never as "no GPU", and every step still has its row."""
    env = {**os.environ, "OUT": str(tmp_path), "PYTHON": "false", "GPU_CHECK_BUDGET": "30"}
    proc = subprocess.run(["bash", str(SCRIPT)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=90, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = (tmp_path / "gpu-report.md").read_text()
    rows = {cells[1].strip(): (cells[2].strip(), cells[4].strip())
            for cells in (line.split("|") for line in report.splitlines()
                          if line.startswith("| "))}
    assert rows["torch version, CUDA, NCCL"][0] == "FAIL (exit 1)", report
    why = rows["allreduce nccl eager (1 rank)"][1]
    assert "GPU unknown: the torch step (FAIL (exit 1))" in why, report
    assert "no GPU:" not in report, report
    assert "no venv with torch" in rows["doctor (no site, with probes)"][1], report


#: The interpreter the script is given (PYTHON) in the torch-import count: it logs each
#: start (its process id and arguments, one line) and runs the test's own python in the
#: same process (exec), until the venv is asked for: from then on it refuses, so the venv
#: step fails and every step after it is skipped without starting one interpreter.
_PYTHON_LOGGER = """#!/usr/bin/env bash
if [ -e "$LOG.venv" ]; then printf 'refused %s\\n' "$(printf '%q ' "$@")" >>"$LOG"; exit 1; fi
case " $* " in *" -m venv "*) : >"$LOG.venv"; echo venv >>"$LOG"; exit 1 ;; esac
printf 'call %s %s\\n' "$$" "$(printf '%q ' "$@")" >>"$LOG"
exec "$REAL_PYTHON" "$@"
"""

#: On PYTHONPATH (which the script keeps for every interpreter it starts): each process
#: that imports torch writes its id once, whichever interpreter it is.
_TORCH_WATCH = """import os, sys


class _TorchWatch:
    seen = False

    def find_spec(self, name, path=None, target=None):
        if name == "torch" and not self.seen:
            self.seen = True
            with open(os.environ["LOG"], "a") as log:
                log.write(f"torch {os.getpid()}\\n")
        return None


sys.meta_path.insert(0, _TorchWatch())
"""


def test_torch_is_started_once_to_find_the_gpu(tmp_path):
    """The GPU is read from the torch step's own log: one interpreter that imports torch
    (seconds of a node's time, more on a shared file system), not a second probe.  Every
    interpreter start through PYTHON is logged and every process that imports torch says
    so: up to the venv step, one of each, the same process, the torch step's."""
    python = tmp_path / "python"
    python.write_text(_PYTHON_LOGGER)
    python.chmod(0o755)
    watch = tmp_path / "watch"
    watch.mkdir()
    (watch / "sitecustomize.py").write_text(_TORCH_WATCH)
    log = tmp_path / "starts.log"
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "PYTHON": str(python), "LOG": str(log),
           "REAL_PYTHON": sys.executable, "GPU_CHECK_BUDGET": "60",
           "PYTHONPATH": os.pathsep.join([str(watch), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(["bash", str(SCRIPT)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = log.read_text().splitlines()
    assert "venv" in lines, lines  # the run got as far as the venv step
    before = lines[:lines.index("venv")]
    probes = [line.split(" ", 2) for line in before
              if line.startswith("call ") and "torch" in line]
    assert len(probes) == 1, before  # one start that imports torch, not two
    assert "is_available()" in probes[0][2], probes  # the torch step's code
    imported = [line.split()[1] for line in lines if line.startswith("torch ")]
    assert imported == [probes[0][1]], lines  # and it is the only process that did
    # After it, PYTHON is asked for torch once more only by the venv step's own check
    # (torch and the tool load in the venv), which the logger refuses.
    later = [line for line in lines[lines.index("venv"):] if "torch" in line]
    assert all(line.startswith("refused ") and "torchmpi" in line for line in later), later
    report = (out / "gpu-report.md").read_text()
    assert "| torch version, CUDA, NCCL | PASS |" in report, report
