"""The doctor on every shipped site: a job that follows the site's design gets no FAIL,
and no two checks of one report contradict each other.

Each site is run with its own runtime variables (:func:`torchmpi.runtime.environment`,
what runtime.sh and the modules set), its launcher's job variables, the MPI library its
design loads (Cray MPICH with GTL only where ``mpi.cuda_aware`` is on) and recorded probe
outputs: a PASS line from the probe itself, and for CUDA tensors over an MPI that is not
CUDA-aware, PyTorch's own error text read from the ProcessGroupMPI fixture.
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

import pytest
from support.host_tools import load_site
from torchmpi import doctor, runtime
from torchmpi.doctor import gpu, nccl, rocm, site_env
from torchmpi.doctor.core import FAIL, PASS, CommandResult
from torchmpi.doctor.probe import OK_MARK

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / "tests" / "fixtures" / "nccl-logs"
SITES = sorted(p.stem for p in (ROOT / "sites").glob("*.yaml"))
PLUGIN_DIR = "/sw/aws-ofi-nccl-1.19.0-abcdef/lib"
#: Where Cray's libfabric module releases live (OLCF's build steps set
#: libfabric_path=/opt/cray/libfabric/2.3.1, olcf/olcf-user-docs@f0571fe
#: software/analytics/pytorch_frontier.rst:646).
CRAY_LIBFABRIC = "/opt/cray/libfabric"


def pytorch_cuda_mpi_error() -> str:
    """PyTorch's rejection of a CUDA tensor on an MPI that is not CUDA-aware, as v2.9.1 says it."""
    text = (ROOT / "tests" / "fixtures" / "process_group_mpi" / "v2.9.1.cpp").read_text()
    start = text.index('"CUDA tensor detected')
    pieces = re.findall(r'"((?:[^"\\]|\\.)*)"', text[start:start + 300])
    message = ""
    for piece in pieces:
        message += piece
        if message.endswith("support"):
            break
    assert message.startswith("CUDA tensor detected") and message.endswith("support"), message
    return "RuntimeError: " + message + "\n"


def ok(backend: str, device: str) -> CommandResult:
    return CommandResult(0, f"{OK_MARK} {backend} {device} world=1\n")


def ompi_info(argv, **_kwargs) -> CommandResult | None:
    """Recorded ``ompi_info`` of a CUDA-aware Open MPI (openmpi-cuda) installed in
    :data:`OPENMPI_CUDA`, beside its library; nothing else exists."""
    if argv[:1] == [f"{OPENMPI_CUDA}/bin/ompi_info"] and "--all" in argv:
        return CommandResult(0, f"ompi:version:full:4.1.6\npath:libdir:{OPENMPI_CUDA}/lib\n"
                                "mca:mpi:base:param:mpi_built_with_cuda_support:value:true\n")
    return None


#: Where the Spack-built openmpi-cuda of an Open MPI site lives.
OPENMPI_CUDA = "/sw/openmpi-4.1.6-cudaxyz"


#: Where :func:`design_job` lays out a site's uenv stand-in: the running test's
#: ``tmp_path`` (pytest removes it), pushed by the autouse fixture below.
_scratch: list[Path] = []


@pytest.fixture(autouse=True)
def _design_scratch(tmp_path: Path):
    _scratch.append(tmp_path)
    yield
    _scratch.pop()


def design_job(name: str) -> doctor.Inputs:
    """A healthy job on ``name``: what its design loads, sets and prints."""
    loaded = load_site(name)
    data = loaded.data
    has_gpu = isinstance(data.get("gpu"), dict)
    # AMD GPUs: a ROCm torch (torch.version.hip), GTL for HSA, RCCL with the plugin
    # aws-ofi-nccl builds for ROCm (librccl-net.so) and its log (torchmpi.doctor.rocm).
    amd = has_gpu and data["gpu"].get("vendor") == "amd"
    mpi_data = data["mpi"]
    cuda_aware = mpi_data.get("cuda_aware", True)
    env = dict(runtime.environment(data))
    launcher = data.get("launcher")
    if launcher == "slurm":
        env.update(SLURM_JOB_ID="7", SLURM_JOB_NUM_NODES="2", SLURM_NETWORK="disable_rdzv_get")
    elif launcher == "pbs":
        env.update(PBS_JOBID="7.desched1", PBS_NUM_NODES="2")
    if mpi_data["kind"] == "cray-mpich":
        # A site that names only the module: the Cray PE layout of that version.
        prefix = mpi_data.get("prefix") or (
            f"/opt/cray/pe/mpich/{mpi_data.get('version', '9.1.0')}/ofi/gnu/12.3")
        libs = [f"{prefix}/lib/libmpi_gnu_123.so.12"]
        if cuda_aware and has_gpu:
            gtl = "libmpi_gtl_hsa" if amd else "libmpi_gtl_cuda"
            libs.append(f"{prefix}/../../gtl/lib/{gtl}.so.0")
    else:
        libs = [f"{OPENMPI_CUDA}/lib/libmpi.so.40"]
    fabric = data.get("fabric")
    maps = None
    log = None
    if fabric == "slingshot":
        env["LD_LIBRARY_PATH"] = PLUGIN_DIR
        # A site that names only the module (LUMI-G): Cray's layout of the release the
        # site names (Site's answer), as LUMI's recipe finds the system libfabric
        # under /opt/cray/libfabric (sites/lumi.yaml, [plugin]).
        lib = data["libfabric"]
        assert loaded.libfabric_release, name
        root = lib.get("prefix") or f"{CRAY_LIBFABRIC}/{loaded.libfabric_release}"
        fabric_lib = f"{root}/lib64/libfabric.so.1"
        # What aws-ofi-nccl >= 1.15 installs (both names; src/Makefile.am at v1.19.2), each
        # marked as the resolver marks it: is it a name NCCL/RCCL opens with this env?
        prefix = "librccl-net" if amd else "libnccl-net"
        names = (f"{prefix}.so", f"{prefix}-ofi.so")
        opened = (rocm.plugin_names if amd else nccl.plugin_names)(env)
        maps = {name: nccl.Mapped(name, [f"{PLUGIN_DIR}/{name}", fabric_lib],
                                  opened=name in opened)
                for name in names}
        log = (LOGS / ("rccl-plugin-ofi.log" if amd else "plugin-ofi.log")).read_text()
    elif fabric == "ib" and has_gpu:
        log = (LOGS / "ib.log").read_text()
    device = "cuda" if has_gpu else "cpu"
    probes = {"probe.mpi": ok("mpi", "cpu"), "probe.gloo": ok("gloo", device)}
    if has_gpu:
        probes["probe.nccl"] = ok("nccl", "cuda")
        probes["probe.mpi_cuda"] = (ok("mpi", "cuda") if cuda_aware
                                    else CommandResult(1, pytorch_cuda_mpi_error()))
    if amd:  # builtin py-torch conflicts +gloo+rocm: no gloo backend, no gloo probe
        probes.pop("probe.gloo")
    info = gpu.TorchInfo(version="2.11.0", mpi=True, nccl=has_gpu, gloo=not amd,
                         nccl_version="2.27.7" if has_gpu else "",
                         cuda_build="12.2" if has_gpu and not amd else "",
                         hip_build="7.1.25424" if amd else None,
                         gpu_count=4 if has_gpu else 0,
                         loaded_libs=libs)
    uenv_root = None
    if data.get("uenv"):
        # The job runs inside the site's uenv (`#SBATCH --uenv=... --view=...`): what the
        # uenv tool leaves, as tests/test_doctor_site.py stands it in (eth-cscs/uenv2).
        uenv = data["uenv"]
        uenv_root = _scratch[-1] / "uenv" / "user-environment"
        (uenv_root / "meta").mkdir(parents=True)
        (uenv_root / "meta" / "env.json").write_text(json.dumps(
            {"name": uenv["image"].split("/")[0], "mount": "/user-environment",
             "views": {uenv["view"]: {"root": f"/user-environment/env/{uenv['view']}"}}}))
        env.update(UENV_MOUNT_LIST="/users/ann/.uenv-images/store.squashfs:/user-environment",
                   UENV_VIEW=f"/user-environment:{uenv['image'].split('/')[0]}:{uenv['view']}")
    return doctor.Inputs(
        uenv_root=uenv_root,
        torch=info, env=env, runner=ompi_info,
        interfaces=["lo", "hsn0", "hsn1"] if fabric == "slingshot" else ["lo", "ib0"],
        nccl_log=log,
        site=site_env.SiteExpectation(loaded.name, data, runtime.environment(data)),
        driver=gpu.DriverInfo(4, "12.2", True) if has_gpu else gpu.DriverInfo(),
        probes=probes, plugin_maps=maps)


#: Pairs of verdicts that cannot both be true: (check, status, words in its detail) twice.
CONTRADICTIONS = (
    (("mpi.cray_gpu", PASS, "NCCL the CUDA ones"), ("probe.mpi_cuda", FAIL, "")),
    (("mpi.cray_gpu", PASS, "GPU-aware Cray MPICH"), ("probe.mpi_cuda", FAIL, "")),
    (("mpi.cuda_aware", PASS, ""), ("probe.mpi_cuda", FAIL, "")),
    (("site.env", PASS, ""), ("mpi.cray_gpu", FAIL, "")),
    (("probe.mpi", PASS, ""), ("backend.mpi", FAIL, "")),
    (("probe.nccl", PASS, ""), ("backend.nccl", FAIL, "")),
)


def contradictions(checks: list[doctor.Check]) -> list[str]:
    by_name = {c.name: c for c in checks}

    def holds(name: str, status: str, words: str) -> bool:
        check = by_name.get(name)
        return check is not None and check.status == status and words in check.detail

    return [f"{a[1]} {a[0]} and {b[1]} {b[0]}" for a, b in CONTRADICTIONS
            if holds(*a) and holds(*b)]


def test_every_shipped_site_is_covered():
    assert {"alps-gh200", "derecho", "perlmutter", "generic-ib", "local"} <= set(SITES)


@pytest.mark.parametrize("name", SITES)
def test_site_design_gives_a_consistent_report_without_failure(name):
    checks = doctor.run_checks(design_job(name))
    table = doctor.format_table(checks)
    assert contradictions(checks) == [], table
    assert [c.name for c in checks if c.status == FAIL] == [], table
    assert doctor.exit_status(checks) == 0, table
    implementation = next(c for c in checks if c.name == "mpi.implementation")
    assert implementation.status == PASS and "the site's MPI" in implementation.detail, table


def test_alps_reports_cuda_over_mpi_as_the_sites_choice():
    """CSCS turns MPICH's GPU support off for PyTorch: the CUDA probe says why it is skipped."""
    checks = {c.name: c for c in doctor.run_checks(design_job("alps-gh200"))}
    assert checks["mpi.cray_gpu"].status == PASS
    assert checks["probe.mpi_cuda"].status == "SKIP"
    assert "NCCL" in checks["probe.mpi_cuda"].detail


def test_the_switch_off_in_the_job_is_the_design_without_a_site():
    """No --site: MPICH_GPU_SUPPORT_ENABLED=0 on Cray MPICH is the job saying the same."""
    inputs = design_job("alps-gh200")
    inputs.site = None
    checks = {c.name: c.status for c in doctor.run_checks(inputs)}
    assert checks["probe.mpi_cuda"] == "SKIP" and checks["mpi.cray_gpu"] == PASS


def test_a_broken_cuda_aware_site_still_fails():
    """Perlmutter's design is CUDA over MPI: the same PyTorch error there is a real FAIL."""
    inputs = design_job("perlmutter")
    inputs.probes = {**inputs.probes,
                     "probe.mpi_cuda": CommandResult(1, pytorch_cuda_mpi_error())}
    checks = {c.name: c.status for c in doctor.run_checks(inputs)}
    assert checks["probe.mpi_cuda"] == FAIL


def test_an_unset_switch_is_not_the_design_the_cuda_probe_still_judges():
    """Only MPICH_GPU_SUPPORT_ENABLED=0 says "NCCL carries CUDA tensors"; unset, Cray MPICH
    leaves GPU support off, so the job forgot it and PyTorch's rejection is a real FAIL."""
    from torchmpi.doctor import probe

    inputs = design_job("perlmutter")
    inputs.site = None
    assert inputs.env.pop(probe.GPU_SWITCH) == "1"
    inputs.probes = {**inputs.probes,
                     "probe.mpi_cuda": CommandResult(1, pytorch_cuda_mpi_error())}
    assert probe.cuda_over_mpi_off(inputs.env, None, "cray-mpich") is None
    checks = {c.name: c for c in doctor.run_checks(inputs)}
    assert checks["probe.mpi_cuda"].status == FAIL, checks["probe.mpi_cuda"]


def test_gather_does_not_start_the_cuda_mpi_probe_where_the_design_says_nccl():
    """The CUDA-over-MPI child is never started on such a job (it could only abort)."""
    from torchmpi.doctor import probe

    info = gpu.TorchInfo(version="2.11.0", mpi=True, nccl=True, gloo=True, gpu_count=4,
                         loaded_libs=["/opt/cray/pe/lib64/libmpi_gnu_123.so.12"])
    started = []

    def runner(argv, **_kwargs):
        started.append(argv[-2:])
        return ok(argv[-2], argv[-1])

    env = {"MPICH_GPU_SUPPORT_ENABLED": "0"}
    design = probe.cuda_over_mpi_off(env, None, "cray-mpich")
    probe.run_all(info, runner, env, design)
    assert ["mpi", "cuda"] not in started and ["mpi", "cpu"] in started


def test_open_mpi_without_cuda_is_no_failure_where_the_design_says_nccl():
    from torchmpi.doctor import mpi

    parsable = "mca:mpi:base:param:mpi_built_with_cuda_support:value:false\n"
    found = mpi.MpiInfo("openmpi", "4.1.6", "loaded", ompi_all=parsable)
    assert mpi.check_openmpi_cuda_aware(found, 4).status == FAIL
    design = "the site routes CUDA tensors through NCCL (mpi.cuda_aware: false)"
    check = mpi.check_openmpi_cuda_aware(found, 4, design)
    assert check.status == PASS and "as designed" in check.detail


def test_the_uenv_stand_in_leaves_nothing_behind(tmp_path: Path) -> None:
    """The Alps design's uenv stand-in lives in the test's own tmp_path, not in a
    temporary directory nobody removes."""
    before = set(Path(tempfile.gettempdir()).glob("uenv-*"))
    inputs = design_job("alps-gh200")
    assert inputs.uenv_root is not None and inputs.uenv_root.is_relative_to(tmp_path)
    assert set(Path(tempfile.gettempdir()).glob("uenv-*")) == before
