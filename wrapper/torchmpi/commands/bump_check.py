"""``torchmpi bump-check``: what a site file names that the site no longer has.

Run on the site's login node before (and after) bumping a site file to the
centre's new stack: it lists every external prefix, compiler and module the
file names that is missing, with what the centre offers in its place where it
can tell (:mod:`torchmpi.bump`).  docs/admins.md walks through a bump.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from torchmpi import bump, sitefile
from torchmpi import site as sitemod
from torchmpi.commands import arguments

EXAMPLE = """\
example (on the site's login node, after `module load PrgEnv-gnu`):
  $ torchmpi bump-check perlmutter
  perlmutter: 2 of 9 paths, compilers and modules the site file names are missing or changed here
    sites/perlmutter.yaml:31:3: mpi.prefix: /opt/cray/pe/mpich/8.1.28/ofi/gnu/12.3 missing
      offered: /opt/cray/pe/mpich/8.1.30/ofi/gnu/12.3
    ...
  $ torchmpi bump-check perlmutter --json
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bump-check",
        help="list what a site file names that the site no longer has",
        description=(
            "On the site: list every external prefix, compiler executable and module the\n"
            "site file names that is missing (or, for a compiler, reports another version),\n"
            "and what the centre offers in its place where it can tell: other versions\n"
            "beside a missing directory, other versions of a module (Lmod's spider).\n"
            "Externals whose prefix is there (/usr) are checked for the version their\n"
            "tools report (Spack's `external find`), so an OS update shows too.\n"
            "Exit status 1 when anything is missing.  See docs/admins.md, 'Bumping a site'."
        ),
        epilog=EXAMPLE,
    )
    arguments.site(p)
    p.add_argument("--root", type=Path, default=Path("/"),
                   help="look for the site's paths under this directory (a mounted image"
                        " of the site; default: /)")
    p.add_argument("--no-modules", action="store_true",
                   help="do not ask Lmod about modules")
    p.add_argument("--no-versions", action="store_true",
                   help="do not ask Spack's detection which versions the externals'"
                        " tools report (a prefix such as /usr is always there)")
    arguments.json(p, "the findings as a list")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    site = sitemod.load(args.site)
    _, lines, _ = sitefile.parse(site.path)
    lmod = None if args.no_modules else bump._lmod()
    modules = bump.available_modules(lmod) if lmod else None
    findings = bump.check(site.data, args.root, modules)
    drift = None if args.no_versions else bump.version_drift(site.data, args.root)
    findings += drift or []
    counts = bump.named_count(site.data)
    if modules is None:
        counts.pop("module")
    if drift is not None:
        counts["version"] = len(bump._versioned_externals(site.data, args.root))
    total = sum(counts.values())
    records = []
    for f in findings:
        line, column = sitefile._nearest(lines, f.key)
        records.append({"file": str(site.path), "line": line, "column": column,
                        "key": sitefile._fmt_path(f.key), "kind": f.kind, "named": f.named,
                        "problem": f.problem, "offered": f.offered})
    if args.json:
        print(json.dumps({"site": site.name, "named": total,
                          "modules_checked": modules is not None,
                          "versions_checked": drift is not None, "findings": records},
                         indent=2))
        return 1 if findings else 0
    out = [f"{site.name}: {len(findings)} of {total} paths, compilers and modules the site"
           f" file names are missing or changed here" if findings else
           f"{site.name}: all {total} paths, compilers and modules the site file names are here"]
    for r in records:
        out.append(f"  {r['file']}:{r['line']}:{r['column']}: {r['key']}: {r['named']}"
                   f" {r['problem']}")
        out.append("    offered: " + (", ".join(r["offered"]) or "nothing this tool can see"))
    if modules is None:
        out.append("  modules not checked: " + ("--no-modules" if args.no_modules else
                   f"no Lmod here ({bump.LMOD_DEFAULT}, or set LMOD_CMD)"))
    if drift is None:
        out.append("  versions of externals not checked: " + (
            "--no-versions" if args.no_versions else "the pinned Spack is not set up here"))
    if findings and len(findings) >= total:
        out.append(f"  nothing the site file names is here: run this on {site.name}'s login"
                   " node (or give --root)")
    print("\n".join(out))
    return 1 if findings else 0
