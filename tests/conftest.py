"""Shared fixtures: the project's pinned, isolated, real Spack.

Every test that is about packages or environments goes through :class:`Spack`,
which runs the pinned Spack CLI with the same isolation as ``setup-env.sh``
(user scope and user cache outside ``~/.spack``, clingo from the venv).  One
user cache serves the whole session, so Spack indexes the repositories once.

Without Spack the ``spack``-marked tests are skipped -- except in CI, where
``TORCHMPI_REQUIRE_SPACK=1`` turns that skip into a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from support.mpi_launch import viewed_allreduce
from support.spack import Spack, stand_in_spack
from torchmpi import paths


@pytest.fixture(scope="session")
def spack(tmp_path_factory: pytest.TempPathFactory) -> Spack:
    """The pinned Spack with the torchmpi and builtin repos, one per session."""
    root, builtin = paths.spack_root(), paths.builtin_repo()
    missing = [p for p in (root / "bin" / "spack", builtin / "repo.yaml") if not p.exists()]
    if missing:
        msg = f"pinned Spack not set up ({', '.join(map(str, missing))} missing): run make setup"
        if os.environ.get("TORCHMPI_REQUIRE_SPACK") == "1":
            pytest.fail(msg + " (TORCHMPI_REQUIRE_SPACK=1: real-Spack tests may not be skipped)")
        pytest.skip(msg)
    config = tmp_path_factory.mktemp("spack-user-config")
    (config / "repos.yaml").write_text(
        "repos:\n  torchmpi: ${TORCHMPI_ROOT}/spack_repo/torchmpi\n"
        "  builtin: ${TORCHMPI_BUILTIN_REPO}\n"
    )
    # No solver cache, as in the rendered environments: Spack 1.1's can answer
    # with a stale solve after a package edit (spack/spack#51553), and these
    # tests exist to see the packages as they are now.
    (config / "concretizer.yaml").write_text(
        "concretizer:\n  concretization_cache:\n    enable: false\n"
    )
    # A private user cache on request (parallel sessions), else the shared one.
    user_cache = Path(os.environ.get("TORCHMPI_TEST_USER_CACHE") or paths.user_cache())
    user_cache.mkdir(parents=True, exist_ok=True)
    return Spack(root, builtin, config, user_cache)


#: Test modules whose every test compiles C++ or builds a venv with a real pip
#: (tens of CPU-seconds each, about a third of what ``make check`` spent): marked
#: ``build``, which ``make check`` deselects and ``make test`` runs.  The why, per module.
BUILD_MODULES = {
    "test_process_group_mpi_build.py": "compiles ProcessGroupMPI.cpp three times, runs mpirun",
    "test_venv.py": "real venvs (ensurepip) and a real pip installing wheels and sdists",
}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "build: compiles code or runs a real pip (make test, not make check)")


#: Fixture scopes whose value one xdist worker computes and only its own tests see.
_SHARED_SCOPES = ("session", "package", "module")

#: This conftest's own session fixtures that are expensive (a launched job, read by
#: tests of more than one module): grouped as the test modules' solves are.
SHARED_JOBS = ("viewed_mpirun", "viewed_torchrun")


def _shared_fixtures(item: pytest.Item) -> set[str]:
    """The expensive session/module fixtures that ``item`` uses: those defined in a
    test module, and this conftest's :data:`SHARED_JOBS`.

    Those hold the solves (a concretized DAG, a solved environment) and the shared
    jobs; conftest's ``spack`` fixture is cheap and may run on every worker.
    """
    info = getattr(item, "_fixtureinfo", None)
    out = set()
    for name in getattr(item, "fixturenames", ()):
        for fdef in (info.name2fixturedefs.get(name, ()) if info else ()):
            if fdef.scope in _SHARED_SCOPES and (str(fdef.baseid).endswith(".py")
                                                 or name in SHARED_JOBS):
                out.add(f"{fdef.baseid}::{name}")
    return out


def _xdist_groups(items: list[pytest.Item]) -> dict[str, str]:
    """Expensive fixture -> group name, fixtures used by one test joined (union-find),
    so that every test of a shared solve runs on the worker that solved it."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    for item in items:
        names = sorted(_shared_fixtures(item))
        for other in names[1:]:
            parent[find(other)] = find(names[0])
        for name in names:
            find(name)
    return {name: find(name).rsplit("::", 1)[-1] for name in parent}


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark what runs Spack, and keep each shared solve's tests on one xdist worker.

    * A test that takes the ``spack`` fixture (directly or through another
      fixture) is marked ``spack`` whether or not its file says so: ``make
      check`` deselects ``-m "not spack and not concretize and not build"``.
    * A test of a :data:`BUILD_MODULES` module is marked ``build``: ``make
      check`` leaves compilations and real pip runs to ``make test``.
    * Under ``pytest -n N --dist loadgroup`` (``make test``) a session fixture
      is computed once *per worker*; a test using a session or module fixture
      of a test module gets an ``xdist_group`` named after it, so the solve is
      done once and the tests that read it run where it was done.
    """
    groups = _xdist_groups(items)
    for item in items:
        if "spack" in getattr(item, "fixturenames", ()) and not item.get_closest_marker("spack"):
            item.add_marker(pytest.mark.spack)
        if item.path.name in BUILD_MODULES and not item.get_closest_marker("build"):
            item.add_marker(pytest.mark.build)
        shared = _shared_fixtures(item)
        if shared and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(groups[min(shared)]))
        if getattr(config.option, "loadgroup", False):  # set in xdist workers
            _carry_group_in_nodeid(item)


def _carry_group_in_nodeid(item: pytest.Item) -> None:
    """Put the ``@group`` suffix that loadgroup's scheduler reads into the node id.

    xdist 3.8 appends it by assigning ``item._nodeid``; pytest 9.2 keeps node ids
    in a structured ``item._id`` and never reads ``_nodeid``, so the suffix was
    lost and every group was spread over the workers (every shared solve done
    twice): pytest-dev/pytest-xdist#1386.  The suffix is written here where the
    id lives; on a pytest that still reads ``_nodeid`` xdist's own hook does it.
    """
    ident = getattr(item, "_id", None)
    names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                    for m in item.iter_markers("xdist_group")})
    if ident is None or not names or "@" in str(ident).rpartition("]")[2]:
        return
    item._id = type(ident).parse(f"{ident}@{'_'.join(names)}")


@pytest.fixture(scope="session")
def viewed_mpirun() -> subprocess.CompletedProcess:
    """The 2-rank allreduce job under mpirun whose every rank's view of the launch is
    printed (support.mpi_launch.viewed_allreduce): tests/test_dist.py's launch mapping
    and tests/test_allreduce.py's JSON report read one job."""
    return viewed_allreduce("mpirun")


@pytest.fixture(scope="session")
def viewed_torchrun() -> subprocess.CompletedProcess:
    """The same job under torchrun: the launch mapping and the gloo run read it."""
    return viewed_allreduce("torchrun")


@pytest.fixture(scope="session")
def have_mpirun() -> str:
    exe = shutil.which("mpirun")
    if not exe:
        pytest.skip("mpirun not installed (apt install openmpi-bin)")
    return exe


@pytest.fixture
def fake_spack(tmp_path: Path, monkeypatch) -> Path:
    """``torchmpi concretize`` without a real solve: :func:`support.spack.stand_in_spack`
    on ``TORCHMPI_SPACK_ROOT``; the test's folder (``argv``, ``lock.json``) is returned."""
    monkeypatch.setenv("TORCHMPI_SPACK_ROOT", str(stand_in_spack(tmp_path)))
    monkeypatch.setenv("SPACK_USER_CACHE_PATH", str(tmp_path / "cache"))
    monkeypatch.delenv("FAIL", raising=False)
    return tmp_path
