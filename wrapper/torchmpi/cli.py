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
import os
import sys

from torchmpi import __version__
from torchmpi.errors import InternalError, UserError

#: sysexits.h EX_SOFTWARE: "an internal software error has been detected".
EX_SOFTWARE = 70

#: Verb modules, in the order ``torchmpi --help`` lists them.
VERBS = ("sites", "render", "container", "concretize", "bump-check", "detect", "doctor",
         "allreduce", "reframe", "venv")


class HelpFormatter(argparse.RawDescriptionHelpFormatter,
                    argparse.ArgumentDefaultsHelpFormatter):
    """Descriptions and examples keep their line breaks; every option shows its default.

    HPC users read ``--help`` on a login node instead of a web page, so each
    verb's epilog carries a worked example that must not be re-wrapped.
    A flag (an option without a value) is off unless given, so it gets no
    "(default: False)"; a help text that already explains its default keeps
    its own words instead of "(default: None)".
    """

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.nargs == 0 or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


class VerbParser(argparse.ArgumentParser):
    """A verb's parser: its own usage on an unknown flag, the project's help layout.

    argparse hands a subparser's unrecognised arguments up to the top-level
    parser, which then prints ``usage: torchmpi [-h] ...`` -- useless for
    finding the verb's flag.  Refusing them here prints the verb's usage.
    """

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args=None, namespace=None):
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torchmpi",
        description="Site recipes and checks for PyTorch's MPI and NCCL backends.",
        epilog="Run `torchmpi VERB --help` for a verb's options and an example.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"torchmpi {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB", parser_class=VerbParser)
    for verb in VERBS:
        try:
            module = importlib.import_module(f"torchmpi.commands.{verb.replace('-', '_')}")
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
    except InternalError as err:
        print(f"torchmpi {args.verb}: internal error (a torchmpi bug; please report it with"
              f" the command line): {err}", file=sys.stderr)
        return EX_SOFTWARE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `torchmpi sites --json | head`: the reader left; say nothing more
        # (Python's documented recipe: point stdout at devnull before exit).
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
