"""``torchmpi concretize SITE``: render if needed, solve, summarise the DAG."""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import yaml

from torchmpi import offsite, output, spackrun, torches
from torchmpi import render as renderer
from torchmpi import site as sitemod
from torchmpi.commands import arguments
from torchmpi.lock import Lock

EXAMPLE = """\
examples:
  $ torchmpi concretize derecho            # environments/derecho/spack.lock, summary
  $ torchmpi concretize derecho -f --json  # full re-solve, summary as JSON on stdout
  $ torchmpi concretize sites/new.yaml -o /tmp/new-env
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "concretize",
        help="render (if needed) and concretize a site environment",
        description=(
            "Validate the site file, render its environment if it changed, then solve it\n"
            "with the project's pinned Spack (minutes for py-torch) and print a summary:\n"
            "roots, node count, packages to build, externals, MPI, NCCL, torch, target.\n"
            "Spack's output goes to stderr; the summary to stdout."
        ),
        epilog=EXAMPLE,
    )
    arguments.site(p)
    arguments.output(p, "environment directory", "environments/SITE")
    p.add_argument("-f", "--fresh", action="store_true",
                   help="re-solve every root even if spack.lock is up to date (spack -f)")
    arguments.force(p)
    arguments.json(p, "the summary as one JSON object")
    p.add_argument("-q", "--quiet", action="store_true", help="do not echo Spack's output")
    p.set_defaults(func=run)


def _failure_reason(lines: list[str]) -> str:
    """Spack's own explanation: from the first error line on (or the tail)."""
    for i, line in enumerate(lines):
        if "Error:" in line or "error:" in line:
            return "\n".join(lines[i:i + 40])
    return "\n".join(lines[-40:])


#: Written beside spack.lock after a solve: the digest of the solver's inputs.
SOLVED_INPUTS = ".torchmpi-solve-inputs"


def solve_inputs(outdir: Path) -> str:
    """sha256 of what the solver reads from the rendered environment.

    spack.yaml without ``env_vars`` (job-time variables, applied on
    ``spack env activate``) and packages.yaml.  modules.yaml and runtime.sh are
    not read by the solver at all.  So a site change confined to ``runtime``
    re-renders files but leaves this digest, and the lock, as they were.
    """
    parts = {}
    for name in ("spack.yaml", "packages.yaml"):
        path = outdir / name
        data = yaml.safe_load(path.read_text()) if path.is_file() else None
        if name == "spack.yaml" and isinstance(data, dict):
            data.get("spack", {}).pop("env_vars", None)
        parts[name] = data
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def _lock_is_stale(outdir: Path) -> bool:
    """Whether spack.lock was solved from other inputs than the rendered files.

    Spack re-solves only when the root specs change: an edited packages.yaml
    (new external, other MPI) leaves a lock it calls up to date, and a changed
    root under ``unify: true`` makes a partial re-solve fail against the old
    DAG ("Couldn't concretize without changing the existing environment").
    Either way the answer is a full re-solve (``-f``) -- but only when the
    solver's inputs changed (:func:`solve_inputs`), not for runtime variables.
    """
    lock, record = outdir / "spack.lock", outdir / SOLVED_INPUTS
    if not lock.is_file() or not record.is_file():
        return True
    return record.read_text().strip() != solve_inputs(outdir)


def run(args: argparse.Namespace) -> int:
    site = sitemod.load(args.site)
    # Checked before the solve, not after it: Spack writes spack.lock at the very end.
    outdir = output.writable_outdir("render", site, args.output)
    spackrun.executable()  # a missing Spack is reported now, not after rendering
    offsite.check_compilers(site.data, site.path)  # on the site: versions as stated
    for note in torches.notes(site.data):  # found now, not as a PatchError in the build
        print(f"torchmpi concretize: note: {note}", file=sys.stderr)
    files = renderer.render(site, outdir)
    if output.diff(outdir, files):
        result = output.write(outdir, files, force=args.force)
        print(f"rendered {outdir} ({', '.join(result.written)})", file=sys.stderr)
    echo = (lambda _line: None) if args.quiet else (lambda line: print(line, file=sys.stderr))
    print(f"==> concretizing {site.name} in {outdir} (this takes minutes)", file=sys.stderr)
    fresh = args.fresh or _lock_is_stale(outdir)
    store = spackrun.offsite_install_args(site.data, site.name)
    if store:
        print(f"==> {site.data['install']['root']} is not on this host: solving against a"
              " private install tree instead (no reuse of site installs)", file=sys.stderr)
    spack_args = [*store, "-e", str(outdir), "concretize"] + (["-f"] if fresh else [])
    rc, lines, seconds = spackrun.run_streaming(spack_args, echo)
    if rc != 0:
        reason = _failure_reason(lines)
        if not args.quiet:  # the whole reason was just streamed; repeat its first line
            reason = reason.splitlines()[0] + "\n(Spack's full message is above)"
        print(f"torchmpi concretize: Spack could not concretize {site.name} (exit {rc},"
              f" {seconds:.0f} s):\n{reason}", file=sys.stderr)
        return 1
    (outdir / SOLVED_INPUTS).write_text(solve_inputs(outdir) + "\n")
    lock = Lock(outdir / "spack.lock")
    wrong = lock.root_mismatches()
    if wrong:
        print(f"torchmpi concretize: {lock.path} maps roots to the wrong specs:\n  "
              + "\n  ".join(wrong) + f"\nRe-solve with `torchmpi concretize {site.name} -f`.",
              file=sys.stderr)
        return 1
    chosen = [n.version for n in lock.named("py-torch")]
    for note in torches.notes(site.data, chosen):
        print(f"torchmpi concretize: note: {note}", file=sys.stderr)
    summary = lock.summary()
    summary.update(site=site.name, seconds=round(seconds, 1), lock=str(outdir / "spack.lock"))
    differs = offsite.differences(site.data, lock)
    summary.update(offsite_preview=bool(differs), offsite_differences=differs)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(format_summary(summary))
    return 0


def format_summary(s: dict) -> str:
    ext = s["externals"]
    counts = f"{s['nodes']} total, {s['to_build']} to build from source, {len(ext)} external"
    rows = [
        ("roots", ", ".join(s["roots"])),
        ("nodes", counts),
        ("externals", ", ".join(ext) or "-"),
        ("MPI", s["mpi"]),
        ("NCCL", s["nccl"]),
        *([("RCCL", s["rccl"])] if s.get("rccl", "-") != "-" else []),
        ("NCCL plugin", s["plugin"]),
        ("torch", s["torch"]),
        ("target", ", ".join(s["targets"])),
        ("time", f"{s['seconds']:.1f} s"),
    ]
    width = max(len(k) for k, _ in rows)
    head = f"site {s['site']}: concretized -> {s['lock']}"
    lines = [head] + [f"  {k:<{width}}  {v}" for k, v in rows]
    if s.get("offsite_preview"):
        lines[0] += "  (OFF-SITE PREVIEW)"
        lines.append("  solved away from the site; on its login node this lock would differ in:")
        lines += [f"    - {line}" for line in s["offsite_differences"]]
        lines.append("  re-run `torchmpi concretize` on the site before installing "
                     "(docs/sites.md)")
    return "\n".join(lines)
