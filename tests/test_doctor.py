"""torchmpi doctor: the report as a whole, the CLI, and this machine.

The per-concern checks are tested in test_doctor_{gpu,mpi,nccl,site}.py.  Here:
run_checks over hand-built inputs, then the real CLI on this machine (pip CPU
torch without an MPI backend, Debian's Open MPI without CUDA).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from support.blocked_imports import SITE_TOOLING, python_without
from support.cli_run import doctor_in_process
from support.doctor_inputs import mapped_at
from support.host_tools import path_without
from support.mpi_launch import TORCHMPI, job_env
from torchmpi import doctor
from torchmpi.cli import main
from torchmpi.doctor import container, gpu, mpi, nccl, network, origin, probe, site_env
from torchmpi.doctor.core import CommandResult, job_nodes, run_command, version_tuple
from torchmpi.doctor.probe import OK_MARK

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / "tests" / "fixtures" / "nccl-logs"
CRAY_TORCH = gpu.TorchInfo(
    version="2.11.0", mpi=True, nccl=True, gloo=True, nccl_version="2.27.7",
    cuda_build="12.2", gpu_count=4,
    loaded_libs=["/opt/cray/pe/mpich/8.1.28/ofi/gnu/12.3/lib/libmpi_gnu_123.so.12",
                 "/opt/cray/pe/mpich/8.1.28/gtl/lib/libmpi_gtl_cuda.so.0"])


def no_programs(argv, **_kwargs):
    return None


def ok(backend: str, device: str) -> CommandResult:
    return CommandResult(0, f"{OK_MARK} {backend} {device} world=1\n")


def cray_inputs(**env: str) -> doctor.Inputs:
    """A Perlmutter-like GPU node with aws-ofi-nccl 1.19.0 on LD_LIBRARY_PATH."""
    plugin_dir = "/sw/aws-ofi-nccl-1.19.0-abcdef/lib"
    base = {"LD_LIBRARY_PATH": plugin_dir, "MPICH_GPU_SUPPORT_ENABLED": "1",
            "NCCL_NET": "AWS Libfabric",
            "SLURM_JOB_ID": "1", "SLURM_JOB_NUM_NODES": "2", "SLURM_NETWORK": "disable_rdzv_get",
            "FI_CXI_RDZV_PROTO": "alt_read"}
    probes = {"probe.mpi": ok("mpi", "cpu"), "probe.mpi_cuda": ok("mpi", "cuda"),
              "probe.nccl": ok("nccl", "cuda"), "probe.gloo": ok("gloo", "cuda")}
    return doctor.Inputs(
        torch=CRAY_TORCH, env={**base, **env}, runner=no_programs,
        interfaces=["lo", "hsn0", "hsn1"], nccl_log=(LOGS / "plugin-ofi.log").read_text(),
        site=site_env.SiteExpectation("perlmutter", {"fabric": "slingshot", "gpu": {}},
                                      {"NCCL_NET": "AWS Libfabric"}),
        driver=gpu.DriverInfo(4, "12.2", True), probes=probes,
        plugin_maps=mapped_at(plugin_dir, "libnccl-net.so", "libnccl-net-ofi.so"))


def statuses(inputs: doctor.Inputs) -> dict[str, str]:
    return {c.name: c.status for c in doctor.run_checks(inputs)}


def test_healthy_cray_gpu_node_has_no_failure():
    got = statuses(cray_inputs())
    assert got["mpi.implementation"] == "PASS" and got["mpi.cray_gpu"] == "PASS"
    assert got["probe.mpi_cuda"] == "PASS" and got["launcher.flags"] == "PASS"
    assert got["nccl.plugin"] == "PASS" and got["nccl.interfaces"] == "PASS"
    assert [n for n, s in got.items() if s in ("FAIL", "WARN")] == []


def test_a_cuda_torchs_plugin_check_speaks_nccls_file_names():
    """The plugin check is NCCL's on a CUDA torch and RCCL's only on a ROCm one: RCCL's
    wording (librccl-net.so) on an NVIDIA node would send the user after a file NCCL
    never opens."""
    check = next(c for c in doctor.run_checks(cray_inputs()) if c.name == "nccl.plugin")
    assert "libnccl-net.so -> /sw/aws-ofi-nccl-1.19.0-abcdef/lib/libnccl-net.so" in (
        check.detail), check
    assert "rccl" not in check.detail.lower()


@pytest.mark.parametrize(("env", "check"), [
    ({"MPICH_GPU_SUPPORT_ENABLED": "0"}, "mpi.cray_gpu"),
    ({"NCCL_NET": "OFI", "LD_LIBRARY_PATH": "/sw/aws-ofi-nccl-1.6.0-x/lib"}, "nccl.plugin"),
    ({"SLURM_NETWORK": "single"}, "launcher.flags"),
    ({"NCCL_SOCKET_IFNAME": "ib"}, "nccl.socket_ifname"),
])
def test_one_bad_setting_fails_its_check(env, check):
    inputs = cray_inputs(**env)
    if "LD_LIBRARY_PATH" in env:  # what the loader then maps is that directory's plugin
        inputs.plugin_maps = mapped_at(env["LD_LIBRARY_PATH"], "libnccl-net.so")
    got = statuses(inputs)
    assert got[check] == "FAIL", got


def test_probe_failure_fails_the_report_with_pytorchs_text():
    inputs = cray_inputs()
    inputs.probes = {**inputs.probes, "probe.mpi_cuda": CommandResult(1, (
        "RuntimeError: CUDA tensor detected and the MPI used doesn't have CUDA-aware MPI "
        "support\n"))}
    checks = {c.name: c for c in doctor.run_checks(inputs)}
    assert checks["probe.mpi_cuda"].status == "FAIL"
    assert doctor.exit_status(list(checks.values())) == 1


def test_every_check_name_is_in_troubleshooting():
    """docs/troubleshooting.md names every check the report can print."""
    text = (ROOT / "docs" / "troubleshooting.md").read_text()
    for check in doctor.run_checks(cray_inputs()):
        assert f"`{check.name}`" in text or f" {check.name} " in text, check.name


def test_the_table_aligns_names_shows_fixes_of_failures_and_counts_each_status():
    """One line a check, the fix under a FAIL or WARN only, and a count of each status."""
    checks = [doctor.Check("torch", "PASS", "torch 2.11.0", "not shown"),
              doctor.Check("site.env", "WARN", "one differs", "source runtime.sh"),
              doctor.Check("gpu", "FAIL", "no GPU", "ask for one"),
              doctor.Check("uenv", "SKIP", "no uenv", "not shown either"),
              doctor.Check("backend.mpi", "PASS", "available")]
    assert doctor.format_table(checks).splitlines() == [
        "PASS  torch        torch 2.11.0",
        "WARN  site.env     one differs",
        "                   fix: source runtime.sh",
        "FAIL  gpu          no GPU",
        "                   fix: ask for one",
        "SKIP  uenv         no uenv",
        "PASS  backend.mpi  available",
        "2 PASS, 1 WARN, 1 FAIL, 1 SKIP",
    ]


def test_the_json_report_is_every_check_and_ok_indented_by_two():
    """``--json``: ``ok`` (no FAIL) and each check's four fields, two spaces an indent
    level, as the other verbs' JSON."""
    checks = [doctor.Check("gpu", "FAIL", "no GPU", "ask for one"),
              doctor.Check("uenv", "WARN", "no uenv")]
    assert doctor.to_json(checks).splitlines()[:9] == [
        "{", '  "ok": false,', '  "checks": [', "    {", '      "name": "gpu",',
        '      "status": "FAIL",', '      "detail": "no GPU",', '      "fix": "ask for one"',
        "    },"]
    assert json.loads(doctor.to_json(checks[1:])) == {
        "ok": True, "checks": [{"name": "uenv", "status": "WARN", "detail": "no uenv",
                                "fix": ""}]}


@pytest.mark.parametrize(("text", "version"), [
    ("1.19.0", (1, 19, 0)),
    ("v1.13.0-aws", (1, 13, 0)),  # an aws-ofi-nccl tag
    ("2.27.7-1", (2, 27, 7)),  # NCCL's release-build: the build number is no part
    ("2.28.9rc1", (2, 28)),  # digits only: the first piece that is not stops it
    ("abc", None), ("", None), (None, None),
])
def test_version_strings_are_read_up_to_the_first_dash(text, version):
    assert version_tuple(text) == version


def test_a_command_that_hangs_is_cut_at_its_timeout_with_what_it_printed():
    """The runner never raises: a hung tool is a result (status 124, as timeout(1) exits)
    with its output so far and the limit, and a missing one is None."""
    result = run_command(["sh", "-c", "echo partial; exec sleep 60"], timeout=2)
    assert result is not None and result.returncode == 124
    assert result.stdout == "partial\n\n(timed out after 2 s)"
    assert run_command(["torchmpi-no-such-program"]) is None


@pytest.mark.parametrize(("env", "nodes"), [
    ({"SLURM_STEP_NUM_NODES": "1", "SLURM_JOB_NUM_NODES": "4"}, 1),
    ({"SLURM_NNODES": "3"}, 3), ({"PBS_NUM_NODES": "2"}, 2), ({}, None),
])
def test_job_nodes(env, nodes):
    assert job_nodes(env) == nodes


# --- the verdicts stack by stack (docs/troubleshooting.md's table) -------------------

#: PyPI torch on a GPU node (the H200 of docs/performance.md: torch 2.11.0+cu130,
#: NCCL 2.28.9 from the nvidia-nccl wheel), no MPI backend.
PIP_TORCH = gpu.TorchInfo(
    version="2.11.0+cu130", nccl=True, gloo=True, nccl_version="2.28.9", cuda_build="13.0",
    gpu_count=1,
    loaded_libs=["/home/ann/venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2"])
PIP_ORIGINS = {"torch": "/home/ann/venv/lib/python3.11/site-packages/torch/__init__.py",
               "libnccl": PIP_TORCH.loaded_libs[0]}
#: Perlmutter as its site file has it, with an install tree.
PERLMUTTER = {"name": "perlmutter", "fabric": "slingshot", "gpu": {},
              "mpi": {"kind": "cray-mpich", "version": "8.1.28"},
              "install": {"root": "/pscratch/tm/install"},
              "container": {"runtime": "podman-hpc"}}


def debian_open_mpi_on_path(argv, **_kwargs):
    """The node's own Open MPI (Debian 4.1.6, no CUDA), which no torch here loads."""
    if argv[0] == "ompi_info":
        return CommandResult(0, "ompi:version:full:4.1.6\npath:libdir:/usr/lib/x86_64-linux-"
                                "gnu/openmpi/lib\nmca:mpi:base:param:mpi_built_with_cuda_"
                                "support:value:false\n")
    return None


def pip_stack(site: dict | None) -> doctor.Inputs:
    base = cray_inputs()
    return doctor.Inputs(
        torch=PIP_TORCH, env={} if site is None else base.env, runner=debian_open_mpi_on_path,
        interfaces=["lo", "eth0"], site=site and site_env.SiteExpectation("perlmutter", site, {}),
        driver=gpu.DriverInfo(1, "13.0", True),
        probes={"probe.nccl": ok("nccl", "cuda"), "probe.gloo": ok("gloo", "cuda")},
        plugin_maps={} if site is None else base.plugin_maps, origins=PIP_ORIGINS,
        container=[doctor.Check("container", "SKIP", "not in a container")])


def site_module() -> doctor.Inputs:
    inputs = cray_inputs()
    inputs.site = site_env.SiteExpectation("perlmutter", PERLMUTTER, inputs.site.env)
    inputs.origins = {"torch": "/pscratch/tm/install/py-torch-2.11.0-x/lib/python3.11/"
                               "site-packages/torch/__init__.py"}
    inputs.container = [doctor.Check("container", "SKIP", "not in a container")]
    return inputs


def container_without_injection() -> doctor.Inputs:
    """The site's image under podman-hpc with TORCHMPI_CONTAINER_INJECT=0: every library
    is the image's own (on the container's root file system)."""
    inputs = cray_inputs(TORCHMPI_CONTAINER="podman-hpc", TORCHMPI_CONTAINER_INJECT="0")
    image = {"libmpi.so.12": "/opt/view/lib/libmpi.so.12",
             "libfabric.so.1": "/opt/view/lib/libfabric.so.1", "libnccl-net.so": None}
    inputs.torch = gpu.TorchInfo(
        version="2.11.0", mpi=True, nccl=True, gloo=True, nccl_version="2.27.7",
        cuda_build="12.2", gpu_count=4, loaded_libs=["/opt/view/lib/libmpi.so.12"])
    inputs.site = site_env.SiteExpectation("perlmutter", PERLMUTTER, inputs.site.env)
    inputs.origins = {"torch": "/opt/view/lib/python3.11/site-packages/torch/__init__.py"}
    inputs.container = container.container_checks(
        inputs.env, True, True, exists=lambda _path: False, resolve=lambda _names: image,
        mounts=["/", "/proc", "/pscratch"])
    return inputs


STACKS = {
    "pip stack, no `--site`": lambda: pip_stack(None),
    "site module loaded, `--site`": site_module,
    "pip wheel shadowing the site's torch, `--site`": lambda: pip_stack(PERLMUTTER),
    "container without injection, `--site`": container_without_injection,
}


def verdict_table() -> tuple[list[str], dict[str, list[str]]]:
    """docs/troubleshooting.md's table: the check names, and each stack's row."""
    text = (ROOT / "docs" / "troubleshooting.md").read_text()
    section = text.split("## The verdicts stack by stack", 1)[1].split("\n## ", 1)[0]
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in section.splitlines() if line.startswith("|")]
    names = [cell.strip("`") for cell in rows[0][1:]]
    return names, {row[0]: row[1:] for row in rows[2:]}


def test_the_mpi_the_probe_child_maps_is_judged():
    """The MPI probe prints the MPI libraries it mapped after MPI_Init; mpi.implementation
    judges those, like the plugin check judges what its child mapped."""
    lib = "/opt/cray/pe/mpich/8.1.28/ofi/gnu/12.3/lib/libmpi_gnu_123.so.12"
    run = CommandResult(0, f"{probe.MAP_MARK} {lib}\n{OK_MARK} mpi cpu world=1\n")
    assert probe.mapped_mpi(run) == [lib] and probe.judge("probe.mpi", run).status == "PASS"
    inputs = site_module()
    inputs.torch = gpu.TorchInfo(**{**vars(CRAY_TORCH), "loaded_libs": []})
    inputs.mpi_libs = probe.mapped_mpi(run)
    check = next(c for c in doctor.run_checks(inputs) if c.name == "mpi.implementation")
    assert check.status == "PASS" and "libmpi_gnu_123.so.12" in check.detail


@pytest.mark.parametrize(("container_check", "where"), [
    (doctor.Check("container", "SKIP", "not in a container"), ""),
    (doctor.Check("container", "PASS", "in a container: podman-hpc"),
     " in a container (podman-hpc)"),
])
def test_the_mpi_mismatch_names_the_container_only_inside_one(container_check, where):
    """The report tells mpi.implementation the runtime only when the container check
    found one (PASS): a SKIP's "not in a container" is no runtime."""
    inputs = site_module()
    inputs.torch = gpu.TorchInfo(**{**vars(CRAY_TORCH), "loaded_libs": [
        "/usr/lib/x86_64-linux-gnu/openmpi/lib/libmpi.so.40.30.6"]})
    inputs.container = [container_check]
    check = next(c for c in doctor.run_checks(inputs) if c.name == "mpi.implementation")
    assert check.status == "FAIL"
    assert check.detail.startswith(
        "torch loads Open MPI (from loaded: /usr/lib/x86_64-linux-gnu/openmpi/lib/"
        f"libmpi.so.40.30.6){where}, not the site's MPI"), check.detail


def test_troubleshooting_table_is_what_the_doctor_says_stack_by_stack():
    """One row per stack; a check the report does not print is '–'."""
    names, rows = verdict_table()
    assert set(rows) == set(STACKS), set(rows) ^ set(STACKS)
    for stack, build in STACKS.items():
        got = statuses(build())
        assert [got.get(name, "–") for name in names] == rows[stack], stack


def test_pip_stack_fails_once_with_one_fix():
    """Without --site a pip torch + pip NCCL is a coherent stack: one FAIL, backend.mpi."""
    checks = doctor.run_checks(pip_stack(None))
    assert [c.name for c in checks if c.status in ("FAIL", "WARN")] == ["backend.mpi"]


# --- the CLI on this machine ----------------------------------------------------------


def doctor_cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([TORCHMPI, "doctor", *args], env=job_env(**env),
                          capture_output=True, text=True, timeout=180, check=False)


def test_doctor_cli_on_this_machine():
    """The pip CPU torch has no MPI backend: FAIL with the fix, exit status 1."""
    proc = doctor_cli("--json", "--site", "derecho", "--nccl-log",
                      str(LOGS / "socket-fallback-hsn.log"), NCCL_CROSS_NIC="1")
    assert proc.returncode == 1, proc.stderr
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    assert checks["backend.mpi"]["status"] == "FAIL" and checks["backend.mpi"]["fix"]
    # Debian's Open MPI is on PATH, but this torch loads no MPI
    assert checks["mpi.implementation"]["status"] == "SKIP"
    assert "no MPI backend" in checks["mpi.implementation"]["detail"]
    assert checks["mpi.cuda_aware"]["status"] == "SKIP"
    # derecho is a GPU site: FAIL on a host without a GPU, PASS on a lent GPU machine
    assert checks["gpu"]["status"] == ("PASS" if gpu.probe_torch().gpu_count else "FAIL")
    assert checks["probe.gloo"]["status"] == "PASS"  # the real one-rank gloo all-reduce
    assert checks["probe.mpi_cuda"]["status"] == "SKIP"
    assert checks["nccl.network"]["status"] == "FAIL"  # socket fallback on a Slingshot site
    assert checks["site.env"]["status"] == "FAIL"
    assert "NCCL_CROSS_NIC" not in checks["site.env"]["detail"]  # that one is set


def test_pip_stack_without_a_site_gets_one_verdict_and_one_fix(tmp_path, capsys):
    """The pip torch (no MPI backend) with Debian's Open MPI on PATH and no
    --site: backend.mpi is the one FAIL; mpi.*, probe.mpi and site.prefix SKIP.  The
    GPU check reads nvidia-smi, so it is hidden: the verdicts must not depend on
    whether this host has a CUDA driver."""
    path = path_without(tmp_path / "bin", "nvidia-smi", path=job_env()["PATH"])
    status, out = doctor_in_process(capsys, "--json", PATH=path)
    assert status == 1, out
    checks = {c["name"]: c for c in json.loads(out)["checks"]}
    failed = [n for n, c in checks.items() if c["status"] == "FAIL"]
    assert failed == ["backend.mpi"], failed
    assert "pip" in checks["backend.mpi"]["fix"]
    for name in ("mpi.implementation", "mpi.cuda_aware", "probe.mpi", "site.prefix"):
        assert checks[name]["status"] == "SKIP", checks[name]
    assert "no site given" in checks["site.prefix"]["detail"]


def test_doctor_cli_table_and_site_mismatch(tmp_path, capsys):
    site = tmp_path / "mysite.yaml"
    site.write_text((ROOT / "sites" / "generic-ib.yaml").read_text().replace(
        "name: generic-ib", "name: mysite"))
    want = site_env.load_expectation(str(site)).env
    name, value = next(iter(want.items()))
    status, out = doctor_in_process(capsys, "--site", str(site), "--no-probe",
                                    **{name: value + "0"})
    assert status == 1
    assert "FAIL  site.env" in out
    assert f"{name}={value}0 (want {value})" in out


@pytest.mark.parametrize(("text", "words"), [
    ("name: broken\nruntime: [\n", "YAML syntax error"),
    ("env:\n  FI_CXI_DEFAULT_CQ_SIZE: 131072\n", "unknown key 'env'"),  # the old lenient layout
])
def test_doctor_cli_bad_site_is_the_loaders_error(tmp_path, text, words):
    site = tmp_path / "broken.yaml"
    site.write_text(text)
    proc = doctor_cli("--site", str(site), "--no-probe")
    assert proc.returncode == 2 and words in proc.stderr and str(site) in proc.stderr
    assert "Traceback" not in proc.stderr


def test_doctor_cli_unknown_site_is_a_user_error():
    proc = doctor_cli("--site", "no-such-site-anywhere", "--no-probe")
    assert proc.returncode == 2 and "unknown site" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_doctor_cli_unreadable_log_is_a_user_error(tmp_path):
    proc = doctor_cli("--nccl-log", str(tmp_path / "missing.log"), "--no-probe")
    assert proc.returncode == 2 and "--nccl-log" in proc.stderr
    assert "Traceback" not in proc.stderr
    # the system's reason in words, not Python's "[Errno 2] ...: 'path'" repeated
    assert "cannot read: No such file or directory" in proc.stderr
    assert "Errno" not in proc.stderr


def test_an_oserror_not_from_the_log_is_not_blamed_on_nccl_log(monkeypatch, capsys):
    """Only the --nccl-log file's read is the user's unreadable log; an OSError from
    anywhere else in gathering (here the site loader's) is not reported as
    '--nccl-log None: cannot read', it propagates as the bug it is."""
    def broken(_name):
        raise FileNotFoundError(2, "No such file or directory", "/x/torch-releases.yaml")

    monkeypatch.setattr(site_env, "load_expectation", broken)
    with pytest.raises(FileNotFoundError):
        main(["doctor", "--no-probe", "--site", "local"])
    assert "--nccl-log" not in capsys.readouterr().err


def test_doctor_help_has_description_example_and_defaults():
    out = doctor_cli("--help").stdout
    out = " ".join(out.split())  # argparse wraps to the terminal width
    assert "one-rank all-reduce" in out and "examples:" in out
    assert out.count("(default") >= 4


def test_compute_node_verbs_work_without_site_tooling_modules():
    """The CLI path of the missing-module SKIP (test_doctor_site tests the function):
    py-torchmpi's run dependencies are python and PyYAML only, so a compute node
    may lack jsonschema, ruamel.yaml, archspec and Spack.

    --no-probe: a probe is a child that does not inherit the blocked modules, so it
    proves nothing here; what the parent imports to judge one (torchmpi.allreduce's
    explain) is imported under the block instead."""
    proc = python_without(
        (*SITE_TOOLING, "spack"),
        "from torchmpi.cli import main",
        "from torchmpi.allreduce import explain  # probe.judge's import",
        "sys.exit(main(['doctor', '--json', '--site', 'derecho', '--no-probe']))",
        timeout=180)
    assert proc.returncode == 1, proc.stderr  # FAIL: the pip torch has no MPI backend
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    assert checks["torch"]["status"] == "PASS"
    assert checks["site.env"]["status"] == "SKIP"
    for module in ("'jsonschema'", "'ruamel.yaml'", "'archspec'"):  # each, not the first
        assert module in checks["site.env"]["detail"], checks["site.env"]["detail"]


# --- docs/troubleshooting.md quotes the code ---------------------------------------------


def _plugin(version: str, *libs: str, **env: str):
    lib_dir = f"/sw/aws-ofi-nccl-{version}-x/lib"
    env = {"LD_LIBRARY_PATH": lib_dir, **env}
    return env, nccl.plugin_from_maps(mapped_at(lib_dir, *libs, env=env))


def _log(name: str) -> str:
    return (LOGS / name).read_text()


def failure_catalogue() -> list:
    """One check per documented message: the FAIL (and WARN) paths of every check."""
    ompi_false = "mca:mpi:base:param:mpi_built_with_cuda_support:value:false"
    cray = mpi.MpiInfo("cray-mpich")
    site = site_env.SiteExpectation("perlmutter", {}, {"FI_CXI_DEFAULT_CQ_SIZE": "131072",
                                                       "NCCL_CROSS_NIC": "1"})
    alt_read = {"FI_CXI_RDZV_PROTO": "alt_read", "SLURM_JOB_ID": "1"}
    cpu = gpu.TorchInfo(version="x", cuda_build="12.8")
    return [
        gpu.check_torch(gpu.TorchInfo(
            import_error="ImportError: libcudart.so.12: cannot open shared object file")),
        gpu.check_backend_mpi(gpu.TorchInfo(version="x")),
        gpu.check_backend_nccl(gpu.TorchInfo(version="x", gpu_count=4)),
        gpu.check_backend_nccl(gpu.TorchInfo(version="x", cuda_build="12.8", gpu_count=4)),
        gpu.check_backend_gloo(gpu.TorchInfo(version="x", distributed=False)),
        gpu.check_backend_gloo(gpu.TorchInfo(version="x", mpi=True)),
        gpu.check_gpu(cpu, gpu.DriverInfo(), True),
        gpu.check_gpu(cpu, gpu.DriverInfo(4, "12.8", True), True),
        gpu.check_gpu(cpu, gpu.DriverInfo(4, "12.2", True), True),
        mpi.check_mpi_implementation(mpi.MpiInfo(None)),
        mpi.check_mpi_implementation(
            mpi.MpiInfo("openmpi", "4.1.6", "loaded: /usr/lib/x86_64-linux-gnu/libmpi.so.40"),
            None, {"name": "perlmutter", "mpi": {"kind": "cray-mpich", "version": "8.1.28"}}),
        mpi.check_openmpi_cuda_aware(mpi.MpiInfo("openmpi", ompi_all=ompi_false), 4),
        mpi.check_openmpi_cuda_aware(mpi.MpiInfo("openmpi", library="/sw/openmpi/lib/"
                                                 "libmpi.so.40"), 4),
        mpi.check_cray_gpu_support(cray, {"MPICH_GPU_SUPPORT_ENABLED": "1"}, ""),
        mpi.check_cray_gpu_support(cray, {}, "libmpi_gtl_cuda.so"),
        mpi.check_cray_gpu_support(cray, {"MPICH_GPU_SUPPORT_ENABLED": "yes"},
                                   "libmpi_gtl_cuda.so"),
        probe.judge("probe.mpi_cuda", CommandResult(1, (
            "RuntimeError: CUDA tensor detected and the MPI used doesn't have CUDA-aware "
            "MPI support"))),
        probe.judge("probe.mpi_cuda", CommandResult(1, (
            "MPIDI_CRAY_init: GPU_SUPPORT_ENABLED is requested, but GTL library is not "
            "linked"))),
        probe.judge("probe.mpi", CommandResult(124, "")),
        probe.judge("probe.nccl", CommandResult(1, (
            "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
            "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version "
            "2.27.7"))),
        probe.judge("probe.gloo", CommandResult(1, (
            "AssertionError: wrong all-reduce result [3.0, 0.0, 3.0, 3.0]"))),
        nccl.check_nccl_plugin(*_plugin("1.6.0", "libnccl-net.so", NCCL_NET="AWS Libfabric",
                                        NCCL_NET_PLUGIN="ofi"), True, 2),
        nccl.check_nccl_plugin(*_plugin("1.6.0", "libnccl-net.so", NCCL_NET="OFI"), True, 2),
        nccl.check_nccl_plugin(*_plugin("1.16.0", "libnccl-net.so",
                                        NCCL_NET="AWS Libfabric"), True, 2),
        nccl.check_nccl_plugin(*_plugin("1.19.0", NCCL_NET="AWS Libfabric"), True, 2),
        nccl.check_nccl_plugin(*_plugin("1.19.0", "libnccl-net-ofi.so",
                                        NCCL_NET="AWS Libfabric"), True, 4),
        nccl.check_nccl_plugin(*_plugin("1.19.0", "libnccl-net-ofi.so"), True, 4),
        nccl.check_nccl_plugin(*_plugin("1.19.0"), True, 2),
        nccl.check_nccl_plugin(*_plugin("1.19.0", "libnccl-net.so",
                                        NCCL_NET="AWS Libfabric"), True, 1),
        nccl.check_nccl_plugin({}, nccl.PluginInfo(errors={"libnccl-net.so": (
            "libfabric.so.1: cannot open shared object file: No such file or directory")}),
            True, 2),
        network.check_socket_ifname({"NCCL_SOCKET_IFNAME": "eth7"}, ["lo", "hsn0"]),
        network.check_nccl_network(_log("socket-fallback-hsn.log"), True, 2),
        network.check_nccl_network(_log("plugin-clash.log"), True, 2),
        network.check_nccl_network(_log("unhandled-system-error.log"), True, 2),
        network.check_nccl_network(_log("plugin-provider-tcp.log"), True, 2),
        network.check_nccl_network(_log("plugin-no-provider-line.log"), True, 2),
        network.check_nccl_interfaces(_log("docker0.log"), 2),
        network.check_nccl_interfaces(_log("plugin-bootstrap-virbr0.log"), 2),
        network.check_nccl_interfaces(_log("loopback.log"), 2),
        site_env.check_site_env(site, {"FI_CXI_DEFAULT_CQ_SIZE": "1024"}),
        site_env.check_launcher_flags({**alt_read, "SLURM_NETWORK": "single"}),
        site_env.check_launcher_flags(alt_read),
        site_env.check_uenv(site_env.SiteExpectation(
            "alps-gh200", {"uenv": {"image": "pytorch/v2.9.1", "view": "default"}}, {}), {}),
        origin.check_site_prefix(
            {"torch": "/home/ann/venv/lib/python3.11/site-packages/torch/__init__.py"},
            {"install": {"root": "/glade/work/$user/torchmpi/derecho/install"}}, {"USER": "ann"},
            tree="/glade/work/ann/torchmpi/derecho/install"),
        origin.check_site_prefix(
            {"libnccl": "/home/ann/venv/lib/python3.11/site-packages/nvidia/nccl/lib/"
                        "libnccl.so.2"}, {"name": "generic-ib"}, {}),
    ]


@pytest.mark.parametrize("check", failure_catalogue(), ids=lambda c: f"{c.name}-{c.status}")
def test_troubleshooting_quotes_each_failure_and_its_fix(check):
    text = (ROOT / "docs" / "troubleshooting.md").read_text()
    assert check.status in ("FAIL", "WARN")
    assert f"`{check.status} {check.name}  {check.detail}`" in text
    assert f"`{check.fix}`" in text


def test_every_check_has_a_failure_in_the_catalogue():
    """Every check the report prints can FAIL, and that FAIL is documented."""
    failing = {c.name for c in failure_catalogue() if c.status == "FAIL"}
    reported = {c.name for c in doctor.run_checks(cray_inputs())}
    assert reported <= failing, reported - failing
