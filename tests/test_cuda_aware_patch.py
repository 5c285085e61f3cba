"""The py-torch override's MPICH/Cray MPICH CUDA-awareness patch.

Runs the patch logic of ``spack_repo/torchmpi/packages/py_torch`` on fixture
sources shaped like PyTorch 2.4-era, 2.9-era and already-fixed
``ProcessGroupMPI.cpp``, then compiles the result against stub MPI headers and
runs it: the patched check must say "CUDA-aware" exactly when the MPI is.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures" / "process_group_mpi"
STUB = FIXTURES / "stub"


def _load_patch_module():
    path = ROOT / "spack_repo/torchmpi/packages/py_torch/cuda_aware_mpi.py"
    spec = importlib.util.spec_from_file_location("torchmpi_cuda_aware_mpi", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


patch = _load_patch_module()


def _function(source: str) -> str:
    start = source.index("bool cudaAwareMpiCheck() {")
    return source[start : source.index("\n}\n", start)]


@pytest.mark.parametrize("era", ["v2.4", "v2.9"])
def test_patch_adds_honest_mpich_branch(era: str) -> None:
    source = (FIXTURES / f"{era}.cpp").read_text()
    patched = patch.patch_source(source)
    body = _function(patched)
    # The MPICH branch sits between the Open MPI branch and the final #else.
    assert body.index("#if defined(MPIX_CUDA_AWARE_SUPPORT)") < body.index(
        "#elif defined(MPICH_VERSION)"
    )
    assert body.rindex("#elif defined(MPICH_VERSION)") < body.rindex("#else")
    assert "return torchmpiMpichCudaAware();" in body
    # Everything else still says "not CUDA-aware": no blind `return true`.
    assert body.rstrip().endswith("#endif // MPIX_CUDA_AWARE_SUPPORT") or body.rstrip().endswith(
        "#endif"
    )
    tail = body[body.rindex("#else") :]
    assert "return false;" in tail and "return true;" not in tail
    # The helper asks MPICH_GPU_SUPPORT_ENABLED, then the library.
    helper = patched[patched.index("bool torchmpiMpichCudaAware()") :]
    assert 'std::getenv("MPICH_GPU_SUPPORT_ENABLED")' in helper
    assert "MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA" in helper
    assert patched.index("bool torchmpiMpichCudaAware()") < patched.index(
        "bool cudaAwareMpiCheck()"
    )
    assert "#include <cstdlib>" in patched
    # The Open MPI branch is untouched.
    assert _function(source).split("#else")[0] in body


@pytest.mark.parametrize("era", ["v2.4", "v2.9"])
def test_patch_is_idempotent(era: str) -> None:
    once = patch.patch_source((FIXTURES / f"{era}.cpp").read_text())
    assert patch.has_mpich_branch(once)
    assert patch.patch_source(once) == once


def test_source_with_mpich_branch_is_unchanged(tmp_path: Path) -> None:
    source = (FIXTURES / "fixed.cpp").read_text()
    assert patch.has_mpich_branch(source)
    target = tmp_path / "ProcessGroupMPI.cpp"
    target.write_text(source)
    assert patch.patch_file(str(target)) is False
    assert target.read_text() == source


def test_unexpected_shape_is_refused() -> None:
    with pytest.raises(patch.PatchError):
        patch.patch_source("int main() { return 0; }\n")
    odd = "#include <x>\nbool cudaAwareMpiCheck() {\n  return false;\n}\n"
    with pytest.raises(patch.PatchError, match="#if/#else"):
        patch.patch_source(odd)


# --- compile and run the patched check against stub MPI headers -------------

MAIN = """
#include <cstdio>
int main() {
  at::Tensor cuda_tensor{true};
  try {
    c10d::checkSingleTensorHelper(cuda_tensor);
    std::puts("accepted");
  } catch (const std::exception&) {
    std::puts("rejected");
  }
  return 0;
}
"""


def _build(tmp_path: Path, source: str, mpi: str, *defines: str) -> Path:
    cxx = shutil.which("g++") or shutil.which("c++")
    if not cxx:
        pytest.skip("no C++ compiler")
    unit = tmp_path / "unit.cpp"
    unit.write_text(source + MAIN)
    exe = tmp_path / f"check-{mpi}-{len(defines)}"
    subprocess.run(
        [cxx, "-std=c++17", "-I", str(STUB / mpi), "-I", str(STUB), *defines, str(unit),
         "-o", str(exe)],
        check=True,
    )
    return exe


def _run(exe: Path, **env: str) -> str:
    full = {k: v for k, v in os.environ.items() if k != "MPICH_GPU_SUPPORT_ENABLED"}
    full.update(env)
    return subprocess.run([str(exe)], env=full, capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.mark.parametrize("era", ["v2.4", "v2.9"])
def test_unpatched_source_rejects_cuda_tensors_on_mpich(tmp_path: Path, era: str) -> None:
    """The bug being fixed: MPICH is never CUDA-aware to stock PyTorch."""
    exe = _build(tmp_path, (FIXTURES / f"{era}.cpp").read_text(), "mpich")
    assert _run(exe, MPICH_GPU_SUPPORT_ENABLED="1") == "rejected"


@pytest.mark.parametrize("era", ["v2.4", "v2.9"])
def test_patched_check_follows_cray_switch(tmp_path: Path, era: str) -> None:
    exe = _build(tmp_path, patch.patch_source((FIXTURES / f"{era}.cpp").read_text()), "mpich")
    assert _run(exe, MPICH_GPU_SUPPORT_ENABLED="1") == "accepted"
    assert _run(exe, MPICH_GPU_SUPPORT_ENABLED="0") == "rejected"
    assert _run(exe) == "rejected"  # plain MPICH without the query API: not CUDA-aware


@pytest.mark.parametrize("era", ["v2.4", "v2.9"])
def test_patched_check_asks_mpich4_library(tmp_path: Path, era: str) -> None:
    source = patch.patch_source((FIXTURES / f"{era}.cpp").read_text())
    exe = _build(tmp_path, source, "mpich", "-DSTUB_MPIX_GPU")
    assert _run(exe, STUB_GPU_QUERY="1") == "accepted"
    assert _run(exe, STUB_GPU_QUERY="0") == "rejected"
    # The Cray switch, when set, is the answer even if the library says yes.
    assert _run(exe, STUB_GPU_QUERY="1", MPICH_GPU_SUPPORT_ENABLED="0") == "rejected"


@pytest.mark.parametrize("era", ["v2.4", "v2.9"])
def test_patched_check_keeps_open_mpi_path(tmp_path: Path, era: str) -> None:
    exe = _build(tmp_path, patch.patch_source((FIXTURES / f"{era}.cpp").read_text()), "openmpi")
    assert _run(exe) == "accepted"
