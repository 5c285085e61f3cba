"""Shared fixtures: the project's pinned, isolated, real Spack.

Every test that is about packages or environments goes through :class:`Spack`,
which runs the pinned Spack CLI with the same isolation as ``setup-env.sh``
(user scope and user cache outside ``~/.spack``, clingo from the venv).  One
user cache serves the whole session, so Spack indexes the repositories once.

Without Spack the ``spack``-marked tests are skipped -- except in CI, where
``TORCHMPI_REQUIRE_SPACK=1`` turns that skip into a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from torchmpi import paths

ROOT = paths.root()


class Spack:
    """The pinned Spack CLI, isolated from ``~/.spack``."""

    def __init__(self, root: Path, builtin: Path, config_dir: Path, cache_dir: Path):
        self.root = root
        self.builtin = builtin
        self.config_dir = config_dir
        self.cache_dir = cache_dir
        self.exe = root / "bin" / "spack"

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPACK_")}
        env.update(
            SPACK_ROOT=str(self.root),
            SPACK_PYTHON=sys.executable,
            SPACK_USER_CONFIG_PATH=str(self.config_dir),
            SPACK_USER_CACHE_PATH=str(self.cache_dir),
            TORCHMPI_ROOT=str(ROOT),
            TORCHMPI_BUILTIN_REPO=str(self.builtin),
        )
        env.pop("SPACK_ENV", None)
        # The venv's bin (ruff, torchmpi) first, as after `. ./setup-env.sh`.
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        return env

    def run(
        self, *args: str, check: bool = True, cwd: Path | None = None, timeout: int = 1200
    ) -> subprocess.CompletedProcess:
        """Run ``spack ARGS``; on an unexpected exit status fail with Spack's output."""
        proc = subprocess.run(
            [str(self.exe), *args],
            check=False,
            env=self.env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            pytest.fail(
                f"spack {' '.join(args)} exited {proc.returncode}\n"
                f"--- stdout ---\n{proc.stdout[-6000:]}\n--- stderr ---\n{proc.stderr[-6000:]}"
            )
        return proc

    def spec_json(self, *args: str) -> dict:
        """Concretize ``spack spec --json ARGS`` and return the parsed spec."""
        return json.loads(self.run("spec", "--json", *args).stdout)

    def python(
        self, code: str, *args: str, check: bool = True, env_dir: Path | None = None
    ) -> subprocess.CompletedProcess:
        """Run a Python script inside ``spack python`` (Spack's API, real repos),
        in the environment ``env_dir`` when given (its config scopes apply).

        Written to a file: ``spack python -c`` compiles a single statement only.
        """
        with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as script:
            script.write(code)
        try:
            prefix = ("-e", str(env_dir)) if env_dir else ()
            return self.run(*prefix, "python", script.name, *args, check=check)
        finally:
            os.unlink(script.name)


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


#: Fixture scopes whose value one xdist worker computes and only its own tests see.
_SHARED_SCOPES = ("session", "package", "module")


def _shared_fixtures(item: pytest.Item) -> set[str]:
    """The session/module fixtures defined in a test module that ``item`` uses.

    Those hold the solves (a concretized DAG, a solved environment); conftest's
    own ``spack`` fixture is cheap and may run on every worker.
    """
    info = getattr(item, "_fixtureinfo", None)
    out = set()
    for name in getattr(item, "fixturenames", ()):
        for fdef in (info.name2fixturedefs.get(name, ()) if info else ()):
            if fdef.scope in _SHARED_SCOPES and str(fdef.baseid).endswith(".py"):
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
      check`` deselects ``-m "not spack and not concretize"``.
    * Under ``pytest -n N --dist loadgroup`` (``make test``) a session fixture
      is computed once *per worker*; a test using a session or module fixture
      of a test module gets an ``xdist_group`` named after it, so the solve is
      done once and the tests that read it run where it was done.
    """
    groups = _xdist_groups(items)
    for item in items:
        if "spack" in getattr(item, "fixturenames", ()) and not item.get_closest_marker("spack"):
            item.add_marker(pytest.mark.spack)
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
def have_mpirun() -> str:
    exe = shutil.which("mpirun")
    if not exe:
        pytest.skip("mpirun not installed (apt install openmpi-bin)")
    return exe


def edited_site(tmp_path: Path, name: str, edit=None):
    """A copy of a shipped site file, edited as data, loaded from ``tmp_path``."""
    import yaml
    from torchmpi import site as sitemod

    data = yaml.safe_load((paths.sites_dir() / f"{name}.yaml").read_text())
    if edit:
        edit(data)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return sitemod.load(str(path))
