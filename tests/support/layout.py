"""Which test files test which wrapper module: derived from the names, not listed.

The rule (docs/testing.md, "Layout"), for ``wrapper/torchmpi/<path>.py``:

* its *key* is the path's parts joined by ``_``, without ``.py``, without a
  package's ``__init__`` and without the ``commands`` and ``data`` folders (a
  verb's command module is tested with the module it drives, a shipped data
  file with the module that ships it): ``doctor/nccl.py`` -> ``doctor_nccl``,
  ``commands/render.py`` -> ``render``, ``container/__init__.py`` -> ``container``;
* its tests are ``tests/test_<key>.py`` and the files that extend it,
  ``tests/test_<key>_<concern>.py``;
  and, for a module of a package, the package's own file (``test_doctor.py``
  for ``doctor/nccl.py``: the package is how the module is used);
* where there are none, the tests of the enclosing package's key (the wing):
  ``doctor/core.py`` -> ``doctor`` -> ``test_doctor.py``, ``test_doctor_*.py``.

A module with no test file by that rule must be in :data:`EXEMPT` with the
reason and the files that do test it; ``tests/test_layout.py`` fails otherwise,
so a new or renamed module shows up there, and ``make mutate`` runs each
module's mutants against exactly these files.
"""

from __future__ import annotations

import ast
from pathlib import Path

from support import ROOT

PACKAGE = ROOT / "wrapper" / "torchmpi"
TESTS = ROOT / "tests"

#: Folders whose modules are tested under the name of what they drive or ship.
TRANSPARENT = ("commands", "data")

#: Modules without a test file named for them: module -> (why, the files that test it).
#: Each is a debt, not a design: a module that gains ``tests/test_<key>.py`` must leave
#: this list (``tests/test_layout.py`` fails on a stale entry).
EXEMPT: dict[str, tuple[str, tuple[str, ...]]] = {
    "autokeys.py": (("the auto keys are what site loading and `torchmpi detect` fill in; "
                    "tested through the shipped sites"),
                    ("tests/test_sites.py",)),
    "detect.py": ("host detection runs only through `torchmpi detect` and the local site",
                  ("tests/test_local_externals.py", "tests/test_sites.py")),
    "errors.py": (("two exception classes; their exit codes and one-line messages are what "
                  "every verb's bad-input test checks"),
                  ("tests/test_cli_help.py", "tests/test_bad_input.py")),
    "spackenv.py": ("the environment files' content, checked in the rendered output",
                    ("tests/test_render.py", "tests/test_torches.py", "tests/test_pairs.py",
                     "tests/test_sites.py")),
    "spackrun.py": ("how Spack is started, checked with a stand-in spack",
                    ("tests/test_concretize_cli.py", "tests/test_offsite.py",
                     "tests/test_paths.py")),
    "writable.py": ("output checks made before work starts, run by the verbs",
                    ("tests/test_bad_input.py", "tests/test_cli_help.py", "tests/test_output.py")),
    "yamltext.py": ("YAML text joined for the rendered files, checked by parsing them back",
                    ("tests/test_render.py",)),
}


def modules(package: Path = PACKAGE) -> list[str]:
    """Every Python module of the wrapper, relative to the package (``doctor/nccl.py``);
    not ``__main__.py`` nor the package's own empty ``__init__.py``."""
    out = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        if rel in ("__init__.py", "__main__.py") or "__pycache__" in rel:
            continue
        if path.name == "__init__.py" and not _has_code(path):
            continue  # a package marker: nothing to test or mutate
        out.append(rel)
    return out


def _has_code(path: Path) -> bool:
    """Anything beyond a docstring."""
    body = ast.parse(path.read_text()).body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return bool(body)


def key(module: str) -> str:
    """``doctor/nccl.py`` -> ``doctor_nccl`` (see the module docstring)."""
    parts = [p for p in module.removesuffix(".py").split("/") if p not in TRANSPARENT]
    if parts and parts[-1] == "__init__":
        parts.pop()
    return "_".join(parts)


def _files(name: str, tests: Path) -> list[str]:
    own = tests / f"test_{name}.py"
    found = ([own] if own.is_file() else []) + sorted(tests.glob(f"test_{name}_*.py"))
    return [p.relative_to(tests.parent).as_posix() for p in found]


def tests_for(module: str, tests: Path = TESTS) -> tuple[str, ...]:
    """The test files of ``module`` (``wrapper/torchmpi/`` prefix allowed), by the rule
    above or :data:`EXEMPT`; empty when neither gives any."""
    module = module.removeprefix("wrapper/torchmpi/")
    # A verb's command module shares the exemption of the module it drives.
    exempt = EXEMPT.get(module) or EXEMPT.get(f"{key(module)}.py")
    if exempt:
        return exempt[1]
    # The module's own key first, then each enclosing package's (the wing).
    names = [key(module)]
    folders = [p for p in module.split("/")[:-1] if p not in TRANSPARENT]
    for i in range(len(folders), 0, -1):
        names.append("_".join(folders[:i]))
    for i, name in enumerate(dict.fromkeys(n for n in names if n)):
        found = _files(name, tests)
        if found:
            # A package's module is also used through the package: its own file.
            package = tests / f"test_{folders[0]}.py" if folders and i == 0 else None
            if package and package.is_file():
                found.append(package.relative_to(tests.parent).as_posix())
            return tuple(dict.fromkeys(found))
    return ()
