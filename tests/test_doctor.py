"""torchmpi doctor: each check passes and fails on real inputs.

Checks take their inputs as arguments, so most tests hand them a TorchInfo, an
environment, a recorded NCCL log or a canned command runner.  The tests at the
end use the real machine instead: Debian's ompi_info (not CUDA-aware) and the
pip CPU torch (no MPI backend).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from mpi_launch import TORCHMPI, job_env
from torchmpi import doctor as d

LOGS = Path(__file__).parent / "fixtures" / "nccl-logs"
GOOD_TORCH = d.TorchInfo(version="2.13.0", mpi=True, nccl=True, gloo=True,
                         nccl_version="2.27.7", cuda_build="12.8", gpu_count=4)
NO_MPI_TORCH = d.TorchInfo(version="2.13.0+cpu", mpi=False, nccl=False, gloo=True)


def log(name: str) -> str:
    return (LOGS / name).read_text()


def canned(outputs: dict[str, str]) -> d.Runner:
    """A runner that knows some programs (by argv joined with spaces) and no others."""
    def runner(argv, **_kwargs):
        key = " ".join(map(str, argv))
        return d.CommandResult(0, outputs[key]) if key in outputs else None
    return runner


NO_PROGRAMS = canned({})

# --- torch and backends ----------------------------------------------------


def test_torch_imports():
    assert d.check_torch(GOOD_TORCH).status == d.PASS


def test_torch_import_failure():
    check = d.check_torch(d.TorchInfo(import_error="ImportError: libcudart.so.12"))
    assert check.status == d.FAIL and "libcudart" in check.detail and check.fix


def test_backend_mpi_present():
    assert d.check_backend_mpi(GOOD_TORCH).status == d.PASS


def test_backend_mpi_missing_fails_with_fix():
    check = d.check_backend_mpi(NO_MPI_TORCH)
    assert check.status == d.FAIL and "py-torch-mpi" in check.fix


def test_backend_nccl_present():
    assert d.check_backend_nccl(GOOD_TORCH).status == d.PASS


@pytest.mark.parametrize(("info", "status"), [
    (NO_MPI_TORCH, d.WARN),  # CPU build on a CPU node: a warning
    (d.TorchInfo(version="x", gloo=True, gpu_count=2), d.FAIL),  # CPU build, GPUs present
    (d.TorchInfo(version="x", gloo=True, cuda_build="12.8", gpu_count=2), d.FAIL),
])
def test_backend_nccl_missing(info, status):
    assert d.check_backend_nccl(info).status == status


def test_backend_gloo():
    assert d.check_backend_gloo(GOOD_TORCH).status == d.PASS
    assert d.check_backend_gloo(d.TorchInfo(version="x")).status == d.FAIL


def test_nccl_version():
    assert d.check_nccl_version(GOOD_TORCH).detail == "NCCL 2.27.7"
    bad = d.TorchInfo(version="x", nccl=True, nccl_version="2.28.9")
    assert d.check_nccl_version(bad).status == d.WARN
    assert d.check_nccl_version(NO_MPI_TORCH).status == d.SKIP


def test_gpu_checks_skip_without_gpu():
    assert d.check_gpu(NO_MPI_TORCH).status == d.SKIP
    assert d.check_gpu(GOOD_TORCH).status == d.PASS


# --- MPI ---------------------------------------------------------------------

OMPI_TRUE = "mca:mpi:base:param:mpi_built_with_cuda_support:value:true\n"
OMPI_FALSE = "mca:mpi:base:param:mpi_built_with_cuda_support:value:false\n"


def openmpi(parsable: str) -> d.Runner:
    return canned({"ompi_info --version": "Open MPI v5.0.8\n",
                   "ompi_info --parsable --all": parsable})


def test_identify_openmpi_from_ompi_info():
    mpi = d.identify_mpi(openmpi(OMPI_TRUE), {})
    assert (mpi.kind, mpi.version) == ("openmpi", "5.0.8")


def test_identify_mpich_from_mpichversion():
    mpi = d.identify_mpi(canned({"mpichversion": "MPICH Version:\t4.2.3\n"}), {})
    assert (mpi.kind, mpi.version) == ("mpich", "4.2.3")


def test_identify_cray_from_torch_link_beats_path_tools():
    ldd = "\tlibmpi_cray.so.12 => /opt/cray/pe/lib64/libmpi_cray.so.12 (0x7f)\n"
    assert d.identify_mpi(openmpi(OMPI_TRUE), {}, ldd).kind == "cray-mpich"


def test_mpi_implementation_missing():
    mpi = d.identify_mpi(NO_PROGRAMS, {})
    assert d.check_mpi_implementation(mpi).status == d.FAIL
    assert d.check_mpi_implementation(d.MpiInfo("openmpi", "5.0.8", "x")).status == d.PASS


def test_openmpi_cuda_aware():
    mpi = d.MpiInfo("openmpi")
    assert d.check_openmpi_cuda_aware(mpi, openmpi(OMPI_TRUE), 4).status == d.PASS


def test_openmpi_not_cuda_aware_fails_with_gpus_warns_without():
    mpi = d.MpiInfo("openmpi")
    with_gpu = d.check_openmpi_cuda_aware(mpi, openmpi(OMPI_FALSE), 4)
    assert with_gpu.status == d.FAIL and "not CUDA-aware" in with_gpu.detail
    assert d.check_openmpi_cuda_aware(mpi, openmpi(OMPI_FALSE), 0).status == d.WARN


def test_openmpi_cuda_field_unreadable():
    mpi = d.MpiInfo("openmpi")
    assert d.check_openmpi_cuda_aware(mpi, openmpi("garbage\n"), 0).status == d.WARN


GTL_LDD = "\tlibmpi_gtl_cuda.so.0 => /opt/cray/pe/mpich/8.1.30/gtl/lib/libmpi_gtl_cuda.so.0\n"
CRAY = d.MpiInfo("cray-mpich")


@pytest.mark.parametrize(("env", "ldd", "status"), [
    ({"MPICH_GPU_SUPPORT_ENABLED": "1"}, GTL_LDD, d.PASS),
    ({"MPICH_GPU_SUPPORT_ENABLED": "1",
      "LD_PRELOAD": "/opt/cray/pe/mpich/8.1.30/gtl/lib/libmpi_gtl_cuda.so"}, "", d.PASS),
    ({}, "", d.PASS),  # GPU support off on purpose (CSCS): consistent
    ({"MPICH_GPU_SUPPORT_ENABLED": "1"}, "", d.FAIL),  # MPI_Init aborts
    ({"MPICH_GPU_SUPPORT_ENABLED": "0"}, GTL_LDD, d.FAIL),  # silent segfaults
    ({}, GTL_LDD, d.FAIL),
], ids=["both", "preloaded", "neither", "set-without-gtl", "gtl-with-0", "gtl-unset"])
def test_cray_gpu_support(env, ldd, status):
    assert d.check_cray_gpu_support(CRAY, env, ldd).status == status


def test_cray_check_skips_elsewhere():
    assert d.check_cray_gpu_support(d.MpiInfo("openmpi"), {}, "").status == d.SKIP


# --- NCCL environment and interfaces ----------------------------------------


def test_nccl_env_plugin_clash():
    env = {"NCCL_NET": "AWS Libfabric", "NCCL_NET_PLUGIN": "ofi"}
    check = d.check_nccl_env(env)
    assert check.status == d.FAIL and "unset NCCL_NET_PLUGIN" in check.fix
    assert d.check_nccl_env({"NCCL_NET": "AWS Libfabric"}).status == d.PASS


@pytest.mark.parametrize(("spec", "status"), [
    ("hsn", d.PASS), ("hsn0,hsn1", d.PASS), ("^docker0,lo", d.PASS), ("=hsn0", d.PASS),
    ("eth7", d.FAIL), ("=hsn", d.FAIL), ("ib", d.FAIL),
])
def test_socket_ifname(spec, status):
    interfaces = ["lo", "hsn0", "hsn1", "docker0"]
    check = d.check_socket_ifname({"NCCL_SOCKET_IFNAME": spec}, interfaces)
    assert check.status == status, check.detail


def test_socket_ifname_unset_passes():
    assert d.check_socket_ifname({}, ["lo"]).status == d.PASS


# --- NCCL logs -------------------------------------------------------------


@pytest.mark.parametrize(("name", "slingshot", "status", "words"), [
    ("plugin-ofi.log", True, d.PASS, "AWS Libfabric"),
    ("ib.log", False, d.PASS, "IB"),
    ("socket-fallback-hsn.log", True, d.FAIL, "sockets on Slingshot"),
    ("socket-fallback-hsn.log", False, d.WARN, "No plugin found"),
    ("plugin-clash.log", True, d.FAIL, "Could not find: ofi libnccl-net-ofi.so"),
    ("unhandled-system-error.log", False, d.FAIL, "unhandled system error"),
    ("no-network-line.log", False, d.WARN, "does not say"),
])
def test_nccl_network_from_log(name, slingshot, status, words):
    check = d.check_nccl_network(log(name), slingshot)
    assert check.status == status and words in check.detail, check


def test_nccl_network_without_log_skips():
    assert d.check_nccl_network(None, True).status == d.SKIP


def test_parse_socket_interfaces():
    assert d.parse_nccl_log(log("socket-fallback-hsn.log")).socket_interfaces == ["hsn0", "hsn1"]
    assert d.parse_nccl_log(log("ib.log")).socket_interfaces == []


@pytest.mark.parametrize(("name", "status"), [
    ("plugin-ofi.log", d.PASS), ("socket-fallback-hsn.log", d.PASS),
    ("docker0.log", d.FAIL), ("loopback.log", d.WARN),
])
def test_nccl_interfaces_from_log(name, status):
    assert d.check_nccl_interfaces(log(name)).status == status


def test_slingshot_detection():
    assert d.on_slingshot({"fabric": "slingshot"}, ["eth0"])
    assert d.on_slingshot(None, ["lo", "hsn0"])
    assert not d.on_slingshot({"fabric": "infiniband"}, ["lo", "ib0"])


# --- site variables --------------------------------------------------------


def test_compare_env_reports_missing_and_different():
    expected = {"NCCL_CROSS_NIC": 1, "FI_CXI_DISABLE_HOST_REGISTER": "1",
                "FI_MR_CACHE_MONITOR": "userfaultfd"}
    actual = {"NCCL_CROSS_NIC": "1", "FI_MR_CACHE_MONITOR": "memhooks"}
    diffs = d.compare_env(expected, actual)
    assert [(x.name, x.actual) for x in diffs] == [
        ("FI_CXI_DISABLE_HOST_REGISTER", None), ("FI_MR_CACHE_MONITOR", "memhooks")]


def test_site_env_check():
    assert d.check_site_env({"A": "1"}, {"A": "1"}).status == d.PASS
    check = d.check_site_env({"A": "1", "B": "x"}, {"A": "2"}, "alps")
    assert check.status == d.FAIL and "A=2 (want 1)" in check.detail and "B unset" in check.detail
    assert d.check_site_env(None, {}).status == d.SKIP


def test_expected_env_from_site_layouts():
    assert d.expected_env({"runtime": {"source": "HPE", "env": {"X": "1"}}}) == {"X": "1"}
    assert d.expected_env({"runtime_env": {"Y": 2}}) == {"Y": 2}
    assert d.expected_env({"env": {"Z": "z"}}) == {"Z": "z"}


# --- the real machine ------------------------------------------------------


def test_real_ompi_info_is_not_cuda_aware():
    """Debian's Open MPI is built without CUDA: the doctor must say so."""
    mpi = d.identify_mpi(d.run_command, {})
    assert mpi.kind == "openmpi"
    check = d.check_openmpi_cuda_aware(mpi, d.run_command, gpu_count=0)
    assert check.status == d.WARN and "not CUDA-aware" in check.detail


def doctor_cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([TORCHMPI, "doctor", *args], env=job_env(**env),
                          capture_output=True, text=True, timeout=120, check=False)


def test_doctor_cli_on_this_machine(tmp_path):
    """The pip CPU torch has no MPI backend: FAIL with the fix, exit status 1."""
    site = tmp_path / "mysite.yaml"
    site.write_text("name: mysite\nfabric: slingshot\n"
                    "runtime:\n  source: test\n  env:\n    NCCL_CROSS_NIC: 1\n")
    proc = doctor_cli("--json", "--site", str(site), "--nccl-log",
                      str(LOGS / "socket-fallback-hsn.log"), NCCL_CROSS_NIC="1")
    assert proc.returncode == 1, proc.stderr
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    assert checks["backend.mpi"]["status"] == "FAIL" and checks["backend.mpi"]["fix"]
    assert checks["mpi.implementation"]["detail"].startswith("Open MPI")
    assert "not CUDA-aware" in checks["mpi.cuda_aware"]["detail"]
    assert checks["gpu"]["status"] == "SKIP"
    assert checks["nccl.network"]["status"] == "FAIL"  # socket fallback on a Slingshot site
    assert checks["site.env"]["status"] == "PASS"


def test_doctor_cli_table_and_site_mismatch(tmp_path):
    site = tmp_path / "plain.yaml"
    site.write_text("env:\n  FI_CXI_DEFAULT_CQ_SIZE: 131072\n")
    proc = doctor_cli("--site", str(site), FI_CXI_DEFAULT_CQ_SIZE="1024")
    assert proc.returncode == 1
    assert "FAIL  site.env" in proc.stdout
    assert "FI_CXI_DEFAULT_CQ_SIZE=1024 (want 131072)" in proc.stdout


def test_doctor_cli_unknown_site_is_a_user_error():
    proc = doctor_cli("--site", "no-such-site-anywhere")
    assert proc.returncode == 2 and "no site file" in proc.stderr


def test_compute_node_verbs_work_without_site_tooling_modules():
    """py-torch-mpi installs the wrapper without jsonschema/jinja2/archspec."""
    code = (
        "import sys\n"
        "for m in ('jsonschema', 'jinja2', 'archspec', 'archspec.cpu'): sys.modules[m] = None\n"
        "from torchmpi.cli import main\n"
        "sys.exit(main(['doctor', '--json']))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=job_env(), capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 1, proc.stderr  # FAIL: the pip torch has no MPI backend
    assert json.loads(proc.stdout)["checks"][0]["name"] == "torch"
