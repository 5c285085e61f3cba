"""The doctor on an AMD GPU node (torchmpi.doctor.rocm), from recorded outputs.

No AMD GPU is at hand: ROCm's tools are fed their outputs in the shape the
public record shows (cited at each), RCCL's ``NCCL_DEBUG=INFO`` logs are
tests/fixtures/nccl-logs/rccl-*.log (README there), and RCCL's plugin lookup
runs the real loader over gcc-built stand-ins named as aws-ofi-nccl's ROCm
build names them.  A ROCm torch is described as the doctor's probe records
one (``torch.version.hip`` set, ``torch.version.cuda`` None).
"""

from __future__ import annotations

import ast
import shutil
import subprocess
from pathlib import Path

import pytest
from support import ROOT
from torchmpi import doctor
from torchmpi.doctor import gpu, nccl, rocm, site_env
from torchmpi.doctor.core import CommandResult, run_command
from torchmpi.doctor.probe import OK_MARK

LOGS = ROOT / "tests" / "fixtures" / "nccl-logs"

#: ``amd-smi static --asic --driver`` on a node with two GCDs of an MI250X, in the
#: shape ROCm/rocm-systems#2987 records (a ``GPU: <n>`` block, ASIC then DRIVER;
#: MI250X's market name as rocminfo prints it, ROCm/rocm_smi_lib#160).
_AMD_SMI_GPU = """\
GPU: {n}
    ASIC:
        MARKET_NAME: AMD Instinct MI250X/MI250
        VENDOR_ID: 0x1002
        TARGET_GRAPHICS_VERSION: gfx90a
    DRIVER:
        NAME: amdgpu
        VERSION: 6.8.5
"""
AMD_SMI = "\n".join(_AMD_SMI_GPU.format(n=n) for n in (0, 1))
#: ``rocm-smi --showproductname``: every line of a GPU starts ``GPU[<n>]``
#: (ROCm/legacy-rocm-build#1886); the card series as wandb/wandb#5449 records it.
ROCM_SMI = """\
============================ ROCm System Management Interface ============================
====================================== Product Info ======================================
GPU[0]\t\t: Card series: \t\tAMD INSTINCT MI200 (MCM) OAM LC MBA HPE C2
GPU[0]\t\t: Card vendor: \t\tAdvanced Micro Devices, Inc. [AMD/ATI]
GPU[1]\t\t: Card series: \t\tAMD INSTINCT MI200 (MCM) OAM LC MBA HPE C2
GPU[1]\t\t: Card vendor: \t\tAdvanced Micro Devices, Inc. [AMD/ATI]
==========================================================================================
"""

GTL_HSA = "/opt/cray/pe/mpich/8.1.31/gtl/lib/libmpi_gtl_hsa.so.0"
ROCM_TORCH = gpu.TorchInfo(
    version="2.10.0", cuda_build=None, hip_build="6.2.41133-dd7f95766", mpi=True, nccl=True,
    gloo=False, nccl_version="2.22.3", gpu_count=8, lib_dir="/sw/py-torch/lib",
    loaded_libs=["/opt/cray/pe/mpich/8.1.31/ofi/gnu/12.3/lib/libmpi_gnu_123.so.12", GTL_HSA])


def smi_runner(amd: str | None = AMD_SMI, rocm_smi: str | None = ROCM_SMI):
    def runner(argv, **_kwargs):
        if argv[0] == "amd-smi" and amd is not None:
            return CommandResult(0, amd)
        if argv[0] == "rocm-smi" and rocm_smi is not None:
            return CommandResult(0, rocm_smi)
        return None
    return runner


def test_amd_smi_and_rocm_smi_are_read() -> None:
    amd = rocm.parse_amd_smi(AMD_SMI)
    assert (amd.gpus, amd.tool, amd.names, amd.driver) == (
        2, "amd-smi", ["AMD Instinct MI250X/MI250"], "6.8.5")
    old = rocm.parse_rocm_smi(ROCM_SMI)
    assert (old.gpus, old.names) == (2, ["AMD INSTINCT MI200 (MCM) OAM LC MBA HPE C2"])
    assert rocm.probe_smi(smi_runner()).tool == "amd-smi"
    assert rocm.probe_smi(smi_runner(amd=None)).tool == "rocm-smi"
    assert rocm.probe_smi(smi_runner(None, None)) == rocm.SmiInfo()


def test_the_gpu_check_of_a_rocm_torch() -> None:
    smi = rocm.parse_amd_smi(AMD_SMI)
    seen = rocm.check_gpu(8, "6.2.41133", smi)
    assert seen.status == "PASS" and "amd-smi lists 2" in seen.detail and "amdgpu 6.8.5" in (
        seen.detail)
    hidden = rocm.check_gpu(0, "6.2.41133", smi)
    assert hidden.status == "FAIL" and "HIP_VISIBLE_DEVICES" in hidden.fix
    assert rocm.check_gpu(0, "6.2.41133", rocm.SmiInfo(), gpu_site=True).status == "FAIL"
    assert rocm.check_gpu(0, "6.2.41133", rocm.SmiInfo()).status == "SKIP"


def test_rccl_plugin_names_follow_rccl() -> None:
    """RCCL's lookup, not NCCL's: librccl-net.so (and libnccl-net.so, which some
    releases want), a NCCL_NET_PLUGIN path as given, a name as librccl-net-<name>.so."""
    assert rocm.plugin_names({}) == ["librccl-net.so", "libnccl-net.so"]
    path = "/sw/frontier/rccl-plugins/aws-ofi-nccl/1.19.2/rocm/7.1.1/lib/librccl-net.so"
    assert rocm.plugin_names({"NCCL_NET_PLUGIN": path}) == [path]
    assert rocm.plugin_names({"NCCL_NET_PLUGIN": "ofi"}) == ["librccl-net-ofi.so"]


@pytest.mark.parametrize(("value", "names"), [
    ("ofi", ["librccl-net-ofi.so"]),
    ("/opt/p/librccl-net.so", ["/opt/p/librccl-net.so"]),
    ("./librccl-net.so", ["./librccl-net.so"]),
    ("librccl-anp.so", ["librccl-anp.so"]),  # lib*.so: taken as given, nothing composed
    ("libfoo.so.1", ["libfoo.so.1", "librccl-net-libfoo.so.1.so"]),
    ("ofi,/opt/p/librccl-net.so", ["librccl-net-ofi.so", "/opt/p/librccl-net.so"]),
    (",ofi,,", ["librccl-net-ofi.so"]),  # strtok_r skips empty names
    ("ofi, anp", ["librccl-net-ofi.so", "librccl-net- anp.so"]),  # split at "," only
    ("none", []),
    ("NONE", []),
])
def test_rccl_reads_nccl_net_plugin_as_nccl_2_27_does(value: str, names: list[str]) -> None:
    """One reader for both: RCCL's loader on NCCL 2.27 splits NCCL_NET_PLUGIN at commas
    and tries each name as NCCL 2.27.7 does (as given, then <prefix>-<name>.so unless a
    path or a lib*.so name), with RCCL's prefix librccl-net where NCCL has libnccl-net;
    "none" in any case loads no external plugin."""
    assert rocm.plugin_names({"NCCL_NET_PLUGIN": value}) == names
    nvidia = [n.replace("librccl-net-", "libnccl-net-") for n in names]
    assert nccl.plugin_names({"NCCL_NET_PLUGIN": value}) == nvidia


def test_rccl_none_loads_no_external_plugin() -> None:
    """NCCL_NET_PLUGIN=none: RCCL tries none and librccl-net-none.so, finds neither and
    uses its internal transports, so the check says to unset it (as for NCCL), not that
    an empty list of files is missing."""
    assert rocm.plugin_names({"NCCL_NET_PLUGIN": "none"}) == []
    check = rocm.check_rccl_plugin({"NCCL_NET_PLUGIN": "none"}, nccl.PluginInfo(), True, 2)
    assert check.status == "FAIL" and check.fix == "unset NCCL_NET_PLUGIN", check
    assert "RCCL uses TCP sockets" in check.detail, check  # RCCL's job, in its name
    assert "no external plugin" in check.detail and "finds no  " not in check.detail, check


def test_an_rccl_plugin_list_is_tried_name_by_name() -> None:
    """A list names every file RCCL would look for, each with RCCL's prefix."""
    env = {"NCCL_NET_PLUGIN": "anp,ofi"}
    assert rocm.plugin_names(env) == ["librccl-net-anp.so", "librccl-net-ofi.so"]
    check = rocm.check_rccl_plugin(env, nccl.PluginInfo(), True, 2)
    assert check.status == "FAIL" and (
        "librccl-net-anp.so or librccl-net-ofi.so" in check.detail), check


@pytest.fixture(scope="module")
def plugin_dir(tmp_path_factory) -> Path:
    """aws-ofi-nccl 1.19.0 built for ROCm as Spack installs it: lib/librccl-net.so
    (NEEDing a libfabric.so.1 stand-in), no libnccl-net.so."""
    cc = shutil.which("gcc")
    if cc is None:
        pytest.fail("no gcc (apt install gcc)")
    root = tmp_path_factory.mktemp("rocm-plugin")
    fabric = root / "libfabric" / "lib64"
    lib = root / "aws-ofi-nccl-1.19.0-q2w3e4r" / "lib"
    fabric.mkdir(parents=True)
    lib.mkdir(parents=True)
    (root / "f.c").write_text("int fi_getinfo(void) { return 0; }\n")
    (root / "p.c").write_text("extern int fi_getinfo(void);\n"
                              "int ncclNetPlugin_v8(void) { return fi_getinfo(); }\n")
    subprocess.run([cc, "-shared", "-fPIC", "-Wl,-soname,libfabric.so.1", "-o",
                    str(fabric / "libfabric.so.1"), str(root / "f.c")], check=True)
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib / "librccl-net.so"), str(root / "p.c"),
                    f"-L{fabric}", "-l:libfabric.so.1", f"-Wl,-rpath,{fabric}"], check=True)
    return lib


def _plugin(env: dict) -> nccl.PluginInfo:
    return nccl.plugin_from_maps(rocm.resolve_plugin(env, run_command))


def test_a_lone_rocm_ofi_library_is_not_what_rccl_opens(plugin_dir: Path,
                                                       tmp_path: Path) -> None:
    """Configured --disable-nccl-net-library the ROCm build ships librccl-net-ofi.so
    alone (aws-ofi-nccl src/Makefile.am at v1.19.2); unset, no RCCL release opens it
    (librccl-net.so or libnccl-net.so), so the fix is NCCL_NET_PLUGIN=ofi, which RCCL
    turns into librccl-net-ofi.so (src/plugin/plugin_open.cc@145a0512, pluginPrefix)."""
    lib = tmp_path / "aws-ofi-nccl-1.19.0-nolink" / "lib"
    lib.mkdir(parents=True)
    shutil.copy(plugin_dir / "librccl-net.so", lib / "librccl-net-ofi.so")
    env = {"LD_LIBRARY_PATH": str(lib), "NCCL_NET": "AWS Libfabric"}
    plugin = _plugin(env)
    assert plugin.libraries == {} and list(plugin.unused) == ["librccl-net-ofi.so"]
    check = rocm.check_rccl_plugin(env, plugin, True, 4)
    assert check.status == "FAIL" and "NCCL_NET_PLUGIN=ofi" in check.fix, check
    assert "librccl-net-ofi.so" in check.detail and "libnccl-net" not in check.detail, check
    env["NCCL_NET_PLUGIN"] = "ofi"
    plugin = _plugin(env)
    assert plugin.libraries == {"librccl-net-ofi.so": str(lib / "librccl-net-ofi.so")}
    assert rocm.check_rccl_plugin(env, plugin, True, 4).status == "PASS"


def test_the_rocm_plugin_is_found_as_rccl_finds_it(plugin_dir: Path) -> None:
    """The real loader: librccl-net.so on LD_LIBRARY_PATH (or its path in NCCL_NET_PLUGIN)
    is RCCL's plugin, its release read from the prefix, its libfabric mapped."""
    env = {"LD_LIBRARY_PATH": str(plugin_dir), "NCCL_NET": "OFI", "SLURM_JOB_NUM_NODES": "2"}
    plugin = _plugin(env)
    assert plugin.libraries == {"librccl-net.so": str(plugin_dir / "librccl-net.so")}
    assert plugin.version == (1, 19, 0) and plugin.libfabric.endswith("libfabric.so.1")
    check = rocm.check_rccl_plugin(env, plugin, slingshot=True, nodes=2,
                                   rccl_version="2.26.6")
    assert check.status == "PASS" and "librccl-net.so ->" in check.detail, check
    by_path = {"NCCL_NET_PLUGIN": str(plugin_dir / "librccl-net.so"), "NCCL_NET": "OFI"}
    check = rocm.check_rccl_plugin(by_path, _plugin(by_path), slingshot=True, nodes=2)
    assert check.status == "PASS" and f"NCCL_NET_PLUGIN={by_path['NCCL_NET_PLUGIN']}" in (
        check.detail), check


@pytest.mark.parametrize(("rccl", "nodes", "status"), [
    ("2.27.7", 2, "WARN"),  # ROCm 7.1's RCCL opens libnccl-net.so; after #4201 not
    (None, 2, "WARN"),  # the release not known: either name
    ("2.26.6", 2, "PASS"),  # NCCL 2.26's loader: librccl-net.so, found
    ("2.27.7", 1, "PASS"),  # one node: no plugin needed (the NCCL check's rule)
])
def test_a_rocm_plugin_under_one_default_name_is_judged_by_the_rccl_release(
        plugin_dir: Path, rccl: str | None, nodes: int, status: str) -> None:
    """Unset, RCCL 2.27.7 opens libnccl-net.so from ROCm 7.1.0 (NCCL 2.27's loader) and
    librccl-net.so again after ROCm/rocm-systems#4201: a plugin under librccl-net.so
    alone (aws-ofi-nccl --with-rocm as built by hand) is a WARN there, naming the path
    to set; with both names (torchmpi's install links them) it PASSes."""
    env = {"LD_LIBRARY_PATH": str(plugin_dir), **({"NCCL_NET": "OFI"} if nodes > 1 else {})}
    check = rocm.check_rccl_plugin(env, _plugin(env), slingshot=True, nodes=nodes,
                                   rccl_version=rccl)
    assert check.status == status, check
    if status == "WARN":
        assert "only librccl-net.so" in check.detail and "not libnccl-net.so" in (
            check.detail), check
        assert check.fix.startswith(
            f"export NCCL_NET_PLUGIN={plugin_dir / 'librccl-net.so'} "), check


def test_a_rocm_plugin_under_both_names_passes_and_nccls_name_alone_fails_before_2_27(
        plugin_dir: Path, tmp_path: Path) -> None:
    """Linked as torchmpi's aws-ofi-nccl installs it, every release finds it; with
    libnccl-net.so alone an RCCL before 2.27 (librccl-net.so only) finds nothing."""
    both = tmp_path / "both"
    both.mkdir()
    (both / "librccl-net.so").symlink_to(plugin_dir / "librccl-net.so")
    (both / "libnccl-net.so").symlink_to("librccl-net.so")
    env = {"LD_LIBRARY_PATH": str(both), "NCCL_NET": "OFI"}
    for rccl in ("2.27.7", None, "2.26.6"):
        check = rocm.check_rccl_plugin(env, _plugin(env), True, 2, rccl_version=rccl)
        assert check.status == "PASS", (rccl, check)
    (both / "librccl-net.so").unlink()
    (both / "libnccl-net.so").unlink()
    (both / "libnccl-net.so").symlink_to(plugin_dir / "librccl-net.so")
    check = rocm.check_rccl_plugin(env, _plugin(env), True, 2, rccl_version="2.26.6")
    assert check.status == "FAIL" and "opens librccl-net.so only" in check.detail, check
    check = rocm.check_rccl_plugin(env, _plugin(env), True, 2, rccl_version="2.27.7")
    assert check.status == "WARN" and "only libnccl-net.so" in check.detail, check


def test_a_missing_rocm_plugin_is_named_in_rccl_terms(plugin_dir: Path) -> None:
    """No plugin on the path: Slingshot multi-node FAILs naming librccl-net.so (what
    RCCL opens), not NVIDIA's libnccl-net.so; a plugin name RCCL cannot find FAILs
    with the file it looked for."""
    env = {"LD_LIBRARY_PATH": "/nonexistent"}
    check = rocm.check_rccl_plugin(env, _plugin(env), slingshot=True, nodes=2)
    assert check.status == "FAIL" and "librccl-net.so" in check.detail, check
    assert "libnccl-net.so" not in check.detail
    named = {"LD_LIBRARY_PATH": str(plugin_dir), "NCCL_NET_PLUGIN": "ofi"}
    check = rocm.check_rccl_plugin(named, _plugin(named), slingshot=True, nodes=2)
    assert check.status == "FAIL" and "librccl-net-ofi.so" in check.detail, check


@pytest.mark.parametrize(("log", "status", "said"), [
    ("rccl-plugin-ofi.log", "PASS", "libfabric provider cxi"),
    ("rccl-no-plugin-socket.log", "FAIL", "Could not find: librccl-net.so"),
    ("rccl-plugin-provider-tcp.log", "FAIL", "tcp does not"),
])
def test_rccl_logs_are_judged_as_nccl_logs(log: str, status: str, said: str) -> None:
    """RCCL's log lines are NCCL's: the network, the plugin and its provider line."""
    check = rocm.check_rccl_network((LOGS / log).read_text(), slingshot=True, nodes=2)
    assert check.status == status and said in check.detail, check
    if status == "FAIL" and "Socket" in (LOGS / log).read_text():
        assert "librccl-net.so" in check.fix and "libnccl-net.so" not in check.fix


def ok(backend: str, device: str) -> CommandResult:
    return CommandResult(0, f"{OK_MARK} {backend} {device} world=1\n")


def frontier_inputs(torch: gpu.TorchInfo = ROCM_TORCH, **env: str) -> doctor.Inputs:
    """A Frontier-like node: ROCm torch, Cray MPICH with GTL for HSA loaded, the
    plugin on LD_LIBRARY_PATH, the RCCL probe passed with its log."""
    plugin_dir = "/sw/aws-ofi-nccl-1.19.0-q2w3e4r/lib"
    base = {"LD_LIBRARY_PATH": plugin_dir, "MPICH_GPU_SUPPORT_ENABLED": "1", "NCCL_NET": "OFI",
            "SLURM_JOB_ID": "1", "SLURM_JOB_NUM_NODES": "2", "SLURM_NETWORK": "disable_rdzv_get",
            "FI_CXI_RDZV_PROTO": "alt_read"}
    fabric = "/opt/cray/libfabric/2.3.1/lib64/libfabric.so.1"
    maps = {"librccl-net.so": nccl.Mapped("librccl-net.so",
                                          [f"{plugin_dir}/librccl-net.so", fabric]),
            "libnccl-net.so": nccl.Mapped("libnccl-net.so", error="libnccl-net.so: cannot open "
                                          "shared object file: No such file or directory")}
    return doctor.Inputs(
        torch=torch, env={**base, **env}, runner=lambda *a, **k: None,
        interfaces=["lo", "hsn0", "hsn1", "hsn2", "hsn3"],
        nccl_log=(LOGS / "rccl-plugin-ofi.log").read_text(),
        site=site_env.SiteExpectation("frontier", {"fabric": "slingshot",
                                                   "gpu": {"vendor": "amd"}}, {}),
        rocm_smi=rocm.parse_amd_smi(AMD_SMI),
        probes={"probe.mpi": ok("mpi", "cpu"), "probe.mpi_cuda": ok("mpi", "cuda"),
                "probe.nccl": ok("nccl", "cuda")},
        plugin_maps=maps, container=[doctor.Check("container", "SKIP", "not in a container")])


def _checks(inputs: doctor.Inputs) -> dict[str, doctor.Check]:
    return {c.name: c for c in doctor.run_checks(inputs)}


def test_a_healthy_amd_node_reports_rocm_rccl_and_gtl_for_hsa() -> None:
    """torch as a ROCm build, GPUs from amd-smi, RCCL as the nccl backend and its probe,
    the ROCm plugin and the cxi provider, GTL for HSA with the switch on."""
    checks = _checks(frontier_inputs())
    assert "ROCm/HIP 6.2.41133" in checks["torch"].detail
    assert checks["backend.nccl"].status == "PASS" and "RCCL 2.22.3" in (
        checks["backend.nccl"].detail)
    assert checks["gpu"].status == "PASS" and "amd-smi" in checks["gpu"].detail
    assert checks["backend.gloo"].status == "SKIP" and "ROCm build" in (
        checks["backend.gloo"].detail)
    assert checks["mpi.cray_gpu"].status == "PASS", checks["mpi.cray_gpu"]
    assert checks["probe.nccl"].status == "PASS"
    assert checks["nccl.plugin"].status == "PASS" and "librccl-net.so" in (
        checks["nccl.plugin"].detail)
    assert checks["nccl.network"].status == "PASS" and "cxi" in checks["nccl.network"].detail
    bad = {n: c.detail for n, c in checks.items() if c.status == "FAIL"}
    assert not bad, bad


def test_the_gpu_switch_without_gtl_for_hsa_names_it() -> None:
    """MPICH_GPU_SUPPORT_ENABLED=1 without libmpi_gtl_hsa in the process: FAIL naming
    the HSA GTL (not CUDA's), with the LD_PRELOAD fix for it."""
    torch = gpu.TorchInfo(**{**ROCM_TORCH.__dict__,
                             "loaded_libs": ROCM_TORCH.loaded_libs[:1]})
    check = _checks(frontier_inputs(torch))["mpi.cray_gpu"]
    assert check.status == "FAIL" and "libmpi_gtl_hsa is not loaded" in check.detail, check
    assert "gtl/lib/libmpi_gtl_hsa.so" in check.fix
    off = _checks(frontier_inputs(MPICH_GPU_SUPPORT_ENABLED="0"))["mpi.cray_gpu"]
    assert off.status == "FAIL" and "HIP buffers" in off.detail, off


def test_the_probes_run_on_a_rocm_torch() -> None:
    """The RCCL probe is the NCCL probe with a cuda tensor: started on a ROCm torch
    with GPUs, as on NVIDIA (the child's argv is recorded, nothing runs)."""
    from torchmpi.doctor import probe

    started = []

    def runner(argv, **_kwargs):
        started.append(tuple(argv[-2:]))
        return ok(*argv[-2:])

    results = probe.run_all(ROCM_TORCH, runner, {})
    assert ("nccl", "cuda") in started and ("mpi", "cuda") in started
    assert probe.judge("probe.nccl", results["probe.nccl"]).status == "PASS"


def test_nothing_on_the_compute_node_side_asks_for_a_cuda_build() -> None:
    """``torchmpi allreduce``, the launcher glue and the probes drive GPUs through
    ``torch.cuda``, which a ROCm build provides; none reads ``torch.version.cuda``
    (which is None there), so they run unchanged over RCCL."""
    for module in ("allreduce.py", "dist.py", "doctor/probe.py", "commands/allreduce.py"):
        tree = ast.parse((ROOT / "wrapper" / "torchmpi" / module).read_text())
        reads = [node.lineno for node in ast.walk(tree)
                 if isinstance(node, ast.Attribute) and node.attr == "cuda"
                 and isinstance(node.value, ast.Attribute) and node.value.attr == "version"]
        assert not reads, (module, reads)


def rocm_failures() -> list[doctor.Check]:
    """The FAIL paths a ROCm torch adds or words differently (and the one-name WARN)."""
    from torchmpi.doctor import mpi

    cray = mpi.MpiInfo("cray-mpich")
    hip = "6.2.41133"
    return [
        rocm.check_gpu(0, hip, rocm.parse_amd_smi(AMD_SMI)),
        gpu.check_backend_nccl(gpu.TorchInfo(version="x", hip_build=hip, gpu_count=8)),
        mpi.check_cray_gpu_support(cray, {"MPICH_GPU_SUPPORT_ENABLED": "1"}, "",
                                   gtl_name=rocm.GTL),
        mpi.check_cray_gpu_support(cray, {}, "libmpi_gtl_hsa.so", gtl_name=rocm.GTL),
        rocm.check_rccl_plugin({"NCCL_NET_PLUGIN": "ofi"}, nccl.PluginInfo(), True, 2),
        rocm.check_rccl_plugin({}, nccl.PluginInfo(), True, 2),
        *(rocm.check_rccl_plugin({"NCCL_NET": "OFI"}, nccl.PluginInfo(
            libraries={name: f"/sw/aws-ofi-nccl-1.19.2-x/lib/{name}"}, version=(1, 19, 2)),
            True, 2, rccl_version=release)
          for name, release in (("librccl-net.so", "2.27.7"), ("libnccl-net.so", "2.26.6"))),
        rocm.check_rccl_network((LOGS / "rccl-no-plugin-socket.log").read_text(), True, 2),
    ]


@pytest.mark.parametrize("check", rocm_failures(), ids=lambda c: f"{c.name}-{c.status}")
def test_troubleshooting_quotes_each_rocm_failure_and_its_fix(check: doctor.Check) -> None:
    text = (ROOT / "docs" / "troubleshooting.md").read_text()
    section = text[text.index("## AMD GPUs (ROCm)"):]
    assert check.status in ("FAIL", "WARN")
    assert f"`{check.status} {check.name}  {check.detail}`" in section
    assert f"`{check.fix}`" in section


def test_the_gpu_check_names_the_models_the_tool_lists() -> None:
    """amd-smi's market names beside its count; none where the tool gave none."""
    seen = rocm.check_gpu(8, "6.2.41133", rocm.parse_amd_smi(AMD_SMI))
    assert "amd-smi lists 2 (AMD Instinct MI250X/MI250), amdgpu 6.8.5" in seen.detail
    bare = rocm.check_gpu(2, "6.2.41133", rocm.SmiInfo(2, "rocm-smi", [], None))
    assert bare.detail.endswith("; rocm-smi lists 2"), bare.detail


def test_a_job_of_unknown_size_is_warned_of_a_plugin_under_one_name() -> None:
    """The node count not known (no launcher variable): judged as a multi-node job,
    as the NCCL check does, not as one node."""
    plugin = nccl.PluginInfo(libraries={"librccl-net.so": "/sw/aws-ofi-nccl-1.19.2-x/lib/"
                                        "librccl-net.so"}, version=(1, 19, 2))
    check = rocm.check_rccl_plugin({"NCCL_NET": "OFI"}, plugin, True, None, rccl_version="2.27.7")
    assert check.status == "WARN" and "only librccl-net.so" in check.detail, check


def test_nccl_net_is_still_judged_when_nccl_net_plugin_names_the_plugin() -> None:
    """NCCL_NET_PLUGIN by path is RCCL's to read; NCCL_NET (and the rest of the job's
    environment) still goes to the NCCL check's rules: a 1.12 plugin registers only as
    "AWS Libfabric", so NCCL_NET=OFI stops the job however the plugin was named."""
    path = "/sw/aws-ofi-nccl-1.12.1-x/lib/librccl-net.so"
    plugin = nccl.PluginInfo(libraries={path: path}, version=(1, 12, 1))
    check = rocm.check_rccl_plugin({"NCCL_NET_PLUGIN": path, "NCCL_NET": "OFI"}, plugin,
                                   True, 2, rccl_version="2.26.6")
    assert check.status == "FAIL" and "registers only as AWS Libfabric" in check.detail, check
