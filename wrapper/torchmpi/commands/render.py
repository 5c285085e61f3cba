"""``torchmpi render SITE``: site file -> Spack environment directory."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from torchmpi import paths
from torchmpi import render as renderer
from torchmpi import site as sitemod
from torchmpi.errors import UserError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("render", help="render a site file into a Spack environment")
    p.add_argument("site", help="site name (see `torchmpi sites`) or path to a site file")
    p.add_argument("-o", "--output", type=Path, metavar="DIR",
                   help="environment directory (default: environments/SITE)")
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 with a diff if DIR differs from a fresh render")
    p.add_argument("--force", action="store_true",
                   help="overwrite files edited by hand or rendered from another site file")
    p.set_defaults(func=run)


def _in_sites_dir(path: Path) -> bool:
    """Whether a site file is (really, after symlinks) one of the checkout's sites/."""
    try:
        path.resolve().relative_to(paths.sites_dir().resolve())
    except ValueError:
        return False
    return True


def run(args: argparse.Namespace) -> int:
    site = sitemod.load(args.site)
    if args.output is None and not _in_sites_dir(site.path):
        real = site.path.resolve()
        link = f" (a link to {real})" if real != site.path.absolute() else ""
        raise UserError(
            f"{site.path}{link}: not a file under {paths.sites_dir()}, and environments/"
            " holds only the checkout's own sites; give the output directory with -o DIR,"
            " or copy the file into sites/"
        )
    outdir = args.output or renderer.default_outdir(site)
    files = renderer.render(site, outdir)
    if args.check:
        if not any((outdir / name).is_file() for name in files):
            print(f"torchmpi render --check: {outdir} was never rendered (no {', '.join(files)});"
                  f" run `torchmpi render {args.site}`", file=sys.stderr)
            return 1
        text = renderer.diff(outdir, files)
        if text:
            sys.stdout.write(text)
            print(f"torchmpi render --check: {outdir} differs from a fresh render of"
                  f" {site.name}; run `torchmpi render {site.name}`", file=sys.stderr)
            return 1
        print(f"{outdir}: up to date with {site.path.name}")
        return 0
    result = renderer.write(outdir, files, force=args.force)
    if result.written:
        print(f"{outdir}: wrote {', '.join(result.written)}")
    else:
        print(f"{outdir}: unchanged")
    return 0
