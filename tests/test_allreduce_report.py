"""The all-reduce report (torchmpi.allreduce_report): nccl-tests' precision, header, verdict.

Built from results alone (no torch, no job); the runs that print these lines end
to end are in tests/test_allreduce.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
from support.privileges import without_root_capabilities
from torchmpi import allreduce as ar
from torchmpi import allreduce_report as report


# --min-busbw: nccl-tests' NCCL_TESTS_MIN_BW (NVIDIA/nccl-tests src/common.cu): the run fails
# when the average bus bandwidth is below 90 % of the threshold.
def test_min_busbw_threshold_has_nccl_tests_ten_percent_slack():
    assert report.below_min_busbw(8.99, 10.0) and not report.below_min_busbw(9.0, 10.0)
    assert not report.below_min_busbw(0.0, None)


@pytest.mark.parametrize(("seconds", "text"), [
    (12345.6e-6, "12346"), (123.46e-6, "123.5"), (1.234e-6, "1.23"),
])
def test_time_is_printed_with_nccl_tests_precision(seconds, text):
    """%7.0f from 10 ms, %7.1f from 100 us, else %7.2f (nccl-tests BenchTime)."""
    row = report.format_row(ar.Result(1024, 256, "float32", seconds * 1e6, 1.0, 0.0, 0))
    assert row.split()[4] == text


def test_header_names_the_mode_and_the_per_call_floor():
    header = report.format_header(1, "nccl", "cuda", "torchrun", warmup=1, iters=2,
                                  time_op="avg", ranks=[], mode="graph", replays=3,
                                  floor_us=17.25)
    assert "# timing: graph (timed iterations captured in a CUDA graph, replayed 3 times" \
        in header
    assert "# per-call floor: 17.25 us" in header


def test_graph_at_one_rank_says_the_graph_holds_no_work():
    """One rank, in place: NCCL launches no kernel, so the captured graph is empty (torch
    warns "The CUDA Graph is empty" on the H200) and --graph times an empty replay."""
    def header(world: int, mode: str) -> str:
        return report.format_header(world, "nccl", "cuda", "single", warmup=1, iters=2,
                                    time_op="avg", ranks=[], mode=mode, replays=3, floor_us=1.0)
    assert "graph is empty" in header(1, "graph")
    assert "graph is empty" not in header(2, "graph")
    assert "graph is empty" not in header(1, "eager")


def test_avg_bus_bandwidth_averages_busbw_not_algbw() -> None:
    """nccl-tests' "Avg bus bandwidth" is the mean of the busbw column."""
    rows = [ar.Result(1 << 20, 1 << 18, "float32", 10.0, 4.0, ar.bus_bandwidth(4.0, 4), 0),
            ar.Result(1 << 21, 1 << 19, "float32", 10.0, 8.0, ar.bus_bandwidth(8.0, 4), 0)]
    assert ar.bus_bandwidth(4.0, 4) == 6.0  # 2 (n-1)/n = 1.5
    assert report.average_busbw(rows) == 9.0
    assert "# Avg bus bandwidth    : 9.000" in report.format_footer(rows)


def test_per_call_floor_hint_only_where_graph_mode_would_remove_it():
    """"--graph removes it" is said to an eager or blocking NCCL run on a GPU, never to a
    run already in graph mode nor one --graph cannot capture (gloo, CPU)."""
    def header(mode: str, backend: str = "nccl", device: str = "cuda") -> str:
        return report.format_header(2, backend, device, "torchrun", warmup=1, iters=2,
                                    time_op="avg", ranks=[], mode=mode, floor_us=5.0)
    assert "--graph removes it" in header("eager")
    assert "--graph removes it" in header("blocking")
    assert "--graph removes it" not in header("graph")
    assert "--graph removes it" not in header("eager", "gloo", "cpu")


def test_footer_counts_the_sizes_that_failed_their_check():
    rows = [ar.Result(8, 2, "float32", 1.0, 0.0, 0.0, 0),
            ar.Result(16, 4, "float32", 1.0, 0.0, 0.0, 3)]
    assert "# correctness: FAILED for 1 size(s)" in report.format_footer(rows)
    assert "# correctness: OK" in report.format_footer(rows[:1])


def test_json_of_no_sizes_reports_zero_bandwidth():
    """A run with no rows (nothing measured) reports 0.0, never a negative peak."""
    got = json.loads(report.to_json([], {"backend": "gloo"}))
    assert got["peak_busbw_gbs"] == 0.0 and got["avg_busbw_gbs"] == 0.0
    assert got["ok"] is True and got["busbw_ok"] is True and got["results"] == []


def test_a_new_or_writable_file_passes_the_check_before_the_run(tmp_path):
    report.check_writable(tmp_path / "new.csv")  # not there yet: the folder decides
    (tmp_path / "old.csv").write_text("replace me\n")
    report.check_writable(tmp_path / "old.csv")
    with pytest.raises(ValueError, match="is a directory"):
        report.check_writable(tmp_path)
    with pytest.raises(ValueError, match="does not exist"):
        report.check_writable(tmp_path / "gone" / "x.csv")


@pytest.fixture
def sealed_folder(tmp_path):
    """A folder nobody may create files in (mode 0555; as root, whom modes do not stop,
    also the immutable attribute), holding a writable file ``kept.csv``."""
    folder = tmp_path / "sealed"
    folder.mkdir()
    (folder / "kept.csv").write_text("replace me\n")
    folder.chmod(0o555)
    if os.access(folder, os.W_OK) and shutil.which("chattr"):
        subprocess.run(["chattr", "+i", str(folder)], capture_output=True, check=False)
    try:
        if os.access(folder, os.W_OK):
            pytest.skip("cannot make a folder unwritable here (root without chattr)")
        yield folder
    finally:
        if shutil.which("chattr"):
            subprocess.run(["chattr", "-i", str(folder)], capture_output=True, check=False)
        folder.chmod(0o755)


def test_a_writable_file_in_a_sealed_folder_may_be_rewritten(sealed_folder):
    """Rewriting a file needs the file writable, not its folder; a new file needs the
    folder."""
    report.check_writable(sealed_folder / "kept.csv")
    with pytest.raises(ValueError, match="cannot create a file in"):
        report.check_writable(sealed_folder / "new.csv")


@pytest.mark.parametrize("below", [(), ("sub",)], ids=["in-it", "further-down"])
def test_a_csv_in_a_folder_one_may_not_search_is_refused_without_a_traceback(tmp_path,
                                                                             below):
    """``--csv`` in a folder whose search (x) bit is off: Python 3.11's ``Path.is_dir``
    raises PermissionError there, which must become a refusal naming that folder (exit 2,
    no traceback) before any rank starts -- the folder whose bit is off, also when the
    file would sit further down.  Root passes every access check by its
    capabilities, so as root the verb runs without them (setpriv's empty bounding set)."""
    import sys

    folder = tmp_path / "no-search"
    folder.mkdir()
    (folder / "sub").mkdir()
    folder.chmod(0o600)
    prefix = without_root_capabilities()
    target = folder.joinpath(*below, "out.csv")
    try:
        proc = subprocess.run([*prefix, sys.executable, "-m", "torchmpi", "allreduce",
                               "--backend", "gloo", "--csv", str(target)],
                              capture_output=True, text=True, timeout=120, check=False)
    finally:
        folder.chmod(0o700)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert f"--csv {target}: cannot search folder {folder} (" in proc.stderr, proc.stderr
    assert not target.exists()
