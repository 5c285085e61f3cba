# Copyright Spack Project Developers. See COPYRIGHT file for details.
#
# SPDX-License-Identifier: (Apache-2.0 OR MIT)
"""Open MPI that is always CUDA-aware, with GPUDirect over InfiniBand.

A subclass of builtin ``openmpi``: it inherits versions, variants, patches and
``provides("mpi")``, and only pins what PyTorch's MPI backend needs.  It is not
Spack's default ``mpi`` provider; environments select it with
``packages: mpi: require: openmpi-cuda``.
"""

from spack_repo.builtin.packages.openmpi.package import Openmpi

from spack.package import *


class OpenmpiCuda(Openmpi):
    """Open MPI built with CUDA support (``--with-cuda``) over UCX with CUDA
    (and gdrcopy), for PyTorch's CUDA-aware MPI backend on InfiniBand."""

    # Detection stays with builtin openmpi: the inherited ``ompi_info``
    # pattern would make `spack external find` report every Open MPI twice.
    executables = ()

    requires(
        "+cuda",
        msg="openmpi-cuda is CUDA-aware by definition; use builtin openmpi for a build "
        "without CUDA",
    )
    # Open MPI 3.0 and later always support MPI_THREAD_MULTIPLE (the
    # thread_multiple variant exists only for 1.5.4-2.x); 4.1 is the oldest
    # series still maintained with CUDA support in the smcuda/UCX paths.
    requires("@4.1:", msg="openmpi-cuda needs Open MPI 4.1 or later")

    # GPUDirect RDMA on InfiniBand goes through UCX's CUDA transports (Open MPI
    # docs, "CUDA-aware support": UCX is the recommended path from 4.0).
    # Builtin openmpi already asks ucx+cuda for fabrics=ucx +cuda; gdrcopy
    # (ucx +gdrcopy, builtin ucx allows it with +cuda) speeds small device
    # copies.
    requires("fabrics=ucx", msg="openmpi-cuda moves GPU buffers through UCX: use fabrics=ucx")
    depends_on("ucx +cuda +gdrcopy")

    #: The line ``ompi_info --parsable --all`` prints for a CUDA-aware build.
    cuda_support_line = "mca:mpi:base:param:mpi_built_with_cuda_support:value:true"

    def test_cuda_support(self):
        """ompi_info reports CUDA support and MPI_THREAD_MULTIPLE"""
        ompi_info = which(self.prefix.bin.ompi_info, required=True)
        out = ompi_info("--parsable", "--all", output=str, error=str)
        assert self.cuda_support_line in out.splitlines(), (
            f"{self.prefix.bin.ompi_info} does not report {self.cuda_support_line}"
        )
        assert "MPI_THREAD_MULTIPLE: yes" in out, "MPI_THREAD_MULTIPLE is not supported"
