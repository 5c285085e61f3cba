"""torchmpi doctor: which MPI is loaded, Open MPI's CUDA support, Cray MPICH's GPU switch."""

from __future__ import annotations

import shutil
from pathlib import Path

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
OMPI_LIB = "/opt/openmpi/lib/libmpi.so.40"
OMPI_TRUE = "mca:mpi:base:param:mpi_built_with_cuda_support:value:true\n"
OMPI_FALSE = "mca:mpi:base:param:mpi_built_with_cuda_support:value:false\n"


def ompi_all(parsable: str, libdir: str = "/opt/openmpi/lib") -> str:
    """``ompi_info --parsable --all`` of the Open MPI installed with that libdir."""
    return f"ompi:version:full:5.0.8\npath:libdir:{libdir}\n{parsable}"


def openmpi(parsable: str, tool: str = "/opt/openmpi/bin/ompi_info", libdir: str =
            "/opt/openmpi/lib"):
    """A node where ``tool`` is the ompi_info of the Open MPI in ``libdir``."""
    return canned({f"{tool} --parsable --all": ompi_all(parsable, libdir)})


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
    found = mpi.identify_mpi(openmpi(OMPI_TRUE, "ompi_info"), {},
                             loaded=[library, "/usr/lib64/libc.so.6"])
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
    found = mpi.identify_mpi(openmpi(OMPI_TRUE, "ompi_info"), {}, ldd)
    assert found.kind == "cray-mpich" and "linked into libtorch_cpu.so" in found.source
    assert found.library == "/opt/cray/pe/lib64/libmpi_gnu_123.so.12"


@pytest.mark.parametrize(("library", "kind"), [
    ("/usr/lib/x86_64-linux-gnu/libmpich.so.12", "mpich"),
    ("/opt/mpich/lib/libmpi.so.12.4.3", "mpich"),
    ("/opt/openmpi/lib/libmpi.so.40.40.7", "openmpi"),
    ("/opt/openmpi/lib/libopen-pal.so.80", "openmpi"),
])
def test_mpich_and_openmpi_libraries(library, kind):
    assert mpi.identify_mpi(NO_PROGRAMS, {}, loaded=[library]).kind == kind


def test_loaded_open_mpi_is_read_with_its_own_ompi_info():
    found = mpi.identify_mpi(openmpi(OMPI_TRUE), {}, loaded=[OMPI_LIB])
    assert (found.kind, found.version) == ("openmpi", "5.0.8")
    assert found.source == f"loaded: {OMPI_LIB}, /opt/openmpi/bin/ompi_info"


def test_an_open_mpi_on_path_does_not_speak_for_another_one():
    """The ompi_info on PATH is another installation's (its libdir is not the
    loaded library's): neither its version nor its CUDA support is this MPI's."""
    runner = openmpi(OMPI_TRUE, "ompi_info", "/usr/lib/x86_64-linux-gnu/openmpi/lib")
    found = mpi.identify_mpi(runner, {}, loaded=[OMPI_LIB])
    assert (found.kind, found.version, found.ompi_all) == ("openmpi", "", "")
    check = mpi.check_openmpi_cuda_aware(found, 4)
    assert check.status == WARN and OMPI_LIB in check.detail


def test_the_ompi_info_on_path_counts_when_it_is_that_open_mpi():
    found = mpi.identify_mpi(openmpi(OMPI_FALSE, "ompi_info"), {}, loaded=[OMPI_LIB])
    assert found.version == "5.0.8" and found.source.endswith(", ompi_info")
    assert mpi.check_openmpi_cuda_aware(found, 4).status == FAIL


def test_nothing_on_path_identifies_an_mpi_torch_does_not_load():
    """With no MPI library in torch, an Open MPI on PATH or a Cray MPICH
    module in the environment is not 'the MPI'."""
    runner = canned({"ompi_info --version": "Open MPI v4.1.6\n", "mpichversion":
                     "MPICH Version:\t4.2.3\n", "ompi_info --parsable --all": OMPI_TRUE})
    assert mpi.identify_mpi(runner, {"CRAY_MPICH_VERSION": "8.1.30"}).kind is None


def test_mpich_version_from_its_own_mpichversion():
    runner = canned({"/opt/mpich/bin/mpichversion": "MPICH Version:\t4.2.3\n"})
    found = mpi.identify_mpi(runner, {}, loaded=["/opt/mpich/lib/libmpi.so.12"])
    assert (found.kind, found.version) == ("mpich", "4.2.3")


# --- verdicts: no backend, the site's MPI ---------------------------------------------

NO_BACKEND = "this torch has no MPI backend (see backend.mpi)"
OPEN_MPI = mpi.MpiInfo("openmpi", "4.1.6", "loaded: /usr/lib/libmpi.so.40",
                       "/usr/lib/libmpi.so.40", ompi_all(OMPI_FALSE))
PERLMUTTER = {"name": "perlmutter", "mpi": {"kind": "cray-mpich", "version": "8.1.28"}}


def test_no_mpi_backend_skips_every_mpi_check():
    """A pip torch loads no MPI; an Open MPI beside it, or the Cray switch a
    site module set, is not judged."""
    switch = {"MPICH_GPU_SUPPORT_ENABLED": "1"}
    for check in (mpi.check_mpi_implementation(OPEN_MPI, NO_BACKEND, PERLMUTTER),
                  mpi.check_openmpi_cuda_aware(OPEN_MPI, 4, None, NO_BACKEND),
                  mpi.check_cray_gpu_support(mpi.MpiInfo(None), switch, "", (), NO_BACKEND)):
        assert check.status == SKIP and "no MPI backend" in check.detail


def test_not_the_sites_mpi_fails_under_site():
    check = mpi.check_mpi_implementation(OPEN_MPI, None, PERLMUTTER)
    assert check.status == FAIL, check
    assert "Open MPI 4.1.6" in check.detail and "Cray MPICH 8.1.28" in check.detail
    assert check.fix == mpi.MISMATCH_FIX


def test_the_sites_mpi_passes_and_openmpi_cuda_is_open_mpi():
    cray = mpi.MpiInfo("cray-mpich", "8.1.28", "loaded: libmpi_gnu_123.so.12")
    assert mpi.check_mpi_implementation(cray, None, PERLMUTTER).status == PASS
    generic = {"name": "generic-ib", "mpi": {"kind": "openmpi-cuda"}}
    assert mpi.check_mpi_implementation(OPEN_MPI, None, generic).status == PASS
    assert mpi.check_mpi_implementation(OPEN_MPI).status == PASS  # no site: what it is


def test_the_images_mpich_passes_only_where_the_site_runs_it():
    """CSCS's Container Engine injects no Cray MPICH: the image's MPICH is the design
    there; in a podman-hpc container on Perlmutter it means the injection failed."""
    image = mpi.MpiInfo("mpich", "4.3.0", "loaded: /usr/lib/libmpich.so.12")
    alps = {"name": "alps-gh200", "mpi": {"kind": "cray-mpich"}, "container": {"runtime": "ce"}}
    assert mpi.check_mpi_implementation(image, None, alps, "ce (TORCHMPI_CONTAINER)"
                                        ).status == PASS
    assert mpi.check_mpi_implementation(image, None, alps).status == FAIL  # not in the image
    check = mpi.check_mpi_implementation(image, None, PERLMUTTER, "podman-hpc (x)")
    assert check.status == FAIL and "in a container (podman-hpc (x))" in check.detail


def test_a_backend_without_a_known_library_warns():
    assert mpi.check_mpi_implementation(mpi.MpiInfo(None)).status == WARN


# --- Open MPI CUDA support (that Open MPI's ompi_info --parsable --all) -----------------


def test_openmpi_cuda_aware():
    found = mpi.MpiInfo("openmpi", ompi_all=ompi_all(OMPI_TRUE))
    assert mpi.check_openmpi_cuda_aware(found, 4).status == PASS


def test_openmpi_not_cuda_aware_fails_with_gpus_warns_without():
    found = mpi.MpiInfo("openmpi", ompi_all=ompi_all(OMPI_FALSE))
    with_gpu = mpi.check_openmpi_cuda_aware(found, 4)
    assert with_gpu.status == FAIL and "not CUDA-aware" in with_gpu.detail
    assert mpi.check_openmpi_cuda_aware(found, 0).status == WARN


def test_openmpi_cuda_field_unreadable():
    found = mpi.MpiInfo("openmpi", ompi_all="garbage\n")
    assert mpi.check_openmpi_cuda_aware(found, 0).status == WARN


#: Debian's Open MPI as a process maps it (libmpi.so.40 resolved by the kernel).
DEBIAN_LIBMPI = Path("/usr/lib/x86_64-linux-gnu/libmpi.so.40").resolve()


def test_real_ompi_info_is_not_cuda_aware():
    """Debian's Open MPI is built without CUDA: the doctor must say so, reading the
    ompi_info on PATH because its libdir holds the very library loaded."""
    found = mpi.identify_mpi(run_command, {}, loaded=[str(DEBIAN_LIBMPI)])
    assert found.kind == "openmpi" and found.version.startswith("4.")
    check = mpi.check_openmpi_cuda_aware(found, gpu_count=0)
    assert check.status == WARN and "not CUDA-aware" in check.detail


def test_real_copy_of_open_mpi_is_not_read_with_debians_ompi_info(tmp_path):
    """A second Open MPI (here a copy of Debian's libmpi in another prefix) whose own
    ompi_info is absent: Debian's ompi_info on PATH is refused, so its answer is a WARN."""
    lib = tmp_path / "lib" / DEBIAN_LIBMPI.name
    lib.parent.mkdir()
    shutil.copy(DEBIAN_LIBMPI, lib)
    found = mpi.identify_mpi(run_command, {}, loaded=[str(lib)])
    assert found.kind == "openmpi" and found.ompi_all == ""
    check = mpi.check_openmpi_cuda_aware(found, gpu_count=0)
    assert check.status == WARN and str(lib) in check.detail


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
