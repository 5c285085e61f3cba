"""GTL for HSA in the packages: what py-torch-mpi, py-mpi4py and py-torch ask of a +rocm
build on cray-mpich +rocm, read from the package classes (``spack python``, no solve).

The preload itself is tested on the Cray EX stand-in (tests/test_gtl_hsa.py); here the
conditions that put it in a build: py-torch installs it for ``+cuda_aware_mpi +rocm``
on ``cray-mpich+rocm``; mpi4py loads the same GTL for jobs that call MPI_Init from
mpi4py first, recording the build's HIP (not CUDA); py-torch-mpi asks for that mpi4py
and sets ``MPICH_GPU_SUPPORT_ENABLED=1`` as it does on NVIDIA.
"""

from __future__ import annotations

import json

import pytest
from support.spack import PACKAGE_CLASSES

ROCM_MPI = "^[virtuals=mpi] cray-mpich+rocm~cuda amdgpu_target=gfx90a"
CUDA_MPI = "^[virtuals=mpi] cray-mpich+cuda~rocm cuda_arch=80"


@pytest.fixture(scope="module")
def facts(spack) -> dict:
    code = PACKAGE_CLASSES + f"""

def deps(name, text):
    spec = spack.spec.Spec(text)
    out = {{}}
    for when, by_name in cls(name).dependencies.items():
        if spec.satisfies(when):
            for dep, dependency in by_name.items():
                out.setdefault(dep, []).append(str(dependency.spec))
    return out

def has_variant(name, variant, text):
    spec = spack.spec.Spec(text)
    return any(spec.satisfies(when) for when, by_name in cls(name).variants.items()
               if variant in by_name)

mpi4py = "py-mpi4py +cuda_aware_mpi"
torch_mpi = "py-torch-mpi@0.1.0 +rocm ~cuda amdgpu_target=gfx90a fabric=slingshot +mpi4py"
print(json.dumps({{
    "mpi4py_variant_rocm": has_variant("py-mpi4py", "cuda_aware_mpi", "py-mpi4py {ROCM_MPI}"),
    "mpi4py_variant_cuda": has_variant("py-mpi4py", "cuda_aware_mpi", "py-mpi4py {CUDA_MPI}"),
    "mpi4py_rocm_deps": deps("py-mpi4py", mpi4py + " {ROCM_MPI}"),
    "mpi4py_cuda_deps": deps("py-mpi4py", mpi4py + " {CUDA_MPI}"),
    "torch_mpi_aware": deps("py-torch-mpi", torch_mpi + " +cuda_aware_mpi {ROCM_MPI}"),
    "torch_mpi_plain": deps("py-torch-mpi", torch_mpi + " ~cuda_aware_mpi {ROCM_MPI}"),
}}))
"""
    return json.loads(spack.python(code).stdout.strip().splitlines()[-1])


def test_mpi4py_can_load_gtl_for_hsa(facts: dict) -> None:
    """py-mpi4py's GTL variant exists on cray-mpich +rocm as on +cuda."""
    assert facts["mpi4py_variant_rocm"] and facts["mpi4py_variant_cuda"]


def test_mpi4py_records_hip_for_rocm_and_cuda_for_cuda(facts: dict) -> None:
    """What the preload records comes from the DAG: HIP (and through it ROCm's HSA
    runtime) for GTL for HSA, never a CUDA dependency in a ROCm build."""
    rocm, cuda = facts["mpi4py_rocm_deps"], facts["mpi4py_cuda_deps"]
    assert "hip" in rocm and "cuda" not in rocm, rocm
    assert "cuda" in cuda and "hip" not in cuda, cuda


def test_py_torch_mpi_rocm_asks_for_the_gtl_loading_mpi4py(facts: dict) -> None:
    """+rocm +cuda_aware_mpi on cray-mpich: the environment's mpi4py loads GTL for HSA
    (MPI-first jobs), and py-torch the same check; ~cuda_aware_mpi asks neither."""
    aware = facts["torch_mpi_aware"]
    assert any("+cuda_aware_mpi" in s for s in aware["py-mpi4py"]), aware["py-mpi4py"]
    assert any("+cuda_aware_mpi" in s for s in aware["py-torch"]), aware["py-torch"]
    plain = facts["torch_mpi_plain"]
    assert not any("+cuda_aware_mpi" in s for s in plain.get("py-mpi4py", [])), plain
