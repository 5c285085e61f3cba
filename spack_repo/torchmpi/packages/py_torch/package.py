# Copyright Spack Project Developers. See COPYRIGHT file for details.
#
# SPDX-License-Identifier: (Apache-2.0 OR MIT)
"""Same-name override of builtin ``py-torch``, adding CUDA-aware MPI support.

Why an override and not a new name: dependents such as builtin
``py-torchvision`` depend on ``py-torch``; a subclass under another name is not
accepted by them (``py-torchvision ^py-torch-mpi`` is unsatisfiable in Spack
1.1), and ``depends_on(..., patches=...)`` does not work across repositories.
The new variant defaults to off, so with ``~cuda_aware_mpi`` this package
builds exactly what builtin builds -- safe when the torchmpi repo is added
site-wide.  See docs/design.md.
"""

import os

from spack_repo.builtin.packages.py_torch.package import PyTorch as BuiltinPyTorch
from spack_repo.torchmpi.packages.py_torch.cuda_aware_mpi import patch_file

from spack.package import *

#: The file holding PyTorch's CUDA-awareness check for the MPI backend.
PROCESS_GROUP_MPI = os.path.join("torch", "csrc", "distributed", "c10d", "ProcessGroupMPI.cpp")


class PyTorch(BuiltinPyTorch):
    """Tensors and Dynamic neural networks in Python with strong GPU acceleration.

    torchmpi override: ``+cuda_aware_mpi`` makes the MPI backend usable with
    CUDA tensors on Open MPI, MPICH and Cray MPICH."""

    variant(
        "cuda_aware_mpi",
        default=False,
        when="+mpi+cuda",
        description="Let the MPI backend pass CUDA tensors to a CUDA-aware MPI "
        "(recognise MPICH/Cray MPICH, link Cray's GTL library)",
    )

    # A CUDA-aware MPI backend needs an MPI that moves device buffers.
    # (Conflicts, not a one_of requirement: a requirement's later alternatives
    # carry a solver penalty that would steer defaults away from +cuda_aware_mpi.)
    for _mpi in ("openmpi", "mpich", "cray-mpich"):
        conflicts(
            f"^{_mpi}~cuda",
            when="+cuda_aware_mpi",
            msg=f"py-torch +cuda_aware_mpi needs a CUDA-aware MPI: use {_mpi}+cuda "
            "(or openmpi-cuda)",
        )

    @property
    def mpich_cuda_patch(self) -> bool:
        """Whether ``patch()`` adds the MPICH branch to ``cudaAwareMpiCheck()``.

        Open MPI is recognised by PyTorch already; the MPICH family is not.
        """
        return self.spec.satisfies("+cuda_aware_mpi") and not self.spec.satisfies(
            "^[virtuals=mpi] openmpi"
        ) and not self.spec.satisfies("^[virtuals=mpi] openmpi-cuda")

    @property
    def gtl_link_flags(self) -> str:
        """Linker flags for Cray's GPU Transport Layer, empty when not needed.

        With cray-mpich, ``MPICH_GPU_SUPPORT_ENABLED=1`` aborts ``MPI_Init``
        unless ``libmpi_gtl_cuda`` is linked ("GTL library is not linked"), so
        it is linked into libtorch here rather than left to ``LD_PRELOAD``.
        """
        if not self.spec.satisfies("+cuda_aware_mpi ^[virtuals=mpi] cray-mpich+cuda"):
            return ""
        return self.spec["mpi"].package.gtl_lib

    def patch(self):
        super().patch()
        if self.mpich_cuda_patch:
            changed = patch_file(PROCESS_GROUP_MPI)
            state = "patched for MPICH CUDA-awareness" if changed else "has an MPICH branch"
            tty.msg(f"torchmpi: {PROCESS_GROUP_MPI} {state}")

    def setup_build_environment(self, env: EnvironmentModifications) -> None:
        super().setup_build_environment(env)
        if self.spec.satisfies("+mpi"):
            # Builtin sets USE_MPI=ON, but FindMPI failing only warns ("Not
            # compiling with MPI"); point it at the MPI of the DAG explicitly.
            # (CMake's FindMPI reads MPI_HOME from the environment.)
            env.set("MPI_HOME", self.spec["mpi"].prefix)
        if "+cuda+nccl" in self.spec:
            # Builtin sets NCCL_LIB_DIR/NCCL_INCLUDE_DIR; NCCL_ROOT keeps
            # FindNCCL from picking a second NCCL elsewhere on the system.
            env.set("NCCL_ROOT", self.spec["nccl"].prefix)
        flags = self.gtl_link_flags
        if flags:
            # setup.py appends $LDFLAGS with -Wl,--no-as-needed on Linux, so
            # the GTL stays a NEEDED entry of libtorch even though no symbol
            # from it is referenced directly.
            env.append_flags("LDFLAGS", flags)
