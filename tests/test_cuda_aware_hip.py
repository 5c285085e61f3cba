"""The MPICH CUDA-awareness patch in a ROCm build: PyTorch's own hipify leaves it as written.

A ROCm build of PyTorch hipifies its sources in place before compiling:
builtin ``py-torch +rocm`` runs ``tools/amd_build/build_amd.py`` before
install, after ``patch()`` (spack-packages v2026.06.0
``repos/spack_repo/builtin/packages/py_torch/package.py``, ``build_amd``), and
that script's ``includes`` take ``torch/*``, so ``ProcessGroupMPI.cpp`` is in
scope.  ProcessGroupMPI asks ``cudaAwareMpiCheck()`` for every tensor that
``is_cuda()``, and a HIP tensor is one ("PyTorch for HIP intentionally reuses
the existing torch.cuda interfaces": ``device(type='cuda')``, PyTorch 2.6.0
``docs/source/notes/hip.rst``, "HIP Interfaces Reuse the CUDA Interfaces").
So the patched check decides for HIP tensors too, through its MPICH branch,
which reads ``MPICH_GPU_SUPPORT_ENABLED`` -- the switch Cray documents for
GTL for HSA as well (olcf/olcf-user-docs systems/frontier_user_guide.rst,
``MPICH_GPU_SUPPORT_ENABLED``).

Here the real hipify of PyTorch 2.6.0 (``build_amd.py`` and
``torch/utils/hipify`` from the source tarball ``make setup`` fetched, run
unchanged in a scratch tree) runs over the patched ``ProcessGroupMPI.cpp``: it
must visit the file and leave it byte for byte, so the branch the provider's
headers select (tests/test_cuda_aware_patch.py) is the one a ROCm build
compiles.  A patch that used a CUDA name hipify rewrites would fail here.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile

import pytest
from support import ROOT, patcher
from torchmpi import paths

REFERENCE = paths.cache() / "reference" / "torch-2.6.0"
TARBALL = REFERENCE / "downloads" / "pytorch_2.6.0+dfsg.orig.tar.xz"
FETCHED = REFERENCE / "src" / "ProcessGroupMPI.cpp"
TOP = "pytorch-v2.6.0"
TARGET = "torch/csrc/distributed/c10d/ProcessGroupMPI.cpp"
#: The files build_amd.py hipifies besides the includes; it opens them, so they must exist.
EXTRA_FILES = ("torch/_inductor/codegen/cpp_wrapper_cpu.py",
               "torch/_inductor/codegen/cpp_wrapper_gpu.py", "torch/_inductor/codegen/wrapper.py")
STUB = ROOT / "tests" / "fixtures" / "process_group_mpi" / "stub"


def _patcher():
    return patcher.load()


@pytest.fixture(scope="module")
def hipified(tmp_path_factory) -> dict:
    """A scratch tree with PyTorch 2.6.0's hipify tooling and the patched
    ProcessGroupMPI.cpp; build_amd.py run in it as builtin's build_amd runs it."""
    for path in (TARBALL, FETCHED):
        if not path.is_file():
            pytest.fail(f"{path} missing: run `make setup` (scripts/get-reference.sh)")
    tree = tmp_path_factory.mktemp("hipify")
    with tarfile.open(TARBALL) as tar:
        members = [m for m in tar.getmembers()
                   if m.name == f"{TOP}/tools/amd_build/build_amd.py"
                   or m.name.startswith(f"{TOP}/torch/utils/hipify/")]
        tar.extractall(tree, members=members, filter="data")
    project = tree / TOP
    for extra in EXTRA_FILES:
        (project / extra).parent.mkdir(parents=True, exist_ok=True)
        (project / extra).touch()
    # What patch() writes for cray-mpich: the stream order and the MPICH branch.
    patched = _patcher().patch_all(FETCHED.read_text(encoding="utf-8"), mpich=True)
    (project / TARGET).parent.mkdir(parents=True)
    (project / TARGET).write_text(patched, encoding="utf-8")
    proc = subprocess.run([sys.executable, "tools/amd_build/build_amd.py"], cwd=project,
                          check=False, capture_output=True, text=True, timeout=300)
    return {"proc": proc, "before": patched,
            "after": (project / TARGET).read_text(encoding="utf-8"), "project": project}


def test_hipify_visits_process_group_mpi(hipified: dict) -> None:
    """The file is in hipify's scope (build_amd.py's ``torch/*``): it is listed."""
    proc = hipified["proc"]
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert f"{hipified['project'] / TARGET} ->" in proc.stdout, proc.stdout[-2000:]


def test_hipify_leaves_the_patched_check_as_written(hipified: dict) -> None:
    """Byte for byte: the MPICH branch and the switch it reads reach the ROCm compile."""
    patcher = _patcher()
    assert patcher.is_patched(hipified["after"])
    assert hipified["after"] == hipified["before"]
    assert 'std::getenv("MPICH_GPU_SUPPORT_ENABLED")' in hipified["after"]


def test_hipified_check_selects_the_mpich_branch(hipified: dict) -> None:
    """On the hipified source, Cray MPICH-like headers (MPICH_VERSION, no
    MPIX_GPU_SUPPORT_CUDA) still select torchmpi's MPICH branch."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.fail("no C++ compiler (apt install g++)")
    command = [cxx, "-E", "-P", "-x", "c++", "-I", str(STUB / "mpich"), "-I", str(STUB), "-"]
    assert _patcher().check_headers(hipified["after"], command, mpich_family=True) == (
        "torchmpi-mpich")
