"""`make test`'s ``-n 2 --dist loadgroup`` really keeps each shared fixture on one worker.

A real pytest-xdist run of a scratch test module under this suite's conftest.py:
each session fixture writes the worker that computed it, and every one must have
been computed once.  With pytest 9.2 the group xdist reads is lost (xdist 3.8
still writes the group into the legacy ``_nodeid``, which pytest 9.2 no longer
reads: pytest-dev/pytest-xdist#1386), and every shared solve of the suite was
done on both workers.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

MODULE = '''
import os, time, pytest

def _record(name):
    with open(os.path.join(os.environ["GROUPS_LOG"], name), "a") as f:
        f.write(os.environ.get("PYTEST_XDIST_WORKER", "main") + "\\n")

@pytest.fixture(scope="session")
def solve_a():
    _record("solve_a")

@pytest.fixture(scope="module")
def solve_b():
    _record("solve_b")

@pytest.fixture(scope="session")
def by_site():
    return {}

@pytest.mark.parametrize("i", range(10))
def test_a(solve_a, i):
    time.sleep(0.05)

@pytest.mark.parametrize("i", range(10))
def test_b(solve_b, i):
    time.sleep(0.05)

@pytest.mark.parametrize("site", [pytest.param(s, marks=pytest.mark.xdist_group(f"site-{s}"))
                                  for s in ("x", "y")])
@pytest.mark.parametrize("i", range(5))
def test_site(by_site, site, i):
    if site not in by_site:
        by_site[site] = _record(f"site-{site}")
    time.sleep(0.05)

@pytest.fixture
def through_c(job_c):
    return job_c

@pytest.mark.parametrize("i", range(5))
def test_c(job_c, i):
    time.sleep(0.05)

@pytest.mark.parametrize("i", range(5))
def test_c_through(through_c, i):
    time.sleep(0.05)

@pytest.mark.parametrize("i", range(20))
def test_free(i):
    time.sleep(0.05)
'''

#: A job-like session fixture of conftest itself (as its viewed_mpirun), named shared.
CONFTEST_JOB = '''

@pytest.fixture(scope="session")
def job_c():
    with open(os.path.join(os.environ["GROUPS_LOG"], "job_c"), "a") as f:
        f.write(os.environ.get("PYTEST_XDIST_WORKER", "main") + "\\n")

SHARED_JOBS = (*SHARED_JOBS, "job_c")
'''


def test_each_shared_fixture_is_computed_on_one_worker(tmp_path: Path) -> None:
    pytest.importorskip("xdist")
    (tmp_path / "conftest.py").write_text((HERE / "conftest.py").read_text() + CONFTEST_JOB)
    shutil.copytree(HERE / "support", tmp_path / "support")  # the conftest imports it
    (tmp_path / "test_shared.py").write_text(MODULE)
    log = tmp_path / "log"
    log.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-q",
         "-p", "no:cacheprovider", "-c", "/dev/null", "--rootdir", str(tmp_path),
         "test_shared.py"],
        check=False, cwd=tmp_path, env={**os.environ, "GROUPS_LOG": str(log)},
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    computed = {p.name: p.read_text().split() for p in sorted(log.iterdir())}
    assert set(computed) == {"solve_a", "solve_b", "site-x", "site-y", "job_c"}
    assert {name: len(workers) for name, workers in computed.items()} == dict.fromkeys(
        computed, 1), computed
