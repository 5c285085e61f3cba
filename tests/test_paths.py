"""One path resolver: Python (torchmpi.paths) and shell (scripts/paths.sh) agree."""

from __future__ import annotations

import os
import subprocess
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


def test_spackrun_and_fixture_use_the_resolver(spack) -> None:
    """The Spack the tests run is the one torchmpi concretize runs."""
    from torchmpi import spackrun

    if os.environ.get("TORCHMPI_SPACK_ROOT") is None:
        assert spackrun.executable() == spack.exe
    assert spack.builtin == paths.builtin_repo()
