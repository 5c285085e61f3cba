"""``torchmpi sites``: the shipped site files, one line each."""

from __future__ import annotations

import argparse

from torchmpi import site as sitemod
from torchmpi.errors import UserError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sites", help="list the site files with a one-line summary")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    names = sitemod.available()
    if not names:
        raise UserError("no site files found (sites/*.yaml)")
    width = max(map(len, names))
    status = 0
    for name in names:
        try:
            line = sitemod.load(name).summary()
        except UserError as err:
            line, status = f"INVALID: {str(err).splitlines()[-1].strip()}", 1
        print(f"{name:<{width}}  {line}")
    return status
