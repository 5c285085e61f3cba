"""``torchmpi detect``: what the ``local`` site would use on this host."""

from __future__ import annotations

import argparse
import json

from torchmpi import detect
from torchmpi.commands import arguments

EXAMPLE = """\
example:
  $ torchmpi detect
  target (archspec)  zen3
  GPUs               NVIDIA A100-SXM4-40GB (sm_80), ...
  $ torchmpi detect --json > host.json
  $ torchmpi detect --externals          # also the build tools Spack finds here
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "detect",
        help="show the host facts the local site is rendered from",
        description=(
            "Show what the 'local' site's auto values become on this host: the CPU target\n"
            "(archspec, as Spack names it), GPUs and their CUDA architecture (nvidia-smi),\n"
            "the CUDA toolkit, a Cray PE, the MPI launcher on PATH and the gcc compilers.\n"
            "Run it on a compute node to find the values for a new site file."
        ),
        epilog=EXAMPLE,
    )
    p.add_argument("--externals", action="store_true",
                   help="also list the host's build tools as Spack finds them "
                   "(`spack external find`, ~15 s): what the local site's "
                   "`externals: auto` reuses")
    arguments.json(p, "one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    facts = detect.report(externals=args.externals)
    if args.json:
        print(json.dumps(facts, indent=2, sort_keys=True))
        return 0
    gpus = ", ".join(f"{g['name']} (sm_{g['cuda_arch']})" for g in facts["gpus"])
    cuda = facts["cuda"]
    mpi = facts["mpi"]
    gcc = facts["gcc"]
    rows = [
        ("target (archspec)", facts["target"]),
        ("GPUs", gpus or "none (nvidia-smi absent or no GPU): CPU-only build"),
        ("cuda_arch", facts["cuda_arch"] or "-"),
        ("CUDA toolkit", f"{cuda['version']} at {cuda['prefix']}" if cuda else "-"),
        ("Cray PE", facts["cray_pe"] or "no"),
        ("MPI on PATH", f"{mpi['launcher']}: {mpi['version']}" if mpi else "none"),
        ("compiler", f"{gcc['spec']} at {gcc['prefix']}" if gcc else "no gcc/g++/gfortran"),
    ]
    if args.externals:
        found = facts["externals"]
        excluded = ", ".join(detect.EXCLUDED_EXTERNALS)
        rows.append(("externals",
                     f"{len(found)} found by `spack external find` (excluded: {excluded})"))
        rows += [("", f"{e['spec'].split()[0]} at {e['prefix']}") for e in found]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    return 0
