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
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from torchmpi import paths

ROOT = Path(__file__).resolve().parents[1]
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


def _patcher():
    path = ROOT / "spack_repo/torchmpi/packages/py_torch/cuda_aware_mpi.py"
    spec = importlib.util.spec_from_file_location("torchmpi_cuda_aware_mpi_build", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


patch = _patcher()


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
        "openmpi": ("openmpi", patch.patch_source(upstream), []),
        "mpich": ("mpich", patch.patch_source(upstream), []),
        "mpich-no-gpu-macro": ("mpich", patch.patch_source(with_upstream_mpich_branch(upstream)),
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
