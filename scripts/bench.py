#!/usr/bin/env python3
"""``make bench``: concretization cost of each site environment (not a test).

Per site, measured in the same run with the same pinned Spack:

* ``concretize``: ``spack -e ENV concretize -f`` of the committed environment
  with the solver cache off (a first solve);
* ``again``: ``spack -e ENV concretize`` right after, the environment unchanged
  (what a user re-running the command pays);
* ``bare``: ``spack spec builtin.py-torch [+cuda cuda_arch=N]`` with the same
  site config (externals, compilers, MPI and target requirements) but none of
  torchmpi's roots, also with the solver cache off.

Ratio (1) = concretize / bare seconds; ratio (2) = from-source builds of the
environment / of the bare spec; ratio (3) = again / concretize.  Writes the
table to stdout and the raw figures to bench-out/bench.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "wrapper"))

from torchmpi import output, paths, spackrun  # noqa: E402
from torchmpi import render as renderer  # noqa: E402
from torchmpi import site as sitemod  # noqa: E402
from torchmpi.lock import Lock  # noqa: E402

NO_CACHE = ["-c", "concretizer:concretization_cache:enable:false"]


def spack(*args: str) -> tuple[float, subprocess.CompletedProcess]:
    start = time.monotonic()
    proc = subprocess.run([str(spackrun.executable()), *args], env=spackrun.environ(),
                          capture_output=True, text=True, check=False)
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        sys.exit(f"bench: spack {' '.join(args)} failed:\n{proc.stdout[-3000:]}"
                 f"\n{proc.stderr[-3000:]}")
    return seconds, proc


def prepare(tree: Path, name: str) -> tuple[Path, Path, sitemod.Site]:
    """The environment as committed (local: rendered here) and a bare config scope."""
    site = sitemod.load(name)
    env_dir = tree / "environments" / name
    shutil.rmtree(env_dir, ignore_errors=True)
    if site.is_local:
        output.write(env_dir, renderer.render(site, env_dir))
    else:
        shutil.copytree(paths.environments_dir() / name, env_dir,
                        ignore=shutil.ignore_patterns("spack.lock", ".spack-env"))
    scope = tree / "bare" / name
    scope.mkdir(parents=True, exist_ok=True)
    shutil.copy(env_dir / "packages.yaml", scope / "packages.yaml")
    (scope / "concretizer.yaml").write_text(
        "concretizer:\n  unify: true\n  targets:\n    host_compatible: false\n")
    return env_dir, scope, site


def bench_site(tree: Path, name: str) -> dict:
    env_dir, scope, site = prepare(tree, name)
    print(f"[{name}] concretize (first, solver cache off) ...", file=sys.stderr, flush=True)
    store = spackrun.offsite_install_args(site.data, f"bench-{name}")
    first_s, _ = spack(*NO_CACHE, *store, "-e", str(env_dir), "concretize", "-f")
    lock = Lock(env_dir / "spack.lock")
    print(f"[{name}] re-concretize unchanged ...", file=sys.stderr, flush=True)
    again_s, _ = spack(*store, "-e", str(env_dir), "concretize")
    bare_spec = "builtin.py-torch" + (f" +cuda cuda_arch={site.cuda_arch}" if site.gpu else "")
    if not site.is_local:  # as in the environment's roots (spackenv.roots)
        bare_spec += f" target={site.data['target']}"
    print(f"[{name}] bare: spack spec {bare_spec} ...", file=sys.stderr, flush=True)
    bare_s, proc = spack(*NO_CACHE, "-C", str(scope), "spec", "--json", bare_spec)
    nodes = json.loads(proc.stdout)["spec"]["nodes"]
    bare_build = sum(1 for n in nodes if not n.get("external"))
    return {
        "site": name,
        "concretize_s": round(first_s, 1),
        "again_s": round(again_s, 1),
        "nodes": len(lock.nodes),
        "to_build": len(lock.to_build),
        "external": len(lock.externals),
        "bare_spec": bare_spec,
        "bare_s": round(bare_s, 1),
        "bare_nodes": len(nodes),
        "bare_to_build": bare_build,
        "ratio_time": round(first_s / bare_s, 2),
        "ratio_builds": round(len(lock.to_build) / bare_build, 2) if bare_build else None,
        "ratio_again": round(again_s / first_s, 3),
    }


def table(rows: list[dict]) -> str:
    cols = [("site", "site"), ("concretize_s", "conc s"), ("nodes", "nodes"),
            ("to_build", "build"), ("external", "ext"), ("bare_s", "bare s"),
            ("bare_to_build", "bare build"), ("ratio_time", "(1) time"),
            ("ratio_builds", "(2) builds"), ("again_s", "again s"), ("ratio_again", "(3) again")]
    widths = [max(len(h), *(len(str(r[k])) for r in rows)) for k, h in cols]
    lines = ["  ".join(h.rjust(w) for (_, h), w in zip(cols, widths))]
    for r in rows:
        lines.append("  ".join(str(r[k]).rjust(w) for (k, _), w in zip(cols, widths)))
    return "\n".join(lines)


#: Sites with a from-source target (docs/performance.md): <= 60 on each Cray site
#: that reuses its centre's published stack: Derecho (NCAR's ncarenv
#: 23.09; 45 before the installed tool declared its own dependencies, jsonschema,
#: ruamel.yaml and archspec, so that `doctor --site` works from the module) and
#: Alps (CSCS's PyTorch uenv as externals).  Perlmutter has no target: NERSC
#: publishes too few externals to reach 60 (docs/performance.md).
FROM_SOURCE_TARGET = {"derecho": 60, "alps-gh200": 60}


def bars(rows: list[dict], width: int = 50) -> str:
    """Per site, one bar of its nodes: '#' built from source, '.' external."""
    most = max(r["nodes"] for r in rows) or 1
    name_w = max(len(r["site"]) for r in rows)
    lines = ["nodes per site ('#' from source, '.' external)"]
    for r in rows:
        built = round(width * r["to_build"] / most)
        ext = round(width * r["external"] / most)
        line = (f"{r['site']:<{name_w}}  {'#' * built}{'.' * ext}"
                f"{' ' * (width - built - ext)}  {r['nodes']} nodes: {r['to_build']} from source,"
                f" {r['external']} external")
        target = FROM_SOURCE_TARGET.get(r["site"])
        if target is not None:
            verdict = "met" if r["to_build"] <= target else "NOT met"
            line += f"  (target <= {target} from source: {verdict})"
        lines.append(line)
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("sites", nargs="*", default=sitemod.available(),
                        help="site names (default: every site file under sites/)")
    parser.add_argument("--out", type=Path, default=paths.root() / "bench-out")
    args = parser.parse_args()
    tree = args.out / "tree"
    tree.mkdir(parents=True, exist_ok=True)
    link = tree / "spack_repo"
    if not link.exists():
        link.symlink_to(paths.root() / "spack_repo")
    rows = []
    for name in args.sites:
        rows.append(bench_site(tree, name))
        (args.out / "bench.json").write_text(json.dumps(rows, indent=2) + "\n")
    print(table(rows))
    print()
    print(bars(rows))
    print("\n(1) time = concretize / bare spec, target <= 1.1;"
          " (2) builds = env / bare spec from-source nodes;"
          " (3) again = unchanged re-concretize / first, target <= 0.3")
    return 0


if __name__ == "__main__":
    sys.exit(main())
