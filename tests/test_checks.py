"""The site checks live in one package, one module per concern, all of them applied.

``torchmpi.checks`` is where a maintainer looks for why a site file is refused:
its table names the module answering for each key, and :data:`RULES` is what
:func:`torchmpi.checks.validate` runs.  A rule module missing from ``RULES``
would never run; one missing from the table would be a rule nobody finds.
"""

from __future__ import annotations

import importlib
import pkgutil
import re

from torchmpi import checks

#: Modules of the package that hold no rules of their own.
HELPERS = {"common", "schema"}


def _rule_modules() -> set[str]:
    return {m.name for m in pkgutil.iter_modules(checks.__path__)} - HELPERS


def test_every_rule_module_is_applied_by_validate() -> None:
    applied = {m.__name__.rpartition(".")[2] for m in checks.RULES
               if m.__name__.startswith("torchmpi.checks.")}
    assert applied == _rule_modules(), "a module of torchmpi.checks that validate never runs"


def test_the_package_table_names_every_module() -> None:
    table = set(re.findall(r"^``(\w+)``\s", checks.__doc__ or "", re.MULTILINE))
    assert table == _rule_modules(), "torchmpi.checks' table and its modules differ"


def test_each_rule_module_answers_problems_with_key_paths() -> None:
    """``problems(data, build)`` of every rule module, on a shipped site: key paths
    (tuples) and messages, none for a valid site."""
    from torchmpi import site as sitemod

    data = sitemod.load("derecho").data
    for name in sorted(_rule_modules()):
        module = importlib.import_module(f"torchmpi.checks.{name}")
        assert module.problems(data, True) == [], name
        assert module.problems(data, False) == [], name


def test_problems_without_build_says_everything() -> None:
    """``checks.problems(data)`` is every rule, those about what Spack builds included;
    ``build=False`` (an installed tool, no package repositories) leaves those out."""
    import copy

    from torchmpi import site as sitemod

    data = copy.deepcopy(sitemod.load("derecho").data)  # as loaded: defaults filled in
    data.setdefault("torch", {})["versions"] = ["2.8.0"]  # no +cuda_aware_mpi build
    keys = [key for key, _ in checks.problems(data)]
    assert ("torch", "versions", 0) in keys
    assert ("torch", "versions", 0) not in [key for key, _ in checks.problems(data, False)]
