"""``torchmpi reframe SITE``: a ReFrame configuration and run-checks.sh for the site."""

from __future__ import annotations

import argparse
import json
import sys

from torchmpi import output
from torchmpi import reframe as rfmconf
from torchmpi import site as sitemod
from torchmpi.commands import arguments

EXAMPLE = """\
examples:
  $ torchmpi reframe derecho -o ~/rfm-derecho     # settings.py + run-checks.sh
  $ ~/rfm-derecho/run-checks.sh -r -S num_nodes=2 # ReFrame's own options pass through
  $ torchmpi reframe local --env runtime-sh --prepare '. ~/venv/bin/activate'
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "reframe",
        help="write a ReFrame configuration for a site and a script running torchmpi's checks",
        description=(
            "Write DIR/settings.py (a ReFrame configuration from the site file: scheduler,\n"
            "launcher and its flags, GPUs per node, features, the environment, performance\n"
            "references) and DIR/run-checks.sh, which runs ReFrame with it on torchmpi's\n"
            "check library (doctor, all-reduce per backend, NCCL network), passing its\n"
            "arguments to ReFrame.  Files not written by this command, edited by hand or\n"
            "written from another site file are not replaced without --force."
        ),
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    arguments.site(p)
    arguments.output(p, "output directory", "reframe/SITE in the checkout")
    p.add_argument("--env", choices=("module", "runtime-sh"), default=None, dest="env_from",
                   help="how jobs get the site's torch: its modules, or DIR/runtime.sh after "
                        "--prepare commands (default: module when install.modules_root is "
                        "set, else runtime-sh)")
    p.add_argument("--prepare", action="append", default=[], metavar="CMD",
                   help="a shell command each job runs first, e.g. 'spack load py-torch-mpi' "
                        "(repeatable; default: none)")
    arguments.force(p)
    arguments.json(p, "what was written")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    site = sitemod.load(args.site)
    outdir = output.writable_outdir("reframe", site, args.output)
    modules_root = (site.data.get("install") or {}).get("modules_root")
    if (args.env_from or ("module" if modules_root else "runtime-sh")) == "runtime-sh" \
            and not args.prepare:  # docs/users.md: runtime.sh alone is not enough to run
        print("torchmpi reframe: note: install.modules_root is not set and no --prepare was"
              " given, so the jobs only source runtime.sh, which sets the site's variables"
              " but loads no torch (docs/users.md); set install.modules_root, or give"
              " --prepare 'spack load py-torch-mpi'", file=sys.stderr)
    out = rfmconf.build(site, outdir, env_from=args.env_from, extra_prepare=args.prepare)
    written = rfmconf.write(out, force=args.force)
    if args.json:
        print(json.dumps({"site": site.name, "output": str(outdir), "written": written},
                         indent=2))
    else:
        print(f"{outdir}: wrote {', '.join(written)}; run {outdir / rfmconf.SCRIPT}")
    return 0
