"""The torchmpi Spack packages, through the pinned real Spack.

Fast checks (repo list, info, audit, lint) first; then concretizations, each
done once per session and shared by the tests that inspect its DAG.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support import ROOT, cray_ex
from support.solves import SiteSolves
from support.spack import CHEAP_SOLVE, CHEAP_SOLVE_CODE, PACKAGE_CLASSES
from torchmpi.paths import package_constant

pytestmark = pytest.mark.spack

PACKAGES = ("py-torch-mpi", "py-torch", "nccl-ss11", "aws-ofi-nccl", "openmpi-cuda",
            "py-mpi4py", "py-torchmpi")
#: Same-name overrides of builtin recipes: must win over builtin.
OVERRIDES = ("py-torch", "aws-ofi-nccl", "py-mpi4py")


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


def test_tool_package_versions_are_the_wrappers(spack) -> None:
    """py-torchmpi and the py-torch-mpi bundle carry the tool's own version."""
    code = (
        "import spack.repo\n"
        "for name in ('py-torchmpi', 'py-torch-mpi'):\n"
        "    cls = spack.repo.PATH.get_pkg_class(name)\n"
        "    print(name, ' '.join(str(v) for v in cls.versions))\n"
    )
    versions = dict(line.split(" ", 1) for line in spack.python(code).stdout.splitlines())
    from torchmpi import __version__

    assert versions == {"py-torchmpi": __version__, "py-torch-mpi": __version__}


def test_tool_package_declares_every_dependency_of_the_tool(spack) -> None:
    """Spack installs Python packages ``--no-deps``: every runtime requirement
    in pyproject.toml must be a run dependency of py-torchmpi, at least as
    new, or the installed doctor cannot read a site file (jsonschema,
    ruamel.yaml) on a compute node.  And ``--no-build-isolation``: pip checks
    no build requirement, so each of ``[build-system] requires`` must be a build
    dependency, at least as new (setuptools 77: an older one refuses the licence
    as an SPDX expression)."""
    import tomllib

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    code = (
        "import spack.deptypes as dt, spack.repo\n"
        "cls = spack.repo.PATH.get_pkg_class('py-torchmpi')\n"
        "for deps in cls.dependencies.values():\n"
        "    for name, dep in deps.items():\n"
        "        for kind, flag in (('run', dt.RUN), ('build', dt.BUILD)):\n"
        "            if dep.depflag & flag:\n"
        "                print(kind, name, dep.spec.versions)\n"
    )
    deps = {"run": {}, "build": {}}
    for line in spack.python(code).stdout.splitlines():
        kind, name, versions = line.split()
        deps[kind][name] = versions
    for req in pyproject["build-system"]["requires"]:
        pypi, low = re.match(r"([A-Za-z0-9_.-]+)>=([^;]*)", req).groups()
        name = "py-" + re.sub(r"[._]", "-", pypi.lower())
        assert deps["build"].get(name, "").split(":")[0] == low.strip(), (req, deps["build"])
    run_deps = deps["run"]
    for req in pyproject["project"]["dependencies"]:
        # A marker (``; python_version < '3.11'``) becomes a `when=` on the package side:
        # the name must be there all the same.
        pypi, _, low = re.match(r"([A-Za-z0-9_.-]+)(>=)?([^;]*)", req).groups()
        low = low.strip()
        name = "py-" + re.sub(r"[._]", "-", pypi.lower())
        assert name in run_deps, f"{req} (pyproject.toml) is not a run dependency: {run_deps}"
        if low:
            # The package's range starts where pyproject's does; it may end earlier
            # (py-jsonschema@4:4.17: no Rust build, the package says why).
            assert run_deps[name].split(":")[0] == low, (req, run_deps[name])


def test_every_tool_version_is_fetchable(spack, tmp_path: Path) -> None:
    """Outside a rendered environment (``make install-site``, then ``spack install
    py-torch-mpi``) Spack fetches py-torchmpi's source: for every declared
    version, Spack's own fetch strategy for that version stages it from the
    package's git URL (this checkout's repository), and the source is the tool
    at that version, with the site files its doctor reads."""
    code = (
        "import sys, spack.fetch_strategy as fs, spack.repo, spack.spec, spack.stage\n"
        "cls = spack.repo.PATH.get_pkg_class('py-torchmpi')\n"
        "for v in cls.versions:\n"
        "    pkg = cls(spack.spec.Spec(f'py-torchmpi@={v}'))\n"
        "    fetcher = fs.for_package_version(pkg, v)\n"
        "    stage = spack.stage.Stage(fetcher, path=f'{sys.argv[1]}/{v}', keep=True)\n"
        "    stage.create()\n"
        "    stage.fetch()\n"
        "    stage.expand_archive()\n"
        "    print(v, type(fetcher).__name__, stage.source_path)\n"
    )
    out = spack.python(code, str(tmp_path), check=False)
    assert out.returncode == 0, f"a declared version cannot be fetched:\n{out.stderr[-3000:]}"
    staged = [line.split() for line in out.stdout.splitlines() if len(line.split()) == 3]
    assert staged, out.stdout
    for version, fetcher, source in staged:
        init = Path(source) / "wrapper" / "torchmpi" / "__init__.py"
        assert f'__version__ = "{version}"' in init.read_text(), (version, fetcher)
        assert (Path(source) / "wrapper" / "torchmpi" / "sites" / "derecho.yaml").is_file()


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
def openmpi_solve(spack, tmp_path_factory) -> dict:
    """InfiniBand build with openmpi-cuda: the generic-ib site's solve, the run's
    one (:mod:`support.solves`; ``py-torch-mpi +cuda cuda_arch=80 +cuda_aware_mpi
    fabric=ib``, ``mpi`` required to be ``openmpi-cuda``, nothing said about UCX or
    NCCL's fabrics, so the recipes decide), read in ``spack python`` so that the
    concrete package can be asked what its patch() would do."""
    env_dir = SiteSolves(spack, tmp_path_factory).copy("generic-ib", "generic-ib--packages")
    code = """
import json
import spack.environment as ev
[spec] = [s for s in ev.active_environment().concrete_roots() if s.name == "py-torch-mpi"]
print(json.dumps({"spec": spec.to_dict()["spec"],
                  "mpich_cuda_patch": spec["py-torch"].package.mpich_cuda_patch}))
"""
    return json.loads(spack.python(code, env_dir=env_dir).stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def openmpi_dag(openmpi_solve: dict) -> Dag:
    return Dag(openmpi_solve["spec"]["nodes"])


def test_openmpi_dag(openmpi_dag: Dag) -> None:
    dag = openmpi_dag
    torch = dag.one("py-torch")
    assert torch["namespace"] == "torchmpi"
    for variant in ("distributed", "mpi", "gloo", "cuda", "nccl", "cuda_aware_mpi"):
        assert dag.variant("py-torch", variant) is True, variant
    assert "gloo" in dag.deps("py-torch")
    assert dag.deps("py-torch")["openmpi-cuda"]["parameters"]["cuda"] is True
    assert not dag.named("openmpi") and not dag.named("mpich")
    assert dag.variant("nccl", "fabrics") == ["verbs"]
    # GPUDirect over InfiniBand: Open MPI on UCX with CUDA and gdrcopy.
    assert dag.variant("openmpi-cuda", "fabrics") == ["ucx"]
    ucx = dag.deps("openmpi-cuda")["ucx"]
    assert ucx["parameters"]["cuda"] is True and ucx["parameters"]["gdrcopy"] is True
    assert "gdrcopy" in dag.deps("ucx")
    assert not dag.named("aws-ofi-nccl") and not dag.named("nccl-ss11")
    assert dag.variant("py-torch", "cuda_arch") == ["80"]
    assert dag.variant("nccl", "cuda_arch") == ["80"]
    assert dag.variant("py-torch-mpi", "fabric") == "ib"
    # Off Cray the mpi4py override is builtin's: its GTL variant does not exist.
    assert dag.one("py-mpi4py")["namespace"] == "torchmpi"
    assert "cuda_aware_mpi" not in dag.one("py-mpi4py")["parameters"]


# --- Cray MPICH + Slingshot-11 environment, with py-torchvision ---------------

CRAY_SPECS = ("py-torch-mpi +cuda cuda_arch=80 fabric=slingshot", "py-torchvision")
#: A site's packages.yaml preferring the opposite of what py-torch-mpi requires
#: (py-torch ``+distributed +mpi +gloo``; mpi4py loading GTL on Cray MPICH
#: ``+cuda``): the requirements must win, so the Cray DAG tests hold with them.
CRAY_PREFERENCES = {
    "py-torch": {"variants": "~distributed ~mpi ~gloo"},
    "py-mpi4py": {"variants": "~cuda_aware_mpi"},
}
TORCHMPI_VERSION = next(
    line.split('"')[1] for line in (ROOT / "wrapper/torchmpi/__init__.py").read_text().splitlines()
    if line.startswith("__version__")
)


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
    # Cray MPICH from the Cray EX stand-in (tests/support/cray_ex.py): the prefix
    # is <mpich>/ofi/<compiler>/<version>, GTL (8.1.30's form, libcudart
    # NEEDED) lives in <mpich>/gtl/lib, where builtin cray-mpich's gtl_lib looks.
    mpich = cray_ex.spack_external(cray_ex.build(ext / "cray-ex", "gpu"))
    cuda = _fake_external(ext / "cuda", ("bin/nvcc", "include/cuda.h", "lib64/libcudart.so"))
    fabric = _fake_external(ext / "libfabric", ("include/rdma/fabric.h", "lib64/libfabric.so"))
    env = base / "env"
    env.mkdir()
    config = {
        "spack": {
            "specs": list(CRAY_SPECS),
            "view": False,
            # As in every rendered environment: the torchmpi tool from this checkout.
            "develop": {"py-torchmpi": {"spec": f"py-torchmpi@={TORCHMPI_VERSION}",
                                        "path": str(ROOT)}},
            # No claim below is about targets, duplicates or reuse (CHEAP_SOLVE).
            "concretizer": {"unify": True, **CHEAP_SOLVE},
            "config": {"install_tree": {"root": str(base / "store")}},
            "packages": {
                **CRAY_PREFERENCES,
                "mpi": {"require": ["cray-mpich"]},
                "cray-mpich": {
                    "buildable": False,
                    "externals": [{"spec": "cray-mpich@8.1.30 +cuda cuda_arch=80",
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
    # The one nccl is the release nccl-ss11 pins, from its vouched pairs.
    assert nccl["version"] == cray_dag.one("nccl-ss11")["version"]
    plugin = cray_dag.one("aws-ofi-nccl")
    assert plugin["namespace"] == "torchmpi"
    assert cray_dag.variant("aws-ofi-nccl", "cxi") is True
    assert cray_dag.deps("aws-ofi-nccl")["nccl"]["hash"] == nccl["hash"]
    assert cray_dag.deps("py-torch")["nccl"]["hash"] == nccl["hash"]
    assert cray_dag.one("nccl-ss11")
    libfabric = cray_dag.one("libfabric")
    assert libfabric.get("external") and cray_dag.variant("libfabric", "fabrics") == ["cxi"]


def test_cuda_arch_is_equal_on_torch_and_nccl(cray_dag: Dag) -> None:
    for name in ("py-torch", "nccl", "nccl-ss11", "py-torch-mpi"):
        assert cray_dag.variant(name, "cuda_arch") == ["80"], name
    # The plugin has no GPU code: no cuda_arch of its own (as builtin aluminum
    # treats it, "NOT a CudaPackage"); it shares the one nccl node.
    assert "cuda_arch" not in cray_dag.one("aws-ofi-nccl")["parameters"]


def test_cray_dag_has_mpi4py_with_gtl(cray_dag: Dag) -> None:
    """MPI-first jobs: the environment's mpi4py is torchmpi's, on the same
    cray-mpich, loading Cray's GTL at import (+cuda_aware_mpi)."""
    mpi4py = cray_dag.one("py-mpi4py")
    assert mpi4py["namespace"] == "torchmpi"
    assert cray_dag.variant("py-mpi4py", "cuda_aware_mpi") is True
    assert cray_dag.deps("py-mpi4py")["cray-mpich"]["hash"] == cray_dag.one("cray-mpich")["hash"]
    assert cray_dag.deps("py-torch-mpi")["py-mpi4py"]["hash"] == mpi4py["hash"]


def test_cray_dag_tool_is_the_developed_checkout(cray_dag: Dag) -> None:
    """The torchmpi tool is a package of its own whose source Spack tracks
    (dev_path in the spec, hence in its hash), not files copied by py-torch-mpi."""
    tool = cray_dag.one("py-torchmpi")
    assert tool["version"] == TORCHMPI_VERSION
    assert tool["parameters"]["dev_path"] == str(ROOT)
    assert cray_dag.deps("py-torch-mpi")["py-torchmpi"]["hash"] == tool["hash"]


def test_cray_torch_has_gloo(cray_dag: Dag) -> None:
    assert cray_dag.variant("py-torch", "gloo") is True
    assert cray_dag.deps("py-torch")["gloo"]["parameters"]["cuda"] is True


def test_cray_requirements_hold_against_site_preferences(cray_env: Path, cray_dag: Dag) -> None:
    """The Cray environment's packages.yaml prefers py-torch ``~distributed ~mpi
    ~gloo`` and py-mpi4py ``~cuda_aware_mpi``; py-torch-mpi's requirements win:
    its torch keeps the MPI backend (and gloo), its mpi4py loads GTL."""
    packages = yaml.safe_load((cray_env / "spack.yaml").read_text())["spack"]["packages"]
    for name, preference in CRAY_PREFERENCES.items():
        assert packages[name] == preference, name
    for variant in ("distributed", "mpi", "gloo", "cuda_aware_mpi"):
        assert cray_dag.variant("py-torch", variant) is True, variant
    assert cray_dag.variant("py-mpi4py", "cuda_aware_mpi") is True


@pytest.fixture(scope="session")
def cray_installed(spack, cray_env: Path) -> Path:
    """The Cray DAG fake-installed (stub prefixes, no compilation): what
    ``spack build-env`` needs ("Not all dependencies ... are installed")."""
    # Module generation off (`::` replaces the list): it would stop at the
    # first fake Python package.  --no-cache: nothing to look up in mirrors.
    spack.run("-c", "modules:default:enable::[]", "-e", str(cray_env),
              "install", "--fake", "--no-cache")
    # `spack build-env` runs the DAG's python3 (sysconfig queries) and sources
    # intel-oneapi-mkl's env/vars.sh; fake prefixes have neither, so give
    # python and python-venv a real venv of this interpreter and mkl an empty
    # vars.sh (as tests/test_modules.py does for module generation).
    code = (
        "import spack.environment as ev\n"
        "for s in ev.active_environment().all_specs():\n"
        "    if not s.external:\n"
        "        print(s.name, s.prefix, s.version.up_to(2))\n"
    )
    for line in spack.python(code, env_dir=cray_env).stdout.splitlines():
        name, prefix, version = line.split()
        if name in ("python", "python-venv"):
            shutil.rmtree(prefix, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "venv", "--without-pip", prefix], check=True)
        elif name == "intel-oneapi-mkl":
            vars_sh = Path(prefix) / "mkl" / version / "env" / "vars.sh"
            vars_sh.parent.mkdir(parents=True, exist_ok=True)
            vars_sh.write_text("")
    return cray_env


@pytest.fixture(scope="session")
def cray_build_env(spack, cray_installed: Path) -> dict:
    """py-torch's build environment in the Cray DAG, computed by the package
    itself on a fake install (no compilation): what setup.py would see."""
    cray_env = cray_installed
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


def test_cray_gtl_is_not_linked(spack, cray_installed: Path) -> None:
    """Cray's GTL is loaded at import, not linked: a torch or mpi4py that
    NEEDs it does not import on a node without a CUDA driver (docs/design.md,
    "GTL without a driver"; tests/test_gtl_preload.py).  The build
    environments ``spack build-env`` gives py-torch and py-mpi4py carry no GTL."""
    for name in ("py-torch", "py-mpi4py"):
        out = spack.run("-e", str(cray_installed), "build-env", name, "--", "env",
                        check=True).stdout
        linking = [line for line in out.splitlines()
                   if line.split("=", 1)[0] in ("LDFLAGS", "LDLIBS", "LIBS")]
        assert not [line for line in linking if "mpi_gtl" in line], (name, linking)


@pytest.mark.parametrize("name,package", [("py-torch", "torch"), ("py-mpi4py", "mpi4py")])
def test_cray_install_loads_gtl_first(spack, cray_installed: Path, name: str,
                                      package: str) -> None:
    """The package's own post-install step, run on its fake prefix with a
    stand-in ``__init__.py``: without the spec's patches in its stage it stops the
    install, naming the patch; with torchmpi's applied as Spack applies them (found
    through the patch index by the sha256 the spec records), the package imports
    ``_torchmpi_gtl`` first, which is the staged preload naming the GTL of the
    DAG's cray-mpich (its ``gtl/lib``)."""
    code = (
        "import os, shutil, sys, spack.environment as ev, spack.patch\n"
        "from spack.error import InstallError\n"
        "env = ev.active_environment()\n"
        "spec = next(s for s in env.all_specs() if s.name == sys.argv[1])\n"
        "site = os.path.join(spec.prefix, 'lib', 'python3', 'site-packages', sys.argv[2])\n"
        "os.makedirs(site, exist_ok=True)\n"
        "with open(os.path.join(site, '__init__.py'), 'w') as f:\n"
        "    f.write('\"\"\"stand-in\"\"\"\\nVERSION = 1\\n')\n"
        "source = spec.package.stage.source_path\n"
        "shutil.rmtree(source, ignore_errors=True)\n"
        "os.makedirs(source)\n"
        "try:\n"
        "    spec.package.load_gtl_at_import()\n"
        "except InstallError as error:\n"
        "    print('UNPATCHED', error)\n"
        "for patch in spec.patches:  # torchmpi's (builtin's target the real source)\n"
        "    if '/torchmpi/packages/' in patch.path:\n"
        "        spack.patch.apply_patch(source, patch.path, patch.level, patch.working_dir)\n"
        "spec.package.load_gtl_at_import()\n"
        "spec.package.stage.destroy()\n"
        "print('SITE', site)\n"
    )
    out = spack.python(code, name, package, env_dir=cray_installed).stdout
    unpatched = next(line for line in out.splitlines() if line.startswith("UNPATCHED "))
    assert "torchmpi-gtl-preload.patch was not applied" in unpatched, unpatched
    site = Path(next(line for line in out.splitlines() if line.startswith("SITE ")).split()[1])
    lines = (site / "__init__.py").read_text().splitlines()
    assert lines[1].startswith(f"from {package} import _torchmpi_gtl"), lines
    node = spack.cache_dir.parent / "test-externals" / "cray-ex"
    gtl = node / "opt/cray/pe/mpich/8.1.30/gtl/lib"
    preload = (site / "_torchmpi_gtl.py").read_text()
    assert f"GTL = {str(gtl / 'libmpi_gtl_cuda.so')!r}" in preload
    assert preload.rstrip().endswith("_GTL_HANDLE = preload()")


def test_py_torch_carries_mpich_patch_only_for_mpich(
    cray_build_env: dict, openmpi_solve: dict
) -> None:
    """The patch applies for cray-mpich; Open MPI is recognised by PyTorch as is."""
    assert cray_build_env["mpich_cuda_patch"] is True
    assert openmpi_solve["mpich_cuda_patch"] is False


# --- what must not concretize, with each package's own message --------------

#: Specs the solver must refuse, solved a group at a time: each group is ONE
#: solve of several roots (Spack reports every refusal its best model has), so
#: the cost is about one py-torch solve per group, not one per spec.  A group
#: holds one py-torch state only; within a group the roots touch separate
#: nodes or ask the same node the same thing.
REFUSAL_GROUPS = (
    (
        # The headline case: a CUDA-aware backend on a Cray MPICH without CUDA.
        "py-torch +cuda cuda_arch=80 +cuda_aware_mpi ^[virtuals=mpi] cray-mpich~cuda",
        "py-mpi4py +cuda_aware_mpi ^[virtuals=mpi] cray-mpich~cuda",
        "py-torch-mpi +cuda cuda_arch=none",
        # 1.17.1: the last release the shutdown-ordering line refuses (its boundary).
        "nccl-ss11 ~cuda ^aws-ofi-nccl@1.17.1",
        "openmpi-cuda@4.0",
    ),
    (
        # 2.9.0: deprecated in builtin, so the solve allows deprecated versions.
        "py-torch@2.9.0 +cuda cuda_arch=80 +cuda_aware_mpi ^mvapich2",
        "py-torch-mpi ~cuda fabric=slingshot",
        # A pair no source vouches for: NCAR ran NCCL 2.21.5 with plugin 1.6.0 only.
        "nccl-ss11@2.21.5-1 +cuda cuda_arch=none ^aws-ofi-nccl@1.12.0",
        "openmpi-cuda ~cuda",
    ),
    (
        # No py-torch: a small solve for roots whose refusal the solver would
        # otherwise trade for a cheaper one (relaxing a requested version).
        "nccl-ss11 +cuda cuda_arch=80 ^aws-ofi-nccl@1.12.0",
        "openmpi-cuda fabrics=auto",
    ),
)

#: Every conflicts()/requires() line of the torchmpi packages -> (group, the
#: text only that line's msg holds).  Deleting the line loses its message
#: (each was deleted once, all together, and every test here failed).
REFUSED = {
    "py-torch: CUDA-aware provider without +cuda": (
        0, "py-torch +cuda_aware_mpi needs a CUDA-aware MPI: use cray-mpich+cuda"),
    "py-torch: provider not known to be CUDA-aware": (
        1, "mvapich2 is not known to torchmpi to be CUDA-aware"),
    "py-torch: releases between the fixtures": (
        1, "torchmpi's patcher was checked on 2.6.0 and 2.9.1 only"),
    "py-torch-mpi: +cuda without cuda_arch": (
        0, "py-torch-mpi +cuda needs the GPU architecture"),
    "py-torch-mpi: slingshot without CUDA": (
        1, "fabric=slingshot builds NCCL with the aws-ofi-nccl"),
    "nccl-ss11: requires +cuda": (0, "nccl-ss11 is NCCL for NVIDIA GPUs"),
    "nccl-ss11: +cuda without cuda_arch": (1, "nccl-ss11 needs the GPU architecture"),
    "nccl-ss11: AWS-only plugin releases": (2, "aws-ofi-nccl 1.7-1.13 are AWS-only"),
    "nccl-ss11: plugin shutdown-ordering bug": (
        0, "aws-ofi-nccl 1.16.0-1.17.1 have a shutdown-ordering bug on Slingshot-11"),
    "nccl-ss11: unvouched NCCL/plugin pair": (
        1, "no source vouches for this aws-ofi-nccl with NCCL 2.21.5-1"),
    "openmpi-cuda: requires +cuda": (1, "openmpi-cuda is CUDA-aware by definition"),
    "openmpi-cuda: requires @4.1:": (0, "openmpi-cuda needs Open MPI 4.1 or later"),
    # Spack 1.1 prints no requirement message for a clash of disjoint variant
    # values: the refusal names the value only this line asks for.
    "openmpi-cuda: requires fabrics=ucx": (
        2, "openmpi-cuda variant 'fabrics' cannot have values 'auto' and 'ucx'"),
}


@pytest.fixture(scope="session")
def refusals(spack, tmp_path_factory) -> dict:
    """Each group of :data:`REFUSAL_GROUPS` solved once in one ``spack python``
    process (one start-up, one repository load), recording the solver's error
    message per group, or "" if the group concretized.  A cray-mpich ``~cuda``
    external (stub prefix) stands for a Cray site without GPU support; the
    ``nccl-ss11`` aarch64/gcc conflict, which no x86_64 host can solve for, is
    checked on its declared condition instead (``aarch64_gcc9``).  Every solve runs
    under :data:`support.spack.CHEAP_SOLVE` (no claim here is about targets,
    duplicates or reuse); ``cpu`` records each solve's CPU-seconds."""
    prefix = tmp_path_factory.mktemp("cray-mpich-nocuda")
    code = CHEAP_SOLVE_CODE + f"""
import json
import time
import spack.concretize
import spack.config
import spack.repo
import spack.spec
from spack.solver.asp import Solver
scope = spack.config.InternalConfigScope("refusals", {{"packages": {{"cray-mpich": {{
    "buildable": False,
    "externals": [{{"spec": "cray-mpich@8.1.29 ~cuda", "prefix": {str(prefix)!r}}}]}}}}}})
messages, cpu = [], []
with spack.config.override(scope):
    for group in {[list(g) for g in REFUSAL_GROUPS]!r}:
        start = time.process_time()
        try:
            Solver().solve([spack.spec.Spec(s) for s in group], allow_deprecated=True)
            messages.append("")
        except Exception as err:  # UnsatisfiableSpecError and friends
            messages.append(str(err) or repr(err))
        cpu.append(round(time.process_time() - start, 1))
# A CPU build under a site preference for the opposite of py-torch-mpi's
# requirement (without +cuda_aware_mpi nothing else keeps torch's +mpi).
start = time.process_time()
with spack.config.override(spack.config.InternalConfigScope(
        "preferences", {{"packages": {{"py-torch": {CRAY_PREFERENCES["py-torch"]!r}}}}})):
    torch = spack.concretize.concretize_one("py-torch-mpi ~cuda")["py-torch"]
cpu.append(round(time.process_time() - start, 1))
preferred = {{k: str(v.value) for k, v in torch.variants.items()}}
# Spack's own condition semantics on the line as nccl-ss11 declares it.
cls = spack.repo.PATH.get_pkg_class("nccl-ss11")
def refused(text):
    spec = spack.spec.Spec(text)
    return [msg for when, entries in cls.conflicts.items() for c, msg in entries
            if spec.satisfies(when) and spec.satisfies(c)]
def unmet(text):
    spec = spack.spec.Spec(text)
    return [msg for when, entries in cls.requirements.items() for reqs, policy, msg in entries
            if spec.satisfies(when) and not any(spec.satisfies(r) for r in reqs)]
module = __import__(cls.__module__, fromlist=["VOUCHED_PAIRS"])
vouched = {{f"{{n}}/{{p}}": refused(text) + unmet(text) for n, p, *_ in module.VOUCHED_PAIRS
           for text in [f"nccl-ss11@{{n}} +cuda cuda_arch=90 ^nccl@{{n}} ^aws-ofi-nccl@{{p}}"]}}
print(json.dumps({{"messages": messages, "preferred": preferred, "vouched": vouched, "cpu": cpu,
                  "aarch64_gcc9": {{
    # A target after %gcc is gcc's (Spack 1.1): nccl's comes before it.
    "hang": refused("nccl-ss11 ^nccl@2.29.2-1 target=neoverse_v2 %gcc@9.5.0 target=zen3"),
    "hang_2.28.9": refused("nccl-ss11 ^nccl@2.28.9-1 target=neoverse_v2 %gcc@9.5.0"),
    "gcc10": refused("nccl-ss11 ^nccl@2.29.2-1 target=neoverse_v2 %gcc@10.5.0"),
    "fixed": refused("nccl-ss11 ^nccl@2.29.3-1 target=neoverse_v2 %gcc@9.5.0"),
    "before": refused("nccl-ss11 ^nccl@2.28.7-1 target=neoverse_v2 %gcc@9.5.0"),
    "x86": refused("nccl-ss11 ^nccl@2.29.2-1 target=zen3 %gcc@9.5.0 target=neoverse_v2"),
    "gcc_only": refused("nccl-ss11 ^nccl@2.29.2-1 %gcc@9.5.0 target=neoverse_v2")}},
                  "shutdown": {{v: refused(f"nccl-ss11 ^nccl@2.29.2-1 ^aws-ofi-nccl@{{v}}")
                               for v in ("1.14.0", "1.15.0", "1.16.0", "1.17.1", "1.17.2")}}}}))
"""
    return json.loads(spack.python(code).stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("line", list(REFUSED))
def test_refused_with_package_message(refusals: dict, line: str) -> None:
    """Every conflicts()/requires() line of the torchmpi packages refuses a
    spec in a real solve, and the solver reports that line's own message."""
    group, text = REFUSED[line]
    message = refusals["messages"][group]
    assert message, f"{list(REFUSAL_GROUPS[group])} concretized but must be refused"
    assert text in message, message


def test_every_refusal_group_is_tested() -> None:
    """No group solved for nothing: each carries at least one tested message."""
    assert {group for group, _ in REFUSED.values()} == set(range(len(REFUSAL_GROUPS)))


def test_cpu_torch_keeps_mpi_against_a_site_preference(refusals: dict) -> None:
    """A site's packages.yaml preferring py-torch ``~distributed ~mpi ~gloo``
    does not cost a CPU py-torch-mpi its MPI backend: its requirement wins.
    (On +cuda_aware_mpi builds +mpi is implied anyway: see the Cray DAG.)"""
    assert refusals["preferred"]["mpi"] == "True", refusals["preferred"]
    assert refusals["preferred"]["distributed"] == "True"
    assert refusals["preferred"]["gloo"] == "True"
    assert refusals["preferred"]["cuda"] == "False"


def test_mpi4py_gtl_variant_is_refused_off_cray_mpich_cuda(refusals: dict) -> None:
    """py-mpi4py's +cuda_aware_mpi exists only on cray-mpich+cuda or cray-mpich+rocm
    (its two variants' when=): asked on a cray-mpich~cuda, the solver would need
    one of those conditions and reports the clash it found cheapest -- the
    ``+cuda`` against ``~cuda``, or (since the GTL-for-HSA variant) a ``+rocm``
    cray-mpich without an amdgpu_target.  (Not the spec text: the header of the
    message repeats every input spec.  With the ``when=`` deleted the cuda line
    was gone from the group's message.)"""
    message = refusals["messages"][0]
    assert ("'cray-mpich' requires conflicting variant values '~cuda' and '+cuda'" in message
            or "cray-mpich: 'amdgpu_target=none' conflicts with '+rocm'" in message), message


def test_every_vouched_pair_is_admitted(refusals: dict) -> None:
    """The other side of the refusals: nccl-ss11's own requires/conflicts lines,
    by Spack's condition semantics, admit every NCCL/plugin pair a source
    vouches for (CSCS's 1.17.2 with NCCL 2.29.2-1 as well as 1.18.0)."""
    assert len(refusals["vouched"]) == len(vouched_pairs())
    assert {pair: why for pair, why in refusals["vouched"].items() if why} == {}


def test_aarch64_gcc9_nccl_hang_is_refused_by_its_condition(refusals: dict) -> None:
    """No solve on this x86_64 host can pick target=aarch64, so this line is
    checked by Spack's own condition semantics (the conflict's when and
    constraint, as nccl-ss11 declares them, on specs): refused exactly for an
    NCCL 2.28.9-2.29.2 (the releases with the weak-CAS loop, NVIDIA/nccl src/proxy.cc)
    whose own target is ARM, built by gcc < 10: whatever gcc's node targets, and not
    for an x86 NCCL whose gcc alone is given an ARM target."""
    facts = refusals["aarch64_gcc9"]
    for hang in ("hang", "hang_2.28.9"):
        assert any("hangs on ARM" in m for m in facts[hang]), (hang, facts)
    for other in ("gcc10", "fixed", "before", "x86", "gcc_only"):
        assert not any("hangs on ARM" in m for m in facts[other]), (other, facts)


def test_shutdown_ordering_conflict_is_1_16_0_to_1_17_1(refusals: dict) -> None:
    """The fix in aws-ofi-nccl 1.17.2 (b96292b9) is in src/cm/, which first ships in
    1.16.0: 1.14.0 (CSCS's PyTorch uenv v2.6.0) and 1.15.0 are not refused for it, by
    Spack's condition semantics on the line as nccl-ss11 declares it."""
    buggy = {v for v, msgs in refusals["shutdown"].items()
             if any("shutdown-ordering" in m for m in msgs)}
    assert buggy == {"1.16.0", "1.17.1"}, refusals["shutdown"]


# --- overrides are neutral for users who never ask for torchmpi's features ----


@pytest.fixture(scope="session")
def overrides_vs_builtin(spack) -> dict:
    """``aws-ofi-nccl`` and ``py-mpi4py``, each through the torchmpi override and
    through builtin (same defaults, same config), in one ``spack python`` and
    three solves: builtin's two together, the overrides' two together (each side
    one environment of both, asked the same), and the plugin ``+cxi`` alone.
    Apart they were five solves in two processes; a py-mpi4py solve of its own
    costs about 40 CPU-seconds, most of it what every solve sets up.  Both sides
    solve under the same :data:`support.spack.CHEAP_SOLVE` (about 30 CPU-s each
    instead of 37)."""
    code = CHEAP_SOLVE_CODE + """
import json
import spack.concretize
import spack.repo
import spack.spec
from spack.util.environment import EnvironmentModifications

def describe(spec, pkg_cls):
    mods = EnvironmentModifications()
    pkg_cls(spec).setup_run_environment(mods)
    return {
        "namespace": spec.namespace,
        "variants": {k: str(v.value) for k, v in spec.variants.items()},
        "deps": sorted((d.name, d.dag_hash()) for d in spec.dependencies()),
        # Each install has its own prefix (the hashes differ by namespace).
        "run_env": [[type(m).__name__, m.name,
                     str(getattr(m, "value", "")).replace(str(spec.prefix), "<prefix>")]
                    for m in mods.env_modifications],
    }

def build_env(spec, pkg_cls):
    spec["mpi"].package.setup_dependent_package(None, spec)  # sets spec["mpi"].mpicc
    mods = EnvironmentModifications()
    pkg_cls(spec).setup_build_environment(mods)
    return [[type(m).__name__, m.name, str(getattr(m, "value", ""))]
            for m in mods.env_modifications]

def together(*texts):
    pairs = spack.concretize.concretize_together([(spack.spec.Spec(s), None) for s in texts])
    return [concrete for _abstract, concrete in pairs]

builtin, builtin_mpi4py = together("builtin.aws-ofi-nccl", "builtin.py-mpi4py")
# At builtin's default release: the override adds newer ones (1.19.2 and 1.20.0,
# OLCF's and LUMI's ROCm pairs, from commits), which an unpinned solve would take.
ours, ours_mpi4py = together(f"aws-ofi-nccl@={builtin.version}", "py-mpi4py")
cxi = spack.concretize.concretize_one("aws-ofi-nccl +cxi")
builtin_cls = spack.repo.PATH.get_repo("builtin").get_pkg_class("aws-ofi-nccl")
mpi4py_cls = spack.repo.PATH.get_repo("builtin").get_pkg_class("py-mpi4py")
both = (ours_mpi4py, builtin_mpi4py)
print(json.dumps({"plugin": {
    "ours": describe(ours, type(ours.package)),
    "builtin": describe(builtin, builtin_cls),
    # The builtin class on the override's spec: what builtin would set there.
    "builtin_on_ours": describe(ours, builtin_cls)["run_env"],
    "cxi_libfabric": {"version": str(cxi["libfabric"].version),
                      "fabrics": sorted(cxi["libfabric"].variants["fabrics"].value)},
}, "mpi4py": {
    "namespaces": [s.namespace for s in both],
    "hashes": [s.dag_hash() for s in both],
    "variants": [{k: str(v.value) for k, v in s.variants.items()} for s in both],
    "deps": [sorted((d.name, d.dag_hash()) for d in s.dependencies()) for s in both],
    "build_env": [build_env(ours_mpi4py, type(ours_mpi4py.package)),
                  build_env(ours_mpi4py, mpi4py_cls)],
}}))
"""
    return json.loads(spack.python(code).stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def plugin_default_vs_builtin(overrides_vs_builtin: dict) -> dict:
    """``aws-ofi-nccl`` through the override and through builtin, each package's
    run environment, and the libfabric of a ``+cxi`` solve."""
    return overrides_vs_builtin["plugin"]


def test_plugin_override_solves_like_builtin_by_default(plugin_default_vs_builtin) -> None:
    ours, builtin = plugin_default_vs_builtin["ours"], plugin_default_vs_builtin["builtin"]
    assert ours["namespace"] == "torchmpi" and builtin["namespace"] == "builtin"
    added = {k: v for k, v in ours["variants"].items() if k not in builtin["variants"]}
    assert added == {"cxi": "False"}, "only torchmpi's own variant, off by default"
    assert {k: ours["variants"][k] for k in builtin["variants"]} == builtin["variants"]
    assert ours["deps"] == builtin["deps"], "the same dependencies, hash for hash"


def test_plugin_with_cxi_gets_a_libfabric_with_the_cxi_provider(plugin_default_vs_builtin) -> None:
    """``+cxi`` (what nccl-ss11 asks) must bring libfabric's cxi provider, from
    a release the plugin's configure accepts (>= 1.11), in a real solve with no
    site to supply it."""
    libfabric = plugin_default_vs_builtin["cxi_libfabric"]
    assert "cxi" in libfabric["fabrics"], libfabric
    assert tuple(int(p) for p in libfabric["version"].split(".")[:2]) >= (1, 11), libfabric


def test_plugin_override_run_environment_is_builtins_by_default(
    plugin_default_vs_builtin,
) -> None:
    """No NCCL_NET of our own and no unset of a user's NCCL_NET_PLUGIN unless +cxi."""
    ours = plugin_default_vs_builtin["ours"]["run_env"]
    assert ours == plugin_default_vs_builtin["builtin"]["run_env"]
    assert ours == plugin_default_vs_builtin["builtin_on_ours"]
    assert not [m for m in ours if m[1] == "NCCL_NET_PLUGIN"]


@pytest.fixture(scope="session")
def mpi4py_default_vs_builtin(overrides_vs_builtin: dict) -> dict:
    """``py-mpi4py`` through the override and through builtin, with the build
    environment each class sets on the override's spec."""
    return overrides_vs_builtin["mpi4py"]


def test_mpi4py_override_is_builtins_by_default(mpi4py_default_vs_builtin) -> None:
    """Registered site-wide, the override gives a default py-mpi4py user exactly
    builtin's: same variants, same dependencies, same build environment."""
    facts = mpi4py_default_vs_builtin
    assert facts["namespaces"] == ["torchmpi", "builtin"]
    assert facts["variants"][0] == facts["variants"][1]
    assert facts["deps"][0] == facts["deps"][1]
    assert facts["build_env"][0] == facts["build_env"][1]
    assert not [m for m in facts["build_env"][0] if m[1] == "LDFLAGS"]


def test_site_wide_registration_changes_namespace_and_hash(mpi4py_default_vs_builtin) -> None:
    """What registering the repo does change for other users (docs/design.md,
    py-torch): the same default spec comes from namespace torchmpi, with another
    DAG hash (Spack hashes the package file), so it is a new install."""
    facts = mpi4py_default_vs_builtin
    assert facts["namespaces"] == ["torchmpi", "builtin"]
    assert facts["hashes"][0] != facts["hashes"][1]


# --- MPI providers and detection ---------------------------------------------


@pytest.fixture(scope="session")
def mpi_providers(spack) -> dict:
    """Every provider of ``mpi`` Spack knows, and py-torch's conflicts under
    +cuda_aware_mpi, read from the real package classes."""
    code = """
import json
import spack.repo
import spack.spec
torch = spack.repo.PATH.get_pkg_class("py-torch")
conflicts = []
for when, entries in torch.conflicts.items():
    # The CUDA side: the +rocm refusals (only cray-mpich+rocm) are tested with +rocm.
    if (when.satisfies(spack.spec.Spec("+cuda_aware_mpi"))
            and not when.satisfies(spack.spec.Spec("+rocm"))):
        conflicts += [str(spec) for spec, _msg in entries]
providers = sorted({s.name for s in spack.repo.PATH.providers_for("mpi")})

def refused(text):
    # Spack's condition semantics on the lines as py-torch declares them.
    spec = spack.spec.Spec(text)
    return [msg for when, entries in torch.conflicts.items() for c, msg in entries
            if spec.satisfies(when) and spec.satisfies(c)]

aware = "py-torch@2.10.0 +distributed+mpi+cuda+cuda_aware_mpi cuda_arch=80 ^[virtuals=mpi] "
matrix = {}
for name in providers:
    row = {"plain": refused(aware + name),
           "off": refused(aware.replace("+cuda_aware_mpi", "~cuda_aware_mpi") + name)}
    if "cuda" in spack.repo.PATH.get_pkg_class(name).variant_names():
        row["~cuda"] = refused(aware + f"{name}~cuda")
        row["+cuda"] = refused(aware + f"{name}+cuda")
    matrix[name] = row
print(json.dumps({"providers": providers, "conflicts": conflicts, "matrix": matrix}))
"""
    return json.loads(spack.python(code).stdout.strip().splitlines()[-1])


AWARE_MPI = {"openmpi", "openmpi-cuda", "mpich", "cray-mpich"}


def test_every_mpi_provider_is_cuda_aware_or_refused(mpi_providers: dict) -> None:
    """+cuda_aware_mpi accepts the four MPIs whose +cuda build is CUDA-aware and
    refuses every other provider by name (a new builtin provider fails here)."""
    # Spack writes `^[virtuals=mpi] x` as `^mpi=x`.
    conflicts = set(mpi_providers["conflicts"])
    for name in mpi_providers["providers"]:
        if name in AWARE_MPI:
            assert f"^mpi={name}~cuda" in conflicts, (name, conflicts)
            assert f"^mpi={name}" not in conflicts
        else:
            assert f"^mpi={name}" in conflicts, f"{name} is neither known nor refused"


def test_cuda_aware_mpi_refusal_per_provider(mpi_providers: dict) -> None:
    """The per-provider matrix of py-torch's ``[virtuals=mpi]`` conflicts, by
    Spack's own condition semantics (each conflict's when and constraint as
    the package declares them, on the spec of every provider): ``~cuda`` of a
    CUDA-aware provider and every other provider are refused with a message
    naming it; ``+cuda`` is not, and nothing is under ``~cuda_aware_mpi``.
    One spec per line is refused by a real solve in ``refusals`` above; a
    solve per provider would cost minutes each."""
    for name in mpi_providers["providers"]:
        row = mpi_providers["matrix"][name]
        assert row["off"] == [], name
        if name in AWARE_MPI:
            assert row["plain"] == [] and row["+cuda"] == [], (name, row)
            message = (f"py-torch +cuda_aware_mpi needs a CUDA-aware MPI: use {name}+cuda "
                       "(or openmpi-cuda)")
            assert len(row["~cuda"]) == 1 and message in row["~cuda"][0], (name, row)
        else:
            assert len(row["plain"]) == 1, (name, row)
            assert f"{name} is not known to torchmpi to be CUDA-aware" in row["plain"][0]


def test_external_find_reports_open_mpi_once(spack, tmp_path: Path) -> None:
    """openmpi-cuda does not inherit openmpi's detection: one entry per install."""
    prefix = tmp_path / "ompi"
    (prefix / "bin").mkdir(parents=True)
    ompi_info = prefix / "bin" / "ompi_info"
    ompi_info.write_text("#!/bin/sh\necho '                Open MPI: 4.1.6'\n")
    ompi_info.chmod(0o755)
    env = tmp_path / "env"
    env.mkdir()
    (env / "spack.yaml").write_text("spack:\n  specs: []\n")
    proc = spack.run("-e", str(env), "external", "find", "--path", str(prefix / "bin"),
                     "openmpi", "openmpi-cuda")
    packages = yaml.safe_load((env / "spack.yaml").read_text())["spack"].get("packages") or {}
    assert "openmpi" in packages, proc.stdout + proc.stderr
    assert "openmpi-cuda" not in packages, packages


# --- py-torch: +cuda_aware_mpi only where a real upstream fixture covers it -----

FIXTURES = ROOT / "tests" / "fixtures" / "process_group_mpi"


def _fixture_tags() -> list[tuple[int, ...]]:
    tags = []
    for path in FIXTURES.glob("v*.cpp"):
        for line in path.read_text().splitlines()[:20]:
            if line.startswith("// Tag: v"):
                tags.append(tuple(int(p) for p in line.split("v", 1)[1].split(".")))
    return sorted(tags)


@pytest.fixture(scope="session")
def torch_class_facts(spack) -> dict:
    """py-torch's releases that can be built +cuda_aware_mpi (the variant exists
    and no version conflict excludes them)."""
    code = """
import json
import spack.repo
import spack.spec
cls = spack.repo.PATH.get_pkg_class("py-torch")
reachable = []
for v in cls.versions:
    if v.isdevelop():
        continue
    s = spack.spec.Spec(f"py-torch@={v} +mpi+cuda")
    if not any(s.intersects(w) for w, vs in cls.variants.items() if "cuda_aware_mpi" in vs):
        continue
    s = spack.spec.Spec(f"py-torch@={v} +mpi+cuda+cuda_aware_mpi")
    if any(s.satisfies(when) and s.satisfies(c)
           for when, entries in cls.conflicts.items() for c, _msg in entries):
        continue
    reachable.append(str(v))
print(json.dumps({"reachable": reachable}))
"""
    return json.loads(spack.python(code).stdout.strip().splitlines()[-1])


def test_cuda_aware_mpi_only_on_versions_the_fixtures_cover(torch_class_facts) -> None:
    """Every release reachable with +cuda_aware_mpi has a fixture of its own
    ProcessGroupMPI.cpp, or is listed in py-torch's UNVERIFIED_TORCH (and every
    listed release is reachable and has no fixture)."""
    tags = {".".join(map(str, t)) for t in _fixture_tags()}
    assert len(tags) >= 2, "fixtures with a 'Tag: vX.Y.Z' header"
    unverified = set(package_constant("py_torch", "UNVERIFIED_TORCH"))
    reachable = set(torch_class_facts["reachable"])
    assert reachable, "no builtin torch version can be built +cuda_aware_mpi"
    assert reachable - tags == unverified, (sorted(reachable - tags), sorted(unverified))


def test_spack_spec_shows_the_patcher(spack, cray_env: Path, cray_dag: Dag) -> None:
    """The patcher and the GTL preload reach the build as patch files
    (py_torch/as_patch.py), so their sha256 are in the concrete spec's ``patches``
    (and hence in the hash: Spack's ``content_hash`` digests each patch applied),
    and ``spack spec`` prints them: py-torch carries both, torchmpi's py-mpi4py the
    preload; a changed patcher or preload is a new build, visible as such."""
    import hashlib

    def digest(package: str, name: str) -> str:
        path = ROOT / "spack_repo/torchmpi/packages" / package / name
        return hashlib.sha256(path.read_bytes()).hexdigest()

    shown = {"py-torch": (digest("py_torch", "torchmpi-patcher.patch"),
                          digest("py_torch", "torchmpi-gtl-preload.patch")),
             "py-mpi4py": (digest("py_mpi4py", "torchmpi-gtl-preload.patch"),)}
    # No argument: the environment's concrete roots, as locked (no new solve).
    out = spack.run("-e", str(cray_env), "spec", check=True).stdout
    for name, digests in shown.items():
        recorded = cray_dag.variant(name, "patches") or []
        assert set(digests) <= set(recorded), (name, cray_dag.one(name))
        lines = [line for line in out.splitlines() if re.search(rf"\b{name}@", line)]
        assert lines and all(f"patches:={d[:7]}" in line or f"patches={d[:7]}" in line
                             or f",{d[:7]}" in line for line in lines for d in digests), lines


# --- aws-ofi-nccl: NCCL_NET by the plugin's version -----------------------------


@pytest.fixture(scope="session")
def plugin_nccl_net(spack) -> dict[str, str]:
    """``nccl_net`` of the override for every builtin plugin release."""
    code = """
import json
import spack.repo
import spack.spec
cls = spack.repo.PATH.get_pkg_class("aws-ofi-nccl")
print(json.dumps({str(v): cls(spack.spec.Spec(f"aws-ofi-nccl@={v} +cxi")).nccl_net
                  for v in cls.versions if not v.isdevelop()}))
"""
    return json.loads(spack.python(code).stdout.strip().splitlines()[-1])


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split("."))


def test_nccl_net_is_a_name_that_plugin_release_answers_to(plugin_nccl_net) -> None:
    """Checked against the names read from the plugin's source at its tags."""
    ranges = json.loads((ROOT / "tests/fixtures/aws_ofi_nccl_net_names.json").read_text())
    ranges = sorted(ranges["ranges"], key=lambda r: _version(r["from"]))
    for version, name in plugin_nccl_net.items():
        bracket = [r for r in ranges if _version(r["from"]) <= _version(version)]
        assert bracket, f"aws-ofi-nccl {version} predates every recorded range"
        assert name in bracket[-1]["accepted"], (version, name, bracket[-1]["source"])
    # "OFI" only from the release that introduced it (PR #530, v1.13.0-aws).
    assert plugin_nccl_net["1.12.1"] == "AWS Libfabric"
    assert plugin_nccl_net["1.13.0"] == "OFI"


def test_every_vouched_rccl_plugin_is_a_release_the_override_declares(plugin_nccl_net) -> None:
    """Each plugin of VOUCHED_RCCL_PAIRS is a release Spack can fetch: builtin's, or one
    the override adds from its release tag's commit (OLCF's 1.19.2, LUMI's 1.20.0:
    aws/aws-ofi-nccl tags v1.19.2 and v1.20.0), with no checksum to cite."""
    declared = set(plugin_nccl_net)
    for rocm, plugin, *_ in vouched_rccl_pairs():
        assert plugin in declared, (rocm, plugin, sorted(declared))
    text = (ROOT / "spack_repo/torchmpi/packages/aws_ofi_nccl/package.py").read_text()
    added = dict(re.findall(r'version\("([\d.]+)", commit="([0-9a-f]{40})"\)', text))
    assert added == {"1.19.2": "17120adbfd9721f4d0861360b09f05a8d9c5fba4",
                     "1.20.0": "a2a6d08ea98296f99596b5c18b30b8a20d74f609"}


# --- nccl-ss11: only NCCL/plugin pairs a source vouches for ---------------------


def vouched_pairs() -> list[tuple[str, str, str, str, str, str, str]]:
    """VOUCHED_PAIRS from nccl_ss11/package.py (tests/test_pairs.py checks its labels)."""
    return [tuple(p) for p in package_constant("nccl_ss11", "VOUCHED_PAIRS")]


def test_every_vouched_pair_names_its_source() -> None:
    pairs = vouched_pairs()
    assert ("2.21.5-1", "1.6.0") in {(n, p) for n, p, *_ in pairs}  # NCAR Derecho
    assert ("2.27.7-1", "1.19.0") in {(n, p) for n, p, *_ in pairs}  # HPE shs-ccl-docs
    for nccl, plugin, _, _, _, source, _evidence in pairs:
        assert any(s in source for s in ("RELEASENOTES", "@")), (nccl, plugin, source)


def test_cray_dag_nccl_and_plugin_are_a_vouched_pair(cray_dag: Dag) -> None:
    pair = (cray_dag.one("nccl")["version"], cray_dag.one("aws-ofi-nccl")["version"])
    assert pair in {(n, p) for n, p, *_ in vouched_pairs()}, pair


# --- AMD GPUs: py-torch-mpi +rocm, RCCL with the plugin at vouched pairs -------
#
# Checked on the package classes by Spack's own condition semantics (one
# ``spack python``, seconds): a full +rocm solve pulls the whole ROCm stack
# and takes minutes here (see ``rocm_slingshot_solve`` below, the one solve).

#: py-torch-mpi +rocm for Slingshot with every variant a ``when=`` may test
#: stated, so that abstract ``satisfies`` decides each condition.
ROCM_SLINGSHOT = ("py-torch-mpi@0.1.0 +rocm ~cuda amdgpu_target=gfx90a fabric=slingshot "
                  "+mpi4py ~cuda_aware_mpi")


def vouched_rccl_pairs() -> list[tuple[str, ...]]:
    """VOUCHED_RCCL_PAIRS from nccl_ss11/package.py, read as data."""
    return [tuple(p) for p in package_constant("nccl_ss11", "VOUCHED_RCCL_PAIRS")]


@pytest.fixture(scope="session")
def rocm_facts(spack) -> dict:
    """What the torchmpi package classes ask of a +rocm build, by condition."""
    code = PACKAGE_CLASSES + f"""

def refused(name, text):
    spec = spack.spec.Spec(text)
    return [msg for when, entries in cls(name).conflicts.items() for c, msg in entries
            if spec.satisfies(when) and spec.satisfies(c)]

def unmet(name, text):
    spec = spack.spec.Spec(text)
    return [msg for when, entries in cls(name).requirements.items()
            for reqs, policy, msg in entries
            if spec.satisfies(when) and not any(spec.satisfies(r) for r in reqs)]

def deps(name, text):
    spec = spack.spec.Spec(text)
    out = {{}}
    for when, by_name in cls(name).dependencies.items():
        if spec.satisfies(when):
            for dep, dependency in by_name.items():
                merged = out.setdefault(dep, spack.spec.Spec(dep))
                merged.constrain(dependency.spec)
    return {{dep: str(s) for dep, s in out.items()}}

base = {ROCM_SLINGSHOT!r}
pairs = __import__(cls("nccl-ss11").__module__, fromlist=["x"]).VOUCHED_RCCL_PAIRS
torch = "py-torch@2.10.0 +distributed +mpi +rocm ~cuda amdgpu_target=gfx90a +cuda_aware_mpi"
print(json.dumps({{
    "deps": deps("py-torch-mpi", base),
    "aware_deps": deps("py-torch-mpi", base.replace("~cuda_aware_mpi", "+cuda_aware_mpi")
                       + " ^[virtuals=mpi] cray-mpich+rocm"),
    "vouched": {{f"{{r}}/{{p}}": unmet("py-torch-mpi", f"{{base}} ^rccl@{{r}} ^aws-ofi-nccl@{{p}}")
                + refused("py-torch-mpi", f"{{base}} ^rccl@{{r}} ^aws-ofi-nccl@{{p}}")
                for r, p, *_ in pairs}},
    "unvouched": unmet("py-torch-mpi", f"{{base}} ^rccl@6.4.0 ^aws-ofi-nccl@1.18.0"),
    "crossed": unmet("py-torch-mpi", f"{{base}} ^rccl@7.1.1 ^aws-ofi-nccl@1.19.0"),
    "tcp_any_pair": unmet("py-torch-mpi", base.replace("fabric=slingshot", "fabric=tcp")
                          + " ^rccl@6.4.0 ^aws-ofi-nccl@1.18.0"),
    "both_vendors": refused("py-torch-mpi", base.replace("~cuda ", "+cuda cuda_arch=90 ")),
    "no_target": refused("py-torch-mpi", base.replace("gfx90a", "none")),
    "cpu_slingshot": refused("py-torch-mpi", base.replace("+rocm", "~rocm")),
    "torch_variant_conditions": [str(w) for w in cls("py-torch").variants
                                 if "cuda_aware_mpi" in cls("py-torch").variants[w]],
    "torch_refused": {{mpi: refused("py-torch", f"{{torch}} ^[virtuals=mpi] {{mpi}}")
                      for mpi in ("cray-mpich+rocm~cuda", "cray-mpich~rocm~cuda",
                                  "mpich+rocm~cuda", "openmpi+rocm~cuda")}},
}}))
"""
    return json.loads(spack.python(code).stdout.strip().splitlines()[-1])


def test_rocm_torch_is_builtins_rocm_build_with_mpi_and_rccl(rocm_facts: dict) -> None:
    """py-torch-mpi +rocm asks builtin py-torch for ROCm with RCCL (its "nccl"
    variant) and the MPI backend, for the same GPU target as RCCL; no CUDA, no
    gloo (builtin py-torch conflicts +gloo+rocm), no NVIDIA NCCL."""
    deps = rocm_facts["deps"]
    torch = deps["py-torch"]
    for part in ("+rocm", "+nccl", "+distributed", "+mpi", "~cuda", "amdgpu_target=gfx90a",
                 "~cuda_aware_mpi"):
        assert part in torch, (part, torch)
    assert "gloo" not in torch, torch
    assert "amdgpu_target=gfx90a" in deps["rccl"], deps["rccl"]
    assert not {"nccl", "nccl-ss11"} & set(deps), sorted(deps)


def test_rocm_slingshot_takes_the_plugin_built_for_rocm(rocm_facts: dict) -> None:
    plugin = rocm_facts["deps"]["aws-ofi-nccl"]
    for part in ("+rocm", "~cuda", "+cxi"):
        assert part in plugin, (part, plugin)


def test_rocm_cuda_aware_mpi_reaches_py_torch(rocm_facts: dict) -> None:
    """+cuda_aware_mpi with +rocm asks py-torch for its patched MPI check and
    mpi4py for its GTL preload, GTL for HSA there (tests/test_gtl_hsa_package.py)."""
    deps = rocm_facts["aware_deps"]
    assert "+cuda_aware_mpi" in deps["py-torch"], deps["py-torch"]
    assert "+cuda_aware_mpi" in deps.get("py-mpi4py", ""), deps.get("py-mpi4py")
    assert "@2.6:+mpi+rocm" in "".join(rocm_facts["torch_variant_conditions"]).replace(" ", ""), (
        rocm_facts["torch_variant_conditions"])


def test_rocm_cuda_aware_mpi_only_on_cray_mpich_rocm(rocm_facts: dict) -> None:
    """The patched check sees HIP buffers only through Cray's switch: py-torch
    +rocm +cuda_aware_mpi is refused on every other provider, and on a
    cray-mpich without +rocm; the CUDA-only refusal does not fire on +rocm."""
    refused = rocm_facts["torch_refused"]
    assert refused["cray-mpich+rocm~cuda"] == [], refused
    assert any("needs cray-mpich+rocm" in m for m in refused["cray-mpich~rocm~cuda"]), refused
    for mpi in ("mpich+rocm~cuda", "openmpi+rocm~cuda"):
        assert any("cannot see" in m and "ROCm support" in m for m in refused[mpi]), refused


def test_every_vouched_rccl_pair_is_admitted(rocm_facts: dict) -> None:
    assert set(rocm_facts["vouched"]) == {f"{r}/{p}" for r, p, *_ in vouched_rccl_pairs()}
    assert {pair: why for pair, why in rocm_facts["vouched"].items() if why} == {}


def test_unvouched_rccl_pair_is_refused_with_the_allowed_pairs(rocm_facts: dict) -> None:
    """A plugin no source pairs with that ROCm (1.18.0 with 6.4.0), and two
    vouched releases crossed (OLCF's ROCm with HPE's plugin), are refused by
    the requirement's own message, which names the pairs and who vouches for them;
    off Slingshot no pair is asked for."""
    for key in ("unvouched", "crossed"):
        message = " ".join(rocm_facts[key])
        assert "no source vouches for this RCCL/aws-ofi-nccl pair" in message, (key, message)
        assert "rccl@6.4.0 with aws-ofi-nccl@1.19.0 (HPE)" in message, message
    assert rocm_facts["tcp_any_pair"] == []


def test_rocm_refusals_name_the_fix(rocm_facts: dict) -> None:
    assert any("+cuda and +rocm are exclusive" in m for m in rocm_facts["both_vendors"])
    assert any("amdgpu_target=gfx90a" in (m or "") for m in rocm_facts["no_target"])
    assert any("+rocm amdgpu_target=<target>" in m for m in rocm_facts["cpu_slingshot"])


def test_vouched_rccl_pairs_are_labelled_and_cited() -> None:
    """Each row: the ROCm/RCCL release, a plugin release, the libfabric, where
    it is for, who vouches, a source at a commit and the kind of record that source is;
    HPE's, OLCF's and LUMI's builds present."""
    pairs = vouched_rccl_pairs()
    assert {(r, p, who) for r, p, _, _, who, *_ in pairs} >= {
        ("6.4.0", "1.19.0", "HPE"), ("7.1.1", "1.19.2", "OLCF"), ("7.0.3", "1.20.0", "LUMI")}
    for row in pairs:
        assert len(row) == 7 and row[3] == "slingshot" and "@" in row[5], row


def test_pairs_reader_ignores_the_rccl_table() -> None:
    """torchmpi.pairs (the NVIDIA pin) reads VOUCHED_PAIRS only: no RCCL row
    is ever offered as an NCCL release."""
    from torchmpi import pairs

    rocm = {r for r, *_ in vouched_rccl_pairs()}
    assert rocm and not rocm & {p.nccl for p in pairs.vouched()}


def _fabric_vendors() -> dict:
    data = yaml.safe_load((ROOT / "wrapper/torchmpi/data/fabrics/slingshot.yaml").read_text())
    return data, data["vendors"]


def test_amd_slingshot_defaults_are_a_vendor_dimension_each_value_cited() -> None:
    """The AMD values live beside the shared ``env`` (no second copy): every
    shared value is either restated by an AMD source (``agrees``) or
    overridden by a centre; every value names a source at a commit."""
    data, vendors = _fabric_vendors()
    amd = vendors["amd"]
    overridden = {k for c in amd["centres"].values() for k in c.get("env", {})}
    overridden |= {k for c in amd["centres"].values() for k in c.get("multi_node_only", {})}
    assert set(data["env"]) <= set(amd["agrees"]) | overridden
    assert not set(amd["env"]) & set(data["env"]), "vendor env only adds"
    cited = [amd["agrees"][k] for k in amd["agrees"]]
    for block in [amd, *amd["centres"].values()]:
        for key in ("env", "multi_node_only"):
            cited += [entry["source"] for entry in block.get(key, {}).values()]
    assert cited and all(re.search(r"\w/[\w.-]+@[0-9a-f]{7} \S+:\d", s) for s in cited), cited


def test_amd_slingshot_defaults_carry_what_olcf_and_lumi_document() -> None:
    _, vendors = _fabric_vendors()
    amd = vendors["amd"]
    assert amd["env"]["HSA_FORCE_FINE_GRAIN_PCIE"]["value"] == "1"
    olcf = amd["centres"]["olcf"]
    assert olcf["env"]["FI_MR_CACHE_MONITOR"]["value"] == "kdreg2"
    assert olcf["env"]["NCCL_SOCKET_IFNAME"]["value"] == "hsn0,hsn1,hsn2,hsn3"
    assert olcf["multi_node_only"]["NCCL_NET"] == {
        **olcf["multi_node_only"]["NCCL_NET"], "value": "OFI", "single_node": "Socket"}
    assert {"MIOPEN_USER_DB_PATH", "MIOPEN_CUSTOM_CACHE_DIR"} <= set(olcf["env"])
    assert "MIOPEN_CUSTOM_CACHE_DIR" in amd["centres"]["lumi"]["env"]


def test_node_kinds_are_matched_on_site_keys_and_cited() -> None:
    """``vendors.<vendor>.nodes.<kind>``: ``when`` names site-file keys (dotted)
    with values the site schema allows for them, and each value adds a name
    the shared ``env`` lacks and names a source at a commit."""
    import archspec.cpu

    data, vendors = _fabric_vendors()
    schema = json.loads((ROOT / "wrapper/torchmpi/schema/site.schema.json").read_text())
    allowed = {"target": set(archspec.cpu.TARGETS),
               "gpu.cuda_arch": {str(v) for v in schema["$defs"]["cuda_arch"]["enum"]}}
    nodes = {k: n for v in vendors.values() for k, n in (v.get("nodes") or {}).items()}
    assert "gh200" in nodes
    for kind, node in nodes.items():
        assert node["when"] and set(node["when"]) <= set(allowed), kind
        for key, values in node["when"].items():
            assert values and {str(v) for v in values} <= allowed[key], (kind, key)
        assert node["env"] and not set(node["env"]) & set(data["env"]), kind
        cited = [c for entry in node["env"].values() for c in entry["source"].split(";")]
        assert all(re.search(r"\w/[\w.-]+@[0-9a-f]{7} \S+:\d", c) for c in cited), cited


def test_runtime_ignores_the_vendor_block() -> None:
    """Until a site names its GPU vendor, the Slingshot defaults a site gets
    are the shared ``env`` alone (shipped sites render as before)."""
    from torchmpi import runtime

    data, _ = _fabric_vendors()
    _, env = runtime.fabric_defaults("slingshot")
    assert dict(env) == {k: str(v) for k, v in data["env"].items()}


def test_design_doc_shows_the_rccl_pairs_table() -> None:
    """docs/design.md's AMD table is VOUCHED_RCCL_PAIRS, row for row."""
    section = (ROOT / "docs" / "design.md").read_text().split("## AMD GPUs", 1)[1]
    section = section.split("\n## ", 1)[0]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in section.splitlines() if re.match(r"\| \d+\.\d+\.\d+ \|", line)]
    shown = {(r[0], r[1], r[2], r[3], r[4]) for r in rows}
    assert shown == {(r, p, lf, f"Slingshot: {who}", evidence)
                     for r, p, lf, _, who, _, evidence in vouched_rccl_pairs()}


@pytest.fixture(scope="session")
def rocm_slingshot_solve(spack, tmp_path_factory) -> dict:
    """The +rocm solve: OLCF Frontier's, the run's one (:mod:`support.solves`):
    py-torch-mpi +rocm amdgpu_target=gfx90a for Slingshot, OLCF's cray-mpich +rocm
    and cxi libfabric as externals, read in ``spack python`` (no second solve).
    The test below asks of it only what the recipes decide."""
    env_dir = SiteSolves(spack, tmp_path_factory).copy("frontier", "frontier--packages")
    code = """
import json
import spack.environment as ev
[spec] = [s for s in ev.active_environment().concrete_roots() if s.name == "py-torch-mpi"]
print(json.dumps({
    "nodes": {d.name: {"version": str(d.version), "external": d.external,
                       "variants": {k: str(v.value) for k, v in d.variants.items()}}
              for d in spec.traverse()}}))
"""
    return json.loads(spack.python(code, env_dir=env_dir).stdout.strip().splitlines()[-1])["nodes"]


@pytest.mark.concretize
def test_rocm_slingshot_solves_to_a_vouched_rccl_stack(rocm_slingshot_solve: dict) -> None:
    """A real solve: builtin py-torch +rocm with MPI and RCCL for gfx90a, RCCL
    and the ROCm plugin at a vouched pair, the site's cray-mpich; no CUDA,
    no NVIDIA NCCL, no gloo."""
    nodes = rocm_slingshot_solve
    torch = nodes["py-torch"]["variants"]
    assert (torch["rocm"], torch["nccl"], torch["mpi"], torch["cuda"], torch["gloo"]) == (
        "True", "True", "True", "False", "False"), torch
    assert nodes["rccl"]["variants"]["amdgpu_target"] == torch["amdgpu_target"] == "('gfx90a',)"
    plugin = nodes["aws-ofi-nccl"]["variants"]
    assert (plugin["rocm"], plugin["cuda"], plugin["cxi"]) == ("True", "False", "True"), plugin
    pair = (nodes["rccl"]["version"], nodes["aws-ofi-nccl"]["version"])
    assert pair in {(r, p) for r, p, *_ in vouched_rccl_pairs()}, pair
    assert nodes["cray-mpich"]["external"] and nodes["libfabric"]["external"]
    assert not {"cuda", "nccl", "nccl-ss11", "gloo"} & set(nodes), sorted(nodes)
