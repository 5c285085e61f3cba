"""``make check``: the tests that need no Spack, no compiler run and no real pip.

The Makefile's ``check`` recipe selects with a ``-m`` expression; the markers
come from tests/conftest.py (``spack`` by fixture, ``build`` by module).  Here
pytest itself collects the compiling and pip-running modules under that very
expression: a marker lost in the conftest, or an expression that stops naming
it, puts their minutes back into ``make check`` and fails here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

from support import ROOT

#: The modules whose tests compile ProcessGroupMPI.cpp or build venvs with pip.
BUILDING = ("tests/test_process_group_mpi_build.py", "tests/test_venv.py")


def _check_expression() -> str:
    """The ``-m`` expression of the Makefile's ``check`` recipe, as written."""
    recipe = (ROOT / "Makefile").read_text().split("\ncheck:", 1)[1].split("\n\n", 1)[0]
    found = re.search(r'-m "([^"]+)"', recipe)
    assert found, recipe
    return found.group(1)


def _collected(*args: str) -> list[str]:
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                           "-p", "no:cacheprovider", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode in (0, 5), proc.stdout[-3000:] + proc.stderr[-3000:]  # 5: none
    return [line for line in proc.stdout.splitlines() if "::" in line]


def test_make_check_runs_no_compilation_and_no_pip() -> None:
    every = _collected(*BUILDING)
    assert {line.split("::")[0] for line in every} == set(BUILDING), every
    assert _collected("-m", _check_expression(), *BUILDING) == []


def test_make_check_still_runs_the_fast_tests() -> None:
    """The expression deselects by marker, not everything: a module of plain
    unit tests is collected whole."""
    module = "tests/test_make_check.py"
    assert _collected("-m", _check_expression(), module) == _collected(module) != []


def test_testing_doc_quotes_the_selection() -> None:
    assert f'`-m "{_check_expression()}"`' in (ROOT / "docs" / "testing.md").read_text()


def test_the_makefiles_pytest_caches_rewritten_tests_where_the_shell_forbids_bytecode(
        tmp_path) -> None:
    """make test and make check run pytest through the Makefile's PYTEST: with
    PYTHONDONTWRITEBYTECODE=1 in the shell (as on this project's machines) pytest still
    caches each test module's rewritten asserts, so the next run and every other
    worker read them instead of rewriting all modules again."""
    (tmp_path / "test_one.py").write_text("def test_one():\n    assert 1 + 1 == 2\n")
    rule = (f"cached: ; $(PYTEST) -q -p no:cacheprovider -c /dev/null --rootdir {tmp_path}"
            f" {tmp_path}")
    proc = subprocess.run(["make", "-s", "--no-print-directory", "-C", str(ROOT),
                           f"--eval={rule}", "cached"],
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert list((tmp_path / "__pycache__").glob("test_one.*-pytest-*.pyc")), proc.stdout
