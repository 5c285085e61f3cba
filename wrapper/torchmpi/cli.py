"""The ``torchmpi`` command line.

Each verb lives in its own module under :mod:`torchmpi.commands` and exposes
``register(subparsers)``, which adds its parser and sets ``func`` (taking the
parsed arguments, returning an exit status).  Keeping verbs apart lets the
site tooling (render, concretize, ...) and the compute-node checks (doctor,
allreduce) evolve independently; the doctor must import without Spack.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from torchmpi import __version__
from torchmpi.errors import UserError

#: Verb modules, in the order ``torchmpi --help`` lists them.
VERBS = ("sites", "render", "concretize", "detect", "doctor", "allreduce")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torchmpi",
        description="Site recipes and checks for PyTorch's MPI and NCCL backends.",
    )
    parser.add_argument("--version", action="version", version=f"torchmpi {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    for verb in VERBS:
        try:
            module = importlib.import_module(f"torchmpi.commands.{verb}")
        except ModuleNotFoundError as err:
            if (err.name or "torchmpi").split(".")[0] == "torchmpi":
                raise
            # A third-party dependency of one verb (jsonschema, yaml, archspec)
            # is missing, as on a compute node with only py-torch-mpi installed:
            # the other verbs (doctor, allreduce) must still work.
            _register_unavailable(sub, verb, err.name)
            continue
        module.register(sub)
    return parser


def _register_unavailable(sub, verb: str, missing: str) -> None:
    """A placeholder verb that explains which module it lacks when invoked."""

    def unavailable(_args: argparse.Namespace) -> int:
        raise UserError(f"this verb needs the Python module '{missing}', which is not "
                        f"installed here (pip install {missing.split('.')[0]})")

    parser = sub.add_parser(verb, help=f"(unavailable: needs {missing})", add_help=False)
    parser.add_argument("rest", nargs=argparse.REMAINDER)
    parser.set_defaults(func=unavailable)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except UserError as err:
        print(f"torchmpi {args.verb}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
