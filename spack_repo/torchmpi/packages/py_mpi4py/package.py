# Copyright Spack Project Developers. See COPYRIGHT file for details.
#
# SPDX-License-Identifier: (Apache-2.0 OR MIT)
"""Same-name override of builtin ``py-mpi4py``: Cray's GTL for MPI-first jobs.

On Cray MPICH with ``MPICH_GPU_SUPPORT_ENABLED=1`` (set by the py-torch-mpi
module), ``MPI_Init`` aborts with "GTL library is not linked" unless
``libmpi_gtl_cuda`` is in the process.  py-torch links it into libtorch, but a
launch script that does ``from mpi4py import MPI`` before ``import torch``
initialises MPI from mpi4py's extension first.  ``+cuda_aware_mpi`` links GTL
into that extension the same way.  The variant defaults to off and exists only
on top of cray-mpich, so everyone else gets exactly builtin's mpi4py.
"""

from spack_repo.builtin.packages.py_mpi4py.package import PyMpi4py as BuiltinPyMpi4py
from spack_repo.torchmpi.packages.py_torch.package import cray_gtl_link_tokens

from spack.package import *


class PyMpi4py(BuiltinPyMpi4py):
    """Python bindings for MPI; torchmpi override: optionally links Cray's GPU
    Transport Layer so that MPI_Init from mpi4py accepts GPU support."""

    variant(
        "cuda_aware_mpi",
        default=False,
        when="^[virtuals=mpi] cray-mpich+cuda",
        description="Link Cray's GPU Transport Layer (libmpi_gtl_cuda) into mpi4py, so a job "
        "that imports mpi4py before torch runs with MPICH_GPU_SUPPORT_ENABLED=1",
    )

    def setup_build_environment(self, env: EnvironmentModifications) -> None:
        super().setup_build_environment(env)
        if not self.spec.satisfies("+cuda_aware_mpi"):
            return  # exactly builtin's build
        # mpi4py's conf/mpidistutils.py customises the compiler through
        # distutils' sysconfig.customize_compiler, which appends $LDFLAGS to
        # the shared-object link line ahead of the objects.
        tokens = cray_gtl_link_tokens(self.spec["mpi"], "py-mpi4py +cuda_aware_mpi")
        env.append_flags("LDFLAGS", " ".join(tokens))
