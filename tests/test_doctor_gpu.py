"""torchmpi doctor: torch, its backends, the GPU/driver check and the real probe's verdicts.

The probe's decision logic is fed recorded child outputs (what PyTorch, MPI and
NCCL print); the probe itself runs for real at the end: gloo on this machine's
CPU, and the CUDA probes only where a GPU exists (skipped otherwise, never faked).
"""

from __future__ import annotations

import os

import pytest
from torchmpi.doctor import gpu, probe, run_command
from torchmpi.doctor.core import FAIL, PASS, SKIP, WARN, CommandResult

GOOD_TORCH = gpu.TorchInfo(version="2.13.0", mpi=True, nccl=True, gloo=True,
                           nccl_version="2.27.7", cuda_build="12.8", gpu_count=4)
NO_MPI_TORCH = gpu.TorchInfo(version="2.13.0+cpu", mpi=False, nccl=False, gloo=True)
CPU_MPI_TORCH = gpu.TorchInfo(version="2.13.0", mpi=True, gloo=True)

# --- torch and backends ----------------------------------------------------------


def test_torch_imports():
    assert gpu.check_torch(GOOD_TORCH).status == PASS


def test_torch_import_failure():
    check = gpu.check_torch(gpu.TorchInfo(import_error="ImportError: libcudart.so.12"))
    assert check.status == FAIL and "libcudart" in check.detail and check.fix


def test_backend_mpi_present_and_missing():
    assert gpu.check_backend_mpi(GOOD_TORCH).status == PASS
    check = gpu.check_backend_mpi(NO_MPI_TORCH)
    assert check.status == FAIL and "py-torch-mpi" in check.fix


@pytest.mark.parametrize(("info", "status"), [
    (GOOD_TORCH, PASS),
    (NO_MPI_TORCH, WARN),  # CPU build on a CPU node: a warning
    (gpu.TorchInfo(version="x", gloo=True, gpu_count=2), FAIL),  # CPU build, GPUs present
    (gpu.TorchInfo(version="x", gloo=True, cuda_build="12.8", gpu_count=2), FAIL),
])
def test_backend_nccl(info, status):
    assert gpu.check_backend_nccl(info).status == status


def test_nccl_version_is_reported_and_2_28_9_is_not_warned():
    """aws-ofi-nccl#1055 was on EFA, and plugin 1.20.0 lists 2.28.9 as tested."""
    info = gpu.TorchInfo(version="x", nccl=True, nccl_version="2.28.9", cuda_build="12.8")
    check = gpu.check_backend_nccl(info)
    assert check.status == PASS and "NCCL 2.28.9" in check.detail


def test_backend_gloo_missing_is_a_build_choice_not_a_failure():
    assert gpu.check_backend_gloo(GOOD_TORCH).status == PASS
    check = gpu.check_backend_gloo(gpu.TorchInfo(version="x", mpi=True))
    assert check.status == WARN and "~gloo" in check.detail


def test_backend_gloo_fails_without_distributed():
    check = gpu.check_backend_gloo(gpu.TorchInfo(version="x", distributed=False))
    assert check.status == FAIL and "+distributed" in check.fix


def test_loaded_libraries_from_proc_maps():
    maps = ("7f00-7f01 r-xp 00000000 08:01 12 /opt/cray/pe/lib64/libmpi_gnu_123.so.12.0.0\n"
            "7f01-7f02 r--p 00001000 08:01 12 /opt/cray/pe/lib64/libmpi_gnu_123.so.12.0.0\n"
            "7f02-7f03 r-xp 00000000 08:01 13 /usr/lib64/libc.so.6\n"
            "7ffd-7ffe rw-p 00000000 00:00 0 [stack]\n")
    assert gpu.loaded_libraries(maps) == ["/opt/cray/pe/lib64/libmpi_gnu_123.so.12.0.0",
                                          "/usr/lib64/libc.so.6"]


# --- GPU and driver --------------------------------------------------------------

SMI_12_2 = """\
+---------------------------------------------------------------------------------------+
| NVIDIA-SMI 535.104.05             Driver Version: 535.104.05   CUDA Version: 12.2     |
|-----------------------------------------+----------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id        Disp.A | Volatile Uncorr. ECC |
|=========================================+======================+======================|
|   0  NVIDIA A100-SXM4-40GB          On  | 00000000:03:00.0 Off |                    0 |
|   1  NVIDIA A100-SXM4-40GB          On  | 00000000:41:00.0 Off |                    0 |
+-----------------------------------------+----------------------+----------------------+
| Processes:                                                                            |
|  GPU   GI   CI        PID   Type   Process name                            GPU Memory |
|=======================================================================================|
|    0   N/A  N/A     48211      C   python                                    1234MiB |
+---------------------------------------------------------------------------------------+
"""


def test_parse_nvidia_smi():
    driver = gpu.parse_nvidia_smi(SMI_12_2)
    assert (driver.gpus, driver.driver_cuda) == (2, "12.2")


def test_gpu_passes_with_a_matching_driver():
    assert gpu.check_gpu(GOOD_TORCH, gpu.DriverInfo(4, "12.8", True)).status == PASS


def test_gpu_skips_on_a_cpu_site_without_gpus():
    assert gpu.check_gpu(NO_MPI_TORCH, gpu.DriverInfo()).status == SKIP


def test_gpu_site_without_a_visible_gpu_fails():
    check = gpu.check_gpu(NO_MPI_TORCH, gpu.DriverInfo(), gpu_site=True)
    assert check.status == FAIL and "GPU site" in check.detail


def test_gpus_that_torch_cannot_see_fail():
    info = gpu.TorchInfo(version="x", cuda_build="12.8", gpu_count=0)
    check = gpu.check_gpu(info, gpu.DriverInfo(2, "12.8", True))
    assert check.status == FAIL and "torch sees none" in check.detail


def test_driver_older_than_cuda_runtime_fails():
    info = gpu.TorchInfo(version="x", cuda_build="12.8", gpu_count=0)
    check = gpu.check_gpu(info, gpu.parse_nvidia_smi(SMI_12_2), gpu_site=True)
    assert check.status == FAIL and "12.2, older than the CUDA 12.8" in check.detail


def test_driver_of_an_older_major_fails_even_if_torch_counts_gpus():
    info = gpu.TorchInfo(version="x", cuda_build="12.8", gpu_count=2)
    assert gpu.check_gpu(info, gpu.DriverInfo(2, "11.8", True)).status == FAIL


def test_older_minor_driver_is_a_warning_when_torch_runs():
    info = gpu.TorchInfo(version="x", cuda_build="12.8", gpu_count=2)
    check = gpu.check_gpu(info, gpu.parse_nvidia_smi(SMI_12_2))
    assert check.status == WARN and "minor-version" in check.detail


# --- the probe's decision logic on recorded outputs --------------------------------

CUDA_REJECTED = """\
Traceback (most recent call last):
  File "<string>", line 13, in <module>
  File ".../torch/distributed/distributed_c10d.py", line 2950, in all_reduce
    work = group.allreduce([tensor], opts)
RuntimeError: CUDA tensor detected and the MPI used doesn't have CUDA-aware MPI support
"""
GTL_ABORT = """\
MPICH ERROR [Rank 0] [job id ] [Mon Nov 23 10:02:11 2026] [nid001234] - Abort(-1) (rank 0 in \
comm 0): MPIDI_CRAY_init: GPU_SUPPORT_ENABLED is requested, but GTL library is not linked
 (Other MPI error)
aborting job:
MPIDI_CRAY_init: GPU_SUPPORT_ENABLED is requested, but GTL library is not linked
"""
NCCL_SYSTEM_ERROR = """\
torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system \
error (run with NCCL_DEBUG=INFO for details), NCCL version 2.27.7
"""
WRONG_SUM = "AssertionError: wrong all-reduce result [3.0, 3.0, 0.0, 3.0]\n"


def test_probe_passes_on_a_correct_sum():
    out = f"{probe.OK_MARK} mpi cuda world=1\n"
    check = probe.judge("probe.mpi_cuda", CommandResult(0, out))
    assert check.status == PASS and "mpi cuda world=1" in check.detail


def test_probe_reports_pytorchs_cuda_rejection_with_the_fix():
    check = probe.judge("probe.mpi_cuda", CommandResult(1, CUDA_REJECTED))
    assert check.status == FAIL
    assert "doesn't have CUDA-aware MPI support" in check.detail
    assert "CUDA-aware" in check.fix and "troubleshooting" in check.fix


def test_probe_makes_the_gtl_hint_reachable():
    check = probe.judge("probe.mpi_cuda", CommandResult(255, GTL_ABORT))
    assert check.status == FAIL and "GTL library is not linked" in check.detail
    assert "Cray GTL library is not linked into PyTorch" in check.fix


def test_probe_nccl_system_error():
    check = probe.judge("probe.nccl", CommandResult(1, NCCL_SYSTEM_ERROR))
    assert check.status == FAIL and "NCCL_SOCKET_IFNAME" in check.fix


def test_probe_wrong_sum_and_hang_fail():
    assert probe.judge("probe.gloo", CommandResult(1, WRONG_SUM)).status == FAIL
    hung = probe.judge("probe.mpi", CommandResult(124, "(timed out after 120 s)"))
    assert hung.status == FAIL and "hung" in hung.detail


def test_probe_ok_mark_needs_exit_status_zero():
    out = f"{probe.OK_MARK} mpi cpu world=1\nSegmentation fault\n"
    assert probe.judge("probe.mpi", CommandResult(139, out)).status == FAIL


def test_cpu_only_node_skips_cuda_probes_with_the_reason():
    checks = {c.name: c for c in probe.probe_checks(CPU_MPI_TORCH, {})}
    assert checks["probe.mpi_cuda"].status == SKIP
    assert "CPU-only node" in checks["probe.mpi_cuda"].detail
    assert checks["probe.nccl"].status == SKIP and "no NCCL backend" in checks["probe.nccl"].detail


def test_gpu_node_probes_gloo_and_nccl_with_cuda_tensors():
    """On a GPU node the gloo probe sends a CUDA tensor (a CPU one proves nothing about the
    GPU path); only probe.mpi stays on the CPU.  The children's output is recorded."""
    started: list[tuple[str, str]] = []

    def runner(argv, **_kwargs):
        backend, device = argv[-2:]
        started.append((backend, device))
        return CommandResult(0, f"{probe.OK_MARK} {backend} {device} world=1\n")

    results = probe.run_all(GOOD_TORCH, runner, {})
    assert started == [("mpi", "cpu"), ("mpi", "cuda"), ("nccl", "cuda"), ("gloo", "cuda")]
    checks = {c.name: c for c in probe.probe_checks(GOOD_TORCH, results)}
    assert "gloo cuda" in checks["probe.gloo"].detail
    assert probe.probe_device(CPU_MPI_TORCH, None) == "cpu"


def test_cuda_through_nccl_by_design_leaves_out_only_the_cuda_probe_over_mpi():
    """Where the design routes CUDA tensors through NCCL (CSCS), the CUDA-over-MPI probe
    is not started and SKIPs with the design's reason; the NCCL probe, which is then
    the GPU path, and the others still run and are judged."""
    design = probe.cuda_over_mpi_off({}, {"mpi": {"cuda_aware": False}}, "cray-mpich")
    assert design
    started: list[tuple[str, str]] = []

    def runner(argv, **_kwargs):
        backend, device = argv[-2:]
        started.append((backend, device))
        return CommandResult(0, f"{probe.OK_MARK} {backend} {device} world=1\n")

    results = probe.run_all(GOOD_TORCH, runner, {}, design)
    assert started == [("mpi", "cpu"), ("nccl", "cuda"), ("gloo", "cuda")]
    checks = {c.name: c for c in probe.probe_checks(GOOD_TORCH, results, design)}
    assert checks["probe.mpi_cuda"].status == SKIP and checks["probe.mpi_cuda"].detail == design
    assert [checks[n].status for n in ("probe.mpi", "probe.nccl", "probe.gloo")] == [PASS] * 3


def test_probe_tensor_is_on_the_device_it_was_asked_for():
    """The real probe child with a device that is not the CPU and exists without a GPU
    (torch's "meta": shapes, no data).  Its tensor must be made there, so reading the
    sum back fails with torch's own words; a tensor made on the CPU would pass."""
    result = probe.run_probe(run_command, dict(os.environ), "gloo", "meta")
    check = probe.judge("probe.gloo", result)
    assert check.status == FAIL and "meta tensor" in check.detail, (check, result)


def test_probe_env_drops_the_launchers_rank_variables():
    env = {"OMPI_COMM_WORLD_RANK": "1", "PMI_RANK": "1", "PMIX_RANK": "1", "RANK": "1",
           "OMPI_MCA_btl": "^openib", "OMPI_ALLOW_RUN_AS_ROOT": "1", "FI_PROVIDER": "cxi"}
    assert probe.probe_env(env) == {"OMPI_MCA_btl": "^openib", "OMPI_ALLOW_RUN_AS_ROOT": "1",
                                    "FI_PROVIDER": "cxi"}


def test_nccl_probe_log_goes_to_the_output_the_doctor_reads():
    env = {"NCCL_DEBUG_FILE": "/tmp/nccl.%h.%p", "NCCL_DEBUG": "WARN"}
    assert probe.probe_env(env, NCCL_DEBUG="INFO") == {"NCCL_DEBUG": "INFO"}


# --- the real probe ------------------------------------------------------------------


def test_doctor_probe_synchronises_before_its_collective():
    """The probe fills its tensor with a kernel; on CUDA it waits before all_reduce."""
    import ast

    body = ast.parse(probe._SCRIPT).body

    def calls(node):
        return {ast.unparse(n.func) for n in ast.walk(node) if isinstance(n, ast.Call)}

    fill = next(i for i, n in enumerate(body) if "torch.full" in calls(n))
    reduce = next(i for i, n in enumerate(body) if "dist.all_reduce" in calls(n))
    between = body[fill + 1:reduce]
    assert any("torch.cuda.synchronize" in calls(n) for n in between), ast.unparse(between)


def test_real_gloo_probe_on_this_cpu():
    info = gpu.probe_torch()
    results = probe.run_all(info, run_command, dict(os.environ))
    check = probe.probe_check("probe.gloo", info, "gloo", probe.probe_device(info, None),
                              results.get("probe.gloo"))
    assert check.status == PASS, check


def _gpu_info() -> gpu.TorchInfo:
    info = gpu.probe_torch()
    if not info.gpu_count:
        pytest.skip("no GPU visible: the CUDA probes need one")
    return info


@pytest.mark.parametrize(("name", "backend"), [("probe.nccl", "nccl"), ("probe.gloo", "gloo"),
                                               ("probe.mpi_cuda", "mpi")])
def test_real_cuda_probe_on_a_gpu(name, backend):
    info = _gpu_info()
    if not getattr(info, backend):
        pytest.skip(f"this torch has no {backend} backend")
    result = probe.run_probe(run_command, dict(os.environ), backend, "cuda")
    check = probe.probe_check(name, info, backend, "cuda", result)
    # NCCL and gloo must work on any CUDA torch; MPI must either work or say why.
    assert check.status == PASS or (backend == "mpi" and check.fix), (check, result)


def test_real_child_output_is_judged_with_pytorchs_text():
    """The pip CPU torch has no MPI backend: run the MPI probe anyway and judge its real output."""
    info = gpu.probe_torch()
    if info.mpi:
        pytest.skip("this torch has an MPI backend")
    result = probe.run_probe(run_command, dict(os.environ), "mpi", "cpu")
    check = probe.judge("probe.mpi", result)
    assert check.status == FAIL and "doesn't have MPI built in" in check.detail
    assert check.fix.startswith("this PyTorch has no MPI backend")


def test_a_torch_that_fails_to_load_by_any_error_is_the_finding(tmp_path):
    """A torch whose import dies with an OSError (a shared library the loader cannot
    open, as a torch built for another CUDA does) is reported, not raised."""
    import subprocess
    import sys

    broken = tmp_path / "torch"
    broken.mkdir()
    (broken / "__init__.py").write_text(
        "raise OSError('libcudart.so.12: cannot open shared object file')\n")
    code = ("import sys; sys.path.insert(0, sys.argv[1])\n"
            "from torchmpi.doctor.gpu import probe_torch\n"
            "print(probe_torch().import_error)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                          text=True, check=False, env={**os.environ, "PYTHONNOUSERSITE": "1"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "OSError: libcudart.so.12: cannot open shared object file"
