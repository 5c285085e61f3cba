# Copyright Spack Project Developers. See COPYRIGHT file for details.
#
# SPDX-License-Identifier: (Apache-2.0 OR MIT)
"""Same-name override of builtin ``py-mpi4py``: Cray's GTL for MPI-first jobs.

On Cray MPICH with ``MPICH_GPU_SUPPORT_ENABLED=1`` (set by the py-torch-mpi
module), ``MPI_Init`` aborts with "GTL library is not linked" unless
``libmpi_gtl_cuda`` is in the process.  py-torch loads it when torch is
imported, but a launch script that does ``from mpi4py import MPI`` before
``import torch`` initialises MPI from mpi4py's extension first.
``+cuda_aware_mpi`` loads GTL from ``mpi4py/__init__.py`` the same way (where a
CUDA driver is present; docs/design.md, "GTL without a driver").  The variant
defaults to off and exists only on top of cray-mpich, so everyone else gets
exactly builtin's mpi4py.
"""

from spack_repo.builtin.packages.py_mpi4py.package import PyMpi4py as BuiltinPyMpi4py
from spack_repo.torchmpi.packages.py_torch import as_patch
from spack_repo.torchmpi.packages.py_torch.package import cray_gtl_library, install_gtl_preload

from spack.package import *


class PyMpi4py(BuiltinPyMpi4py):
    """Python bindings for MPI; torchmpi override: optionally loads Cray's GPU
    Transport Layer at import so that MPI_Init from mpi4py accepts GPU support."""

    variant(
        "cuda_aware_mpi",
        default=False,
        when="^[virtuals=mpi] cray-mpich+cuda",
        description="Load Cray's GPU Transport Layer (libmpi_gtl_cuda) when mpi4py is imported, "
        "where a CUDA driver is present, so a job "
        "that imports mpi4py before torch runs with MPICH_GPU_SUPPORT_ENABLED=1",
    )

    # AMD GPUs: cray-mpich +rocm's GTL for HSA (libmpi_gtl_hsa), the same preload
    # (py_torch/gtl_preload.py records the vendor from the GTL's name).
    variant(
        "cuda_aware_mpi",
        default=False,
        when="^[virtuals=mpi] cray-mpich+rocm",
        description="Load Cray's GTL for HSA (libmpi_gtl_hsa) when mpi4py is imported, where "
        "ROCm's HSA runtime loads, so a job that imports mpi4py before torch runs with "
        "MPICH_GPU_SUPPORT_ENABLED=1",
    )

    # GTL calls the CUDA runtime without NEEDing it in some releases (cray-mpich
    # 8.1.27: eth-cscs/stackinator#158): the preload loads this build's libcudart
    # first (py_torch/gtl_preload.py), so the build has one to record.  For HSA, the
    # build's HIP (and through it ROCm's HSA runtime) is recorded the same way.
    depends_on("cuda", type="link", when="+cuda_aware_mpi ^[virtuals=mpi] cray-mpich+cuda")
    depends_on("hip", type="link", when="+cuda_aware_mpi ^[virtuals=mpi] cray-mpich+rocm")

    # The preload reaches the build as a patch that creates it in the stage
    # (py_torch/as_patch.py writes this package's copy): ``spack spec`` shows it
    # (``patches=``), and a changed preload is a new mpi4py.
    patch(as_patch.GTL_PRELOAD.patch, when="+cuda_aware_mpi")
    #: That patch's sha256, rewritten with it by ``as_patch.py``: Spack re-reads the
    #: patch index only for a package whose package.py changed (py_torch/package.py,
    #: PATCHER_PATCH_SHA256, says why that matters).
    GTL_PRELOAD_PATCH_SHA256 = "ffc5f5a208862f571169b678a620248e11d8787c536c2c0db78a77ef6a9b0598"

    @run_after("install")
    def load_gtl_at_import(self):
        """Cray GTL, loaded by ``mpi4py/__init__.py`` before the extension loads libmpi."""
        if self.spec.satisfies("+cuda_aware_mpi"):
            gtl = cray_gtl_library(self.spec["mpi"], "py-mpi4py +cuda_aware_mpi")
            install_gtl_preload(self, "mpi4py", gtl)
