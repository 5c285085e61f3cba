"""torchmpi's patch of PyTorch's MPI backend, compiled into the real file and run.

Upstream's ``torch/csrc/distributed/c10d/ProcessGroupMPI.cpp`` of v2.6.0 (from
Debian's source pool) gets torchmpi's patch (the patcher py-torch's
``patch()`` runs), is compiled with ``-DUSE_C10D_MPI`` against the torch 2.6.0
wheel's own headers (PyPI) together with a small driver
(``tests/process_group_mpi_driver.cpp``), linked to that wheel's
``libtorch_cpu``/``libc10``, and run under ``mpirun -n 2``: once with Debian's
Open MPI, once with Debian's MPICH 4.0.2.  ``make setup``
(``scripts/get-reference.sh``) fetches and checks those inputs; without them
these tests fail, they never skip.

What runs, per build:

* ``openmpi``, ``mpich``: v2.6.0 + torchmpi's patch.  all_reduce, broadcast,
  all_gather, gather and scatter of CPU tensors give the right values on both
  ranks; a CUDA tensor (a stand-in, see the driver's ``cuda_tensor()``: no GPU
  here) meets PyTorch's own check -- refused with "CUDA tensor detected and the
  MPI used doesn't have CUDA-aware MPI support" on Open MPI (Debian's is not
  CUDA-aware) and on MPICH unless ``MPICH_GPU_SUPPORT_ENABLED=1``; with ``0``,
  or unset, MPICH 4's own ``MPIX_GPU_query_support`` (Debian's MPICH has no
  CUDA) says no.
* ``mpich-no-gpu-macro``: v2.6.0 with upstream's MPICH branch of PR #178323
  added (the ``main`` shape, written here from the facts: see
  :data:`UPSTREAM_MPICH_BRANCH`) + torchmpi's patch, compiled with MPICH headers
  whose ``MPIX_GPU_SUPPORT_CUDA`` is removed (a Cray MPICH without the macro):
  upstream's branch compiles out, torchmpi's fallback answers.

Every build also carries the stream order (``order_streams``), run by the
driver's ``streams`` mode on a stand-in device whose streams run their
kernels only when waited for (the driver's ``lazy`` namespace: registered as
c10's device guard and ATen's kernels for the CUDA device type): with the
waits, device all_reduce, broadcast, all_gather, gather and scatter give the
right values; with the stand-in told to ignore a kind of wait, the
collectives that depend on it give wrong ones.  The driver's ``future`` mode
does the same for ``Work::getFuture()``: a device copy chained with ``then()``
is read right after the child future's ``wait()`` only because the patch gives
the work's future its outputs' devices.  What a CPU-only host cannot
prove: that a real GPU runtime (CUDA, HIP) honours these c10 calls as the
stand-in does -- docs/users.md says so.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from support import patcher
from torchmpi import paths

DRIVER = Path(__file__).with_name("process_group_mpi_driver.cpp")
REFERENCE = paths.cache() / "reference" / "torch-2.6.0"
NOT_AWARE = "CUDA tensor detected and the MPI used doesn't have CUDA-aware MPI support"

#: Upstream's MPICH branch as pytorch/pytorch PR #178323 adds it to
#: ``cudaAwareMpiCheck()`` between the Open MPI branch and the final ``#else``:
#: compiled where the MPI headers define ``MPIX_GPU_SUPPORT_CUDA``, true iff
#: ``MPICH_GPU_SUPPORT_ENABLED`` is ``"1"`` (the PR's description; the order of
#: branches as in tests/fixtures/process_group_mpi/main-pr178323.cpp).  Written
#: here, not copied.
UPSTREAM_MPICH_BRANCH = """\
#elif defined(MPIX_GPU_SUPPORT_CUDA)
  return std::getenv("MPICH_GPU_SUPPORT_ENABLED") != nullptr &&
      std::string(std::getenv("MPICH_GPU_SUPPORT_ENABLED")) == "1";
"""

#: An ``mpi.h`` in front of MPICH's that removes ``MPIX_GPU_SUPPORT_CUDA``:
#: MPICH's headers as a Cray MPICH without that macro would have them.
NO_GPU_MACRO_MPI_H = """\
#include_next <mpi.h>
#undef MPIX_GPU_SUPPORT_CUDA
"""

MPI = {
    "openmpi": ("mpicxx.openmpi", "mpirun.openmpi"),
    "mpich": ("mpicxx.mpich", "mpirun.mpich"),
}


patch = patcher.load()


def reference() -> Path:
    """The fetched v2.6.0 reference; a test failure (never a skip) without it."""
    if not (REFERENCE / ".complete").is_file():
        pytest.fail(f"{REFERENCE} is missing or incomplete: run `make setup` "
                    "(scripts/get-reference.sh fetches torch 2.6.0's source and wheel)")
    return REFERENCE


def upstream_source() -> str:
    return (reference() / "src" / "ProcessGroupMPI.cpp").read_text()


def with_upstream_mpich_branch(source: str) -> str:
    """``source`` with PR #178323's branch before the outer ``#else`` of the check."""
    start = source.index("bool cudaAwareMpiCheck() {")
    at = source.index("#else // !defined(MPIX_CUDA_AWARE_SUPPORT)", start)
    return source[:at] + UPSTREAM_MPICH_BRANCH + source[at:]


def _tool(name: str) -> str:
    found = shutil.which(name)
    if not found:
        pytest.fail(f"{name} not found: run `make setup` (scripts/check-system.sh installs "
                    "libopenmpi-dev and libmpich-dev)")
    return found


def _compile_command(ref: Path, family: str, source: Path, exe: Path,
                     include: list[str]) -> list[str]:
    lib = ref / "torch" / "lib"
    return [
        _tool(MPI[family][0]), "-std=c++17", "-O0", "-w", "-DUSE_C10D_MPI",
        "-D_GLIBCXX_USE_CXX11_ABI=0",  # the PyPI wheel's ABI
        f'-DTORCHMPI_PG_SOURCE="{source}"', *include,
        "-I", str(ref / "torch" / "include"),
        "-I", str(ref / "torch" / "include" / "torch" / "csrc" / "api" / "include"),
        str(DRIVER), "-o", str(exe), "-L", str(lib), "-ltorch_cpu", "-lc10",
        # DT_RPATH (not RUNPATH) so that libtorch_cpu's own NEEDED
        # libcudart.so.12/libcupti.so.12 are found without LD_LIBRARY_PATH.
        "-Wl,--disable-new-dtags", f"-Wl,-rpath,{lib}:{ref / 'nvidia' / 'lib'}",
        f"-Wl,-rpath-link,{ref / 'nvidia' / 'lib'}",
    ]


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The three drivers, compiled side by side (one g++ each, ~15 s of CPU
    and 35-50 s of wall time each on this shared 2-core machine)."""
    ref = reference()
    out = tmp_path_factory.mktemp("process_group_mpi")
    shim = out / "no-gpu-macro"
    shim.mkdir()
    (shim / "mpi.h").write_text(NO_GPU_MACRO_MPI_H)
    upstream = upstream_source()
    sources = {
        # What py-torch's patch() applies: the stream order on every build,
        # the MPICH branch on the MPICH family only.
        "openmpi": ("openmpi", patch.patch_all(upstream, mpich=False), []),
        "mpich": ("mpich", patch.patch_all(upstream, mpich=True), []),
        "mpich-no-gpu-macro": ("mpich",
                               patch.patch_all(with_upstream_mpich_branch(upstream), mpich=True),
                               ["-I", str(shim)]),
    }
    jobs = {}
    started = time.monotonic()
    for name, (family, text, include) in sources.items():
        source = out / f"{name}.cpp"
        source.write_text(text)
        exe = out / name
        log = (out / f"{name}.log").open("w")
        jobs[name] = (exe, subprocess.Popen(_compile_command(ref, family, source, exe, include),
                                            stdout=log, stderr=subprocess.STDOUT), log)
    for name, (exe, proc, log) in jobs.items():
        proc.wait(timeout=900)
        log.close()
        if proc.returncode != 0:
            pytest.fail(f"compiling {name} failed:\n{(out / f'{name}.log').read_text()[-4000:]}")
    print(f"process_group_mpi: 3 builds in {time.monotonic() - started:.0f} s")
    return {name: exe for name, (exe, _, _) in jobs.items()}


def run(family: str, exe: Path, mode: str, **env: str) -> list[str]:
    """``mpirun -n 2 <driver> <mode>``: its output lines, sorted; fails on a non-zero exit."""
    full = {k: v for k, v in os.environ.items()
            if not k.startswith(("OMPI_", "PMI_", "PMIX_", "HYDRA_", "MPICH_"))}
    full.update(env)
    argv = [_tool(MPI[family][1]), "-n", "2"]
    if family == "openmpi":
        argv += ["--oversubscribe"]
        full.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    done = subprocess.run([*argv, str(exe), mode], env=full, capture_output=True, text=True,
                          timeout=180, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return sorted(line for line in done.stdout.splitlines() if line.startswith("rank "))


def _cuda(lines: list[str]) -> set[str]:
    """Both ranks' verdict on a CUDA tensor: {"rejected: <msg>"} or {"accepted"}."""
    verdicts = set()
    for line in lines:
        _, _, rest = line.partition(": cuda ")
        if rest and not rest.startswith("all_reduce"):
            verdicts.add(rest)
    assert len([line for line in lines if ": cuda " in line and "all_reduce" not in line]) == 2
    return verdicts


def test_reference_is_upstream_2_6_0() -> None:
    """The fetched text is v2.6.0's and has the shape the patch expects."""
    ref = reference()
    assert (ref / "src" / "version.txt").read_text().strip() == "2.6.0a0"
    source = upstream_source()
    assert not patch.is_patched(source) and not patch.has_upstream_mpich_branch(source)
    assert f'"{NOT_AWARE}"' in source.replace('"\n        "', "")


@pytest.mark.parametrize("name", ["openmpi", "mpich", "mpich-no-gpu-macro"])
def test_collectives_on_cpu_tensors(builds: dict[str, Path], name: str) -> None:
    family = "openmpi" if name == "openmpi" else "mpich"
    lines = run(family, builds[name], "collectives")
    ops = ("all_reduce", "broadcast", "all_gather", "gather", "scatter")
    assert lines == sorted(f"rank {r}: {op} ok" for r in (0, 1) for op in ops), lines


def test_open_mpi_without_cuda_refuses_cuda_tensors(builds: dict[str, Path]) -> None:
    """The seeds' failure, from PyTorch's own code: Debian's Open MPI is not CUDA-aware
    (mpi-ext.h: MPIX_CUDA_AWARE_SUPPORT 0), and the patch leaves that path alone --
    even MPICH's switch does not change the answer there."""
    assert _cuda(run("openmpi", builds["openmpi"], "cuda")) == {f"rejected: {NOT_AWARE}"}
    assert _cuda(run("openmpi", builds["openmpi"], "cuda", MPICH_GPU_SUPPORT_ENABLED="1")) == {
        f"rejected: {NOT_AWARE}"}


@pytest.mark.parametrize("name", ["mpich", "mpich-no-gpu-macro"])
def test_mpich_follows_the_cray_switch(builds: dict[str, Path], name: str) -> None:
    """MPICH_GPU_SUPPORT_ENABLED=1: accepted; 0: refused with PyTorch's message."""
    accepted = run("mpich", builds[name], "cuda", MPICH_GPU_SUPPORT_ENABLED="1")
    assert _cuda(accepted) == {"accepted"}, accepted
    refused = run("mpich", builds[name], "cuda", MPICH_GPU_SUPPORT_ENABLED="0")
    assert _cuda(refused) == {f"rejected: {NOT_AWARE}"}, refused


def test_mpich_unset_asks_the_library(builds: dict[str, Path]) -> None:
    """Switch unset, MPIX_GPU_query_support present (MPICH 4.0.2): the library's
    answer -- Debian's MPICH is built without CUDA, so no.  (That the query is
    really asked, and a yes is followed, is tests/test_cuda_aware_patch.py's
    stub MPICH; no CUDA-aware MPICH can be had here.)"""
    assert _cuda(run("mpich", builds["mpich"], "cuda")) == {f"rejected: {NOT_AWARE}"}


def test_mpich_without_gpu_macro_unset_is_not_aware(builds: dict[str, Path]) -> None:
    """Switch unset, no MPIX_GPU_SUPPORT_CUDA / query: torchmpi's fallback says no."""
    lines = run("mpich", builds["mpich-no-gpu-macro"], "cuda")
    assert _cuda(lines) == {f"rejected: {NOT_AWARE}"}


def test_headers_select_the_branch_each_build_compiled(tmp_path: Path) -> None:
    """The patch-time check (``check_headers``) with the real headers: Open MPI's
    own branch; on MPICH 4.0.2 (which defines MPIX_GPU_SUPPORT_CUDA) upstream's
    branch where the source has it, torchmpi's otherwise; without the macro,
    torchmpi's fallback -- and unpatched v2.6.0 on MPICH selects no branch,
    which the check refuses."""
    (tmp_path / "mpi.h").write_text(NO_GPU_MACRO_MPI_H)

    def pre(family: str, *extra: str) -> list[str]:
        return [_tool(MPI[family][0]), "-E", "-P", "-x", "c++", *extra, "-"]

    upstream = upstream_source()
    pr = with_upstream_mpich_branch(upstream)
    patched = patch.patch_source(upstream)
    assert patch.check_headers(patched, pre("openmpi"), False) == "open-mpi"
    assert patch.check_headers(patched, pre("mpich"), True) == "torchmpi-mpich"
    assert patch.check_headers(patch.patch_source(pr), pre("mpich"), True) == "upstream-mpich"
    no_macro = pre("mpich", "-I", str(tmp_path))
    assert patch.check_headers(patch.patch_source(pr), no_macro, True) == "torchmpi-mpich"
    # Without torchmpi's fallback, upstream's branch alone leaves this MPICH with none.
    assert patch.selected_branch(pr, no_macro) == "none"
    with pytest.raises(patch.PatchError, match="'none' branch"):
        patch.check_headers(upstream, pre("mpich"), True)


OPS = ("all_reduce", "broadcast", "all_gather[0]", "all_gather[1]", "scatter")


def _verdicts(lines: list[str], marker: str = ": device ") -> dict[str, str]:
    """``{"R <op>": "ok" | "WRONG" | <error>}`` from the driver's lines that carry
    ``marker`` (the streams mode's ``: device ``, the future mode's ``: device future ``)."""
    found = {}
    for line in lines:
        rank, _, rest = line.partition(marker)
        if rest:
            op, _, verdict = rest.partition(" ")
            found[f"{rank.split()[1]} {op}"] = verdict.split(":")[0]
    return found


def _want(verdicts: dict[str, str]) -> dict[str, str]:
    """Every op on both ranks (gather's outputs on the root only) -> its verdict."""
    want = {f"{r} {op}": verdicts.get(op, "ok") for r in (0, 1) for op in OPS}
    want.update({f"0 gather[{i}]": verdicts.get("gather", "ok") for i in (0, 1)})
    return want


def test_stream_order_reaches_every_mpi_call() -> None:
    """On v2.6.0's text: a wait after each of the 12 device guards that precede an
    MPI call (collectives, all_to_all, send/recv), the enqueue hook, idempotent."""
    upstream = upstream_source()
    ordered = patch.order_streams(upstream)
    guards = len(re.findall(r"c10::DeviceGuard \w+\(.+\.device\(\)\);\n *torchmpiWaitStream",
                            ordered))
    assert guards == 12 == upstream.count("c10::DeviceGuard guard")
    assert ordered.count("torchmpiOrderStreams(entry);") == 1
    # The work's future gets its outputs' devices before the work is queued.
    assert ordered.count("work->future_ = torchmpiDeviceFuture(") == 1
    assert ordered.index("torchmpiDeviceFuture(work->result()") < ordered.index(
        "queue_.emplace_back(std::move(entry), work);")
    with pytest.raises(patch.PatchError, match="pgMutex_ lock"):
        patch.order_streams(upstream.replace(
            "std::unique_lock<std::mutex> lock(pgMutex_);\n  queue_.emplace_back",
            "std::lock_guard<std::mutex> lock(pgMutex_);\n  queue_.emplace_back"))
    assert patch.order_streams(ordered) == ordered
    once = patch.patch_all(upstream, True)
    assert patch.patch_all(once, True) == once
    with pytest.raises(patch.PatchError, match="enqueue"):
        patch.order_streams(upstream.replace("ProcessGroupMPI::enqueue(", "ProcessGroupMPI::q("))


@pytest.mark.parametrize("name", ["mpich", "mpich-no-gpu-macro"])
def test_stream_order_on_a_stand_in_device(builds: dict[str, Path], name: str) -> None:
    """Device tensors whose inputs are still being written on the caller's stream
    (and whose outputs the worker copies on its own): every collective right;
    the waits are reached (5 events recorded by the callers, 5 waited for by the
    worker, 10 stream drains, and one recorded by each work's future that has
    device outputs as it completes: 5 on the root, 4 elsewhere, where gather has
    none); with CPU tensors the stand-in is never called."""
    lines = run("mpich", builds[name], "streams", MPICH_GPU_SUPPORT_ENABLED="1")
    assert _verdicts(lines) == _want({}), lines
    assert [line for line in lines if "cpu stand-in calls" in line] == [
        f"rank {r}: cpu stand-in calls 0" for r in (0, 1)], lines
    assert [line for line in lines if "waits:" in line] == [
        f"rank {r}: waits: {10 - r} recorded, 5 on events, 10 on streams" for r in (0, 1)], lines
    ops = ("all_reduce", "broadcast", "all_gather", "gather", "scatter")
    assert {f"rank {r}: {op} ok" for r in (0, 1) for op in ops} <= set(lines)


@pytest.mark.parametrize("ignored,verdicts", [
    # The caller's stream not waited for: MPI reads inputs still being written.
    ("event", {op: "WRONG" for op in (*OPS, "gather")}),
    # The worker's stream not drained: scatter sends its flat buffer before the
    # copies into it ran; all_gather/gather complete before the copies out ran.
    ("stream", {"all_gather[0]": "WRONG", "all_gather[1]": "WRONG", "gather": "WRONG",
                "scatter": "WRONG"}),
])
def test_each_wait_is_what_orders(builds: dict[str, Path], ignored: str,
                                  verdicts: dict[str, str]) -> None:
    """The control: the stand-in ignoring one kind of wait (what upstream's
    backend, which makes none, amounts to) gives wrong values exactly where
    that wait matters -- so the right values above come from the patch."""
    lines = run("mpich", builds["mpich"], "streams", MPICH_GPU_SUPPORT_ENABLED="1",
                TORCHMPI_LAZY_IGNORE=ignored)
    assert _verdicts(lines) == _want(verdicts), lines


def test_open_mpi_build_carries_the_stream_order(builds: dict[str, Path]) -> None:
    """Open MPI's build compiles the same waits (no MPICH branch): CPU collectives
    pass with the stand-in device registered and never call it; device tensors
    meet PyTorch's check first (Debian's Open MPI is not CUDA-aware)."""
    lines = run("openmpi", builds["openmpi"], "streams")
    assert [line for line in lines if "cpu stand-in calls" in line] == [
        f"rank {r}: cpu stand-in calls 0" for r in (0, 1)], lines
    assert {line.partition(": ")[2] for line in lines if "device" in line} == {
        f"device rejected: {NOT_AWARE}"}, lines


FUTURE_OPS = ("all_gather[0]", "all_gather[1]", "then")


@pytest.mark.parametrize("ignored,wrong", [("", ()), ("event", ("0 then", "1 then"))])
def test_device_future_orders_what_is_chained_on_it(builds: dict[str, Path], ignored: str,
                                                    wrong: tuple[str, ...]) -> None:
    """``Work::getFuture()`` of a device collective (what DDP's comm hooks chain
    on): its value is the outputs, complete; and a callback chained with
    ``then()`` while the work is still in MPI runs its device copy on the worker
    thread, which the child future's ``wait()`` must order before the caller's
    stream reads the result.  Upstream builds that future without devices
    (v2.6.0 ProcessGroupMPI.hpp, ``WorkMPI``), so c10's Future records no event
    and its wait orders nothing (ivalue_inl.h, ``markCompleted``: "a silent
    synchronization/correctness issue"); the patch gives it the outputs' devices.
    Upstream's future failed this on both ranks (each callback on its worker's
    stream, which nothing waits for).  The control: the stand-in ignoring event
    waits, each chained copy (on a stream of the pool, as c10's Future runs a
    callback of a device-aware future) is read unrun."""
    env = {"TORCHMPI_LAZY_IGNORE": ignored} if ignored else {}
    lines = run("mpich", builds["mpich"], "future", MPICH_GPU_SUPPORT_ENABLED="1", **env)
    got = _verdicts(lines, ": device future ")
    want = {f"{r} {what}": "ok" for r in (0, 1) for what in FUTURE_OPS}
    want.update({key: "WRONG" for key in wrong})
    assert got == want, lines
