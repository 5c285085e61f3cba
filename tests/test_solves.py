"""support.solves: a site is solved once per run, whichever module and worker asks.

A real ``pytest -n 2 --dist loadgroup`` run of two scratch test modules that
read the same sites through :class:`support.solves.SiteSolves` -- one through
``get_all`` (as tests/test_sites_concretize.py), one site by site (as
tests/test_modules.py and tests/test_packages.py) -- each in its own xdist
group, so on both workers at once.  The Spack they run is the stand-in of
:func:`support.spack.stand_in_spack`, which records every start: each site
must have been concretized exactly once, and every test must have read a lock.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.spack import stand_in_spack

HERE = Path(__file__).resolve().parent
SITES = ("derecho", "perlmutter", "generic-ib", "alps-gh200")

MODULE = '''
import os
from pathlib import Path

import pytest
from support.solves import SiteSolves
from support.spack import Spack

SITES = {sites!r}


@pytest.fixture(scope="session")
def {fixture}(tmp_path_factory):
    root = Path(os.environ["STAND_IN"])
    spack = Spack(root / "spack", root, root / "config", root / "cache")
    solves = SiteSolves(spack, tmp_path_factory)
    return solves.get_all(SITES) if {together!r} else {{s: solves.get(s) for s in SITES}}


@pytest.mark.parametrize("site", SITES)
def test_read(site, {fixture}):
    assert {fixture}[site].lock is not None
    assert {fixture}[site].returncode == 0
'''


def test_each_site_is_solved_once_for_every_module_and_worker(tmp_path: Path) -> None:
    pytest.importorskip("xdist")
    shutil.copy(HERE / "conftest.py", tmp_path / "conftest.py")
    shutil.copytree(HERE / "support", tmp_path / "support")
    for name, together in (("one", True), ("two", False)):
        (tmp_path / f"test_{name}.py").write_text(
            MODULE.format(sites=SITES, fixture=f"solves_{name}", together=together))
    stand_in = tmp_path / "stand-in"
    stand_in.mkdir()
    stand_in_spack(stand_in)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-q",
         "-p", "no:cacheprovider", "-c", "/dev/null", "--rootdir", str(tmp_path),
         "--basetemp", str(tmp_path / "base"), "test_one.py", "test_two.py"],
        check=False, cwd=tmp_path, env={**os.environ, "STAND_IN": str(stand_in)},
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"{2 * len(SITES)} passed" in proc.stdout, proc.stdout[-2000:]
    starts = [line.split() for line in (stand_in / "argv").read_text().splitlines()]
    solved = sorted(Path(argv[argv.index("-e") + 1]).name for argv in starts
                    if "concretize" in argv)
    assert solved == sorted(SITES), starts
