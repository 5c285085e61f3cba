"""torchmpi reframe: real ReFrame (reframe-hpc from PyPI) reads every generated configuration,
writes the job scripts a site would submit (dry run), and runs the checks for real on
`local` (local scheduler, Open MPI's mpirun, gloo), where planted faults must fail them.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.disk import limit_file_size
from support.mpi_launch import job_env, wrong_allreduce_torchmpi
from support.sites import edited_site, write_site
from torchmpi import parseback, paths, runtime
from torchmpi import reframe as rfmconf
from torchmpi import site as sitemod
from torchmpi.cli import main
from torchmpi.errors import InternalError

BIN = Path(sys.executable).parent
REFRAME = BIN / "reframe"
SITES = sitemod.available()
#: the local run: 2 ranks, small sizes, few iterations (speed is for benchmarks)
SMALL = ["-S", "max_bytes=64K", "-S", "iters=2", "-S", "warmup=1"]
GLOO = ["-n", "torchmpi_allreduce%variant=gloo_cpu"]


def reframe_env(tmp: Path) -> dict[str, str]:
    """The job environment of support.mpi_launch (root, oversubscribed Open MPI) and a private
    TMPDIR and HOME, so ReFrame's log file and report database stay in the test's directory."""
    env = job_env(OMPI_MCA_rmaps_base_oversubscribe="1", TMPDIR=str(tmp), HOME=str(tmp))
    env.pop("RFM_CONFIG_FILES", None)
    return env


def generate(site: str, outdir: Path, *extra: str) -> None:
    assert main(["reframe", site, "-o", str(outdir), *extra]) == 0


def run_checks(outdir: Path, tmp: Path, *args: str, timeout: float = 300
               ) -> subprocess.CompletedProcess:
    assert REFRAME.is_file(), "reframe missing from the venv: run `make setup`"
    return subprocess.run([str(outdir / rfmconf.SCRIPT), *args, "--prefix", str(tmp / "rfm")],
                          env=reframe_env(tmp), capture_output=True, text=True,
                          timeout=timeout, check=False)


@pytest.fixture(scope="module", params=SITES)
def dry_run(request, tmp_path_factory) -> tuple[str, Path, subprocess.CompletedProcess]:
    """Each shipped site: configuration written, then a 2-node dry run of every check."""
    site = request.param
    tmp = tmp_path_factory.mktemp(f"rfm-{site}")
    generate(site, tmp / "cfg")
    proc = run_checks(tmp / "cfg", tmp, "--dry-run", "-S", "num_nodes=2")
    return site, tmp, proc


def job_script(tmp: Path, test_dir: str) -> str:
    found = sorted((tmp / "rfm" / "stage").glob(f"*/*/*/{test_dir}/rfm_job.sh"))
    assert len(found) == 1, (test_dir, found)
    return found[0].read_text()


def allreduce_dirs(tmp: Path) -> dict[str, str]:
    """variant -> job script, read from each dry-run stage directory."""
    out = {}
    for script in (tmp / "rfm" / "stage").glob("*/*/*/torchmpi_allreduce_*/rfm_job.sh"):
        text = script.read_text()
        match = re.search(r"--backend (\S+) --device (\S+)", text)
        out[f"{match.group(1)}_{match.group(2)}"] = text
    return out


def test_every_site_configuration_validates_with_reframe(dry_run):
    """ReFrame validates every configuration file it loads against its schema before it
    does anything (reframe/frontend/cli.py: ``site_config.validate()`` right after
    ``load_config``, for a run as for ``--show-config``), so the dry run that loaded the
    written file and selected the site's system is the validation; no second start."""
    site, tmp, proc = dry_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    files = re.search(r"^\s*settings files:\s*(.*)$", proc.stdout, re.MULTILINE)
    assert files and repr(str(tmp / "cfg" / rfmconf.CONFIG)) in files.group(1), proc.stdout
    assert re.search(rf"^\s*selected system:\s*'{re.escape(site)}'$", proc.stdout,
                     re.MULTILINE), proc.stdout


def test_every_site_dry_run_builds_the_checks_its_features_select(dry_run):
    site, tmp, proc = dry_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "skipping test file" not in proc.stdout + proc.stderr  # the library loads
    loaded = sitemod.load(site)
    want = {"gloo_cpu", "mpi_cpu"}
    if loaded.gpu:
        want |= {"nccl_cuda"} | ({"mpi_cuda"} if loaded.mpi_moves_device_buffers else set())
    assert set(allreduce_dirs(tmp)) == want
    assert ("torchmpi_nccl_network" in proc.stdout) == bool(loaded.gpu)
    assert "torchmpi_doctor" in proc.stdout


def test_dry_run_job_scripts_carry_the_sites_launch_lines(dry_run):
    site, tmp, _ = dry_run
    loaded = sitemod.load(site)
    data = loaded.data
    gpus = (data.get("checks") or {}).get("gpus_per_node", 1) if loaded.gpu else None
    ranks = gpus or 2
    script = allreduce_dirs(tmp)["gloo_cpu"]
    env = runtime.environment(data)
    needs_flag = any(env.get(r["variable"]) == r["value"] for r in runtime.launcher_flags())
    if data["launcher"] == "slurm":
        assert f"#SBATCH --ntasks={2 * ranks}" in script
        assert f"#SBATCH --ntasks-per-node={ranks}" in script
        assert f"#SBATCH --gpus-per-node={gpus}" in script
        launch = "srun --network=disable_rdzv_get " if needs_flag else "srun "
        cpus = (data.get("checks") or {}).get("cpus_per_node")
        if cpus:  # the node's cores shared among its ranks (JUPITER: 288 / 4)
            launch += f"--cpus-per-task={cpus // ranks} "
        assert re.search("^" + re.escape(launch) + "torchmpi allreduce", script,
                         re.MULTILINE), script
        assert ("--network=disable_rdzv_get" in script) == needs_flag
    elif data["launcher"] == "pbs":
        cpus = (data.get("checks") or {}).get("cpus_per_node")
        assert f"#PBS -l select=2:mpiprocs={ranks}:ncpus={cpus}:ngpus={gpus}" in script
        assert re.search(rf"^mpiexec -n {2 * ranks} --ppn {ranks} .*torchmpi allreduce",
                         script, re.MULTILINE), script
    else:
        assert re.search(rf"^mpirun -np {2 * ranks} torchmpi allreduce", script,
                         re.MULTILINE), script
    modules_root = (data.get("install") or {}).get("modules_root")
    if modules_root:
        mpi = data["mpi"]
        # The centre's module names where it provides the MPI (JSC: OpenMPI/5.0.5).
        names = " ".join(mpi.get("modules") or [f"{mpi['kind']}/{mpi['version']}"])
        assert f"module load {names} py-torch-mpi" in script
        assert "module use " + rfmconf.shell_path(modules_root) + "/linux-*/Core" in script
    else:
        assert f". {tmp / 'cfg' / rfmconf.RUNTIME}" in script


def test_alps_sets_alt_read_so_its_srun_line_has_the_flag():
    """The claim of the parametrized test is not vacuous: a shipped site needs the flag."""
    env = runtime.environment(sitemod.load("alps-gh200").data)
    assert env.get("FI_CXI_RDZV_PROTO") == "alt_read"


def test_doctor_runs_once_per_node_with_the_site_file(dry_run):
    site, tmp, _ = dry_run
    script = job_script(tmp, "torchmpi_doctor")
    assert f"torchmpi doctor --json --site {sitemod.load(site).path.absolute()}" in script


def test_nccl_network_check_expects_the_pinned_plugin_and_cxi_on_slingshot():
    expect = rfmconf.nccl_expectations(sitemod.load("derecho"))
    assert expect == {"network": "AWS Libfabric", "provider": "cxi", "plugin": "1.6.0",
                      "bootstrap": r"hsn[^:\s]*"}
    log = (paths.root() / "tests/fixtures/nccl-logs/plugin-ofi.log").read_text()
    assert re.search(r"Bootstrap\s*:\s*Using\s+(\[\d+\])?(" + expect["bootstrap"] + ")", log)
    assert rfmconf.bootstrap_pattern("^docker,lo") is None
    assert rfmconf.bootstrap_pattern("=eth0,ib0") == "eth0|ib0"


def test_config_is_data_and_written_atomically(tmp_path):
    generate("derecho", tmp_path)
    text = (tmp_path / rfmconf.CONFIG).read_text()
    tree = ast.parse(text)
    value = next(n.value for n in tree.body if isinstance(n, ast.Assign))
    config = ast.literal_eval(value)
    part = config["systems"][0]["partitions"][0]
    assert (part["scheduler"], part["launcher"]) == ("pbspro", "pals")
    assert config["systems"][0]["modules_system"] == "nomod"  # never `module show` off-site
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp left


def test_a_file_not_ours_is_kept_without_force(tmp_path, capsys):
    (tmp_path / rfmconf.CONFIG).write_text("site_configuration = {}\n")
    assert main(["reframe", "derecho", "-o", str(tmp_path)]) == 2
    assert "not written by torchmpi reframe" in capsys.readouterr().err
    assert (tmp_path / rfmconf.CONFIG).read_text() == "site_configuration = {}\n"
    assert main(["reframe", "derecho", "-o", str(tmp_path), "--force"]) == 0


def test_config_that_does_not_load_back_is_refused():
    with pytest.raises(InternalError, match="does not load back"):
        parseback.python_text("site_configuration = {'systems': []}\n",
                              {"site_configuration": {"systems": [1]}}, "settings.py")


def _local_site(tmp_path: Path, checks: dict | None = None) -> Path:
    """sites/local.yaml with ``checks`` replaced when given."""
    return write_site(tmp_path, "local", (lambda d: d.update(checks=checks)) if checks else None)


def _perf(stdout: str, name: str) -> float:
    match = re.search(rf"P: {name}: (\S+) GB/s", stdout)
    assert match, stdout
    return float(match.group(1))


def test_local_run_passes_with_a_performance_figure(tmp_path):
    generate(str(_local_site(tmp_path)), tmp_path / "cfg", "--env", "runtime-sh")
    proc = run_checks(tmp_path / "cfg", tmp_path, "-r", *GLOO, *SMALL)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "PASSED" in out and "Ran 1/1 test case" in out
    assert _perf(out, "avg_busbw") > 0 and _perf(out, "peak_busbw") > 0
    # Each performance variable is the figure torchmpi printed for it, not another line's.
    job = next((tmp_path / "rfm" / "output").glob("*/*/*/torchmpi_allreduce_*/rfm_job.out"))
    text = job.read_text()
    avg = float(re.search(r"^# Avg bus bandwidth\s*:\s*(\S+)", text, re.MULTILINE).group(1))
    peak = float(re.search(r"^# peak busbw (\S+) GB/s", text, re.MULTILINE).group(1))
    assert avg < peak, text  # a mean over sizes below their maximum: the two differ
    assert (_perf(out, "avg_busbw"), _perf(out, "peak_busbw")) == (avg, peak), out
    # busbw: the figure of the run's largest size (64K here), the one a reference is taken at
    largest = re.search(r"^\s*65536\s+\d+\s+\S+\s+sum\s+\S+\s+\S+\s+(\S+)\s+OK$", text,
                        re.MULTILINE)
    assert largest, text
    assert _perf(out, "busbw") == float(largest.group(1)), out
    perflog = tmp_path / "rfm" / "perflogs" / "local" / "cpu" / "torchmpi_allreduce.log"
    assert "busbw" in perflog.read_text()


def test_local_run_fails_on_a_wrong_all_reduce_result(tmp_path):
    """A torchmpi whose rank 1 corrupts one result (mpi_launch.WRONG_ALLREDUCE)."""
    wrapper = wrong_allreduce_torchmpi(tmp_path / "faulty-torchmpi")
    generate(str(_local_site(tmp_path)), tmp_path / "cfg", "--env", "runtime-sh")
    proc = run_checks(tmp_path / "cfg", tmp_path, "-r", *GLOO, *SMALL,
                      "-S", f"torchmpi={wrapper}")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "FAILED" in out and "sanity" in out, out


def test_local_run_fails_below_a_reference(tmp_path):
    reference = {"backend": "gloo", "nodes": 1, "size": "64K", "busbw": 100000,
                 "source": "planted by tests/test_reframe.py: far above any machine"}
    site = _local_site(tmp_path, {"references": [reference]})
    generate(str(site), tmp_path / "cfg", "--env", "runtime-sh")
    proc = run_checks(tmp_path / "cfg", tmp_path, "-r", *GLOO, *SMALL)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "performance" in out and "busbw" in out, out


# References are taken at one large size, as CSCS's NCCL checks are: nccl-tests all_reduce
# at -b 1024M -e 1024M, reference 75 GB/s -5 % (eth-cscs/cscs-reframe-tests
# checks/containers/container_engine/xccl_tests.py); PyTorch's all-reduce busbw at 16 GiB
# (checks/apps/pytorch/pytorch_allreduce.py).  An average over 8 B..128 MiB mixes in the
# per-call floor of small sizes.
def test_reference_is_a_busbw_at_one_size_with_its_defaults_written_out(tmp_path):
    reference = {"backend": "nccl", "nodes": 2, "busbw": 75.0, "source": "a 2-node run"}
    site = sitemod.load(str(_local_site(tmp_path, {"references": [reference]})))
    config = rfmconf.configuration(site, env_from="runtime-sh", outdir=tmp_path,
                                   extra_prepare=[])
    extras = config["systems"][0]["partitions"][0]["extras"]["torchmpi"]
    assert extras["references"] == [{**reference, "device": "cuda", "size": "1G",
                                     "tolerance": 0.1}]


def test_the_allreduce_check_runs_up_to_the_reference_size_by_default(dry_run):
    _, tmp, _ = dry_run
    assert "-b 8 -e 1G " in allreduce_dirs(tmp)["gloo_cpu"]


@pytest.mark.parametrize("key", ["avg_busbw", "max_bytes"])
def test_an_average_reference_is_refused_naming_its_key(tmp_path, capsys, key):
    reference = {"backend": "gloo", "nodes": 1, "busbw": 1.0, "source": "old form",
                 key: {"avg_busbw": 1.0, "max_bytes": "128M"}[key]}
    site = _local_site(tmp_path, {"references": [reference]})
    assert main(["reframe", str(site), "-o", str(tmp_path / "cfg")]) == 2
    err = capsys.readouterr().err
    assert "checks.references" in err and key in err, err
    assert not (tmp_path / "cfg").exists()


def test_reference_without_source_is_refused(tmp_path, capsys):
    site = _local_site(tmp_path, {"references": [{"backend": "gloo", "nodes": 1,
                                                  "busbw": 1.0}]})
    assert main(["reframe", str(site), "-o", str(tmp_path / "cfg")]) == 2
    err = capsys.readouterr().err
    assert "checks.references" in err and "source" in err
    assert not (tmp_path / "cfg").exists()


def test_pals_launcher_emits_ppn():
    sys.path.insert(0, str(rfmconf.library_dir()))
    try:
        import torchmpi_launchers
    finally:
        sys.path.pop(0)

    class Job:
        num_tasks, num_tasks_per_node, num_cpus_per_task = 8, 4, 16

    assert torchmpi_launchers.PalsLauncher().command(Job()) == [
        "mpiexec", "-n", "8", "--ppn", "4", "--depth", "16"]


def test_the_launcher_library_loads_twice_under_two_names():
    """ReFrame may import a check library again under another module name; the second
    registration of ``pals`` is refused by ReFrame and must not stop the load."""
    import importlib.util

    sys.path.insert(0, str(rfmconf.library_dir()))
    try:
        import torchmpi_launchers
    finally:
        sys.path.pop(0)
    spec = importlib.util.spec_from_file_location(
        "torchmpi_launchers_again", rfmconf.library_dir() / "torchmpi_launchers.py")
    again = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(again)
    assert again.PalsLauncher is not torchmpi_launchers.PalsLauncher


def test_the_network_check_fills_both_nodes_with_one_rank_per_gpu(dry_run):
    """The NCCL network check's job: 2 nodes x the GPUs of a node, in the launch line."""
    site, tmp, _ = dry_run
    loaded = sitemod.load(site)
    if not loaded.gpu:
        assert not list((tmp / "rfm" / "stage").glob("*/*/*/torchmpi_nccl_network"))
        return
    ranks = (loaded.data.get("checks") or {}).get("gpus_per_node", 1)
    script = job_script(tmp, "torchmpi_nccl_network")
    launch = {"slurm": f"#SBATCH --ntasks={2 * ranks}\n",
              "pbs": f"\nmpiexec -n {2 * ranks} --ppn {ranks} "}.get(
        loaded.data["launcher"], f"\nmpirun -np {2 * ranks} ")
    assert launch in script, script
    # The bootstrap line the sanity needs is logged under BOOTSTRAP from NCCL 2.23
    # (NVIDIA/nccl src/bootstrap.cc at v2.23.4-1): the job asks for the doctor's subsystems.
    from torchmpi.doctor.network import NCCL_DEBUG_SUBSYS
    assert f"export NCCL_DEBUG_SUBSYS={NCCL_DEBUG_SUBSYS}\n" in script, script


def test_library_is_package_data():
    text = (paths.root() / "pyproject.toml").read_text()
    assert '"data/reframe/*.py"' in text
    assert (rfmconf.library_dir() / "torchmpi_checks.py").is_file()
    assert shutil.which("bash") and os.access(rfmconf.library_dir(), os.R_OK)


def test_local_doctor_check_fails_on_the_pip_torch_unless_the_site_expects_it(tmp_path):
    """The checkout's pip torch has no MPI backend: torchmpi_doctor must FAIL naming it, and
    pass once the site file lists exactly those findings under checks.expected_fail."""
    doctor = ["-n", "torchmpi_doctor", "-S", "probe=false"]  # static checks: enough here
    generate(str(_local_site(tmp_path / "a")), tmp_path / "a" / "cfg", "--env", "runtime-sh")
    proc = run_checks(tmp_path / "a" / "cfg", tmp_path / "a", "-r", *doctor)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    # -S probe=false reaches the job (ReFrame casts a string to a plain bool with bool():
    # "false" would be True, the probes would run, and the run would take seconds more)
    assert "--no-probe" in job_script(tmp_path / "a", "torchmpi_doctor")
    failed = re.search(r"doctor FAIL: \[([^\]]*)\]", out)
    assert failed and "'backend.mpi'" in failed.group(1), out
    names = re.findall(r"'([^']+)'", failed.group(1))
    site = _local_site(tmp_path / "b", {"expected_fail": names})
    generate(str(site), tmp_path / "b" / "cfg", "--env", "runtime-sh")
    proc = run_checks(tmp_path / "b" / "cfg", tmp_path / "b", "-r", *doctor)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _checks_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "torchmpi_checks_under_test", rfmconf.library_dir() / "torchmpi_checks.py")
    if spec.name in sys.modules:
        return sys.modules[spec.name]
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # ReFrame's test classes look up their own file
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("log", "passes"), [
    ("plugin-ofi.log", True),              # plugin 1.19.0, cxi, AWS Libfabric, hsn0
    ("socket-fallback-hsn.log", False),    # no plugin: Using network Socket
    ("plugin-bootstrap-virbr0.log", False),  # bootstrap on a bridge, not hsn
])
def test_nccl_network_sanity_on_recorded_logs(log, passes):
    """The torchmpi_nccl_network patterns, for a Slingshot site pinned to plugin 1.19.0,
    against recorded NCCL logs (the all-reduce's own correctness line appended)."""
    want = {"network": "AWS Libfabric", "provider": "cxi", "plugin": "1.19.0",
            "bootstrap": rfmconf.bootstrap_pattern("hsn")}
    text = (paths.root() / "tests/fixtures/nccl-logs" / log).read_text() + "# correctness: OK\n"
    needles = _checks_module().network_needles(want)
    assert all(re.search(n, text, re.MULTILINE) for n in needles) == passes


def test_pbs_site_that_needs_the_rendezvous_flag_gets_it_on_mpiexec(tmp_path):
    """FI_CXI_RDZV_PROTO=alt_read needs the launcher to disable its rendezvous gets
    (fabric data launcher_flags): on a PBS site that is PALS mpiexec's --disable_rdzv_get.
    No shipped PBS site sets alt_read (derecho keeps HPE's default), so derecho with it."""
    def alt_read(data):
        data["runtime"]["env"]["FI_CXI_RDZV_PROTO"] = "alt_read"

    site = edited_site(tmp_path, "derecho", alt_read)
    generate(str(site.path), tmp_path / "cfg")
    proc = run_checks(tmp_path / "cfg", tmp_path, "--dry-run", "-S", "num_nodes=2", *GLOO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    script = allreduce_dirs(tmp_path)["gloo_cpu"]
    launch = re.search(r"^mpiexec -n 8 --ppn 4 .*torchmpi allreduce.*$", script, re.MULTILINE)
    assert launch and "--disable_rdzv_get" in launch.group(0), script


def test_runtime_sh_runs_after_the_prepare_commands_so_the_sites_values_win(tmp_path):
    """--prepare commands run first and the site's runtime.sh last (docs/users.md): a
    prepare command that sets a runtime variable does not override the site's value."""
    generate("generic-ib", tmp_path, "--env", "runtime-sh",
             "--prepare", "export NCCL_DEBUG=TRACE")
    text = (tmp_path / rfmconf.CONFIG).read_text()
    config = ast.literal_eval(next(n.value for n in ast.parse(text).body
                                   if isinstance(n, ast.Assign)))
    cmds = config["environments"][0]["prepare_cmds"]
    proc = subprocess.run(["bash", "-c", "\n".join([*cmds, 'printf %s "$NCCL_DEBUG"'])],
                          capture_output=True, text=True, check=True)
    assert proc.stdout == "WARN", cmds  # sites/generic-ib.yaml runtime.env NCCL_DEBUG


def test_a_hand_edited_file_is_kept_without_force(tmp_path, capsys):
    """settings.py records its body's sha256 as render's files do: an edit is refused
    (as `torchmpi render` and `torchmpi container` refuse one) and kept whole."""
    assert main(["reframe", "derecho", "-o", str(tmp_path)]) == 0
    settings = tmp_path / rfmconf.CONFIG
    edited = settings.read_text() + "# my change\n"
    settings.write_text(edited)
    capsys.readouterr()
    assert main(["reframe", "derecho", "-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{rfmconf.CONFIG} edited by hand" in err and "--force" in err
    assert settings.read_text() == edited
    assert main(["reframe", "derecho", "-o", str(tmp_path), "--force"]) == 0
    assert settings.read_text() != edited


# CSCS's ReFrame mounts a uenv per job with the scheduler options `--uenv={uenv}` and
# `--view={views}` (eth-cscs/cscs-reframe-tests config/cscs.py, values from
# config/utilities/uenv.py); here the one environment needs the site's one uenv, so the
# partition's `access` carries both.
def test_alps_jobs_mount_the_sites_uenv(tmp_path):
    site = sitemod.load("alps-gh200")
    config = rfmconf.configuration(site, env_from="runtime-sh", outdir=tmp_path,
                                   extra_prepare=[])
    access = config["systems"][0]["partitions"][0]["access"]
    uenv = site.data["uenv"]
    assert f"--uenv={uenv['image']}" in access and f"--view={uenv['view']}" in access


@pytest.mark.parametrize("name", [n for n in sitemod.available() if n != "alps-gh200"])
def test_sites_without_a_uenv_mount_none(tmp_path, name):
    site = sitemod.load(name)
    config = rfmconf.configuration(site, env_from="runtime-sh", outdir=tmp_path,
                                   extra_prepare=[])
    access = config["systems"][0]["partitions"][0]["access"]
    assert access == list((site.data.get("checks") or {}).get("access", []))
    assert not any(a.startswith(("--uenv", "--view")) for a in access)


# --- an interrupted write leaves the old files whole ------------------------------


def test_reframe_interrupted_by_a_full_disk_leaves_old_files_whole(tmp_path: Path) -> None:
    """The same for ``torchmpi reframe``: its files are replaced all or none, and a
    failed write leaves no temporary file beside them (it had its own writer)."""
    out = tmp_path / "rfm"
    cli = [sys.executable, "-m", "torchmpi", "reframe"]
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    old_site = edited_site(tmp_path, "derecho")
    subprocess.run([*cli, str(old_site.path), "-o", str(out)], check=True, env=env,
                   capture_output=True, text=True, timeout=300)
    old = {p.name: p.read_bytes() for p in out.iterdir()}
    new_dir = tmp_path / "new"
    new_dir.mkdir()
    new_site = edited_site(new_dir, "derecho",
                           lambda d: d.update(description=d["description"] + " (changed)"))
    files = rfmconf.build(new_site, out).files
    assert all(files[name].encode() != old[name] for name in files), "every file must change"
    sizes = sorted(len(text.encode()) for text in files.values())
    proc = subprocess.run([*cli, str(new_site.path), "-o", str(out), "--force"],
                          preexec_fn=limit_file_size(sizes[-2] + 1), capture_output=True,
                          text=True, timeout=300, env=env, check=False)
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr and "cannot write" in proc.stderr, proc.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == old


def test_jobs_from_runtime_sh_alone_are_warned_and_the_json_says_what_was_written(
        tmp_path: Path, capsys) -> None:
    """``--env runtime-sh`` without ``--prepare`` loads no torch: the note says so
    (as given on a command line, not only as the default); ``--json`` prints the files
    written, indented as every verb's JSON."""
    import json
    import shlex

    argv = shlex.split(f"reframe derecho -o {tmp_path / 'a'} --env runtime-sh --json")
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "loads no torch" in captured.err
    report = json.loads(captured.out)
    assert report["site"] == "derecho" and report["written"]
    assert captured.out == json.dumps(report, indent=2) + "\n"
    argv = shlex.split(f"reframe derecho -o {tmp_path / 'b'} --env runtime-sh "
                       "--prepare 'spack load py-torch-mpi'")
    assert main(argv) == 0 and "loads no torch" not in capsys.readouterr().err
    argv = shlex.split(f"reframe derecho -o {tmp_path / 'c'} --env module")
    assert main(argv) == 0 and "loads no torch" not in capsys.readouterr().err
    assert sitemod.load("derecho").data["install"]["modules_root"]  # default: module
    assert main(["reframe", "derecho", "-o", str(tmp_path / "d")]) == 0
    assert "loads no torch" not in capsys.readouterr().err


def test_the_rendezvous_flag_is_written_only_for_the_launchers_that_take_one(tmp_path):
    """srun's --network and PALS's --disable_rdzv_get; a plain mpiexec has no such flag,
    so nothing is added there (a launcher named in the site file, read from YAML)."""
    def alt_read(launcher: str):
        def edit(data):
            data["launcher"] = launcher
            data.setdefault("runtime", {}).setdefault("env", {})["FI_CXI_RDZV_PROTO"] = "alt_read"
        return edit

    def flags(name: str, launcher: str) -> list[str]:
        return rfmconf.launcher_options(edited_site(tmp_path / launcher, name, alt_read(launcher)))

    assert flags("derecho", "pbs") == ["--disable_rdzv_get"]
    assert flags("generic-ib", "slurm") == ["--network=disable_rdzv_get"]
    assert flags("generic-ib", "mpiexec") == []
