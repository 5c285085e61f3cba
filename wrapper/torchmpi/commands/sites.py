"""``torchmpi sites``: the shipped site files, one line each (or JSON)."""

from __future__ import annotations

import argparse
import json

from torchmpi import site as sitemod
from torchmpi.commands import arguments
from torchmpi.detect import HostLacks
from torchmpi.errors import UserError

EXAMPLE = """\
example:
  $ torchmpi sites
  derecho     zen3, sm_80, cray-mpich@8.1.27, slingshot, pbs -- NCAR Derecho GPU nodes ...
  $ torchmpi sites --json | python -m json.tool
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sites",
        help="list the site files with a one-line summary",
        description=(
            "Validate every site file under sites/ and print one line per site: CPU target,\n"
            "GPU, MPI, fabric, launcher and description.  An invalid site is listed as\n"
            "INVALID with its first problem, and the exit status is 1.  A valid site whose\n"
            "`auto` values this host cannot detect (local without gfortran) is listed as\n"
            "UNAVAILABLE here, with what to install; that alone keeps the exit status 0."
        ),
        epilog=EXAMPLE,
    )
    arguments.json(p, "one object per site")
    p.set_defaults(func=run)


def _entry(name: str) -> dict:
    """One site as JSON: its summary fields, or why it cannot be loaded (here, or at all)."""
    try:
        site = sitemod.load(name)
    except HostLacks as err:
        return {"name": name, "valid": True, "loadable": False, "error": str(err)}
    except UserError as err:
        return {"name": name, "valid": False, "loadable": False, "error": str(err)}
    d = site.data
    return {
        "name": name, "valid": True, "loadable": True, "path": str(site.path),
        "description": d["description"],
        "target": d["target"], "cuda_arch": site.cuda_arch, "mpi": d["mpi"]["kind"],
        "mpi_version": d["mpi"].get("version"), "fabric": d["fabric"],
        "launcher": d["launcher"],
    }


def run(args: argparse.Namespace) -> int:
    names = sitemod.available()
    if not names:
        raise UserError("no site files found (sites/*.yaml)")
    if args.json:
        entries = [_entry(name) for name in names]
        print(json.dumps(entries, indent=2))
        return 0 if all(e["valid"] for e in entries) else 1
    width = max(map(len, names))
    status = 0
    for name in names:
        try:
            line = sitemod.load(name).summary()
        except HostLacks as err:
            line = f"UNAVAILABLE here: {str(err).splitlines()[-1].strip()}"
        except UserError as err:
            line, status = f"INVALID: {str(err).splitlines()[-1].strip()}", 1
        print(f"{name:<{width}}  {line}")
    return status
