# Copyright Spack Project Developers. See COPYRIGHT file for details.
#
# SPDX-License-Identifier: (Apache-2.0 OR MIT)
"""The user-facing package: a PyTorch whose distributed backends work here.

A bundle over the torchmpi ``py-torch`` override (MPI backend forced on,
CUDA-aware where asked), the NCCL stack of the chosen fabric, mpi4py on the
same MPI, and the ``torchmpi`` tool (``py-torchmpi``: doctor, allreduce) used
by the stand-alone tests.  It holds no torch build of its own, so builtin
dependents like ``py-torchvision`` share the one ``py-torch`` node.
"""

from spack_repo.builtin.build_systems.bundle import BundlePackage
from spack_repo.builtin.build_systems.cuda import CudaPackage
from spack_repo.builtin.build_systems.rocm import ROCmPackage
from spack_repo.torchmpi.packages.nccl_ss11.package import VOUCHED_RCCL_PAIRS

from spack.package import *


class PyTorchMpi(BundlePackage, CudaPackage, ROCmPackage):
    """PyTorch with a working MPI backend (CUDA-aware on Open MPI and Cray
    MPICH) and NCCL set up for the site's network, plus the torchmpi checks."""

    homepage = "https://pytorch.org/docs/stable/distributed.html"

    license("Apache-2.0 OR MIT")

    # The version is the torchmpi tool's (py-torchmpi, wrapper/torchmpi/__init__.py).
    version("0.1.0")

    variant(
        "cuda_aware_mpi",
        default=True,
        when="+cuda",
        description="MPI backend accepts CUDA tensors (needs a CUDA-aware MPI)",
    )
    # ProcessGroupMPI takes a HIP tensor for a CUDA one (is_cuda() is true on
    # ROCm builds), so the same patched check serves: on Cray MPICH it answers
    # MPICH_GPU_SUPPORT_ENABLED, which Cray documents for AMD GPUs too, with
    # libmpi_gtl_hsa linked or MPI_Init exits (olcf/olcf-user-docs@f0571fe
    # systems/frontier_user_guide.rst:678-684, 4068-4072).  Default off until
    # py-torch loads GTL for HSA at import as it loads libmpi_gtl_cuda
    # (docs/design.md, "AMD GPUs").
    variant(
        "cuda_aware_mpi",
        default=False,
        when="+rocm",
        description="MPI backend accepts HIP tensors (Cray MPICH +rocm with GTL for HSA)",
    )
    variant(
        "fabric",
        default="tcp",
        values=("slingshot", "ib", "tcp"),
        multi=False,
        description="Network the NCCL stack is built for: slingshot (HPE Slingshot-11 "
        "via aws-ofi-nccl), ib (InfiniBand verbs), tcp (sockets only)",
    )

    variant(
        "mpi4py",
        default=True,
        description="Include mpi4py built on the same MPI (on Cray MPICH loading GTL, so "
        "a job that imports mpi4py before torch runs with MPICH_GPU_SUPPORT_ENABLED=1)",
    )

    extends("python")
    depends_on("python", type=("build", "run"))
    # The torchmpi tool (doctor, allreduce); its version is this bundle's.
    depends_on("py-torchmpi@0.1.0", type="run", when="@0.1.0")

    with when("+mpi4py"):
        depends_on("py-mpi4py", type="run")
        # MPI_Init from mpi4py must find GTL as MPI_Init from libtorch does:
        # the module sets MPICH_GPU_SUPPORT_ENABLED=1 for +cuda_aware_mpi.
        # (+cuda: libmpi_gtl_cuda; +rocm: GTL for HSA, libmpi_gtl_hsa: the same preload.)
        depends_on("py-mpi4py +cuda_aware_mpi", when="+cuda_aware_mpi ^[virtuals=mpi] cray-mpich")

    # PyTorch drops the MPI backend silently when FindMPI fails; +mpi here and
    # the check after install make that a hard error instead.  +gloo: builtin
    # py-torch defaults to ~gloo, but the CPU-tensor path of the torchmpi
    # checks (allreduce --backend gloo, doctor) and most launch scripts'
    # init_process_group("gloo") need it.
    # Builtin py-torch conflicts +gloo+rocm: ROCm builds keep MPI and RCCL.
    depends_on("py-torch +distributed +mpi", type=("build", "link", "run"))
    depends_on("py-torch +gloo", when="~rocm")
    depends_on("mpi", type=("build", "link", "run"))
    depends_on("py-torch ~cuda", when="~cuda")
    depends_on("py-torch ~rocm", when="~rocm")
    depends_on("py-torch +cuda +nccl", when="+cuda")
    depends_on("py-torch +cuda_aware_mpi", when="+cuda_aware_mpi")
    depends_on("py-torch ~cuda_aware_mpi", when="+cuda ~cuda_aware_mpi")
    depends_on("py-torch ~cuda_aware_mpi", when="+rocm ~cuda_aware_mpi")

    with when("+cuda"):
        for _arch in CudaPackage.cuda_arch_values:
            with when(f"cuda_arch={_arch}"):
                depends_on(f"py-torch cuda_arch={_arch}")
                depends_on(f"nccl cuda_arch={_arch}")
                depends_on(f"nccl-ss11 cuda_arch={_arch}", when="fabric=slingshot")
        depends_on("nccl-ss11 +cuda", when="fabric=slingshot")
        depends_on("nccl fabrics=verbs", when="fabric=ib")
        depends_on("nccl fabrics=auto", when="fabric=tcp")

    # AMD GPUs: builtin py-torch +rocm with RCCL (torch's "nccl" backend),
    # the GPU architecture passed down as cuda_arch is for NVIDIA.
    with when("+rocm"):
        depends_on("py-torch +rocm +nccl")
        for _target in ROCmPackage.amdgpu_targets:
            with when(f"amdgpu_target={_target}"):
                depends_on(f"py-torch amdgpu_target={_target}")
                depends_on(f"rccl amdgpu_target={_target}")
        # RCCL reaches Slingshot-11 only through the aws-ofi-nccl plugin built
        # --with-rocm (librccl-net.so), and only at the pairs of
        # VOUCHED_RCCL_PAIRS (nccl_ss11/package.py: who vouches for each, by what record).
        with when("fabric=slingshot"):
            depends_on("rccl", type=("link", "run"))
            depends_on("aws-ofi-nccl +rocm ~cuda +cxi", type=("link", "run"))
            requires(
                *(f"^rccl@{rocm} ^aws-ofi-nccl@{plugin}"
                  for rocm, plugin, *_ in VOUCHED_RCCL_PAIRS),
                policy="one_of",
                msg="py-torch-mpi +rocm fabric=slingshot: no source vouches for this "
                "RCCL/aws-ofi-nccl pair; use "
                + " or ".join(f"rccl@{r} with aws-ofi-nccl@{p} ({who})"
                              for r, p, _, _, who, *_ in VOUCHED_RCCL_PAIRS)
                + " (docs/design.md)",
            )

    conflicts(
        "+cuda",
        when="+rocm",
        msg="py-torch-mpi: +cuda and +rocm are exclusive (one GPU vendor per build)",
    )
    conflicts(
        "amdgpu_target=none",
        when="+rocm",
        msg="py-torch-mpi +rocm needs the GPU architecture, e.g. amdgpu_target=gfx90a "
        "(MI250X) or gfx942 (MI300A)",
    )
    conflicts(
        "fabric=slingshot",
        when="~cuda ~rocm",
        msg="fabric=slingshot builds NCCL with the aws-ofi-nccl plugin, which needs a GPU: "
        "use +cuda cuda_arch=<arch> or +rocm amdgpu_target=<target>, or fabric=tcp for a "
        "CPU-only build",
    )
    conflicts(
        "cuda_arch=none",
        when="+cuda",
        msg="py-torch-mpi +cuda needs the GPU architecture, e.g. cuda_arch=80 (A100)",
    )

    @run_after("install")
    def check_mpi_backend(self):
        """Refuse an install whose PyTorch lost the MPI backend."""
        out = self.spec["python"].command(
            "-c",
            "import torch.distributed as d; print(d.is_mpi_available())",
            output=str,
            error=str,
        )
        if out.strip() != "True":
            raise InstallError(
                "torch.distributed.is_mpi_available() is False: py-torch was built without "
                "its MPI backend (look for 'Not compiling with MPI' in its build log)"
            )

    def setup_run_environment(self, env: EnvironmentModifications) -> None:
        # Cray MPICH moves device buffers only with GTL in the process (py-torch
        # loads it at import for +cuda_aware_mpi) AND this switch; set them together.  CSCS
        # warns that GPU-aware MPI next to NCCL can deadlock and sets 0 for
        # PyTorch: a site file may override this value (docs/design.md).
        # +rocm alike: py-torch (and py-mpi4py) load GTL for HSA, libmpi_gtl_hsa, at
        # import where ROCm's HSA runtime loads (py_torch/gtl_preload.py).
        if self.spec.satisfies("+cuda_aware_mpi ^[virtuals=mpi] cray-mpich"):
            env.set("MPICH_GPU_SUPPORT_ENABLED", "1")

    # Stand-alone tests: `spack test run py-torch-mpi` (need a real install).

    def _mpiexec(self):
        for name in ("mpiexec", "mpirun", "srun"):
            exe = which(join_path(self.spec["mpi"].prefix.bin, name)) or which(name)
            if exe:
                return exe
        raise SkipTest("no mpiexec/mpirun/srun found to launch ranks")

    def test_backends(self):
        """torch.distributed has the MPI and gloo backends (and NCCL with +cuda)"""
        python = self.spec["python"].command
        code = (
            "import torch.distributed as d; "
            "print(d.is_mpi_available(), d.is_gloo_available(), d.is_nccl_available())"
        )
        mpi, gloo, nccl = python("-c", code, output=str, error=str).split()
        assert mpi == "True", "torch.distributed.is_mpi_available() is False"
        if not self.spec.satisfies("+rocm"):  # builtin py-torch: +gloo conflicts with +rocm
            assert gloo == "True", "torch.distributed.is_gloo_available() is False"
        if self.spec.satisfies("+cuda") or self.spec.satisfies("+rocm"):
            assert nccl == "True", "torch.distributed.is_nccl_available() is False"

    def _allreduce(self, device: str) -> None:
        """Run ``torchmpi allreduce`` on 2 ranks; a wrong sum exits non-zero."""
        launcher = self._mpiexec()
        args = ["-n", "2"]
        if self.spec.satisfies("^[virtuals=mpi] openmpi") or self.spec.satisfies(
            "^[virtuals=mpi] openmpi-cuda"
        ):
            args.append("--oversubscribe")  # a test node may have a single slot
        torchmpi = join_path(self.spec["py-torchmpi"].prefix.bin, "torchmpi")
        launcher(
            *args, torchmpi, "allreduce", "--backend", "mpi", "--device", device,
            "--sizes", "8,64K,1M", "--warmup", "1", "--iters", "5",
        )

    def test_allreduce_cpu(self):
        """2-rank all-reduce of CPU tensors over the MPI backend"""
        self._allreduce("cpu")

    def test_allreduce_cuda(self):
        """2-rank all-reduce of CUDA tensors over the MPI backend (+cuda, GPU present)"""
        if not self.spec.satisfies("+cuda_aware_mpi"):
            raise SkipTest("built without +cuda_aware_mpi")
        python = self.spec["python"].command
        ngpu = python("-c", "import torch; print(torch.cuda.device_count())", output=str)
        if int(ngpu.strip() or 0) < 1:
            raise SkipTest("no GPU visible")
        self._allreduce("cuda")

    def test_mpi4py_before_torch(self):
        """MPI initialised by mpi4py before torch is imported, as MPI launch scripts do"""
        if not self.spec.satisfies("+mpi4py"):
            raise SkipTest("built without +mpi4py")
        code = (
            "from mpi4py import MPI\n"  # MPI_Init here: on Cray it needs GTL in mpi4py
            "import torch, torch.distributed as dist\n"
            "dist.init_process_group('mpi')\n"
            "t = torch.ones(4)\n"
            "dist.all_reduce(t)\n"
            "assert t.sum().item() == 4 * dist.get_world_size(), t\n"
            "print('mpi4py-first ok, world', dist.get_world_size())\n"
        )
        self._mpiexec()("-n", "1", self.spec["python"].command.path, "-c", code)
