"""``torchmpi venv DIR``: a venv over the site's torch, with pip held to the site's pins."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from torchmpi import venv as venvmod
from torchmpi.commands import arguments
from torchmpi.errors import UserError
from torchmpi.lock import Lock

EXAMPLE = """\
examples:
  $ module load cray-mpich py-torch-mpi
  $ torchmpi venv ~/venvs/train --site derecho   # pins from the site's spack.lock
  $ torchmpi venv ~/venvs/train                  # pins: what the module's Python has
  $ ~/venvs/train/bin/pip install transformers   # never replaces the site's torch
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "venv",
        help="create a venv over the site's torch where pip cannot replace it",
        description=(
            "Create DIR with `python -m venv --system-site-packages` on the site's Python,\n"
            "write DIR/constraints.txt pinning the site's Python packages (torch, numpy,\n"
            "mpi4py, ...) and make every pip in the venv use it (DIR/pip.conf, and\n"
            "PIP_CONSTRAINT in bin/activate).  A package that needs another torch is then\n"
            "refused by pip instead of replacing the site's.  The venv's pip is upgraded to\n"
            "26.2 or newer, which keeps the pins out of sdist build environments.\n"
            "Given an existing venv, re-pin it: files edited by hand, not written by\n"
            "torchmpi venv or pinned from another source are kept without --force."
        ),
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("dir", type=Path,
                   help="the venv directory to create (new or empty), or a venv to re-pin")
    p.add_argument("--site", metavar="NAME|FILE", default=None,
                   help="pin from this site's environments/SITE/spack.lock "
                        "(default: pin what --python has installed)")
    p.add_argument("--lock", type=Path, metavar="FILE", default=None,
                   help="pin from this spack.lock (default: the site's, see --site)")
    p.add_argument("--python", default="python3",
                   help="the site's Python, the venv's base (default: python3 on PATH, "
                        "the module's)")
    p.add_argument("--keep-pip", action="store_true",
                   help="keep the venv's own pip instead of upgrading it to pip>=26.2 (which "
                        "needs an index or PIP_FIND_LINKS); an older pip applies the pins "
                        "inside sdist build environments too, so builds that need a newer "
                        "numpy than the site's fail")
    arguments.force(p)
    arguments.json(p, "the pins and paths")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.lock is not None and args.site is not None:
        raise UserError("give --site or --lock, not both")
    lock_path = args.lock or (venvmod.find_lock(args.site) if args.site else None)
    if lock_path is not None:
        try:
            pins = venvmod.pins_from_lock(Lock(lock_path))
        except (OSError, ValueError, KeyError) as err:
            raise UserError(f"{lock_path}: not a readable spack.lock ({err})") from None
        source = f"from {lock_path.name} of {args.site or lock_path}"
        pinned_from = venvmod.origin(lock_path, lock_path.read_bytes())
    else:
        pins = venvmod.pins_from_python(args.python)
        source = f"what {args.python} has installed"
        pinned_from = venvmod.origin(Path(args.python),
                                     json.dumps(pins, sort_keys=True).encode())
    if not any(name.lower() == "torch" for name in pins):
        raise UserError(f"no torch among the pins ({source}); load the site's module "
                        "(module load py-torch-mpi) or give --site/--lock")
    constraints = venvmod.create(args.dir, python=args.python, pins=pins, source=source,
                                 pinned_from=pinned_from, keep_pip=args.keep_pip,
                                 force=args.force)
    if args.json:
        print(json.dumps({"venv": str(args.dir), "constraints": str(constraints),
                          "pins": pins}, indent=2))
    else:
        print(f"{args.dir}: venv over {args.python} with {len(pins)} pins in {constraints}; "
              f"activate with `. {args.dir}/bin/activate`")
    return 0
