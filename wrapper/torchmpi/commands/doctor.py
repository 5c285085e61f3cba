"""``torchmpi doctor``: is this node's PyTorch/MPI/NCCL stack right?"""

from __future__ import annotations

import argparse

from torchmpi.errors import UserError


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "doctor",
        help="check torch backends, MPI CUDA-awareness, NCCL network and site variables",
        description=(
            "Prints PASS/WARN/FAIL/SKIP per check with a one-line fix; exit status 1 on any "
            "FAIL.  Runs without Spack and without a GPU (GPU checks are skipped)."
        ),
    )
    parser.add_argument("--site", metavar="NAME|FILE",
                        help="compare the environment with this site's runtime variables")
    parser.add_argument("--nccl-log", metavar="FILE",
                        help="judge the network from this NCCL_DEBUG=INFO log instead of "
                             "running a one-GPU NCCL probe")
    parser.add_argument("--no-nccl-probe", action="store_true",
                        help="do not start the NCCL probe even when a GPU is present")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from torchmpi import doctor

    try:
        inputs = doctor.gather(site=args.site, nccl_log=args.nccl_log,
                               probe_nccl=not args.no_nccl_probe)
    except (OSError, ValueError, TypeError) as err:
        raise UserError(str(err)) from err
    checks = doctor.run_checks(inputs)
    print(doctor.to_json(checks) if args.json else doctor.format_table(checks))
    return doctor.exit_status(checks)
