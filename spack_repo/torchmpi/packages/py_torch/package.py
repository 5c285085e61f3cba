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

import hashlib
import os

from spack_repo.builtin.packages.py_torch.package import PyTorch as BuiltinPyTorch
from spack_repo.torchmpi.packages.py_torch import cuda_aware_mpi

from spack.package import *

#: The file holding PyTorch's CUDA-awareness check for the MPI backend.
PROCESS_GROUP_MPI = os.path.join("torch", "csrc", "distributed", "c10d", "ProcessGroupMPI.cpp")

#: sha256 of ``cuda_aware_mpi.py``, the patcher ``patch()`` runs.  Spack's
#: package hash covers this file only, not the modules it imports: keeping the
#: patcher's digest here makes every change to the patcher change py-torch's
#: hash (a rebuild), and ``patch()`` refuses a patcher that does not match.
CUDA_AWARE_MPI_SHA256 = "aab38b33274d2a920819bb390b85e745eca33cfe796ac22434252d6828083f75"

#: Builtin releases that can be built ``+cuda_aware_mpi`` but have no fixture
#: of their real ProcessGroupMPI.cpp (its text at these tags could not be read
#: here; tests/fixtures/process_group_mpi/README.md says what was tried).  The
#: patcher leaves alone a check that already handles MPICH (as main's does
#: after pytorch/pytorch#178323), adds its branch before the outer ``#else``
#: otherwise, and refuses a check without that ``#if``/``#else`` (PatchError,
#: the build stops) rather than guess.
#: tests/test_packages.py fails unless every release reachable with
#: ``+cuda_aware_mpi`` has a fixture or is listed here: add a fixture, then drop
#: the release here.  (2.10 and later stay reachable: builtin deprecates every
#: older release, so excluding them would leave GPU sites without a torch.)
UNVERIFIED_TORCH = ("2.10.0", "2.11.0", "2.12.0")

#: Providers of ``mpi`` whose ``+cuda`` build moves device buffers and whose
#: CUDA-awareness PyTorch (Open MPI) or the patch below (MPICH family) can ask.
CUDA_AWARE_MPI_PROVIDERS = ("openmpi", "openmpi-cuda", "mpich", "cray-mpich")

#: Every other provider of ``mpi`` in builtin spack-packages v2026.06.0
#: (``spack providers mpi``; tests/test_packages.py fails when that list
#: changes).  None has a ``cuda`` variant that says whether the build is
#: CUDA-aware, so ``+cuda_aware_mpi`` refuses them instead of guessing.
OTHER_MPI_PROVIDERS = (
    "cray-mvapich2",
    "fujitsu-mpi",
    "hpcx-mpi",
    "intel-oneapi-mpi",
    "mpi-serial",
    "mpilander",
    "mpitrampoline",
    "mpt",
    "msmpi",
    "mvapich",
    "mvapich-plus",
    "mvapich2",
    "nmad",
    "nvhpc",
    "spectrum-mpi",
)


def cray_gtl_link_tokens(mpi: "Spec", who: str) -> list:
    """Linker tokens that make a shared object NEED Cray's GPU Transport Layer.

    With cray-mpich, ``MPICH_GPU_SUPPORT_ENABLED=1`` aborts ``MPI_Init``
    unless ``libmpi_gtl_cuda`` is linked into the process ("GTL library is not
    linked"), so it is linked into the library that calls ``MPI_Init`` (libtorch
    here, mpi4py's extension in ``py-mpi4py``) rather than left to
    ``LD_PRELOAD``.

    Builtin ``cray-mpich``'s ``gtl_lib`` is a dict of ``ldflags`` (``-L`` and
    ``-Wl,-rpath``) and ``ldlibs`` (``-lmpi_gtl_cuda``), consumed token by
    token as builtin ``lammps`` does.  ``-Wl,--no-as-needed`` goes just before
    the library: nothing calls into GTL directly, so a linker that defaults to
    ``--as-needed`` (Ubuntu, and CMake projects that add it) would otherwise
    drop the NEEDED entry that MPI_Init looks for.
    """
    gtl = mpi.package.gtl_lib
    if not gtl.get("ldlibs"):
        raise InstallError(
            f"cray-mpich found no GTL library for this GPU: {who} would abort in "
            "MPI_Init with MPICH_GPU_SUPPORT_ENABLED=1"
        )
    return [*gtl.get("ldflags", []), "-Wl,--no-as-needed", *gtl["ldlibs"]]


class PyTorch(BuiltinPyTorch):
    """Tensors and Dynamic neural networks in Python with strong GPU acceleration.

    torchmpi override: ``+cuda_aware_mpi`` makes the MPI backend usable with
    CUDA tensors on Open MPI, MPICH and Cray MPICH."""

    # From 2.6: the oldest release whose cudaAwareMpiCheck() the patcher was
    # run on as upstream has it (tests/fixtures/process_group_mpi: v2.6.0 and
    # v2.9.1, identical in that function).  Builtin deprecates everything
    # before 2.10 (CVEs), so the releases a solve can use are newer than the
    # newest fixture: see UNVERIFIED_TORCH.
    variant(
        "cuda_aware_mpi",
        default=False,
        when="@2.6: +mpi+cuda",
        description="Let the MPI backend pass CUDA tensors to a CUDA-aware MPI "
        "(recognise MPICH/Cray MPICH, link Cray's GTL library)",
    )

    # Between the two fixtures (v2.6.0, v2.9.1) no release text was read, and
    # builtin deprecates all of them (CVEs): excluded rather than assumed.
    conflicts(
        "@2.7.0:2.9.0",
        when="+cuda_aware_mpi",
        msg="py-torch +cuda_aware_mpi: torchmpi's patcher was checked on 2.6.0 and 2.9.1 "
        "only among releases before 2.10; use py-torch@2.9.1 or @2.10:",
    )

    # A CUDA-aware MPI backend needs an MPI that moves device buffers.  The
    # conflicts name the provider of ``mpi`` ([virtuals=mpi]) so that an MPI
    # elsewhere in the DAG (a build tool's own) is not mistaken for it.
    # (Conflicts, not a one_of requirement: a requirement's later alternatives
    # carry a solver penalty that would steer defaults away from +cuda_aware_mpi.)
    for _mpi in CUDA_AWARE_MPI_PROVIDERS:
        conflicts(
            f"^[virtuals=mpi] {_mpi}~cuda",
            when="+cuda_aware_mpi",
            msg=f"py-torch +cuda_aware_mpi needs a CUDA-aware MPI: use {_mpi}+cuda "
            "(or openmpi-cuda)",
        )
    for _mpi in OTHER_MPI_PROVIDERS:
        conflicts(
            f"^[virtuals=mpi] {_mpi}",
            when="+cuda_aware_mpi",
            msg=f"py-torch +cuda_aware_mpi: {_mpi} is not known to torchmpi to be CUDA-aware; "
            "use cray-mpich+cuda, mpich+cuda, openmpi+cuda or openmpi-cuda (or ~cuda_aware_mpi)",
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
    def gtl_link_flags(self) -> list[str]:
        """Linker flags for Cray's GPU Transport Layer, empty when not needed
        (see :func:`cray_gtl_link_tokens`)."""
        if not self.spec.satisfies("+cuda_aware_mpi ^[virtuals=mpi] cray-mpich+cuda"):
            return []
        return cray_gtl_link_tokens(self.spec["mpi"], "py-torch +cuda_aware_mpi")

    def patch(self):
        super().patch()
        if self.mpich_cuda_patch:
            with open(cuda_aware_mpi.__file__, "rb") as stream:
                digest = hashlib.sha256(stream.read()).hexdigest()
            if digest != CUDA_AWARE_MPI_SHA256:
                raise InstallError(
                    f"{cuda_aware_mpi.__file__} changed (sha256 {digest}) but "
                    "CUDA_AWARE_MPI_SHA256 in py_torch/package.py was not updated"
                )
            changed = cuda_aware_mpi.patch_file(PROCESS_GROUP_MPI)
            state = "patched for MPICH CUDA-awareness" if changed else "has an MPICH branch"
            tty.msg(f"torchmpi: {PROCESS_GROUP_MPI} {state}")

    def setup_build_environment(self, env: EnvironmentModifications) -> None:
        super().setup_build_environment(env)
        # Only +cuda_aware_mpi changes the build: with it off (or absent, on a
        # CPU-only torch) this package sets exactly what builtin sets.
        if not self.spec.satisfies("+cuda_aware_mpi"):
            return
        # Builtin sets USE_MPI=ON, but FindMPI failing only warns ("Not
        # compiling with MPI"); point it at the MPI of the DAG explicitly.
        # (CMake's FindMPI reads MPI_HOME from the environment.)
        env.set("MPI_HOME", self.spec["mpi"].prefix)
        if self.spec.satisfies("+nccl"):
            # Builtin sets NCCL_LIB_DIR/NCCL_INCLUDE_DIR; NCCL_ROOT keeps
            # FindNCCL from picking a second NCCL elsewhere on the system.
            env.set("NCCL_ROOT", self.spec["nccl"].prefix)
        flags = self.gtl_link_flags
        if flags:
            # PyTorch's CMake reads $LDFLAGS into CMAKE_SHARED_LINKER_FLAGS;
            # whole tokens, never the str() of builtin's dict.
            env.append_flags("LDFLAGS", " ".join(flags))
