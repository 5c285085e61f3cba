"""One path resolver: Python (torchmpi.paths) and shell (scripts/paths.sh) agree."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from torchmpi import paths

VARS = ("TORCHMPI_CACHE", "XDG_CACHE_HOME", "HOME", "TORCHMPI_SPACK_ROOT", "SPACK_ROOT",
        "TORCHMPI_PACKAGES_ROOT", "SPACK_USER_CACHE_PATH")


def _shell(env: dict[str, str]) -> dict[str, str]:
    script = (". \"$TORCHMPI_ROOT/scripts/paths.sh\"\n"
              "printf '%s\\n' \"$TORCHMPI_CACHE\" \"$TORCHMPI_SPACK_ROOT\""
              " \"$TORCHMPI_PACKAGES_ROOT\" \"$TORCHMPI_BUILTIN_REPO\"\n")
    out = subprocess.run(["sh", "-c", script], env={"PATH": os.environ["PATH"], **env,
                                                    "TORCHMPI_ROOT": str(paths.root())},
                         capture_output=True, text=True, check=True).stdout.split("\n")
    return dict(zip(("cache", "spack", "packages", "builtin"), out))


def _python(env: dict[str, str], monkeypatch) -> dict[str, str]:
    for var in VARS:
        monkeypatch.delenv(var, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return {"cache": str(paths.cache()), "spack": str(paths.spack_root()),
            "packages": str(paths.packages_root()), "builtin": str(paths.builtin_repo())}


CASES = {
    "defaults": {},
    "xdg": {"XDG_CACHE_HOME": "/x/cache"},
    "cache": {"TORCHMPI_CACHE": "/c", "XDG_CACHE_HOME": "/x/cache"},
    "other spack by request": {"SPACK_ROOT": "/opt/spack"},
    "the pinned spack as SPACK_ROOT": {"TORCHMPI_CACHE": "/c", "SPACK_ROOT": "/c/spack-PIN"},
    "explicit roots": {"TORCHMPI_SPACK_ROOT": "/s", "TORCHMPI_PACKAGES_ROOT": "/p",
                       "SPACK_ROOT": "/opt/spack"},
}


@pytest.mark.parametrize("case", CASES)
def test_python_and_shell_resolve_the_same(case: str, tmp_path: Path, monkeypatch) -> None:
    env = {k: v.replace("PIN", paths.pins()["TORCHMPI_SPACK_TAG"])
           for k, v in CASES[case].items()}
    env.setdefault("HOME", str(tmp_path / "home"))
    assert _python(env, monkeypatch) == _shell(env)


def test_user_cache(monkeypatch) -> None:
    monkeypatch.setenv("TORCHMPI_CACHE", "/c")
    monkeypatch.delenv("SPACK_USER_CACHE_PATH", raising=False)
    assert paths.user_cache() == Path("/c/user-cache")
    monkeypatch.setenv("SPACK_USER_CACHE_PATH", "/u")
    assert paths.user_cache() == Path("/u")


def test_package_constant_reads_the_literal_without_spack(tmp_path, monkeypatch) -> None:
    """A top-level literal of a torchmpi package.py, read without importing it (it
    imports Spack); a missing name or file is a LookupError or OSError, not ``None``."""
    pkg = tmp_path / "spack_repo" / "torchmpi" / "packages" / "demo"
    pkg.mkdir(parents=True)
    (pkg / "package.py").write_text(
        "from spack.package import *\nX: int = 0\nclass Demo:\n    ROWS = ()\n"
        "ROWS = (('a', 'b'),)\nY = Z = 1\n")
    (tmp_path / "sites").mkdir()  # what makes TORCHMPI_ROOT a checkout (paths.root)
    monkeypatch.setenv("TORCHMPI_ROOT", str(tmp_path))
    assert paths.package_constant("demo", "ROWS") == (("a", "b"),)
    assert paths.package_constant("demo", "Y") == 1
    with pytest.raises(LookupError, match="no X"):  # annotated: not ``X = ...``
        paths.package_constant("demo", "X")
    with pytest.raises(LookupError, match="no Z"):  # only the first target is the name
        paths.package_constant("demo", "Z")
    with pytest.raises(OSError):
        paths.package_constant("gone", "ROWS")


def test_package_rows_say_where_each_row_is(tmp_path, monkeypatch) -> None:
    """A table's rows, each with the 1-based line and column where it starts, so that a
    refusal of one row points at it; a value that is no tuple of literal rows is a
    MalformedTable naming the file, line and column, a missing table a LookupError."""
    pkg = tmp_path / "spack_repo" / "torchmpi" / "packages" / "demo"
    pkg.mkdir(parents=True)
    (pkg / "package.py").write_text(
        "ROWS = (\n    ('a', 'b'),\n  ('c',\n   'd'),\n)\nONE = 1\nBAD = (('x', y),)\n"
        "SET = ({[1]},)\nWIDE = ('é', ('ü', z))\n")
    (tmp_path / "sites").mkdir()
    monkeypatch.setenv("TORCHMPI_ROOT", str(tmp_path))
    path = paths.package_file("demo")
    assert path == pkg / "package.py"
    assert paths.package_rows(path, "ROWS") == [
        paths.Row(("a", "b"), 2, 5), paths.Row(("c", "d"), 3, 3)]
    malformed = paths.MalformedTable
    with pytest.raises(malformed, match=r"demo/package\.py:6:7: ONE is no tuple or list of"):
        paths.package_rows(path, "ONE")
    with pytest.raises(malformed, match=r"demo/package\.py:7:8: BAD: the row is no literal"):
        paths.package_rows(path, "BAD")
    # a set of lists is no literal either (literal_eval raises TypeError, not ValueError)
    with pytest.raises(malformed, match=r"demo/package\.py:8:8: SET: the row is no literal"):
        paths.package_rows(path, "SET")
    # columns count characters, as an editor does, not ast's UTF-8 bytes ('é' is two)
    with pytest.raises(malformed, match=r"demo/package\.py:9:14: WIDE: the row is no literal"):
        paths.package_rows(path, "WIDE")
    with pytest.raises(LookupError, match="no GONE"):
        paths.package_rows(path, "GONE")


@pytest.mark.parametrize("splitter", ["\f", "\u2028", "\x1c", "\x85"])
def test_package_rows_count_lines_as_python_does(tmp_path, splitter: str) -> None:
    """A form feed (or U+2028, a file separator, NEL) in a comment before the table ends
    no line for Python's tokenizer, only \\n, \\r\\n and \\r do; a column counted in
    ``str.splitlines()``' lines would be counted in the line above the row (here one of
    two-byte characters) and point at the wrong column."""
    path = tmp_path / "package.py"
    path.write_text(f"# a comment{splitter} that goes on\nÉÉ = 0\nROWS = (('é', y),)\n",
                    encoding="utf-8")
    with pytest.raises(paths.MalformedTable,
                       match=r"package\.py:3:9: ROWS: the row is no literal"):
        paths.package_rows(path, "ROWS")


def test_package_rows_count_lines_of_any_newline(tmp_path) -> None:
    """\\r\\n and a lone \\r end a line for Python's tokenizer as \\n does."""
    path = tmp_path / "package.py"
    path.write_bytes("# one\r\n# two\rÉÉ = 0\nROWS = (('é', y),)\r\n".encode())
    with pytest.raises(paths.MalformedTable,
                       match=r"package\.py:4:9: ROWS: the row is no literal"):
        paths.package_rows(path, "ROWS")


def test_spackrun_and_fixture_use_the_resolver(spack) -> None:
    """The Spack the tests run is the one torchmpi concretize runs."""
    from torchmpi import spackrun

    if os.environ.get("TORCHMPI_SPACK_ROOT") is None:
        assert spackrun.executable() == spack.exe
    assert spack.builtin == paths.builtin_repo()


def test_root_is_the_checkout_holding_this_package(monkeypatch) -> None:
    """Without TORCHMPI_ROOT (or with one that is no checkout: no ``sites/``), the root is
    the folder two above the package, whose ``sites/`` and ``environments/`` the verbs read."""
    monkeypatch.delenv("TORCHMPI_ROOT", raising=False)
    root = paths.root()
    assert (root / "wrapper" / "torchmpi" / "paths.py").samefile(paths.__file__)
    assert paths.sites_dir() == root / "sites" and paths.sites_dir().is_dir()
    assert paths.environments_dir() == root / "environments"
    assert paths.torchmpi_repo() == root / "spack_repo" / "torchmpi"


def test_sites_dir_follows_torchmpi_root(tmp_path, monkeypatch) -> None:
    (tmp_path / "sites").mkdir()
    monkeypatch.setenv("TORCHMPI_ROOT", str(tmp_path))
    assert paths.sites_dir() == tmp_path / "sites"
    assert paths.environments_dir() == tmp_path / "environments"


def test_an_installed_tool_reads_the_sites_it_carries(tmp_path) -> None:
    """Outside a checkout (no ``sites/`` two above the package), ``sites_dir`` is the
    copy the package carries.  The module itself, laid out as an install would."""
    pkg = tmp_path / "lib" / "torchmpi"
    pkg.mkdir(parents=True)
    shutil.copy(paths.__file__, pkg / "paths.py")
    code = ("import importlib.util, sys\n"
            "spec = importlib.util.spec_from_file_location('p', sys.argv[1])\n"
            "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
            "print(m.root()); print(m.sites_dir())\n")
    env = {k: v for k, v in os.environ.items() if k != "TORCHMPI_ROOT"}
    out = subprocess.run([sys.executable, "-c", code, str(pkg / "paths.py")], env=env,
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == [str(tmp_path.resolve()), str(pkg.resolve() / "sites")]


def test_the_pinned_spack_starts_from_bytecode() -> None:
    """`make setup` compiles the pinned Spack's own modules once, with the interpreter that
    runs Spack (this venv's: SPACK_PYTHON).  Where PYTHONDONTWRITEBYTECODE is set, as on
    the machines this project is tested on, Python never writes them itself, and every
    `spack` start compiled its modules again: 1.2 s against 0.6 s for `spack python -c
    'import spack.solver.asp'` (docs/performance.md).  Every module of Spack's core
    package has a bytecode file no older than its source, for this interpreter."""
    import importlib.util

    if paths.spack_root() != paths.cache() / f"spack-{paths.pins()['TORCHMPI_SPACK_TAG']}":
        pytest.skip("SPACK_ROOT names a Spack of its own: make setup leaves it as it is")
    lib = paths.spack_root() / "lib" / "spack" / "spack"
    sources = sorted(lib.rglob("*.py"))
    assert len(sources) > 300, lib
    stale = []
    for source in sources:
        cached = Path(importlib.util.cache_from_source(str(source)))
        if not cached.is_file() or cached.stat().st_mtime < source.stat().st_mtime:
            stale.append(source.relative_to(lib))
    assert not stale, f"{len(stale)} of {len(sources)} without bytecode, e.g. {stale[:3]}"
