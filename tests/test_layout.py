"""The tests mirror the modules: each wrapper module has its test file, found by name.

``make mutate`` runs a module's mutants against exactly the files
:func:`support.layout.tests_for` finds, so a module without tests, or a test
file named for no module, would make its score meaningless.  Helpers are in
``tests/support/``: a test file imports neither ``conftest`` (a pytest plugin,
importable only by accident of ``sys.path``) nor another test file.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from support import ROOT, layout

TESTS = ROOT / "tests"


def test_every_wrapper_module_has_its_tests() -> None:
    missing = [m for m in layout.modules() if not layout.tests_for(m)]
    assert not missing, (
        "wrapper modules without tests/test_<key>.py (tests/support/layout.py says how a "
        f"module's key is made; an exemption needs its reason): {missing}")


def test_every_exemption_is_still_needed_and_names_real_files() -> None:
    """A module that gained its own test file, or went away, leaves EXEMPT."""
    modules = set(layout.modules())
    for module, (why, files) in layout.EXEMPT.items():
        assert module in modules, f"EXEMPT names {module}, which is not a wrapper module"
        assert why and files, module
        assert all((ROOT / f).is_file() for f in files), (module, files)
        own = [n for n in (layout.key(module),) if (TESTS / f"test_{n}.py").is_file()]
        assert not own, f"{module} has tests/test_{own[0]}.py now: drop it from EXEMPT"


@pytest.mark.parametrize("module, key", [
    ("doctor/nccl.py", "doctor_nccl"), ("commands/render.py", "render"),
    ("container/__init__.py", "container"), ("data/reframe/torchmpi_checks.py",
                                             "reframe_torchmpi_checks"),
])
def test_a_modules_key_is_its_path(module: str, key: str) -> None:
    assert layout.key(module) == key


def test_a_module_without_its_own_file_gets_its_packages_and_extensions(tmp_path: Path) -> None:
    """own file + ``test_<key>_*.py`` (+ the package's own file); else the enclosing
    package's (the wing)."""
    for name in ("test_pkg.py", "test_pkg_extra.py", "test_pkg_mod.py", "test_pkgx.py"):
        (tmp_path / name).write_text("")
    found = {m: [Path(f).name for f in layout.tests_for(m, tmp_path)]
             for m in ("pkg/mod.py", "pkg/other.py", "commands/pkg.py", "alone.py")}
    assert found == {"pkg/mod.py": ["test_pkg_mod.py", "test_pkg.py"],
                     "pkg/other.py": ["test_pkg.py", "test_pkg_extra.py", "test_pkg_mod.py"],
                     "commands/pkg.py": ["test_pkg.py", "test_pkg_extra.py",
                                         "test_pkg_mod.py"],
                     "alone.py": []}


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
    return names


def test_no_test_file_imports_conftest_or_another_test_file() -> None:
    offenders = {p.name: sorted(n for n in _imports(p) if n == "conftest" or
                                n.startswith("test_"))
                 for p in sorted(TESTS.glob("*.py"))}
    offenders = {k: v for k, v in offenders.items() if v}
    assert not offenders, f"import helpers from tests/support/ instead: {offenders}"


def test_helpers_live_in_support_not_beside_the_tests() -> None:
    loose = [p.name for p in TESTS.glob("*.py")
             if p.name != "conftest.py" and not p.name.startswith("test_")]
    assert not loose, f"move to tests/support/: {loose}"
