"""``torchmpi container SITE``: site file -> image recipe + run-time descriptor."""

from __future__ import annotations

import argparse
import json

from torchmpi import container as containermod
from torchmpi import output
from torchmpi import site as sitemod
from torchmpi.commands import arguments

EXAMPLE = """\
examples:
  $ torchmpi container derecho              # -> containers/derecho/
  $ torchmpi container alps-gh200 -o /tmp/alps-image --json
  $ scripts/container-context.sh containers/derecho && \\
      podman build -t torchmpi-derecho:0.1.0 containers/derecho
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "container",
        help="render a site's container image recipe and run-time descriptor",
        description=(
            "Write a self-contained container spack.yaml, a multi-stage Containerfile\n"
            "and the run-time descriptor of the site's `container.runtime` (CE EDF,\n"
            "podman-hpc, shifter, apptainer or podman).  A request the site cannot\n"
            "satisfy is refused before anything is written."
        ),
        epilog=EXAMPLE,
    )
    arguments.site(p)
    arguments.output(p, "output directory", "containers/SITE in the checkout")
    arguments.force(p)
    arguments.json(p, "what was written")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    site = sitemod.load(args.site)
    outdir = output.writable_outdir("container", site, args.output)
    files = containermod.render(site)
    result = output.write(outdir, files, force=args.force)
    status = "written" if result.written else "unchanged"
    if args.json:
        print(json.dumps({"site": site.name, "output": str(outdir), "status": status,
                          "written": result.written,
                          "unchanged": [f for f in files if f not in result.written]}, indent=2))
    else:
        print(f"{outdir}: " + (f"wrote {', '.join(result.written)}" if result.written
                               else status))
    return 0
