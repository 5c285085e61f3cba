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

import importlib.util
import os

from spack_repo.builtin.packages.py_torch.package import PyTorch as BuiltinPyTorch
from spack_repo.torchmpi.packages.py_torch import as_patch

from spack.package import *

#: The file holding PyTorch's CUDA-awareness check for the MPI backend.
PROCESS_GROUP_MPI = os.path.join("torch", "csrc", "distributed", "c10d", "ProcessGroupMPI.cpp")

#: Builtin releases that can be built ``+cuda_aware_mpi`` but have no fixture
#: of their real ProcessGroupMPI.cpp (its text at these tags could not be read
#: here; tests/fixtures/process_group_mpi/README.md says what was tried).  The
#: patcher adds its branch before the outer ``#else``, after any MPICH branch
#: upstream has (main's, after pytorch/pytorch#178323), checks against the
#: provider's headers which branch compiles, and refuses a check without that
#: ``#if``/``#else`` (PatchError, the build stops) rather than guess.
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


def staged_module(pkg, artefact: "as_patch.Artefact", name: str):
    """The module ``artefact``'s patch created in ``pkg``'s stage, loaded from there.

    Not this repository's copy: the staged one is what the spec's ``patches=``
    records (as_patch.py).  A stage without it stops the install, naming the patch.
    """
    path = os.path.join(pkg.stage.source_path, artefact.staged)
    if not os.path.isfile(path):
        raise InstallError(f"{pkg.name}: {path} is missing: the patch {artefact.patch} was "
                           "not applied (is it in `spack spec`'s patches= of this node?)")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cray_gtl_library(mpi: "Spec", who: str) -> str:
    """The path of Cray's GPU Transport Layer library of this cray-mpich.

    With cray-mpich, ``MPICH_GPU_SUPPORT_ENABLED=1`` aborts ``MPI_Init``
    unless ``libmpi_gtl_cuda`` is in the process ("GTL library is not
    linked").  It is loaded at import, not linked (:func:`install_gtl_preload`;
    docs/design.md, "GTL without a driver": a link makes torch unimportable
    on nodes without a CUDA driver).  Builtin ``cray-mpich``'s ``gtl_lib`` is a
    dict of ``ldflags`` (``-L<dir>``, ``-Wl,-rpath,<dir>``) and ``ldlibs``
    (``-lmpi_gtl_cuda``); the path is ``<dir>/lib<name>.so``.
    """
    gtl = mpi.package.gtl_lib
    dirs = [flag[2:] for flag in gtl.get("ldflags", []) if flag.startswith("-L")]
    if not gtl.get("ldlibs") or not dirs:
        raise InstallError(
            f"cray-mpich found no GTL library for this GPU: {who} would abort in "
            "MPI_Init with MPICH_GPU_SUPPORT_ENABLED=1"
        )
    return os.path.join(dirs[0], "lib" + gtl["ldlibs"][0][2:] + ".so")


def install_gtl_preload(pkg, package: str, gtl: str) -> None:
    """Write ``_torchmpi_gtl.py`` into the installed Python package ``package``
    and import it first from its ``__init__.py`` (``gtl_preload.add_to_package``),
    with the preload the package's ``patch()`` directive staged
    (``as_patch.GTL_PRELOAD``), never this repository's copy."""
    gtl_preload = staged_module(pkg, as_patch.GTL_PRELOAD, "torchmpi_staged_gtl_preload")
    inits = []
    for dirpath, _, filenames in os.walk(pkg.prefix):
        parent = os.path.basename(os.path.dirname(dirpath))
        if (os.path.basename(dirpath) == package and "__init__.py" in filenames
                and parent in ("site-packages", "dist-packages")):
            inits.append(os.path.join(dirpath, "__init__.py"))
    if len(inits) != 1:
        raise InstallError(f"{pkg.name}: expected one {package}/__init__.py in {pkg.prefix}: "
                           f"{inits}")
    # What GTL calls without NEEDing it (C++ and CUDA, or HSA and HIP, runtimes, per
    # cray-mpich release: gtl_preload's docstring), recorded from this build, with
    # the vendor of the GTL the build's cray-mpich gave (libmpi_gtl_cuda or _hsa).
    try:
        vendor = gtl_preload.vendor_of(gtl)
    except ValueError as error:
        raise InstallError(f"{pkg.name}: {error}") from None
    cuda = next((dep for dep in pkg.spec.traverse() if dep.name == "cuda"), None)
    rocm = tuple(str(dep.prefix) for dep in pkg.spec.traverse()
                 if dep.name in ("hsa-rocr-dev", "hip"))
    try:
        cxx = pkg.compiler.cxx
    except (AttributeError, KeyError, ValueError):  # no C++ compiler in the DAG
        cxx = None
    needs = gtl_preload.build_needs(cxx, str(cuda.prefix) if cuda and vendor == "cuda"
                                    else None, rocm if vendor == "hsa" else ())
    gtl_preload.add_to_package(os.path.dirname(inits[0]), package, gtl, tuple(needs), vendor)
    where = gtl_preload.DRIVER_NAMES[vendor]
    tty.msg(f"torchmpi: {package} loads {gtl} at import where {where} loads "
            f"(after {', '.join(needs) or 'nothing else'})")


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
    # ROCm: ProcessGroupMPI sees a HIP tensor as is_cuda(), so the same patched
    # check decides; on Cray MPICH it answers MPICH_GPU_SUPPORT_ENABLED, the
    # switch Cray documents for AMD GPUs too, with GTL for HSA linked
    # (libmpi_gtl_hsa; olcf/olcf-user-docs@f0571fe systems/frontier_user_guide.rst:4068-4072).
    variant(
        "cuda_aware_mpi",
        default=False,
        when="@2.6: +mpi+rocm",
        description="Let the MPI backend pass HIP tensors to Cray MPICH +rocm "
        "(the MPICH branch of the patched check; Cray's MPICH_GPU_SUPPORT_ENABLED)",
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
            when="+cuda_aware_mpi +cuda",
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

    # +rocm: only Cray MPICH.  PyTorch's Open MPI branch asks
    # MPIX_Query_cuda_support(), and the patched MPICH branch, without Cray's
    # switch, asks MPIX_GPU_SUPPORT_CUDA: neither answers for HIP buffers.
    for _mpi in ("openmpi", "openmpi-cuda", "mpich"):
        conflicts(
            f"^[virtuals=mpi] {_mpi}",
            when="+cuda_aware_mpi +rocm",
            msg=f"py-torch +rocm +cuda_aware_mpi: the MPI backend's check cannot see {_mpi}'s "
            "ROCm support; use cray-mpich+rocm (or ~cuda_aware_mpi)",
        )
    conflicts(
        "^[virtuals=mpi] cray-mpich~rocm",
        when="+cuda_aware_mpi +rocm",
        msg="py-torch +rocm +cuda_aware_mpi needs cray-mpich+rocm (GTL for HSA, libmpi_gtl_hsa)",
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
    def gtl_library(self) -> str:
        """Cray's GTL library to load at import, empty when not needed
        (see :func:`cray_gtl_library`)."""
        # +rocm: cray-mpich +rocm's GTL for HSA (libmpi_gtl_hsa), the same preload.
        if not (self.spec.satisfies("+cuda_aware_mpi ^[virtuals=mpi] cray-mpich+cuda")
                or self.spec.satisfies("+cuda_aware_mpi +rocm ^[virtuals=mpi] cray-mpich+rocm")):
            return ""
        return cray_gtl_library(self.spec["mpi"], "py-torch +cuda_aware_mpi")

    # The patcher, as a patch that creates it in the stage (as_patch.py): its
    # sha256 is in the spec (``patches=``) and its hash, and ``patch()`` below
    # runs that copy.  Every +cuda_aware_mpi build gets the stream order; the
    # MPICH family also gets the MPICH branch of cudaAwareMpiCheck().
    patch(as_patch.PATCH, when="+cuda_aware_mpi")
    # Cray's GTL preload, the same way: staged, and installed by load_gtl_at_import.
    # (The conflicts above leave cray-mpich +cuda, or +rocm with +rocm, here.)
    patch(as_patch.GTL_PRELOAD.patch, when="+cuda_aware_mpi ^[virtuals=mpi] cray-mpich")
    #: The sha256 of that patch file, rewritten with it by ``as_patch.py``.  Not a
    #: check (Spack hashes the file itself): Spack re-reads a repository's patch
    #: index only for packages whose package.py changed (spack v1.1.0
    #: lib/spack/spack/repo.py, ``PatchIndexer.needs_update`` returns False), so a
    #: new patcher under an unchanged package.py solves with the new sha256 and
    #: then fails ``spack install`` with "Couldn't find patch" from the stale
    #: index.  This line changes package.py whenever the patch changes.
    PATCHER_PATCH_SHA256 = "444031d33b6de87d75591b619b9431bfb5e0f958d35641a3bcdc9524c7d73b5a"
    #: The same for the GTL preload's patch (and for the same reason).
    GTL_PRELOAD_PATCH_SHA256 = "ffc5f5a208862f571169b678a620248e11d8787c536c2c0db78a77ef6a9b0598"

    def staged_patcher(self):
        """The patcher the ``patch()`` directive put in the stage (not this
        repository's copy: the one whose sha256 the spec records)."""
        path = os.path.abspath(as_patch.STAGED)
        if not os.path.isfile(path):
            raise InstallError(f"py-torch +cuda_aware_mpi: {path} is missing: the patch "
                               f"{as_patch.PATCH} was not applied")
        spec = importlib.util.spec_from_file_location("torchmpi_staged_cuda_aware_mpi", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    def patch(self):
        super().patch()
        if not self.spec.satisfies("+cuda_aware_mpi"):
            return
        patcher = self.staged_patcher()
        try:
            changed = patcher.patch_file(PROCESS_GROUP_MPI, mpich=self.mpich_cuda_patch)
        except patcher.PatchError as error:
            raise InstallError(f"py-torch +cuda_aware_mpi: {PROCESS_GROUP_MPI}: {error}") from None
        what = "stream order" + (", MPICH CUDA-awareness" if self.mpich_cuda_patch else "")
        state = f"patched ({what})" if changed else "already patched"
        tty.msg(f"torchmpi: {PROCESS_GROUP_MPI} {state}")
        if self.mpich_cuda_patch:
            self.check_mpi_headers(patcher)

    def check_mpi_headers(self, patcher) -> None:
        """Which branch of the patched check the provider's own headers compile.

        Upstream's MPICH branch (pytorch/pytorch#178323) needs
        ``MPIX_GPU_SUPPORT_CUDA``, torchmpi's fallback ``MPICH_VERSION``: the
        patched function is preprocessed with this ``mpi``'s include
        directories, and a build that would refuse every CUDA tensor stops here
        (the staged patcher's ``check_headers``).  A provider without ``mpi.h`` is
        only warned about: FindMPI stops that build anyway.
        """
        mpi = self.spec["mpi"]
        try:
            dirs = list(mpi.headers.directories)
        except NoHeadersError:  # an external without include/: nothing to read
            dirs = []
        if not any(os.path.isfile(os.path.join(d, "mpi.h")) for d in dirs):
            tty.warn(f"torchmpi: no mpi.h in {mpi.name}'s headers ({mpi.prefix}): "
                     "cudaAwareMpiCheck()'s branch not checked")
            return
        cxx = os.environ.get("SPACK_CXX") or os.environ.get("CXX") or "c++"
        command = [cxx, "-E", "-P", "-x", "c++", *(f"-I{d}" for d in dirs), "-"]
        with open(PROCESS_GROUP_MPI, encoding="utf-8") as stream:
            source = stream.read()
        try:
            branch = patcher.check_headers(source, command, mpich_family=True)
        except patcher.PatchError as error:
            raise InstallError(f"py-torch +cuda_aware_mpi with {mpi.name}: {error}") from None
        tty.msg(f"torchmpi: {mpi.name}'s headers compile the {branch} branch of "
                "cudaAwareMpiCheck()")

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
        if self.spec.satisfies("+nccl +cuda"):  # with +rocm, +nccl is RCCL (RCCL_PATH)
            # Builtin sets NCCL_LIB_DIR/NCCL_INCLUDE_DIR; NCCL_ROOT keeps
            # FindNCCL from picking a second NCCL elsewhere on the system.
            env.set("NCCL_ROOT", self.spec["nccl"].prefix)

    @run_after("install")
    def load_gtl_at_import(self):
        """Cray GTL, loaded by ``torch/__init__.py`` before libtorch loads libmpi."""
        gtl = self.gtl_library
        if gtl:
            install_gtl_preload(self, "torch", gtl)
