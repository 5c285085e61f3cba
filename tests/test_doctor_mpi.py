"""torchmpi doctor: which MPI is loaded, Open MPI's CUDA support, Cray MPICH's GPU switch."""

from __future__ import annotations

import pytest
from torchmpi.doctor import mpi, run_command
from torchmpi.doctor.core import FAIL, PASS, SKIP, WARN, CommandResult


def canned(outputs: dict[str, str]):
    """A runner that knows some programs (by argv joined with spaces) and no others."""
    def runner(argv, **_kwargs):
        key = " ".join(map(str, argv))
        return CommandResult(0, outputs[key]) if key in outputs else None
    return runner


NO_PROGRAMS = canned({})
OMPI_TRUE = "mca:mpi:base:param:mpi_built_with_cuda_support:value:true\n"
OMPI_FALSE = "mca:mpi:base:param:mpi_built_with_cuda_support:value:false\n"


def openmpi(parsable: str):
    return canned({"ompi_info --version": "Open MPI v5.0.8\n",
                   "ompi_info --parsable --all": parsable})


# --- identification by the libraries really loaded ---------------------------------


@pytest.mark.parametrize(("library", "flavour"), [
    ("/opt/cray/pe/lib64/libmpi_cray.so.12.0.0", "CCE"),
    ("/opt/cray/pe/mpich/8.1.28/ofi/gnu/12.3/lib/libmpi_gnu_123.so.12", "GNU 123"),
    ("/opt/cray/pe/lib64/libmpi_gnu_91.so.12", "GNU 91"),
    ("/opt/cray/pe/lib64/libmpi_intel.so.12", "Intel"),
    ("/opt/cray/pe/lib64/libmpi_aocc.so.12", "AOCC"),
    ("/opt/cray/pe/lib64/libmpi_nvidia.so.12", "NVIDIA"),
], ids=["cce", "gnu-path", "gnu-91", "intel", "aocc", "nvidia"])
def test_every_cray_mpich_build_is_cray_mpich(library, flavour):
    # An Open MPI on PATH must not win over the library torch loaded.
    found = mpi.identify_mpi(openmpi(OMPI_TRUE), {}, loaded=[library, "/usr/lib64/libc.so.6"])
    assert found.kind == "cray-mpich" and f"{flavour} build" in found.source


def test_cray_version_from_the_library_path():
    lib = "/opt/cray/pe/mpich/8.1.28/ofi/gnu/12.3/lib/libmpi_gnu_123.so.12"
    assert mpi.identify_mpi(NO_PROGRAMS, {}, loaded=[lib]).version == "8.1.28"


def test_cray_mpich_libmpich_alias_is_not_plain_mpich():
    libs = ["/opt/cray/pe/mpich/8.1.28/ofi/gnu/12.3/lib/libmpich.so",
            "/opt/cray/pe/lib64/libmpi_gnu_123.so.12"]
    assert mpi.identify_mpi(NO_PROGRAMS, {}, loaded=libs).kind == "cray-mpich"


def test_cray_from_torch_ldd_when_nothing_is_loaded():
    ldd = "\tlibmpi_gnu_123.so.12 => /opt/cray/pe/lib64/libmpi_gnu_123.so.12 (0x7f)\n"
    found = mpi.identify_mpi(openmpi(OMPI_TRUE), {}, ldd)
    assert found.kind == "cray-mpich" and "linked into libtorch_cpu.so" in found.source


@pytest.mark.parametrize(("library", "kind"), [
    ("/usr/lib/x86_64-linux-gnu/libmpich.so.12", "mpich"),
    ("/opt/mpich/lib/libmpi.so.12.4.3", "mpich"),
    ("/opt/openmpi/lib/libmpi.so.40.40.7", "openmpi"),
    ("/opt/openmpi/lib/libopen-pal.so.80", "openmpi"),
])
def test_mpich_and_openmpi_libraries(library, kind):
    assert mpi.identify_mpi(NO_PROGRAMS, {}, loaded=[library]).kind == kind


def test_loaded_open_mpi_is_confirmed_with_ompi_info():
    found = mpi.identify_mpi(openmpi(OMPI_TRUE), {}, loaded=["/x/lib/libmpi.so.40"])
    assert (found.kind, found.version) == ("openmpi", "5.0.8")
    assert found.source == "loaded + ompi_info"


def test_identify_from_path_tools_when_torch_loads_no_mpi():
    assert mpi.identify_mpi(openmpi(OMPI_TRUE), {}).source == "ompi_info on PATH"
    found = mpi.identify_mpi(canned({"mpichversion": "MPICH Version:\t4.2.3\n"}), {})
    assert (found.kind, found.version) == ("mpich", "4.2.3")


def test_cray_module_without_library():
    found = mpi.identify_mpi(NO_PROGRAMS, {"CRAY_MPICH_VERSION": "8.1.30"})
    assert (found.kind, found.version) == ("cray-mpich", "8.1.30")


def test_mpi_implementation_missing_fails():
    assert mpi.check_mpi_implementation(mpi.identify_mpi(NO_PROGRAMS, {})).status == FAIL
    assert mpi.check_mpi_implementation(mpi.MpiInfo("openmpi", "5.0.8", "x")).status == PASS


# --- Open MPI CUDA support (ompi_info --parsable --all) ------------------------------


def test_openmpi_cuda_aware():
    found = mpi.MpiInfo("openmpi")
    assert mpi.check_openmpi_cuda_aware(found, openmpi(OMPI_TRUE), 4).status == PASS


def test_openmpi_not_cuda_aware_fails_with_gpus_warns_without():
    found = mpi.MpiInfo("openmpi")
    with_gpu = mpi.check_openmpi_cuda_aware(found, openmpi(OMPI_FALSE), 4)
    assert with_gpu.status == FAIL and "not CUDA-aware" in with_gpu.detail
    assert mpi.check_openmpi_cuda_aware(found, openmpi(OMPI_FALSE), 0).status == WARN


def test_openmpi_cuda_field_unreadable():
    found = mpi.MpiInfo("openmpi")
    assert mpi.check_openmpi_cuda_aware(found, openmpi("garbage\n"), 0).status == WARN


def test_real_ompi_info_is_not_cuda_aware():
    """Debian's Open MPI is built without CUDA: the doctor must say so."""
    found = mpi.identify_mpi(run_command, {})
    assert found.kind == "openmpi"
    check = mpi.check_openmpi_cuda_aware(found, run_command, gpu_count=0)
    assert check.status == WARN and "not CUDA-aware" in check.detail


# --- Cray MPICH: GTL and MPICH_GPU_SUPPORT_ENABLED ------------------------------------

GTL_LDD = "\tlibmpi_gtl_cuda.so.0 => /opt/cray/pe/mpich/8.1.30/gtl/lib/libmpi_gtl_cuda.so.0\n"
CRAY = mpi.MpiInfo("cray-mpich")


@pytest.mark.parametrize(("env", "ldd", "status"), [
    ({"MPICH_GPU_SUPPORT_ENABLED": "1"}, GTL_LDD, PASS),
    ({"MPICH_GPU_SUPPORT_ENABLED": "1",
      "LD_PRELOAD": "/opt/cray/pe/mpich/8.1.30/gtl/lib/libmpi_gtl_cuda.so"}, "", PASS),
    ({}, "", PASS),  # GPU support off on purpose (CSCS): consistent
    ({"MPICH_GPU_SUPPORT_ENABLED": "1"}, "", FAIL),  # MPI_Init aborts
    ({"MPICH_GPU_SUPPORT_ENABLED": "0"}, GTL_LDD, FAIL),  # silent segfaults
    ({}, GTL_LDD, FAIL),
], ids=["both", "preloaded", "neither", "set-without-gtl", "gtl-with-0", "gtl-unset"])
def test_cray_gpu_support(env, ldd, status):
    assert mpi.check_cray_gpu_support(CRAY, env, ldd).status == status


def test_gtl_seen_among_loaded_libraries():
    loaded = ["/opt/cray/pe/mpich/8.1.30/gtl/lib/libmpi_gtl_cuda.so.0"]
    check = mpi.check_cray_gpu_support(CRAY, {"MPICH_GPU_SUPPORT_ENABLED": "1"}, "", loaded)
    assert check.status == PASS


@pytest.mark.parametrize("value", ["yes", "true", "2", ""])
def test_gpu_switch_other_than_0_or_1_is_flagged(value):
    check = mpi.check_cray_gpu_support(CRAY, {"MPICH_GPU_SUPPORT_ENABLED": value}, GTL_LDD)
    assert check.status == WARN and "neither 0 nor 1" in check.detail
    assert "unset/0" not in check.detail and check.fix.endswith("=1")


def test_cray_check_skips_elsewhere():
    assert mpi.check_cray_gpu_support(mpi.MpiInfo("openmpi"), {}, "").status == SKIP
