#!/usr/bin/env python3
"""``make mutate``: plant one-line bugs, run the tests of the mutated module, report survivors.

Why hand-written mutants and not mutmut or cosmic-ray: those generate every
operator swap in every file (thousands of mutants for wrapper/ alone), and each
one here costs a pytest start plus, for the packages, a Spack solve of minutes
on a 2-core machine.  A short list of *realistic* bugs -- the ones a reviewer
would miss: a dropped provider, a truthy "0", bytes counted for characters --
run against only the test files that own the module measures what matters in
minutes, needs nothing from the network, and each mutant documents a claim.

Each mutant is run in a scratch copy of the checkout (the working tree is never
touched; ``PYTHONPATH`` points the ``torchmpi`` import at the copy).  A mutant of
the patcher (``cuda_aware_mpi.py``) also gets ``CUDA_AWARE_MPI_SHA256`` updated to
its own digest, so that it is not "killed" merely by the digest test: only a test
of the patcher's behaviour can kill it.

Mutants of package files are killed only by real-Spack tests; they run with
``--spack`` (slow: each re-solves).  Without it they are listed as not measured.

Usage: scripts/mutate.py [--spack] [--jobs N] [--only AREA] [--match TEXT]... [--list]
Exit status: 0 when every measured mutant is killed or listed in SURVIVORS_OK.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PATCHER = "spack_repo/torchmpi/packages/py_torch/cuda_aware_mpi.py"
TORCH_PACKAGE = "spack_repo/torchmpi/packages/py_torch/package.py"
TORCH_MPI = "spack_repo/torchmpi/packages/py_torch_mpi/package.py"
PLUGIN = "spack_repo/torchmpi/packages/aws_ofi_nccl/package.py"
NCCL_SS11 = "spack_repo/torchmpi/packages/nccl_ss11/package.py"
OPENMPI_CUDA = "spack_repo/torchmpi/packages/openmpi_cuda/package.py"


@dataclass(frozen=True)
class Mutant:
    area: str
    file: str
    old: str  # must occur exactly once in the file
    new: str
    tests: tuple[str, ...]  # the test files of the mutated module
    spack: bool = False  # only a real-Spack test can kill it

    @property
    def name(self) -> str:
        return f"{self.file}: {self.old.strip()[:60]!r}"


SITE = ("tests/test_blind_spots.py", "tests/test_site_answers.py", "tests/test_bad_input.py",
        "tests/test_sites.py")
RUNTIME = ("tests/test_blind_spots.py", "tests/test_runtime.py")
RENDER = ("tests/test_blind_spots.py", "tests/test_render.py", "tests/test_sites.py")
PATCH = ("tests/test_cuda_aware_patch.py",)
PKG = ("tests/test_package_methods.py", "tests/test_packages.py")

MUTANTS: tuple[Mutant, ...] = (
    # --- site: loader, file reader, auto keys ------------------------------------
    Mutant("site", "wrapper/torchmpi/sitefile.py",
           'len(raw[start:err.start].decode("utf-8", "replace"))', "len(raw[start:err.start])",
           SITE),
    Mutant("site", "wrapper/torchmpi/site.py", "    if local:\n        return errors\n",
           "    if True:\n        return errors\n", SITE),
    Mutant("site", "wrapper/torchmpi/site.py",
           'if kind == "openmpi-cuda" and data.get("gpu") is None:',
           'if kind == "openmpi-cuda" and data.get("gpu") == "none":', SITE),
    Mutant("site", "wrapper/torchmpi/site.py",
           'if nccl.get("plugin") and data.get("fabric") != "slingshot":',
           'if nccl.get("plugin") and data.get("fabric") == "ib":', SITE),
    Mutant("site", "wrapper/torchmpi/site.py",
           "if switch is not None and stated is not None and str(stated) != switch:",
           "if switch == \"1\" and stated is not None and str(stated) != switch:", SITE),
    Mutant("site", "wrapper/torchmpi/autokeys.py",
           'AUTO_KEYS = ("target", "compilers", "gpu", "mpi.kind", "externals")',
           'AUTO_KEYS = ("target", "compilers", "mpi.kind", "gpu", "externals")', SITE),
    Mutant("site", "wrapper/torchmpi/detect.py",
           '        data.pop("gpu")  # no GPU found', '        data["gpu"] = None  # no GPU found',
           SITE),
    # --- runtime variables ---------------------------------------------------------
    Mutant("runtime", "wrapper/torchmpi/runtime.py", 'if cray_gpu_switch(data) == "1":',
           "if cray_gpu_switch(data):", RUNTIME),
    Mutant("runtime", "wrapper/torchmpi/runtime.py",
           ' or not isinstance(data.get("gpu"), dict):', ":", RUNTIME),
    Mutant("runtime", "wrapper/torchmpi/runtime.py",
           'return "1" if mpi.get("cuda_aware", True) else "0"',
           'return "1" if mpi.get("cuda_aware", False) else "0"', RUNTIME),
    Mutant("runtime", "wrapper/torchmpi/runtime.py",
           "        out.set.setdefault(GPU_SWITCH, \"1\")", "        out.set[GPU_SWITCH] = \"1\"",
           RUNTIME),
    # the site's value must win over the fabric default it restates
    Mutant("runtime", "wrapper/torchmpi/runtime.py",
           '    out.set.update((k, str(v)) for k, v in (site.get("env") or {}).items())',
           '    out.set.update((k, str(v)) for k, v in (site.get("env") or {}).items()'
           ' if k not in out.set)', RUNTIME),
    # a '$' in the middle of a value is as unfaithful as one at the start
    Mutant("runtime", "wrapper/torchmpi/runtime.py", '            if "$" in str(value):',
           '            if str(value).startswith("$"):', RUNTIME),
    # runtime.sh: an unset PATH-like variable must not gain an empty entry (= ".")
    Mutant("runtime", "wrapper/torchmpi/runtime.py",
           """{shlex.quote(value)}"${{{name}:+:${name}}}"')""",
           """{shlex.quote(value)}":${name}"')""", RUNTIME),
    # runtime.sh: a value with a space ("AWS Libfabric") must stay one word
    Mutant("runtime", "wrapper/torchmpi/runtime.py",
           '        lines.append(f"export {_name(key)}={shlex.quote(value)}")',
           '        lines.append(f"export {_name(key)}={value}")', RUNTIME),
    # --- (block A: container, reframe, venv: mutants added below this line) ---
    # --- rendering -------------------------------------------------------------------
    Mutant("render", "wrapper/torchmpi/render.py",
           'fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=outdir)',
           "tmp = str(outdir / name); fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)",
           RENDER),
    Mutant("render", "wrapper/torchmpi/render.py",
           "    return hashlib.sha256(body.encode()).hexdigest() != match.group(1)",
           "    return False", RENDER),
    Mutant("render", "wrapper/torchmpi/render.py", "    if foreign and not force:",
           "    if foreign and force:", RENDER),
    Mutant("render", "wrapper/torchmpi/spackenv.py",
           'root += " +cuda_aware_mpi" if mpi.get("cuda_aware", True) else " ~cuda_aware_mpi"',
           'root += " +cuda_aware_mpi"', RENDER),
    Mutant("render", "wrapper/torchmpi/spackenv.py",
           """        pins["aws-ofi-nccl"] = {"require": [f"@{nccl['plugin']}"]}""",
           "        pass", RENDER),
    # --- allreduce statistics ------------------------------------------------------
    Mutant("allreduce", "wrapper/torchmpi/allreduce.py", '/ (world if how == "avg" else 1)',
           "/ 1", ("tests/test_allreduce.py", "tests/test_blind_spots.py")),
    Mutant("allreduce", "wrapper/torchmpi/allreduce.py",
           '"max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN',
           '"max": dist.ReduceOp.MIN, "min": dist.ReduceOp.MAX',
           ("tests/test_allreduce.py", "tests/test_blind_spots.py")),
    Mutant("allreduce", "wrapper/torchmpi/allreduce.py", "sum(r.busbw_gbs for r in results)",
           "sum(r.algbw_gbs for r in results)",
           ("tests/test_allreduce.py", "tests/test_blind_spots.py")),
    Mutant("allreduce", "wrapper/torchmpi/allreduce.py",
           "return algbw * 2 * (world_size - 1) / world_size",
           "return algbw * (world_size - 1) / world_size",
           ("tests/test_allreduce.py", "tests/test_blind_spots.py")),
    # --- (block B: modules, pairs, torches, spackenv: mutants added below this line) ---
    # --- doctor ------------------------------------------------------------------------
    Mutant("doctor", "wrapper/torchmpi/doctor/mpi.py",
           "    return Check(name, FAIL if gpu_count else WARN,",
           "    return Check(name, WARN,", ("tests/test_doctor_mpi.py", "tests/test_doctor.py")),
    Mutant("doctor", "wrapper/torchmpi/doctor/mpi.py",
           '    return any("libmpi_gtl_cuda" in text',
           '    return any("libmpi_gtl" in text and "cuda" not in text',
           ("tests/test_doctor_mpi.py", "tests/test_doctor.py")),
    # --- (block C: dist, doctor gpu/nccl/probe, allreduce CUDA sync: mutants added below this line) ---
    # --- lock and off-site ---------------------------------------------------------
    Mutant("lock/offsite", "wrapper/torchmpi/lock.py", "            elif node.name != wanted:",
           "            elif False:", ("tests/test_concretize_cli.py",)),
    Mutant("lock/offsite", "wrapper/torchmpi/offsite.py",
           '[str(executable), "-dumpfullversion", "-dumpversion"]',
           '[str(executable), "-dumpversion"]',
           ("tests/test_concretize_cli.py", "tests/test_blind_spots.py")),
    # --- the patcher (digest updated: only behaviour may kill it) -----------------------
    Mutant("patcher", PATCHER, '    return "MPIX_GPU_SUPPORT_CUDA" in body or "MPICH" in body '
           "or MARKER in source", '    return MARKER in source', PATCH),
    Mutant("patcher", PATCHER, '        elif word == "else" and depth == 1:',
           '        elif word == "else":', PATCH),
    Mutant("patcher", PATCHER, '    return std::string(enabled) == "1";',
           "    return true;", PATCH),
    Mutant("patcher", PATCHER, "    return supported != 0;", "    return true;", PATCH),
    Mutant("patcher", PATCHER, "    body = body[:at] + _BRANCH + body[at:]",
           "    body = body[:at] + body[at:]", PATCH),
    # --- packages (real Spack: --spack) --------------------------------------------------
    Mutant("packages", TORCH_PACKAGE,
           ') and not self.spec.satisfies("^[virtuals=mpi] openmpi-cuda")',
           ') and not self.spec.satisfies("^[virtuals=mpi] openmpi-cuda") '
           'and not self.spec.satisfies("^[virtuals=mpi] cray-mpich")', PKG, spack=True),
    Mutant("packages", TORCH_PACKAGE, '        env.set("MPI_HOME", self.spec["mpi"].prefix)',
           "        pass", PKG, spack=True),
    Mutant("packages", TORCH_PACKAGE, "        super().patch()\n", "", PKG, spack=True),
    Mutant("packages", "spack_repo/torchmpi/packages/py_mpi4py/package.py",
           '        if self.spec.satisfies("+cuda_aware_mpi"):',
           "        if False:", PKG, spack=True),
    # the plugin's name cut-off one release late: 1.13.0 registers "OFI" as well
    Mutant("packages", PLUGIN, 'if self.spec.satisfies("@:1.12") else "OFI"',
           'if self.spec.satisfies("@:1.13") else "OFI"', PKG, spack=True),
    # NCCL_NET set for every aws-ofi-nccl user with CUDA, not only on Slingshot
    Mutant("packages", PLUGIN, '        if self.spec.satisfies("+cxi"):',
           '        if self.spec.satisfies("+cuda"):', PKG, spack=True),
    # the cxi provider no longer required of libfabric
    Mutant("packages", PLUGIN, 'depends_on("libfabric@1.11: fabrics=cxi", when="+cxi")',
           'depends_on("libfabric@1.11:", when="+cxi")', PKG, spack=True),
    # GPUDirect copies without gdrcopy
    Mutant("packages", OPENMPI_CUDA, 'depends_on("ucx +cuda +gdrcopy")',
           'depends_on("ucx +cuda")', PKG, spack=True),
    # one of HPE's Slingshot settings changed
    Mutant("packages", NCCL_SS11, '("NCCL_NET_GDR_LEVEL", "PHB")',
           '("NCCL_NET_GDR_LEVEL", "SYS")', PKG, spack=True),
    # the shutdown-ordering range ends one release early: 1.17.1 let through
    Mutant("packages", NCCL_SS11, '"^aws-ofi-nccl@1.14:1.17.1"', '"^aws-ofi-nccl@1.14:1.17.0"',
           PKG, spack=True),
    # only the newest vouched plugin allowed with an NCCL (CSCS's 1.17.2 refused)
    Mutant("packages", NCCL_SS11, "f\"^aws-ofi-nccl@{','.join(_plugins)}\"",
           'f"^aws-ofi-nccl@{_plugins[0]}"', PKG, spack=True),
    # the GPU switch for every Cray MPICH build, CUDA-aware or not
    Mutant("packages", TORCH_MPI,
           'if self.spec.satisfies("+cuda_aware_mpi ^[virtuals=mpi] cray-mpich"):',
           'if self.spec.satisfies("^[virtuals=mpi] cray-mpich"):', PKG, spack=True),
    # mpi4py's GTL asked on the wrong provider (mpich), so not on Cray
    Mutant("packages", TORCH_MPI,
           'when="+cuda_aware_mpi ^[virtuals=mpi] cray-mpich")',
           'when="+cuda_aware_mpi ^[virtuals=mpi] mpich")', PKG, spack=True),
    # InfiniBand sites get NCCL without verbs
    Mutant("packages", TORCH_MPI, 'depends_on("nccl fabrics=verbs", when="fabric=ib")',
           'depends_on("nccl fabrics=auto", when="fabric=ib")', PKG, spack=True),
    # torch built against a NCCL other than the DAG's
    Mutant("packages", TORCH_PACKAGE,
           '            env.set("NCCL_ROOT", self.spec["nccl"].prefix)',
           "            pass", PKG, spack=True),
    # the GTL file name cut one character short ("liblmpi_gtl_cuda.so")
    Mutant("packages", TORCH_PACKAGE, '"lib" + gtl["ldlibs"][0][2:] + ".so"',
           '"lib" + gtl["ldlibs"][0][1:] + ".so"', PKG, spack=True),
    # the unverified-release gap ends one release early: 2.9.0 let through
    Mutant("packages", TORCH_PACKAGE, '        "@2.7.0:2.9.0",', '        "@2.7.0:2.8",',
           PKG, spack=True),
)

#: Survivors left on purpose: mutant name -> why (docs/testing.md repeats these).
SURVIVORS_OK: dict[str, str] = {
    "wrapper/torchmpi/runtime.py: 'out.set.setdefault(GPU_SWITCH, \"1\")'":
        "equivalent: validation admits a stated switch only when it equals the implied"
        " value, so setting 1 over a stated 1 changes nothing (not even the order)",
}


def _copy_checkout(dest: Path) -> None:
    """The working tree as git sees it (tracked and untracked, not ignored) at ``dest``."""
    names = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                           capture_output=True, check=True).stdout.split(b"\0")
    for raw in filter(None, names):
        rel = raw.decode()
        src = ROOT / rel
        if not src.is_file():
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / rel)


def _apply(tree: Path, m: Mutant) -> None:
    path = tree / m.file
    text = path.read_text()
    if text.count(m.old) != 1:
        raise SystemExit(f"mutate: {m.name}: the line occurs {text.count(m.old)} times "
                         f"in {m.file} (the code moved on: update scripts/mutate.py)")
    path.write_text(text.replace(m.old, m.new))
    if m.file == PATCHER:  # keep the digest check from being what kills it
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        pkg = tree / TORCH_PACKAGE
        pkg.write_text(re.sub(r'^CUDA_AWARE_MPI_SHA256 = "[0-9a-f]{64}"$',
                              f'CUDA_AWARE_MPI_SHA256 = "{digest}"', pkg.read_text(),
                              flags=re.MULTILINE))


def mutant_env(tree: Path, outer: dict[str, str]) -> dict[str, str]:
    """The environment a mutant's tests run under, in the scratch copy ``tree``.

    ``TORCHMPI_ROOT`` must name the copy: ``setup-env.sh`` (which ``make mutate``
    sources) exports it as the checkout, ``paths.root()`` prefers it, and the
    Spack fixture builds its repos.yaml from it -- inherited, every package
    mutant's tests read the unmutated checkout (tests/test_mutate.py).
    """
    return dict(outer, PYTHONPATH=str(tree / "wrapper"), PYTHONDONTWRITEBYTECODE="1",
                TORCHMPI_ROOT=str(tree))


def _run(m: Mutant) -> tuple[Mutant, str, float]:
    """'killed', 'survived' or 'error: ...' for one mutant, in a fresh copy.

    Only a package mutant runs its files' real-Spack tests: ``--spack`` selects
    those mutants, it does not add minutes of solves to the wrapper's."""
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="torchmpi-mutant-") as tmp:
        tree = Path(tmp)
        _copy_checkout(tree)
        _apply(tree, m)
        marks = [] if m.spack else ["-m", "not spack and not concretize"]
        env = mutant_env(tree, dict(os.environ))
        proc = subprocess.run([sys.executable, "-m", "pytest", *m.tests, "-x", "-q",
                               "-p", "no:cacheprovider", *marks], cwd=tree, env=env,
                              capture_output=True, text=True, check=False)
    # pytest: 0 all passed, 1 a test failed, 5 nothing collected, others: an error.
    verdict = {0: "survived", 1: "killed"}.get(proc.returncode,
                                               f"error: pytest exit {proc.returncode}")
    return m, verdict, time.monotonic() - start


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spack", action="store_true",
                    help="also run the package mutants with the real-Spack tests (slow)")
    ap.add_argument("--jobs", type=int, default=2, help="mutants run at once (default 2)")
    ap.add_argument("--only", help="only this area")
    ap.add_argument("--match", action="append", default=[], metavar="TEXT",
                    help="only mutants whose name (file: line) contains TEXT (repeatable)")
    ap.add_argument("--list", action="store_true", help="list the mutants and check they apply")
    args = ap.parse_args(argv)
    chosen = [m for m in MUTANTS if args.only in (None, m.area)
              and (not args.match or any(t in m.name for t in args.match))]
    for m in chosen:  # every mutant's line must still be in the code
        if (ROOT / m.file).read_text().count(m.old) != 1:
            raise SystemExit(f"mutate: {m.name}: line not found once; update scripts/mutate.py")
    if args.list:
        for m in chosen:
            print(f"{m.area:12} {m.name}  -> {', '.join(m.tests)}")
        return 0
    measured = [m for m in chosen if args.spack or not m.spack]
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(_run, measured))
    areas: dict[str, list[str]] = {}
    bad = 0
    for m, verdict, seconds in results:
        equivalent = verdict == "survived" and m.name in SURVIVORS_OK
        areas.setdefault(m.area, []).append("equivalent" if equivalent else verdict)
        flag = verdict
        if verdict != "killed":
            flag += f" (left on purpose: {SURVIVORS_OK[m.name]})" if m.name in SURVIVORS_OK else ""
            bad += m.name not in SURVIVORS_OK
        print(f"{flag:10} {seconds:6.0f} s  {m.area:12} {m.name}")
    print("\n" + score_table(areas, [m.area for m in chosen]))
    return 1 if bad else 0


def score_table(areas: dict[str, list[str]], order: list[str]) -> str:
    """Killed out of the non-equivalent mutants measured, per area.

    The usual mutation score: an equivalent mutant (listed in SURVIVORS_OK with
    the reason no behaviour can differ) has no bug for a test to find, so it is
    counted apart, neither killed nor a survivor.
    """
    lines = [f"{'area':22} killed / measured (equivalent)  score"]
    for area in dict.fromkeys(order):
        got = areas.get(area, [])
        if not got:
            lines.append(f"{area:22} not measured (real-Spack mutants: "
                         "make mutate MUTATE_ARGS=--spack)")
            continue
        killed, equivalent = got.count("killed"), got.count("equivalent")
        counted = len(got) - equivalent
        score = f"{100 * killed // counted} %" if counted else "-"
        lines.append(f"{area:22} {killed} / {counted}"
                     + (f" ({equivalent} equivalent)" if equivalent else "")
                     + f"  {score}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
