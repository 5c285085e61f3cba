"""torchmpi doctor --site: the project's loader, runtime.environment, launcher-bound flags."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support.blocked_imports import SITE_TOOLING, python_without
from support.host_tools import local_data
from support.mpi_launch import job_env
from torchmpi import runtime
from torchmpi import site as site_files
from torchmpi.doctor import origin, site_env
from torchmpi.doctor.core import FAIL, PASS, SKIP, WARN
from torchmpi.errors import UserError


def expectation(env: dict[str, str], name: str = "alps") -> site_env.SiteExpectation:
    return site_env.SiteExpectation(name, {}, env)


def test_compare_env_reports_missing_and_different():
    expected = {"NCCL_CROSS_NIC": 1, "FI_CXI_DISABLE_HOST_REGISTER": "1",
                "FI_MR_CACHE_MONITOR": "userfaultfd"}
    actual = {"NCCL_CROSS_NIC": "1", "FI_MR_CACHE_MONITOR": "memhooks"}
    diffs = site_env.compare_env(expected, actual)
    assert [(x.name, x.actual) for x in diffs] == [
        ("FI_CXI_DISABLE_HOST_REGISTER", None), ("FI_MR_CACHE_MONITOR", "memhooks")]


def test_site_env_check():
    assert site_env.check_site_env(expectation({"A": "1"}), {"A": "1"}).status == PASS
    check = site_env.check_site_env(expectation({"A": "1", "B": "x"}), {"A": "2"})
    assert check.status == FAIL and "A=2 (want 1)" in check.detail and "B unset" in check.detail
    assert site_env.check_site_env(None, {}).status == SKIP


def test_single_node_job_may_leave_nccl_net_unset():
    """HPE: do not set NCCL_NET on single-node runs, so its absence there is no difference."""
    site = expectation({"NCCL_NET": "AWS Libfabric", "NCCL_CROSS_NIC": "1"})
    actual = {"NCCL_CROSS_NIC": "1"}
    assert site_env.check_site_env(site, actual, nodes=2).status == FAIL
    check = site_env.check_site_env(site, actual, nodes=1)
    assert check.status == PASS and "single-node" in check.detail


def test_single_node_job_with_a_wrong_nccl_net_still_differs():
    """Only an absent NCCL_NET is let off on one node: a value other than the site's
    (a typo NCCL stops on) is a difference there too."""
    site = expectation({"NCCL_NET": "AWS Libfabric", "NCCL_CROSS_NIC": "1"})
    check = site_env.check_site_env(site, {"NCCL_NET": "Socket", "NCCL_CROSS_NIC": "1"},
                                    nodes=1)
    assert check.status == FAIL and "NCCL_NET=Socket (want AWS Libfabric)" in check.detail


def test_expected_variables_are_runtime_environment_of_the_loaded_site():
    """One loader, one function: the doctor expects exactly what runtime.sh sets."""
    loaded = site_env.load_expectation("derecho")
    reference = site_files.load("derecho")
    assert loaded.env == runtime.environment(reference.data)
    assert loaded.env["MPICH_GPU_SUPPORT_ENABLED"] == "1"


def test_bad_site_file_is_the_loaders_user_error(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nruntime: [\n")
    with pytest.raises(UserError, match=r"bad\.yaml:\d+"):
        site_env.load_expectation(str(bad))


#: In a child: the doctor's --site load of derecho, as ``got``.
_LOAD_DERECHO = ("from torchmpi.doctor import site_env",
                 "got = site_env.load_expectation('derecho')")


def test_site_without_jsonschema_is_reported_not_raised():
    """A compute node with only py-torch-mpi has no jsonschema: --site is a SKIP, not a crash."""
    proc = python_without(["jsonschema"], *_LOAD_DERECHO,
                          "print(site_env.check_site_env(got, {}))")
    assert proc.returncode == 0, proc.stderr
    assert "status='SKIP'" in proc.stdout and "pip install jsonschema" in proc.stdout


def test_troubleshooting_quotes_the_skip_a_node_with_only_py_torch_mpi_prints():
    """The quote stops at its ``...``; up to there it is what the doctor prints where
    none of the loader's modules is installed (every one is named, not the first)."""
    proc = python_without(SITE_TOOLING, *_LOAD_DERECHO,
                          "print(site_env.check_site_env(got, {}).detail)")
    assert proc.returncode == 0, proc.stderr
    text = (Path(__file__).parent.parent / "docs" / "troubleshooting.md").read_text()
    quoted = re.search(r"`SKIP site\.env  site <name> (.+?) \.\.\.`", text)
    assert quoted, "docs/troubleshooting.md quotes no site.env SKIP"
    printed = proc.stdout.strip().replace("site derecho ", "", 1)
    assert printed.startswith(quoted.group(1)), (quoted.group(1), printed)


# --- launcher-bound settings ---------------------------------------------------------------

ALT_READ = {"FI_CXI_RDZV_PROTO": "alt_read"}


@pytest.mark.parametrize(("env", "status", "words"), [
    ({}, PASS, "no setting"),
    (ALT_READ, SKIP, "not inside a Slurm or PBS job"),
    ({**ALT_READ, "SLURM_JOB_ID": "7", "SLURM_NETWORK": "disable_rdzv_get"}, PASS,
     "--network=disable_rdzv_get"),
    ({**ALT_READ, "SLURM_JOB_ID": "7", "SLURM_NETWORK": "single,disable_rdzv_get"}, PASS, ""),
    ({**ALT_READ, "SLURM_JOB_ID": "7", "SLURM_NETWORK": "single"}, FAIL, "SLURM_NETWORK=single"),
    ({**ALT_READ, "SLURM_JOB_ID": "7"}, WARN,
     "SLURM_NETWORK is unset (srun sets it from --network from Slurm 24.05.1)"),
    ({**ALT_READ, "PBS_JOBID": "12.desched1"}, WARN, "--disable_rdzv_get"),
    ({"FI_CXI_RDZV_PROTO": "default", "SLURM_JOB_ID": "7"}, PASS, "no setting"),
])
def test_launcher_flags(env, status, words):
    check = site_env.check_launcher_flags(env)
    assert check.status == status and words in check.detail, check


def test_launcher_rules_are_the_fabric_data():
    """The rules live in the fabric data (one place), not in the doctor's code."""
    import yaml

    data = yaml.safe_load((Path(__file__).resolve().parents[1] / "wrapper" / "torchmpi" / "data"
                           / "fabrics" / "slingshot.yaml").read_text())
    rules = site_env.launcher_rules()
    assert rules and [r.variable for r in rules] == [f["variable"] for f in
                                                      data["launcher_flags"]]


def test_pbs_flag_is_hpes_spelling_everywhere():
    """HPE spells the PBS flag with underscores: ``--disable_rdzv_get`` (HewlettPackard/
    shs-ccl-docs ccl_env.sh, and nccl/nccl_tuning_guide.md since commit 93e21d2 "use
    underscore in PBS Pro disable_rdzv_get flag").  The hyphenated form is in no source, so
    neither the fabric data nor any doc may carry it."""
    root = Path(__file__).resolve().parents[1]
    assert [r.pbs_flag for r in site_env.launcher_rules()] == ["--disable_rdzv_get"]
    files = [*root.glob("docs/*.md"), *root.glob("sites/*.yaml"), root / "README.md",
             *(root / "wrapper" / "torchmpi").rglob("*.py"),
             *(root / "wrapper" / "torchmpi" / "data").rglob("*.yaml")]
    hyphen = "disable" + "-rdzv-get"
    assert [str(f.relative_to(root)) for f in files if hyphen in f.read_text()] == []


def test_every_rule_cites_its_source():
    assert site_env.launcher_rules()
    for rule in site_env.launcher_rules():
        assert "HPE" in rule.source and rule.slurm_flag.startswith("srun --network=")


def test_users_job_examples_show_each_launcher_flag():
    text = (Path(__file__).resolve().parents[1] / "docs" / "users.md").read_text()
    for rule in site_env.launcher_rules():
        assert rule.slurm_flag.split()[-1] in text and rule.pbs_flag in text
        assert f"SLURM_NETWORK={rule.slurm_value}" in text


def test_installed_tool_reads_its_site_without_the_package_repositories(tmp_path) -> None:
    """An installed tool (no checkout: no spack_repo/, no pinned builtin repo) still
    compares a job with its site: ``doctor --site`` must not need the files the
    build-time rules read (vouched pairs, torch releases, CUDA ranges).  --no-probe: the
    probes are children that read no site file, and this test asserts nothing of them."""
    import json
    import os

    from torchmpi import paths

    target = tmp_path / "inst"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                    "--no-build-isolation", "--no-compile", "--target", str(target),
                    str(paths.root())], check=True, capture_output=True, text=True, timeout=600)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHMPI_")}
    env["PYTHONPATH"] = str(target)
    proc = subprocess.run([sys.executable, "-m", "torchmpi", "doctor", "--site", "derecho",
                           "--json", "--no-probe"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600, check=False)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout.strip(), proc.stderr
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    assert checks["site.env"]["status"] in ("PASS", "FAIL"), checks.get("site.env")


# --- site.prefix: the install tree this doctor was installed into ------------------------

def _spack_db_dirname() -> str:
    """Spack's own name for its database directory at an install tree's root."""
    from torchmpi import paths

    source = (paths.spack_root() / "lib" / "spack" / "spack" / "database.py").read_text()
    return re.search(r'^_DB_DIRNAME = "([^"]+)"', source, re.MULTILINE).group(1)


def spack_tree(tmp_path: Path, user: str = "ann") -> tuple[Path, Path]:
    """An install tree as Spack 1.1 lays one out: its database at the root, each package
    in ``<platform>-<target>/<name>-<version>-<hash>``, the tool's own files inside."""
    root = tmp_path / "glade" / "work" / user / "torchmpi" / "install"
    (root / _spack_db_dirname()).mkdir(parents=True)
    (root / _spack_db_dirname() / "index.json").write_text("{}")
    site_packages = (root / "linux-zen3" / "py-torchmpi-0.1.0-abcdefg" / "lib" / "python3.11"
                     / "site-packages")
    shutil.copytree(Path(origin.__file__).parents[1], site_packages / "torchmpi",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return root, site_packages


def test_the_recorded_tree_is_the_one_holding_the_tools_own_files(tmp_path):
    assert origin.SPACK_DB == _spack_db_dirname()
    root, site_packages = spack_tree(tmp_path)
    tool = site_packages / "torchmpi" / "doctor" / "origin.py"
    assert origin.recorded_tree(str(tool)) == str(root)
    # A checkout or a pip install of the tool lies in no install tree.
    assert origin.recorded_tree(origin.__file__) is None


def test_every_user_passes_with_the_installers_tree(tmp_path):
    """Derecho's install.root names $user: Bob runs the module Ann installed, and his
    torch is Ann's, under the tree the tool was installed into, so PASS, not 'the site
    installs under /glade/work/bob/...' (the old check expanded $user with his USER)."""
    root, _ = spack_tree(tmp_path)
    torch_file = f"{root}/linux-zen3/py-torch-2.6.0-hij/lib/python3.11/site-packages/torch/x.py"
    site = {"name": "derecho", "install": {"root": "/glade/work/$user/torchmpi/install"}}
    for env in ({"USER": "bob"}, {"USER": "reframe-svc"}, {}):
        check = origin.check_site_prefix({"torch": torch_file}, site, env, tree=str(root))
        assert check.status == PASS and str(root) in check.detail, (env, check)
    pip = {"torch": "/home/bob/venv/lib/python3.11/site-packages/torch/__init__.py"}
    check = origin.check_site_prefix(pip, site, {"USER": "bob"}, tree=str(root))
    assert check.status == FAIL and f"installs under {root}" in check.detail, check


def test_without_a_recorded_tree_a_per_user_root_is_not_compared():
    """The doctor of a checkout cannot tell whose $user or $PSCRATCH the installer's was."""
    site = {"name": "perlmutter", "install": {"root": "$PSCRATCH/torchmpi/install"}}
    check = origin.check_site_prefix({"torch": "/x/torch/__init__.py"}, site,
                                     {"PSCRATCH": "/pscratch/sd/b/bob"}, tree=None)
    assert check.status == SKIP and "$PSCRATCH" in check.detail, check
    fixed = {"name": "x", "install": {"root": "/global/common/software/m1/tm/install"}}
    assert origin.check_site_prefix({"torch": "/x/torch/__init__.py"}, fixed, {},
                                    tree=None).status == FAIL


def test_the_installed_doctor_compares_with_its_own_tree(tmp_path):
    """`torchmpi doctor --site` run from a tool installed in a tree: the site file's
    $user root (here another user's) is not what torch is compared with."""
    root, site_packages = spack_tree(tmp_path)
    site = tmp_path / "local.yaml"
    data = local_data()
    data["install"] = {"root": "/nonexistent/$user/install"}
    site.write_text(yaml.safe_dump(data, sort_keys=False))
    env = job_env(PYTHONPATH=str(site_packages), USER="bob")
    proc = subprocess.run([sys.executable, "-m", "torchmpi", "doctor", "--json", "--no-probe",
                           "--site", str(site)], env=env, capture_output=True, text=True,
                          timeout=300, check=False, cwd=tmp_path)
    assert proc.stdout.startswith("{"), proc.stderr
    report = json.loads(proc.stdout)
    check = next(c for c in report["checks"] if c["name"] == "site.prefix")
    assert check["status"] == FAIL and f"installs under {root})" in check["detail"], check
    assert "/nonexistent/bob" not in check["detail"]


def test_a_spack_view_of_the_tree_is_the_tree(tmp_path):
    """An environment view links each file into its own directories (Spack's default
    link type): the doctor and torch seen through the view are still the tree's."""
    root, site_packages = spack_tree(tmp_path / "store")
    view = tmp_path / "env" / ".spack-env" / "view" / "lib" / "python3.11" / "site-packages"
    for src in (site_packages / "torchmpi").rglob("*.py"):
        link = view / "torchmpi" / src.relative_to(site_packages / "torchmpi")
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(src)
    torch_real = root / "linux-zen3" / "py-torch-2.6.0-hij" / "lib" / "python3.11" / \
        "site-packages" / "torch" / "__init__.py"
    torch_real.parent.mkdir(parents=True)
    torch_real.write_text("")
    (view / "torch").mkdir()
    (view / "torch" / "__init__.py").symlink_to(torch_real)
    tree = origin.recorded_tree(str(view / "torchmpi" / "doctor" / "origin.py"))
    assert tree == str(root)
    site = {"name": "derecho", "install": {"root": "/glade/work/$user/torchmpi/install"}}
    check = origin.check_site_prefix({"torch": str(view / "torch" / "__init__.py")}, site,
                                     {"USER": "bob"}, tree=tree)
    assert check.status == PASS, check


# --- uenv: the mounted uenv is the site's ------------------------------------------------------
# A stand-in for a mounted uenv, as the uenv tool (eth-cscs/uenv2@5af9df7) leaves it:
# * UENV_MOUNT_LIST "<sqfs>:<mount>", comma-separated (src/slurm/plugin.cpp, set by
#   `srun --uenv`; src/squashfs-mount/squashfs-mount.cpp, by `uenv start`/`run`); a
#   pulled image is <repo>/images/<sha256>/store.squashfs (src/uenv/repository.cpp);
# * UENV_VIEW "<mount>:<uenv name>:<view>", comma-separated (src/uenv/env.cpp,
#   generate_environment);
# * <mount>/meta/env.json with name, mount and views (src/uenv/meta.cpp load_meta; shape
#   of test/setup/apptool/app42/meta/env.json).
# The name is the recipe's: `name: pytorch`, `store: /user-environment` in
# eth-cscs/alps-uenv recipes/pytorch/v2.9.1/gh200/config.yaml.
SHA = "6f1b7d0e3a4c5b2d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d"
MOUNTED = {"UENV_MOUNT_LIST": f"/users/ann/.uenv-images/images/{SHA}/store.squashfs"
                              ":/user-environment",
           "UENV_VIEW": "/user-environment:pytorch:default"}


def uenv_tree(tmp_path: Path, name: str = "pytorch", views=("default", "spack")) -> Path:
    root = tmp_path / "user-environment"
    (root / "meta").mkdir(parents=True)
    view = {v: {"description": f"{v} view", "root": f"/user-environment/env/{v}",
                "env": {"version": 1, "type": "spack-view",
                        "values": {"list": {"PATH": [{"op": "prepend", "value": [
                            f"/user-environment/env/{v}/bin"]}]}, "scalar": {}}}}
            for v in views}
    (root / "meta" / "env.json").write_text(json.dumps(
        {"description": "PyTorch", "mount": "/user-environment", "name": name,
         "views": view}))
    return root


def alps() -> site_env.SiteExpectation:
    loaded = site_files.load("alps-gh200")
    return site_env.SiteExpectation(loaded.name, loaded.data, runtime.environment(loaded.data))


def test_the_sites_uenv_mounted_with_its_view_passes(tmp_path):
    check = site_env.check_uenv(alps(), MOUNTED, uenv_tree(tmp_path))
    assert check.status == PASS, check
    assert "pytorch" in check.detail and "default" in check.detail


@pytest.mark.parametrize("env, tree, words", [
    ({}, {}, "no uenv is mounted"),
    ({"UENV_MOUNT_LIST": f"/x/{SHA}/store.squashfs:/user-tools",
      "UENV_VIEW": "/user-tools:pytorch:default"}, {}, "nothing is mounted at /user-environment"),
    # another uenv's name, sorting before the site's and after it: the name check's own
    # words (a later check, of the loaded view, also names what is mounted)
    (MOUNTED, {"name": "prgenv-gnu"}, "prgenv-gnu is mounted at /user-environment; "),
    (MOUNTED, {"name": "vllm"}, "vllm is mounted at /user-environment; "),
    ({**MOUNTED, "UENV_VIEW": "/user-environment:pytorch:spack"}, {}, "view default"),
    (MOUNTED, {"views": ("spack",)}, "has no view default"),
])
def test_another_uenv_or_view_or_none_fails(tmp_path, env, tree, words):
    check = site_env.check_uenv(alps(), env, uenv_tree(tmp_path, **tree))
    assert check.status == FAIL and words in check.detail, check
    assert "uenv start pytorch/v2.9.1 --view=default" in check.fix


def test_a_mount_without_meta_data_is_not_the_sites(tmp_path):
    check = site_env.check_uenv(alps(), MOUNTED, tmp_path / "empty")
    assert check.status == FAIL and "meta/env.json" in check.detail, check


def test_sites_without_a_uenv_skip_the_check(tmp_path):
    check = site_env.check_uenv(expectation({}), MOUNTED, uenv_tree(tmp_path))
    assert check.status == SKIP
    assert site_env.check_uenv(None, {}, tmp_path).status == SKIP


def test_users_alps_job_example_mounts_the_sites_uenv():
    """docs/users.md's Alps job script starts the uenv as CSCS documents it
    (cscs-docs docs/software/ml/pytorch.md: #SBATCH --uenv=, #SBATCH --view=)."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "users.md").read_text()
    uenv = site_files.load("alps-gh200").data["uenv"]
    script = text[text.index("#SBATCH -N 2 --ntasks-per-node 4 --gpus-per-node 4"):]
    script = script[:script.index("```")]
    assert f"#SBATCH --uenv={uenv['image']}\n" in script
    assert f"#SBATCH --view={uenv['view']}\n" in script
    assert script.index("--uenv=") < script.index("module load py-torch-mpi")
