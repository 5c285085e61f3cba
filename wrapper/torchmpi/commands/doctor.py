"""``torchmpi doctor``: is this node's PyTorch/MPI/NCCL stack right?"""

from __future__ import annotations

import argparse
import textwrap

from torchmpi.commands import arguments

EXAMPLES = """\
examples:
  torchmpi doctor --site perlmutter          # inside the job, after module load
  srun -N 1 -n 1 --gpus 1 torchmpi doctor --json > doctor.json
  torchmpi doctor --nccl-log nccl.log        # judge a log from a real multi-node run
"""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "doctor",
        help="check torch backends, MPI CUDA-awareness, NCCL network and site variables",
        description=textwrap.fill(
            "Runs a one-rank all-reduce through each backend torch has (MPI with CPU and "
            "CUDA tensors, NCCL, gloo) and checks the MPI library, Cray GTL, the NCCL "
            "plugin and interfaces and the site's runtime variables.  Prints "
            "PASS/WARN/FAIL/SKIP per check with a one-line fix; exit status 1 on any FAIL, "
            "2 on bad input.  Runs without Spack; on a CPU-only node the GPU probes SKIP."
        ),
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--site", metavar="NAME|FILE", default=None,
                        help="compare the environment with this site's runtime variables "
                             "(default: no site comparison)")
    parser.add_argument("--nccl-log", metavar="FILE", default=None,
                        help="judge the network from this NCCL_DEBUG=INFO log instead of the "
                             "one-rank NCCL probe's (default: the probe's log)")
    parser.add_argument("--no-probe", "--no-nccl-probe", action="store_true", default=False,
                        dest="no_probe",
                        help="do not run the one-rank all-reduce probes; --no-nccl-probe is "
                             "its old name (default: run them)")
    arguments.json(parser, "one JSON object instead of the table (default: table)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from torchmpi import doctor

    inputs = doctor.gather(site=args.site, nccl_log=args.nccl_log,
                           run_probes=not args.no_probe)
    checks = doctor.run_checks(inputs)
    print(doctor.to_json(checks) if args.json else doctor.format_table(checks))
    return doctor.exit_status(checks)
