"""The torchmpi Spack packages, through the pinned real Spack.

Fast checks (repo list, info, audit, lint) first; then concretizations, each
done once per session and shared by the tests that inspect its DAG.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

pytestmark = pytest.mark.spack

PACKAGES = ("py-torch-mpi", "py-torch", "nccl-ss11", "aws-ofi-nccl", "openmpi-cuda")
#: Same-name overrides of builtin recipes: must win over builtin.
OVERRIDES = ("py-torch", "aws-ofi-nccl")


def test_repo_list_shows_torchmpi_first(spack) -> None:
    lines = [line.split() for line in spack.run("repo", "list").stdout.splitlines()]
    names = [parts[1] for parts in lines if len(parts) > 1]
    assert "torchmpi" in names and "builtin" in names
    assert names.index("torchmpi") < names.index("builtin"), "overrides need torchmpi first"


def test_packages_resolve_to_torchmpi_namespace(spack) -> None:
    code = (
        "import spack.repo\n"
        f"for name in {PACKAGES!r}:\n"
        "    print(name, spack.repo.PATH.get_pkg_class(name).namespace)\n"
    )
    namespaces = dict(line.split() for line in spack.python(code).stdout.splitlines())
    assert namespaces == {name: "torchmpi" for name in PACKAGES}


@pytest.mark.parametrize("name", PACKAGES)
def test_spack_info(spack, name: str) -> None:
    out = spack.run("info", name).stdout
    assert name in out
    if name == "py-torch":
        assert "cuda_aware_mpi" in out
    if name == "py-torch-mpi":
        assert "fabric" in out and "cuda_aware_mpi" in out


def test_audit_packages(spack) -> None:
    proc = spack.run("audit", "packages", *PACKAGES)
    assert "FAILED" not in proc.stdout


def test_audit_configs(spack) -> None:
    proc = spack.run("audit", "configs")
    assert "FAILED" not in proc.stdout


def test_package_files_are_ruff_clean() -> None:
    """Lint with the builtin repo's ruff settings (spack_repo/ruff.toml)."""
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-fix", "--config",
         str(ROOT / "spack_repo" / "ruff.toml"), str(ROOT / "spack_repo")],
        capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


# --- concretized DAGs ---------------------------------------------------------


class Dag:
    """A concretized DAG from ``spack spec --json`` or an environment lock."""

    def __init__(self, nodes: list[dict]):
        self.nodes = nodes

    @classmethod
    def from_spec_json(cls, data: dict) -> Dag:
        return cls(data["spec"]["nodes"])

    @classmethod
    def from_lock(cls, lock: dict) -> Dag:
        return cls(list(lock["concrete_specs"].values()))

    def named(self, name: str) -> list[dict]:
        return [n for n in self.nodes if n["name"] == name]

    def one(self, name: str) -> dict:
        found = self.named(name)
        assert len(found) == 1, f"expected exactly one {name}, found {len(found)}"
        return found[0]

    def variant(self, name: str, variant: str):
        return self.one(name)["parameters"].get(variant)

    def by_hash(self, h: str) -> dict:
        return next(n for n in self.nodes if n["hash"] == h)

    def deps(self, name: str) -> dict[str, dict]:
        node = self.one(name)
        return {d["name"]: self.by_hash(d["hash"]) for d in node.get("dependencies", [])}


@pytest.fixture(scope="session")
def openmpi_solve(spack) -> dict:
    """InfiniBand build with openmpi-cuda, solved from scratch in ``spack python``
    so that the concrete package can be asked what its patch() would do."""
    code = """
import json
import spack.concretize
spec = spack.concretize.concretize_one(
    "py-torch-mpi +cuda cuda_arch=80 fabric=ib ^openmpi-cuda")
print(json.dumps({"spec": spec.to_dict()["spec"],
                  "mpich_cuda_patch": spec["py-torch"].package.mpich_cuda_patch}))
"""
    return json.loads(spack.python(code).stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def openmpi_dag(openmpi_solve: dict) -> Dag:
    return Dag(openmpi_solve["spec"]["nodes"])


def test_openmpi_dag(openmpi_dag: Dag) -> None:
    dag = openmpi_dag
    torch = dag.one("py-torch")
    assert torch["namespace"] == "torchmpi"
    for variant in ("distributed", "mpi", "cuda", "nccl", "cuda_aware_mpi"):
        assert dag.variant("py-torch", variant) is True, variant
    assert dag.deps("py-torch")["openmpi-cuda"]["parameters"]["cuda"] is True
    assert not dag.named("openmpi") and not dag.named("mpich")
    assert dag.variant("nccl", "fabrics") == ["verbs"]
    assert not dag.named("aws-ofi-nccl") and not dag.named("nccl-ss11")
    assert dag.variant("py-torch", "cuda_arch") == ["80"]
    assert dag.variant("nccl", "cuda_arch") == ["80"]
    assert dag.variant("py-torch-mpi", "fabric") == "ib"


# --- Cray MPICH + Slingshot-11 environment, with py-torchvision ---------------

CRAY_SPECS = ("py-torch-mpi +cuda cuda_arch=80 fabric=slingshot", "py-torchvision")


def _fake_external(root: Path, files: tuple[str, ...]) -> Path:
    for rel in files:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    return root


@pytest.fixture(scope="session")
def cray_env(spack, tmp_path_factory) -> Path:
    """An environment shaped like a Cray EX site: cray-mpich +cuda, cuda and a
    cxi libfabric as externals (fake prefixes laid out like the real ones),
    py-torch-mpi for Slingshot plus builtin py-torchvision, unified."""
    base = tmp_path_factory.mktemp("cray-env")
    # Fake external prefixes at a fixed place beside the user cache: identical
    # solver input from run to run, so Spack's concretization cache can answer
    # a repeated solve of an unchanged DAG.
    ext = spack.cache_dir.parent / "test-externals"
    # Cray PE layout: the prefix is <mpich>/ofi/<compiler>/<version> and GTL
    # lives in <mpich>/gtl/lib, where builtin cray-mpich's gtl_lib looks.
    cray_root = _fake_external(ext / "mpich" / "8.1.29", ("gtl/lib/libmpi_gtl_cuda.so",))
    mpich = _fake_external(
        cray_root / "ofi" / "gnu" / "12.3", ("include/mpi.h", "lib/libmpi.so")
    )
    cuda = _fake_external(ext / "cuda", ("bin/nvcc", "include/cuda.h", "lib64/libcudart.so"))
    fabric = _fake_external(ext / "libfabric", ("include/rdma/fabric.h", "lib64/libfabric.so"))
    env = base / "env"
    env.mkdir()
    config = {
        "spack": {
            "specs": list(CRAY_SPECS),
            "view": False,
            "concretizer": {"unify": True},
            "config": {"install_tree": {"root": str(base / "store")}},
            "packages": {
                "mpi": {"require": ["cray-mpich"]},
                "cray-mpich": {
                    "buildable": False,
                    "externals": [{"spec": "cray-mpich@8.1.29 +cuda cuda_arch=80",
                                   "prefix": str(mpich)}],
                },
                "cuda": {
                    "buildable": False,
                    "externals": [{"spec": "cuda@12.8.0", "prefix": str(cuda)}],
                },
                "libfabric": {
                    "buildable": False,
                    "externals": [{"spec": "libfabric@1.22.0 fabrics=cxi",
                                   "prefix": str(fabric)}],
                },
            },
        }
    }
    # JSON is valid YAML; Spack reads spack.yaml with a YAML parser.
    (env / "spack.yaml").write_text(json.dumps(config, indent=2))
    spack.run("-e", str(env), "concretize")
    return env


@pytest.fixture(scope="session")
def cray_dag(cray_env: Path) -> Dag:
    return Dag.from_lock(json.loads((cray_env / "spack.lock").read_text()))


def test_cray_dag_has_one_torch_shared_with_torchvision(cray_dag: Dag) -> None:
    torch = cray_dag.one("py-torch")
    assert torch["namespace"] == "torchmpi"
    assert cray_dag.deps("py-torchvision")["py-torch"]["hash"] == torch["hash"]
    assert cray_dag.deps("py-torch-mpi")["py-torch"]["hash"] == torch["hash"]
    assert cray_dag.variant("py-torch", "cuda_aware_mpi") is True


def test_cray_dag_uses_external_cray_mpich(cray_dag: Dag) -> None:
    mpich = cray_dag.one("cray-mpich")
    assert mpich.get("external"), "cray-mpich must be the site's external"
    assert cray_dag.deps("py-torch")["cray-mpich"]["hash"] == mpich["hash"]
    for other in ("openmpi", "openmpi-cuda", "mpich"):
        assert not cray_dag.named(other)


def test_cray_dag_has_slingshot_nccl_stack(cray_dag: Dag) -> None:
    nccl = cray_dag.one("nccl")
    assert cray_dag.variant("nccl", "fabrics") == ["auto"]
    # The one nccl is the release nccl-ss11 pins, from its known-good set.
    assert nccl["version"] == cray_dag.one("nccl-ss11")["version"]
    assert nccl["version"] in ("2.29.2-1", "2.27.7-1", "2.21.5-1")
    plugin = cray_dag.one("aws-ofi-nccl")
    assert plugin["namespace"] == "torchmpi"
    assert cray_dag.variant("aws-ofi-nccl", "cxi") is True
    assert cray_dag.deps("aws-ofi-nccl")["nccl"]["hash"] == nccl["hash"]
    assert cray_dag.deps("py-torch")["nccl"]["hash"] == nccl["hash"]
    assert cray_dag.one("nccl-ss11")
    libfabric = cray_dag.one("libfabric")
    assert libfabric.get("external") and cray_dag.variant("libfabric", "fabrics") == ["cxi"]


def test_cuda_arch_is_equal_on_torch_nccl_and_plugin(cray_dag: Dag) -> None:
    for name in ("py-torch", "nccl", "aws-ofi-nccl", "nccl-ss11", "py-torch-mpi"):
        assert cray_dag.variant(name, "cuda_arch") == ["80"], name


@pytest.fixture(scope="session")
def cray_build_env(spack, cray_env: Path) -> dict:
    """py-torch's build environment in the Cray DAG, computed by the package
    itself on a fake install (no compilation): what setup.py would see."""
    # Module generation off (`::` replaces the list): it would stop at the
    # first fake Python package.  --no-cache: nothing to look up in mirrors.
    spack.run("-c", "modules:default:enable::[]", "-e", str(cray_env),
              "install", "--fake", "--no-cache")
    code = """
import json
import spack.build_environment
import spack.environment as ev
from spack.util.environment import EnvironmentModifications
env = ev.active_environment()
specs = {s.name: s for r in env.concrete_roots() for s in r.traverse()}
torch = specs["py-torch"]
spack.build_environment.set_package_py_globals(torch.package)  # make_jobs, ...
mods = EnvironmentModifications()
torch.package.setup_build_environment(mods)
build_env = {}
mods.apply_modifications(build_env)
print(json.dumps({
    "env": build_env,
    "mpich_cuda_patch": torch.package.mpich_cuda_patch,
    "nccl_prefix": str(specs["nccl"].prefix),
    "mpi_prefix": str(specs["cray-mpich"].prefix),
}))
"""
    return json.loads(spack.python(code, env_dir=cray_env).stdout.strip().splitlines()[-1])


def test_build_environment_forces_mpi_and_system_nccl(cray_build_env: dict) -> None:
    env = cray_build_env["env"]
    assert env["USE_DISTRIBUTED"] == "ON"
    assert env["USE_MPI"] == "ON"
    assert env["MPI_HOME"] == cray_build_env["mpi_prefix"]
    assert env["USE_NCCL"] == "ON" and env["USE_SYSTEM_NCCL"] == "ON"
    nccl = cray_build_env["nccl_prefix"]
    assert env["NCCL_ROOT"] == nccl
    assert env["NCCL_INCLUDE_DIR"] == f"{nccl}/include"
    assert env["NCCL_LIB_DIR"] == f"{nccl}/lib"
    assert env["TORCH_CUDA_ARCH_LIST"] == "8.0"


def test_build_environment_links_cray_gtl(cray_build_env: dict) -> None:
    ldflags = cray_build_env["env"]["LDFLAGS"]
    assert "-lmpi_gtl_cuda" in ldflags
    gtl_dir = str(Path(cray_build_env["mpi_prefix"]).parents[2] / "gtl" / "lib")
    assert f"-L{gtl_dir}" in ldflags


def test_py_torch_carries_mpich_patch_only_for_mpich(
    cray_build_env: dict, openmpi_solve: dict
) -> None:
    """The patch applies for cray-mpich; Open MPI is recognised by PyTorch as is."""
    assert cray_build_env["mpich_cuda_patch"] is True
    assert openmpi_solve["mpich_cuda_patch"] is False


# --- what must not concretize, with each package's own message --------------

NEGATIVE = {
    "openmpi-cuda ~cuda": "openmpi-cuda is CUDA-aware by definition",
    "py-torch-mpi ~cuda fabric=slingshot": "fabric=slingshot builds NCCL with the aws-ofi-nccl",
    # The NCCL/plugin pair that deadlocks (aws/aws-ofi-nccl#1055).
    "aws-ofi-nccl +cuda cuda_arch=80 ^nccl@2.28.9-1": "NCCL 2.28.9 deadlocks with the aws-ofi",
    "nccl-ss11 +cuda cuda_arch=80 ^aws-ofi-nccl@1.12.0": "aws-ofi-nccl 1.7-1.13 are AWS-only",
}


@pytest.fixture(scope="session")
def refusals(spack) -> dict[str, str]:
    """Try every negative spec in one ``spack python`` process (one start-up),
    recording the solver's error message for each, or "" if it concretized."""
    code = f"""
import json
import spack.concretize
result = {{}}
for text in {list(NEGATIVE)!r}:
    try:
        spack.concretize.concretize_one(text)
        result[text] = ""
    except Exception as err:  # UnsatisfiableSpecError and friends
        result[text] = str(err) or repr(err)
print(json.dumps(result))
"""
    return json.loads(spack.python(code).stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("text", list(NEGATIVE))
def test_refused_with_package_message(refusals: dict[str, str], text: str) -> None:
    message = refusals[text]
    assert message, f"'{text}' concretized but must be refused"
    assert NEGATIVE[text] in message, message
