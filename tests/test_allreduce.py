"""torchmpi allreduce: sizes, bandwidth arithmetic, error hints, and real 2-rank jobs."""

from __future__ import annotations

import csv
import json

import pytest
from mpi_launch import TORCHMPI, mpirun, torchrun
from torchmpi.allreduce import (
    CUDA_REJECTED_HINT,
    bus_bandwidth,
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


def test_parse_size_rejects_junk():
    with pytest.raises(ValueError):
        parse_size("lots")


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


def test_cuda_tensor_rejection_gets_the_documented_message():
    err = RuntimeError("CUDA tensor detected and the MPI used doesn't have CUDA-aware MPI "
                       "support")
    assert explain(err) == CUDA_REJECTED_HINT
    assert CUDA_REJECTED_HINT == ("this PyTorch does not recognise your MPI as CUDA-aware — "
                                  "see docs/troubleshooting.md")
    assert explain(RuntimeError("something else")) is None


def _rows(stdout: str) -> list[list[str]]:
    return [line.split() for line in stdout.splitlines() if line and not line.startswith("#")]


def test_gloo_under_mpirun_checks_and_reports(tmp_path):
    out_csv, out_json = tmp_path / "ar.csv", tmp_path / "ar.json"
    proc = mpirun(2, TORCHMPI, "allreduce", "--backend", "gloo", "--sizes", "8,4K,1M",
                  "--warmup", "1", "--iters", "3", "--csv", str(out_csv),
                  "--json", str(out_json))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "launcher=openmpi" in proc.stdout and "ranks=2" in proc.stdout
    rows = _rows(proc.stdout)
    assert [int(r[0]) for r in rows] == [8, 4096, 1 << 20]
    assert all(r[-1] == "OK" for r in rows)
    for row in rows:  # busbw = algbw * 2(n-1)/n = algbw for n = 2
        assert float(row[6]) == pytest.approx(float(row[5]), abs=1e-3)
    assert "# correctness: OK" in proc.stdout
    report = json.loads(out_json.read_text())
    assert report["ranks"] == 2 and [r["errors"] for r in report["results"]] == [0, 0, 0]
    with open(out_csv) as handle:
        assert [int(r["bytes"]) for r in csv.DictReader(handle)] == [8, 4096, 1 << 20]


def test_gloo_under_torchrun():
    proc = torchrun(2, "--no-python", TORCHMPI, "allreduce", "--sizes", "1K",
                    "--warmup", "0", "--iters", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "launcher=torchrun" in proc.stdout and _rows(proc.stdout)[0][-1] == "OK"


def test_mpi_backend_missing_is_explained():
    """The pip CPU torch has no MPI backend: a clear message, not a traceback."""
    proc = mpirun(2, TORCHMPI, "allreduce", "--backend", "mpi", "--sizes", "8")
    assert proc.returncode != 0
    assert "this PyTorch has no MPI backend" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_bad_size_is_a_user_error():
    proc = mpirun(1, TORCHMPI, "allreduce", "--sizes", "lots")
    assert proc.returncode != 0 and "not a size" in proc.stderr
