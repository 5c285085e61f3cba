"""torch itself, its distributed backends, and the GPUs it can (or cannot) use.

:func:`probe_torch` imports torch in this process and records what the checks
need, including the shared libraries the import really loaded (read from
``/proc/self/maps``), which is how :mod:`torchmpi.doctor.mpi` tells which MPI
is in the process.  A failed import is a finding, not a crash.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from torchmpi.doctor.core import FAIL, PASS, SKIP, WARN, Check, Runner, version_tuple


@dataclass
class TorchInfo:
    """What the doctor needs to know about the importable torch."""

    version: str | None = None
    import_error: str | None = None
    distributed: bool = True  # torch.distributed.is_available()
    mpi: bool = False
    nccl: bool = False
    gloo: bool = False
    nccl_version: str | None = None
    cuda_build: str | None = None  # torch.version.cuda; None for a CPU-only build
    hip_build: str | None = None  # torch.version.hip; set for a ROCm build (doctor.rocm)
    gpu_count: int = 0
    lib_dir: str | None = None
    loaded_libs: list[str] = field(default_factory=list)  # paths from /proc/self/maps


def loaded_libraries(maps_text: str) -> list[str]:
    """Shared-object paths from a ``/proc/<pid>/maps`` text, each once, in load order."""
    paths = re.findall(r"\s(/\S+\.so(?:\.[\w.]+)?)\s*$", maps_text, re.MULTILINE)
    return list(dict.fromkeys(paths))


def probe_torch() -> TorchInfo:
    """Import torch here and describe it; a failed import is reported, not raised."""
    try:
        import torch
        import torch.distributed as dist
    except Exception as err:  # noqa: BLE001 -- any import failure is the finding
        return TorchInfo(import_error=f"{type(err).__name__}: {err}")
    info = TorchInfo(version=torch.__version__, cuda_build=torch.version.cuda,
                     hip_build=getattr(torch.version, "hip", None),
                     lib_dir=str(Path(torch.__file__).parent / "lib"))
    info.distributed = dist.is_available()
    info.mpi = info.distributed and dist.is_mpi_available()
    info.nccl = info.distributed and dist.is_nccl_available()
    info.gloo = info.distributed and dist.is_gloo_available()
    try:
        info.gpu_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001 -- a broken driver means "no usable GPU"
        info.gpu_count = 0
    if info.nccl:
        try:
            version = torch.cuda.nccl.version()
            info.nccl_version = (".".join(map(str, version)) if isinstance(version, tuple)
                                 else str(version))
        except Exception:  # noqa: BLE001
            info.nccl_version = None
    try:
        info.loaded_libs = loaded_libraries(Path("/proc/self/maps").read_text())
    except OSError:
        info.loaded_libs = []
    return info


def check_torch(info: TorchInfo) -> Check:
    if info.import_error:
        return Check("torch", FAIL, f"import torch failed: {info.import_error}",
                     "load the site's py-torch-mpi module (or activate its environment)")
    build = (f"CUDA {info.cuda_build}" if info.cuda_build else
             f"ROCm/HIP {info.hip_build}" if info.hip_build else "CPU-only build")
    return Check("torch", PASS, f"torch {info.version} ({build})")


def check_backend_mpi(info: TorchInfo) -> Check:
    if info.import_error:
        return Check("backend.mpi", SKIP, "torch does not import")
    if info.mpi:
        return Check("backend.mpi", PASS, "torch.distributed.is_mpi_available() is True")
    return Check(
        "backend.mpi", FAIL,
        "this PyTorch has no MPI backend (built without MPI: 'Not compiling with MPI')",
        "use the site's py-torch-mpi build (pip/conda wheels never have it); "
        "see docs/troubleshooting.md#mpi-backend-missing",
    )


def check_backend_nccl(info: TorchInfo) -> Check:
    if info.import_error:
        return Check("backend.nccl", SKIP, "torch does not import")
    library = "RCCL" if info.hip_build else "NCCL"  # a ROCm torch's "nccl" is RCCL
    if info.nccl:
        version = f" ({library} {info.nccl_version})" if info.nccl_version else ""
        return Check("backend.nccl", PASS,
                     f"torch.distributed.is_nccl_available() is True{version}")
    if info.hip_build:
        return Check("backend.nccl", FAIL, f"ROCm/HIP {info.hip_build} build without RCCL",
                     "rebuild py-torch with +nccl (RCCL; the site environment does this)")
    if not info.cuda_build:
        status = FAIL if info.gpu_count else WARN
        return Check("backend.nccl", status, "CPU-only PyTorch: no NCCL backend",
                     "on GPU nodes use the +cuda build of py-torch-mpi")
    return Check("backend.nccl", FAIL, f"CUDA {info.cuda_build} build without NCCL",
                 "rebuild py-torch with +nccl (the site environment does this)")


def check_backend_gloo(info: TorchInfo) -> Check:
    """No gloo is a build choice (builtin py-torch defaults to ~gloo); no distributed is not."""
    if info.import_error:
        return Check("backend.gloo", SKIP, "torch does not import")
    if not info.distributed:
        return Check("backend.gloo", FAIL,
                     "torch.distributed.is_available() is False: torch built without "
                     "distributed support, so no backend at all",
                     "use the site's py-torch-mpi (py-torch +distributed)")
    if info.gloo:
        return Check("backend.gloo", PASS, "torch.distributed.is_gloo_available() is True")
    if info.hip_build:  # by design: builtin py-torch conflicts +gloo+rocm
        return Check("backend.gloo", SKIP,
                     "no gloo backend: a ROCm build has none (builtin py-torch cannot build "
                     "gloo with ROCm); CPU tensors go over the MPI backend")
    return Check("backend.gloo", WARN,
                 "no gloo backend (torch built ~gloo): --backend gloo and "
                 "init_process_group('gloo') fail; MPI and NCCL are unaffected",
                 "use the site's py-torch-mpi, which requires +gloo")


# --- GPU and driver ------------------------------------------------------------

#: NVIDIA's CUDA compatibility guide: an application built with CUDA X.Y needs a
#: driver that supports at least X.Y; within one major version older drivers run
#: it under "minor version compatibility" (no PTX JIT), across a major not at all
#: (docs.nvidia.com/deploy/cuda-compatibility, "Minor Version Compatibility").
_SMI_CUDA = re.compile(r"CUDA Version:\s*(\d+\.\d+)")


@dataclass
class DriverInfo:
    """What ``nvidia-smi`` says: GPUs it sees and the newest CUDA the driver supports."""

    gpus: int = 0
    driver_cuda: str | None = None
    found: bool = False  # nvidia-smi ran


def parse_nvidia_smi(text: str) -> DriverInfo:
    """``nvidia-smi`` (plain table) -> GPU count and the driver's CUDA version."""
    match = _SMI_CUDA.search(text)
    # A GPU's row carries its PCI bus id; process rows further down do not.
    gpus = len(re.findall(r"^\|\s+\d+\s.*\|\s+[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d",
                          text, re.MULTILINE))
    gpus = gpus or len(re.findall(r"^GPU \d+:", text, re.MULTILINE))
    return DriverInfo(gpus=gpus, driver_cuda=match.group(1) if match else None, found=True)


def probe_driver(runner: Runner) -> DriverInfo:
    result = runner(["nvidia-smi"])
    if result is None:
        return DriverInfo()
    return parse_nvidia_smi(result.stdout)


def check_gpu(info: TorchInfo, driver: DriverInfo, gpu_site: bool = False) -> Check:
    """GPUs torch can use; a GPU site without one, or a driver too old for torch's CUDA, fails."""
    name = "gpu"
    if info.import_error:
        return Check(name, SKIP, "torch does not import")
    runtime, have = version_tuple(info.cuda_build), version_tuple(driver.driver_cuda)
    too_old = bool(runtime and have and have < runtime[:2])
    if too_old and (have[0] < runtime[0] or not info.gpu_count):
        return Check(name, FAIL,
                     f"the NVIDIA driver supports CUDA {driver.driver_cuda}, older than the CUDA "
                     f"{info.cuda_build} runtime torch was built with: torch cannot use the GPU",
                     f"use a py-torch-mpi built for CUDA <= {driver.driver_cuda}, or ask the "
                     "admins for a newer driver")
    if info.gpu_count:
        if too_old:
            return Check(name, WARN,
                         f"{info.gpu_count} GPU(s), but the driver's CUDA {driver.driver_cuda} is "
                         f"older than torch's CUDA {info.cuda_build}: runs under minor-version "
                         "compatibility (no PTX JIT)",
                         f"prefer a torch built for CUDA {driver.driver_cuda}")
        return Check(name, PASS, f"{info.gpu_count} GPU(s) visible to torch")
    if gpu_site or driver.gpus:
        seen = (f"nvidia-smi lists {driver.gpus} GPU(s) but torch sees none" if driver.gpus
                else "this is a GPU site but no GPU is visible")
        why = "" if info.cuda_build else " (torch is a CPU-only build)"
        return Check(name, FAIL, f"{seen}{why}",
                     "run on a GPU node inside the job (srun/mpiexec, --gpus) with the site's "
                     "CUDA py-torch-mpi; check CUDA_VISIBLE_DEVICES")
    return Check(name, SKIP, "no GPU visible and the site has none: GPU checks skipped")
