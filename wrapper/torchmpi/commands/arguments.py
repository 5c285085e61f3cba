"""The arguments several verbs share, declared once.

As Spack's ``spack/cmd/common/arguments.py``: a verb asks for ``site``, ``-o``,
``--force`` or ``--json`` by calling the function of that name, so the flag, its
type, its destination and its meaning cannot drift apart between verbs (an ``-o``
that is a ``Path`` in one verb and a string in another, a ``--force`` that covers
hand edits in one verb and not in the next).  Only the part of the help that is the
verb's own (what the output directory holds, what the JSON carries) is passed in.
``tests/test_arguments.py`` checks that no verb declares one of these itself.

Imports nothing of torchmpi: the compute-node verbs (doctor, allreduce) use it too.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def site(parser: argparse.ArgumentParser) -> None:
    """The positional site every site verb takes: a name in ``sites/`` or a path."""
    parser.add_argument("site", help="site name (see `torchmpi sites`) or path to a site file")


def output(parser: argparse.ArgumentParser, what: str, default: str) -> None:
    """``-o DIR``: where the verb writes; ``default`` is said in the help."""
    parser.add_argument("-o", "--output", type=Path, metavar="DIR", default=None,
                        help=f"{what} (default: {default})")


def force(parser: argparse.ArgumentParser) -> None:
    """``--force``: the one way past the write policy every writing verb shares."""
    parser.add_argument("--force", action="store_true", default=False,
                        help="overwrite files edited by hand, rendered from another site "
                             "file or not written by torchmpi (default: refuse them)")


def json(parser: argparse.ArgumentParser, what: str) -> None:
    """``--json``: machine-readable output on stdout, ``what`` says what it holds."""
    parser.add_argument("--json", action="store_true", default=False,
                        help=f"machine-readable output on stdout: {what}")
