"""``torchmpi render SITE``: site file -> Spack environment directory."""

from __future__ import annotations

import argparse
import json
import sys

from torchmpi import output, torches
from torchmpi import render as renderer
from torchmpi import site as sitemod
from torchmpi.checks import network
from torchmpi.commands import arguments

EXAMPLE = """\
examples:
  $ torchmpi render derecho                 # -> environments/derecho/
  $ torchmpi render --check derecho         # CI: exit 1 with a diff if it is stale
  $ torchmpi render sites/new.yaml -o /tmp/new-env --json
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "render",
        help="render a site file into a Spack environment",
        description=(
            "Validate a site file and write its Spack environment: spack.yaml,\n"
            "packages.yaml, modules.yaml and runtime.sh.  Files edited by hand since\n"
            "they were rendered are not overwritten without --force; nothing is written\n"
            "when the site file is invalid."
        ),
        epilog=EXAMPLE,
    )
    arguments.site(p)
    arguments.output(p, "environment directory", "environments/SITE")
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 with a diff if DIR differs from a fresh render")
    arguments.force(p)
    arguments.json(p, "what was written or found")
    p.set_defaults(func=run)


def _report(args: argparse.Namespace, record: dict, text: str) -> None:
    """The result on stdout: ``record`` as JSON with --json, else ``text`` (if any)."""
    if args.json or text:
        print(json.dumps(record, indent=2) if args.json else text)


def run(args: argparse.Namespace) -> int:
    site = sitemod.load(args.site)
    # --check writes nothing, so only a render needs the directory writable
    where = output.outdir if args.check else output.writable_outdir
    outdir = where("render", site, args.output)
    for note in [*torches.notes(site.data), *network.notes(site.data)]:  # found now
        print(f"torchmpi render: note: {note}", file=sys.stderr)
    record = {"site": site.name, "output": str(outdir)}
    files = renderer.render(site, outdir)
    if args.check:
        if not any((outdir / name).is_file() for name in files):
            print(f"torchmpi render --check: {site.name} was never rendered into {outdir}"
                  f" (none of {', '.join(files)} is there); run `torchmpi render"
                  f" {args.site}`", file=sys.stderr)
            _report(args, {**record, "status": "never-rendered"}, "")
            return 1
        text = output.diff(outdir, files)
        if text:
            if args.json:
                _report(args, {**record, "status": "differs", "diff": text}, "")
            else:
                sys.stdout.write(text)
            print(f"torchmpi render --check: {outdir} differs from a fresh render of"
                  f" {site.name}; run `torchmpi render {site.name}`", file=sys.stderr)
            return 1
        _report(args, {**record, "status": "up-to-date"},
                f"{outdir}: up to date with {site.path.name}")
        return 0
    result = output.write(outdir, files, force=args.force)
    status = "written" if result.written else "unchanged"
    text = f"{outdir}: " + (f"wrote {', '.join(result.written)}" if result.written else status)
    _report(args, {**record, "status": status, "written": result.written,
                   "unchanged": [f for f in files if f not in result.written]}, text)
    return 0
