"""torchmpi allreduce: sizes, bandwidth arithmetic, error hints, and real 1- and 2-rank jobs."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.cli_run import run_cli
from support.mpi_launch import (
    TORCHMPI,
    VIEWED_ARGS,
    WRONG_ALLREDUCE,
    job_env,
    mpirun,
    torchrun,
)
from support.privileges import without_root_capabilities
from torchmpi import allreduce as ar
from torchmpi.allreduce import (
    CUDA_REJECTED_HINT,
    bus_bandwidth,
    combine_times,
    explain,
    parse_size,
    size_series,
)


@pytest.mark.parametrize(("text", "size"), [
    ("8", 8), ("64K", 65536), ("1M", 1 << 20), ("1G", 1 << 30), ("1GiB", 1 << 30),
    ("2mb", 2 << 20),
])
def test_parse_size(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["lots", "0", "0K", "-8", "-1M", ""])
def test_parse_size_rejects_junk_zero_and_negative(text):
    with pytest.raises(ValueError):
        parse_size(text)


def test_default_range_spans_8_bytes_to_1_gib():
    sizes = size_series(8, 1 << 30)
    assert sizes[0] == 8 and sizes[-1] == 1 << 30 and len(sizes) == 28


def test_size_series_rejects_empty_range():
    with pytest.raises(ValueError):
        size_series(1024, 8)


def test_busbw_follows_nccl_tests():
    assert bus_bandwidth(10.0, 2) == pytest.approx(10.0)
    assert bus_bandwidth(10.0, 8) == pytest.approx(17.5)
    assert bus_bandwidth(10.0, 1) == 0.0


def test_time_is_averaged_over_ranks_like_nccl_tests_minus_a():
    times = [1.0, 2.0, 6.0]
    assert combine_times(times, "avg") == 3.0
    assert (combine_times(times, "max"), combine_times(times, "min")) == (6.0, 1.0)
    assert combine_times(times, "rank0") == 1.0


def test_cuda_tensor_rejection_gets_the_documented_message():
    err = RuntimeError("CUDA tensor detected and the MPI used doesn't have CUDA-aware MPI "
                       "support")
    assert explain(err) == CUDA_REJECTED_HINT
    assert CUDA_REJECTED_HINT == ("this PyTorch does not recognise your MPI as CUDA-aware — "
                                  "see docs/troubleshooting.md")
    assert explain(RuntimeError("something else")) is None


def _rows(stdout: str) -> list[list[str]]:
    return [line.split() for line in stdout.splitlines() if line and not line.startswith("#")]


@pytest.fixture(scope="module")
def gloo_run_blocking_with_csv(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """One 2-rank gloo job under mpirun, read by two tests (what a run checks and reports,
    its header's floor and timing mode): one mpirun, not two.  ``--blocking`` changes
    when the clock waits for the device, nothing the first test reads; eager's header is
    test_one_rank_prints_algbw_as_bytes_over_time's."""
    out_csv = tmp_path_factory.mktemp("gloo-run") / "ar.csv"
    return mpirun(2, TORCHMPI, "allreduce", "--backend", "gloo", "--sizes", "8,4K,1M",
                  "--warmup", "1", "--iters", "3", "--blocking", "--csv", str(out_csv)), out_csv


def test_gloo_under_mpirun_checks_and_reports(gloo_run_blocking_with_csv):
    proc, out_csv = gloo_run_blocking_with_csv
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "launcher=openmpi" in out and "ranks=2" in out
    assert "# warmup iters: 1, timed iters: 3, time: avg over ranks" in out
    assert "#  Rank   0 on " in out and "#  Rank   1 on " in out and "device cpu" in out
    assert "WARNING: one rank" not in out
    rows = _rows(out)
    assert [int(r[0]) for r in rows] == [8, 4096, 1 << 20]
    assert all(r[-1] == "OK" for r in rows)
    for row in rows:  # busbw = algbw * 2(n-1)/n = algbw for n = 2
        assert float(row[6]) == pytest.approx(float(row[5]), abs=1e-3)
    assert "# correctness: OK" in out
    avg = [line for line in out.splitlines() if line.startswith("# Avg bus bandwidth")]
    assert len(avg) == 1 and out.rstrip().endswith(avg[0])
    mean = sum(float(r[6]) for r in rows) / 3
    assert float(avg[0].split(":")[1]) == pytest.approx(mean, abs=2e-3)
    with open(out_csv) as handle:
        assert [int(r["bytes"]) for r in csv.DictReader(handle)] == [8, 4096, 1 << 20]


@pytest.fixture
def json_run_with_a_floor_met(viewed_mpirun) -> subprocess.CompletedProcess:
    """One 2-rank ``--json`` job with a --min-busbw any machine meets, read by two tests
    here (the JSON report's shape, the floor's verdict in it) and by tests/test_dist.py's
    launch mapping under mpirun: conftest's viewed_mpirun, one mpirun, not three (its
    readers share its xdist group).  The JSON of a run without --min-busbw is
    test_one_rank_prints_algbw_as_bytes_over_time's."""
    proc = viewed_mpirun
    assert VIEWED_ARGS["mpirun"][-3:] == ("--min-busbw", "0.000001", "--json")
    return proc


def test_json_is_machine_readable_on_stdout(json_run_with_a_floor_met):
    proc = json_run_with_a_floor_met
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["ranks"] == 2 and report["ok"] is True and report["average"] == "avg"
    assert [r["bytes"] for r in report["results"]] == [8, 1024]
    assert [r["rank"] for r in report["rank_map"]] == [0, 1]


def test_one_rank_warns_that_nothing_crosses_a_link(capsys):
    """In the worker (support.cli_run): the claim is the header, not the launch."""
    status, out, err = run_cli(capsys, "allreduce", "--sizes", "1K", "--warmup", "0",
                               "--iters", "1")
    assert status == 0, out + err
    assert "# WARNING: one rank" in out
    import torch.distributed as dist  # the worker is as it was for the next test

    assert "RANK" not in os.environ and not dist.is_initialized()


def test_gloo_under_torchrun(viewed_torchrun):
    """conftest's viewed_torchrun: the torchrun job tests/test_dist.py's launch mapping
    reads too (one torchrun and two ranks, not twice that)."""
    proc = viewed_torchrun
    assert "--json" not in VIEWED_ARGS["torchrun"]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "launcher=torchrun" in proc.stdout and _rows(proc.stdout)[0][-1] == "OK"


def test_a_wrong_result_is_fail_with_nonzero_exit():
    proc = mpirun(2, sys.executable, "-c", WRONG_ALLREDUCE, "allreduce", "--sizes", "8,1K,4K",
                  "--warmup", "0", "--iters", "1")
    assert proc.returncode != 0, proc.stdout
    rows = {int(r[0]): r[-1] for r in _rows(proc.stdout)}
    assert rows == {8: "OK", 1024: "FAIL", 4096: "OK"}
    assert "# correctness: FAILED for 1 size(s)" in proc.stdout
    assert "FAIL: wrong all-reduce result at size(s) 1024 bytes" in proc.stderr


# Rank 0 dies in the third size: the rows of the sizes done before are already out.
CRASH = """
import os, sys, torch, torch.distributed as dist
from torchmpi.cli import main
real = dist.all_reduce
def crashing(tensor, *args, **kwargs):
    if tensor.numel() == 1024:
        os._exit(3)
    return real(tensor, *args, **kwargs)
dist.all_reduce = crashing
sys.exit(main(sys.argv[1:]))
"""


def test_rows_are_printed_as_each_size_completes():
    proc = subprocess.run([sys.executable, "-c", CRASH, "allreduce", "--sizes", "8,1K,4K",
                           "--warmup", "0", "--iters", "1"], env=job_env(),
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 3
    assert [int(r[0]) for r in _rows(proc.stdout)] == [8, 1024]


def test_mpi_backend_missing_is_explained(capsys):
    """The pip CPU torch has no MPI backend: a clear message and exit 1, not an exception
    (in the worker, support.cli_run: an exception would fail the test itself)."""
    status, out, err = run_cli(capsys, "allreduce", "--backend", "mpi", "--sizes", "8")
    assert status == 1, out + err
    assert "this PyTorch has no MPI backend" in err


def allreduce_cli(*args: str) -> subprocess.CompletedProcess:
    """One process, no launcher: input errors must stop it before torch.distributed starts."""
    return subprocess.run([TORCHMPI, "allreduce", *args], env=job_env(), capture_output=True,
                          text=True, timeout=120, check=False)


@pytest.mark.parametrize(("args", "words"), [
    (("--sizes", "lots"), "not a size"),
    (("--sizes", "0"), "is not positive"),
    (("--sizes", "8,-1K"), "is not positive"),
    (("--sizes", ","), "names no size"),
    (("--min-bytes", "0"), "is not positive"),
    (("--factor", "1"), "factor must be at least 2"),
    (("--iters", "0"), "--iters 0"),
    (("--warmup", "-1"), "--warmup -1"),
])
def test_bad_input_is_a_user_error(args, words):
    proc = allreduce_cli(*args)
    assert proc.returncode == 2 and words in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


@pytest.mark.parametrize("where", ["missing-dir/ar.csv", "."])
def test_unwritable_csv_is_refused_before_the_run(tmp_path, where):
    target = tmp_path / where
    proc = allreduce_cli("--sizes", "8", "--csv", str(target))
    assert proc.returncode == 2 and "--csv" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""  # nothing ran


def test_readonly_csv_is_refused_before_the_run(tmp_path):
    """Mode 0444.  Root passes every access check by its capabilities, so as root the
    verb runs without them (setpriv's empty bounding set: uid 0 then is an owner like any
    other) -- a check, where a root run would write the file and prove nothing."""
    target = tmp_path / "ar.csv"
    target.write_text("keep me\n")
    target.chmod(0o444)
    prefix = without_root_capabilities()
    proc = subprocess.run([*prefix, TORCHMPI, "allreduce", "--sizes", "8", "--csv",
                           str(target)], env=job_env(), capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 2 and "not writable" in proc.stderr, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""  # nothing ran
    assert target.read_text() == "keep me\n"


def test_help_has_description_example_and_defaults():
    out = allreduce_cli("--help").stdout
    out = " ".join(out.split())  # argparse wraps to the terminal width
    assert "Avg bus bandwidth" in out and "examples:" in out
    assert out.count("(default") >= 10


def _visible_gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@pytest.mark.parametrize("backend", ["nccl", "gloo"])
def test_cuda_tensors_on_a_gpu(backend):
    """Runs where a GPU is lent; skipped (never faked) elsewhere."""
    gpus = _visible_gpus()
    if not gpus:
        pytest.skip("no GPU visible")
    ranks = min(gpus, 2) if backend == "nccl" else 2  # NCCL refuses two ranks on one GPU
    proc = torchrun(ranks, "--no-python", TORCHMPI, "allreduce", "--backend", backend,
                    "--device", "cuda", "--sizes", "8,1M,64M", "--warmup", "2", "--iters", "5")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "device cuda:" in proc.stdout and "# Avg bus bandwidth" in proc.stdout
    assert [r[-1] for r in _rows(proc.stdout)] == ["OK", "OK", "OK"]


# --- stream order: CUDA tensors over the MPI backend ------------------------------------
# ProcessGroupMPI calls MPI on its worker thread with the tensor's pointer and no wait on
# the caller's CUDA stream (pytorch/pytorch#38642): every collective that follows a kernel
# must come after a synchronisation.  Checked without a GPU: a real gloo group of one rank
# runs run_sizes on CPU tensors, and a stand-in for the stream wait records when it runs.


@pytest.fixture
def gloo_world_of_one():
    import torch.distributed as dist
    from torchmpi.dist import _free_port

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{_free_port()}",
                            rank=0, world_size=1)
    yield dist
    dist.destroy_process_group()


def test_every_collective_waits_for_the_stream(gloo_world_of_one, monkeypatch):
    dist = gloo_world_of_one
    events: list[str] = []
    for name in ("all_reduce", "broadcast", "barrier"):
        real = getattr(dist, name)

        def recorded(*args, _real=real, _name=name, **kwargs):
            events.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(dist, name, recorded)
    results = ar.run_sizes([8, 4096], device="cpu", warmup=1, iters=2, time_op="avg",
                           ready=lambda: events.append("sync"))
    assert [r.errors for r in results] == [0, 0]
    collectives = [i for i, e in enumerate(events) if e != "sync"]
    assert len(collectives) >= 2 * 6, events
    unsynced = [events[i] for i in collectives if i == 0 or events[i - 1] != "sync"]
    assert unsynced == [], events
    for how in ("avg", "rank0"):  # the time reduction is a collective too
        events.clear()
        ar._reduce_time(1.0, how, 1, "cpu", ready=lambda: events.append("sync"))
        assert events[0] == "sync" and len(events) == 2, events


def test_the_stream_wait_is_cudas_only_for_cuda_over_mpi():
    """NCCL and gloo order themselves against the current stream; MPI does not."""
    import torch

    assert ar.stream_wait("cuda", "mpi") is torch.cuda.synchronize
    for device, backend in (("cuda", "nccl"), ("cuda", "gloo"), ("cpu", "mpi")):
        assert ar.stream_wait(device, backend) is ar.no_wait


def test_the_clock_is_read_only_after_the_device_finished(gloo_world_of_one, monkeypatch):
    """CUDA collectives return before the GPU is done: the timer must stop after the wait.

    Without it a CUDA run times only the kernel launches and reports a bandwidth no
    link has (nccl-tests synchronises its stream before reading the clock too).  The
    CUDA wait is a stand-in that records when it runs, beside the collectives and the clock.
    """
    dist = gloo_world_of_one
    events: list[str] = []
    _recording(dist, monkeypatch, events)
    ar.run_sizes([8], device="cpu", warmup=1, iters=2, time_op="avg")
    start = events.index("clock")
    stop = events.index("clock", start + 1)
    assert events[start:stop + 1] == ["clock", "all_reduce", "all_reduce", "finish", "clock"]
    assert "finish" in events[:start], events  # the warm-up is finished before the start too


def test_every_collective_waits_for_the_stream_first(gloo_world_of_one, monkeypatch):
    """ProcessGroupMPI reads a CUDA tensor on its own thread: the wait chosen by
    ``stream_wait`` for the run's device and backend must run before every
    collective (the sums checked, the warm-up, the timed ones, the time reduced).

    The wait is a stand-in that records when it runs, asked for by the run's own
    device and backend, so a run that ignores ``stream_wait`` is seen here
    without a GPU."""
    dist = gloo_world_of_one
    events: list[str] = []
    asked: list[tuple[str, str]] = []
    real_reduce = dist.all_reduce

    def reduce(*args, **kwargs):
        events.append("all_reduce")
        return real_reduce(*args, **kwargs)

    def wait(device: str, backend: str):
        asked.append((device, backend))
        return lambda: events.append("ready")

    monkeypatch.setattr(dist, "all_reduce", reduce)
    monkeypatch.setattr(ar, "stream_wait", wait)
    ar.run_sizes([8], device="cpu", warmup=1, iters=2, time_op="avg")
    assert asked == [("cpu", "gloo")]
    reduces = [i for i, e in enumerate(events) if e == "all_reduce"]
    assert len(reduces) >= 5, events  # check, wrong-count, warm-up, 2 timed (+ time)
    assert all(i > 0 and events[i - 1] == "ready" for i in reduces), events


def test_the_clock_waits_for_cuda_on_every_backend():
    """Unlike the stream wait, the clock's wait is needed by every backend on CUDA."""
    import torch

    assert ar.clock_wait("cuda") is torch.cuda.synchronize
    assert ar.clock_wait("cpu") is ar.no_wait


def _avg_line(stdout: str) -> str:
    lines = [line for line in stdout.splitlines() if line.startswith("# Avg bus bandwidth")]
    assert len(lines) == 1, stdout
    return lines[0]


def test_min_busbw_above_what_the_machine_does_fails_the_run():
    proc = mpirun(2, TORCHMPI, "allreduce", "--sizes", "1K,64K", "--warmup", "0", "--iters",
                  "2", "--min-busbw", "100000")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert _avg_line(proc.stdout).endswith(" FAILED")
    assert "# correctness: OK" in proc.stdout  # the results were right, the speed was not
    assert "below 90% of --min-busbw 100000" in proc.stderr


def test_min_busbw_met_passes_and_says_ok(json_run_with_a_floor_met):
    proc = json_run_with_a_floor_met
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["min_busbw_gbs"] == 0.000001 and report["busbw_ok"] is True


def test_nccl_tests_min_bw_variable_is_honoured_like_nccl_tests(capsys):
    """In the worker (support.cli_run), one rank: the claim is that the variable is read
    as the floor when no flag is given; a floor missed by a real 2-rank job is
    test_min_busbw_above_what_the_machine_does_fails_the_run's."""
    status, out, err = run_cli(capsys, "allreduce", "--sizes", "1K", "--warmup", "0",
                               "--iters", "1", NCCL_TESTS_MIN_BW="100000")
    assert status == 1, out + err
    assert _avg_line(out).endswith(" FAILED")
    assert "below 90% of NCCL_TESTS_MIN_BW 100000 GB/s" in err, err  # what set the floor


@pytest.mark.parametrize("value", ["fast", "-1", "nan"])
def test_bad_min_busbw_is_a_user_error(value):
    proc = allreduce_cli("--sizes", "8", "--min-busbw", value)
    assert proc.returncode == 2 and "--min-busbw" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


# --- what the timed loop measures: eager, --blocking (nccl-tests -z 1), --graph (-G N) -------
# nccl-tests (NVIDIA/nccl-tests src/common.cu, BenchTime): with -z 1 every collective is
# followed by a stream synchronisation; with -G N the timed iterations are captured into a
# CUDA graph, the timer is reset, the graph is launched N times, and the time per operation is
# the elapsed time / (iters * N).  Checked here without a GPU: a real gloo group of one rank,
# stand-ins for the device wait and for the graph capture that record when they run.


def _recording(dist, monkeypatch, events: list[str]) -> None:
    real_reduce, real_clock = dist.all_reduce, ar.time.perf_counter

    def reduce(*args, **kwargs):
        events.append("all_reduce")
        return real_reduce(*args, **kwargs)

    def clock():
        events.append("clock")
        return real_clock()

    monkeypatch.setattr(dist, "all_reduce", reduce)
    monkeypatch.setattr(ar.time, "perf_counter", clock)
    monkeypatch.setattr(ar, "clock_wait", lambda device: lambda: events.append("finish"))


def _timed_window(events: list[str]) -> list[str]:
    start = events.index("clock")
    stop = events.index("clock", start + 1)
    return events[start:stop + 1]


def test_blocking_waits_for_the_device_after_every_timed_collective(gloo_world_of_one,
                                                                      monkeypatch):
    """nccl-tests -z 1: the host waits for each collective to finish before the next."""
    events: list[str] = []
    _recording(gloo_world_of_one, monkeypatch, events)
    ar.run_sizes([8], device="cpu", warmup=1, iters=3, time_op="avg", mode="blocking")
    window = _timed_window(events)
    assert window == ["clock"] + ["all_reduce", "finish"] * 3 + ["clock"], window


def test_eager_waits_for_the_device_once_after_the_timed_collectives(gloo_world_of_one,
                                                                       monkeypatch):
    events: list[str] = []
    _recording(gloo_world_of_one, monkeypatch, events)
    ar.run_sizes([8], device="cpu", warmup=1, iters=3, time_op="avg", mode="eager")
    assert _timed_window(events) == ["clock"] + ["all_reduce"] * 3 + ["finish", "clock"]


def test_graph_captures_the_timed_iterations_and_times_only_the_replays(gloo_world_of_one,
                                                                        monkeypatch):
    """-G N: capture outside the clock, one untimed replay, then N replays timed."""
    events: list[str] = []
    _recording(gloo_world_of_one, monkeypatch, events)
    captured: list[list[str]] = []

    def capture(body):
        events.append("capture")
        before = len(events)
        body()
        captured.append(events[before:])
        return lambda: events.append("replay")

    ar.run_sizes([8], device="cpu", warmup=1, iters=3, time_op="avg", mode="graph",
                 replays=2, capture=capture)
    assert captured == [["all_reduce"] * 3], captured  # the timed iterations, nothing else
    window = _timed_window(events)
    assert window == ["clock", "replay", "replay", "finish", "clock"], window
    start = events.index("clock")
    assert events[start - 6:start] == ["capture", *["all_reduce"] * 3, "replay", "finish"], \
        events[:start]  # captured, replayed once untimed (uploads the graph), finished


def test_graph_time_is_per_operation_over_every_replay(gloo_world_of_one, monkeypatch):
    """elapsed / (iters * replays), as nccl-tests divides by iters and cudaGraphLaunches."""
    ticks = iter([0.0, 60.0])
    monkeypatch.setattr(ar.time, "perf_counter", lambda: next(ticks))
    (result,) = ar.run_sizes([1024], device="cpu", warmup=0, iters=3, time_op="avg",
                             mode="graph", replays=2, capture=lambda body: lambda: None)
    assert result.time_us == pytest.approx(10e6)
    assert result.algbw_gbs == pytest.approx(1024 / 10.0 / 1e9)


def test_a_time_below_the_clock_resolution_reports_zero_bandwidth(gloo_world_of_one,
                                                                  monkeypatch):
    """A clock that did not advance: 0 s, and bandwidths of 0 rather than a division
    by zero that would end the run."""
    monkeypatch.setattr(ar.time, "perf_counter", lambda: 60.0)
    (result,) = ar.run_sizes([1024], device="cpu", warmup=0, iters=3, time_op="avg",
                             mode="graph", replays=2, capture=lambda body: lambda: None)
    assert (result.time_us, result.algbw_gbs, result.busbw_gbs) == (0.0, 0.0, 0.0)


def test_the_real_capture_is_a_torch_cuda_graph_replay():
    """What --graph captures with: torch.cuda.CUDAGraph, its replay returned."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(ar.cuda_graph_capture))
    names = {ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    assert {"torch.cuda.CUDAGraph", "torch.cuda.graph", "graph.replay"} <= names, names


def test_call_floor_times_one_element_calls_on_the_host(gloo_world_of_one, monkeypatch):
    """The per-call floor: host time of dist.all_reduce on one element, no device wait
    inside the timed calls (a GPU would run nothing there anyway)."""
    dist = gloo_world_of_one
    events: list[str] = []
    sizes: list[int] = []
    real_reduce = dist.all_reduce

    def reduce(tensor, *args, **kwargs):
        events.append("all_reduce")
        sizes.append(tensor.numel())
        return real_reduce(tensor, *args, **kwargs)

    monkeypatch.setattr(dist, "all_reduce", reduce)
    monkeypatch.setattr(ar, "clock_wait", lambda device: lambda: events.append("finish"))
    floor = ar.call_floor("cpu", calls=10)
    assert floor > 0
    assert sizes[:11] == [1] * 11  # one warm call, ten timed (then the time is reduced)
    assert events[:13] == ["all_reduce", "finish", *["all_reduce"] * 10, "finish"], events


def test_one_rank_prints_algbw_as_bytes_over_time(capsys):
    """nccl-tests at one rank: algbw = bytes / time, busbw = 0 (nothing crosses a link).
    In the worker (support.cli_run): the claim is the report, not the launch."""
    status, out, err = run_cli(capsys, "allreduce", "--sizes", "64K", "--warmup", "0",
                               "--iters", "2", "--json")
    assert status == 0, out + err
    report = json.loads(out)
    (row,) = report["results"]
    assert row["busbw_gbs"] == 0.0
    assert row["algbw_gbs"] == pytest.approx(row["bytes"] / (row["time_us"] * 1e3), rel=1e-9)
    assert report["mode"] == "eager" and report["floor_us"] > 0


def test_gloo_run_prints_the_floor_and_blocking_mode_in_its_header(gloo_run_blocking_with_csv):
    proc, _ = gloo_run_blocking_with_csv
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "# timing: blocking" in proc.stdout
    floor = [line for line in proc.stdout.splitlines() if line.startswith("# per-call floor:")]
    assert len(floor) == 1 and float(floor[0].split()[3]) > 0, proc.stdout
    assert [r[-1] for r in _rows(proc.stdout)] == ["OK", "OK", "OK"]


@pytest.mark.parametrize(("args", "words"), [
    (("--graph",), "--graph needs --backend nccl"),                # gloo: host collectives
    (("--graph", "--backend", "mpi"), "--graph needs --backend nccl"),
    (("--graph", "--backend", "nccl", "--device", "cpu"), "--graph needs --backend nccl"),
    (("--graph", "--backend", "gloo", "--device", "cuda"), "--graph needs --backend nccl"),
    (("--graph", "0", "--backend", "nccl"), "--graph 0: must be at least 1"),
    (("--graph", "2", "--blocking", "--backend", "nccl"), "not allowed with"),
])
def test_graph_input_errors_come_before_the_run(args, words):
    proc = allreduce_cli("--sizes", "8", *args)
    assert proc.returncode == 2 and words in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


# GPU-only: run by scripts/gpu-check.sh on a GPU node; skipped (never faked) elsewhere.
def _floor_and_rows(stdout: str) -> tuple[float, list[list[str]]]:
    floor = [line for line in stdout.splitlines() if line.startswith("# per-call floor:")]
    assert len(floor) == 1, stdout
    return float(floor[0].split()[3]), _rows(stdout)


def test_graph_on_a_gpu_goes_below_the_per_call_floor():
    """One GPU, NCCL, in place: the replayed graph's time per operation at 8 B is below the
    host cost of one dist.all_reduce call (the goal: <= 2 us where eager gives 14-21 us)."""
    if not _visible_gpus():
        pytest.skip("no GPU visible")
    proc = torchrun(1, "--no-python", TORCHMPI, "allreduce", "--backend", "nccl",
                    "--sizes", "8,1M", "--warmup", "5", "--iters", "50", "--graph", "5")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    floor, rows = _floor_and_rows(proc.stdout)
    assert [r[-1] for r in rows] == ["OK", "OK"]
    assert "# timing: graph" in proc.stdout
    assert float(rows[0][4]) < floor, proc.stdout


def test_blocking_on_a_gpu_checks_and_reports():
    if not _visible_gpus():
        pytest.skip("no GPU visible")
    proc = torchrun(1, "--no-python", TORCHMPI, "allreduce", "--backend", "nccl",
                    "--sizes", "8,1M", "--warmup", "2", "--iters", "10", "--blocking")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    floor, rows = _floor_and_rows(proc.stdout)
    assert floor > 0 and [r[-1] for r in rows] == ["OK", "OK"]


# --- statistics: nccl-tests' definitions on known per-rank times ----------------

REDUCE = """
import json, sys
import torch.distributed as dist
from torchmpi import allreduce
from torchmpi.dist import init_distributed
init_distributed("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
times = [float(t) for t in sys.argv[2].split(",")]
out = {how: allreduce._reduce_time(times[rank], how, world, "cpu")
       for how in ("avg", "max", "min", "rank0")}
if rank == 0:
    with open(sys.argv[1], "w") as fh:
        json.dump(out, fh)
dist.destroy_process_group()
"""


def test_time_reduction_over_real_ranks(tmp_path: Path) -> None:
    """Three gloo ranks with times 2, 6, 1 (rank 0 not the extreme): avg divides by
    the ranks, max and min pick ranks 1 and 2, rank0 is rank 0's.  Under mpirun, whose
    launcher is no Python that imports torch (torchrun's is: the launchers have tests
    of their own)."""
    script = tmp_path / "reduce.py"
    script.write_text(REDUCE)
    out = tmp_path / "out.json"
    proc = mpirun(3, sys.executable, str(script), str(out), "2,6,1", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(out.read_text())
    assert got == {"avg": 3.0, "max": 6.0, "min": 1.0, "rank0": 2.0}
