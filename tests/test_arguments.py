"""The arguments several verbs share are declared once, in torchmpi.commands.arguments.

As Spack's ``cmd/common/arguments.py``: a verb asks for ``site``, ``-o``, ``--force``
or ``--json`` by name, so the flag, its type and its destination cannot drift apart
between verbs (``-o`` a Path everywhere, ``--json`` a store_true named ``json``).
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

import pytest
from torchmpi.cli import build_parser

COMMANDS = Path(__file__).resolve().parents[1] / "wrapper" / "torchmpi" / "commands"
SHARED = {"site", "-o", "--output", "--force", "--json"}


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


@pytest.mark.parametrize("path", sorted(p for p in COMMANDS.glob("*.py")
                                        if p.name not in ("__init__.py", "arguments.py")),
                         ids=lambda p: p.stem)
def test_no_verb_declares_a_shared_argument_itself(path: Path) -> None:
    tree = ast.parse(path.read_text())
    own = [node.args[0].value for node in ast.walk(tree)
           if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
           and node.func.attr == "add_argument" and node.args
           and isinstance(node.args[0], ast.Constant) and node.args[0].value in SHARED]
    assert not own, f"{path.name} declares {own}: use torchmpi.commands.arguments"


def test_every_verb_gets_the_same_shared_arguments() -> None:
    seen: dict[str, set] = {}
    for sub in _subparsers().values():
        for action in sub._actions:
            key = action.dest if not action.option_strings else action.option_strings[-1]
            if key in ("site", "--output", "--force", "--json"):
                shape = (tuple(action.option_strings), action.dest, type(action).__name__,
                         action.type, action.metavar, action.default)
                seen.setdefault(key, set()).add(shape)
    assert set(seen) == {"site", "--output", "--force", "--json"}
    for key, shapes in seen.items():
        assert len(shapes) == 1, (key, shapes)


def test_without_the_flags_a_verb_refuses_hand_edits_and_prints_text() -> None:
    """``--force`` and ``--json`` are off unless given: the write policy holds and the
    output is the table, for every verb that takes them."""
    verbs = _subparsers()
    render = verbs["render"].parse_args(["cscs-daint"])
    assert (render.force, render.json) == (False, False)
    given = verbs["render"].parse_args(["cscs-daint", "--force", "--json"])
    assert (given.force, given.json) == (True, True)
    for name, sub in verbs.items():
        defaults = {a.dest: a.default for a in sub._actions if a.dest in ("force", "json")}
        assert all(v is False for v in defaults.values()), (name, defaults)
