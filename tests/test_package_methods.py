"""The torchmpi package methods that change a build, run for real per MPI provider.

A property test (``mpich_cuda_patch`` is True) cannot see ``patch()`` skip
cray-mpich; so here each method a build runs -- ``patch()``,
``setup_build_environment()`` -- is called by the pinned Spack on a concrete
spec for every MPI provider and each ``cuda_aware_mpi`` setting, and the test
reads what it produced: the staged ProcessGroupMPI.cpp (the real upstream text
from tests/fixtures/process_group_mpi), the environment modifications.

One py-torch solve serves all of it (a py-torch solve takes minutes): the
plain ``py-torch`` of a Cray MPICH ``+cuda`` site.  That solve is itself a
test -- registered site-wide, the overrides' new variants stay off for a user
who never asks -- and its concrete DAG is then re-pointed at each provider
(the ``mpi`` node renamed, ``cuda_aware_mpi`` set) to give each method the
spec it reads; the methods read only the spec, never a solver.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT

pytestmark = pytest.mark.spack

FIXTURE = ROOT / "tests" / "fixtures" / "process_group_mpi" / "v2.9.1.cpp"
PGMPI = Path("torch", "csrc", "distributed", "c10d", "ProcessGroupMPI.cpp")
#: The line builtin py-torch's own patch() edits (pytorch/pytorch#52208).
CAFFE2_LINE = "set_target_properties(torch_global_deps PROPERTIES LINKER_LANGUAGE C)\n"

PROVIDERS = ("cray-mpich", "mpich", "openmpi", "openmpi-cuda")
#: Providers whose CUDA-awareness PyTorch cannot see without torchmpi's patch.
MPICH_FAMILY = ("cray-mpich", "mpich")


def _stub_library(path: Path) -> None:
    """A real (tiny) shared library: builtin cray-mpich's gtl_lib looks for it on disk."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if not cc:
        pytest.fail("no C compiler to build the stub GTL library (apt install gcc)")
    path.parent.mkdir(parents=True, exist_ok=True)
    source = path.with_suffix(".c")
    source.write_text("int gtl_stub(void) { return 0; }\n")
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(path), str(source)], check=True)
    source.unlink()


def _touch(root: Path, *files: str) -> Path:
    for rel in files:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).touch()
    return root


SCRIPT = r"""
import copy, json, os, sys
import spack.build_environment
import spack.concretize
import spack.spec
from spack.util.environment import EnvironmentModifications

stage, fixture, caffe2_line = sys.argv[1], sys.argv[2], sys.argv[3]
PGMPI = os.path.join("torch", "csrc", "distributed", "c10d", "ProcessGroupMPI.cpp")

def variants(spec):
    return {k: str(v.value) for k, v in spec.variants.items()}

def stub_prefixes(spec):
    # What a fake install lays down: each Spack-built dependency's prefix with a
    # library and a header under the default names that libs/headers look for
    # (builtin py-torch's build environment asks spec["cudnn"].libs and the like).
    for node in spec.traverse():
        if node.external:
            continue
        for stem in {node.name, node.name.removeprefix("lib"), node.name.replace("-", "_")}:
            for rel in (f"lib/lib{stem}.so", f"include/{stem}.h"):
                path = os.path.join(str(node.prefix), rel)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                open(path, "a").close()

def mods_of(pkg, method):
    stub_prefixes(pkg.spec)
    spack.build_environment.set_package_py_globals(pkg)
    mods = EnvironmentModifications()
    getattr(pkg, method)(mods)
    env = {}
    mods.apply_modifications(env)
    return env

torch = spack.concretize.concretize_one("py-torch")
mpi4py = spack.concretize.concretize_one("py-mpi4py")
out = {"plain": {"py-torch": variants(torch), "py-mpi4py": variants(mpi4py),
                 "torch_mpi": torch["mpi"].name, "mpi4py_mpi": mpi4py["mpi"].name}}

def repointed(root, provider, flags):
    # The concrete DAG as a dict with the mpi node renamed and variants set.
    data = copy.deepcopy(root.to_dict())
    nodes = data["spec"]["nodes"]
    mpi_hash = root["mpi"].dag_hash()
    for node in nodes:
        if node["name"] == root.name:
            node["parameters"].update(flags)
        for edge in node.get("dependencies", []):
            if edge["hash"] == mpi_hash:
                edge["name"] = provider
        if node["hash"] == mpi_hash and provider != root["mpi"].name:
            node["name"] = provider
            node["namespace"] = "torchmpi" if provider == "openmpi-cuda" else "builtin"
            node.pop("external", None)
    return spack.spec.Spec.from_dict(data)

out["torch"] = {}
for provider in ("cray-mpich", "mpich", "openmpi", "openmpi-cuda"):
    for aware in (True, False):
        key = f"{provider} {'+' if aware else '~'}cuda_aware_mpi"
        spec = repointed(torch, provider, {"cuda_aware_mpi": aware})
        src = os.path.join(stage, key.replace(" ", "_"))
        os.makedirs(os.path.dirname(os.path.join(src, PGMPI)))
        with open(fixture) as f, open(os.path.join(src, PGMPI), "w") as g:
            g.write(f.read())
        os.makedirs(os.path.join(src, "caffe2"))
        with open(os.path.join(src, "caffe2", "CMakeLists.txt"), "w") as g:
            g.write(caffe2_line)
        os.chdir(src)
        row = {"mpi": spec["mpi"].name, "satisfies": spec.satisfies("+cuda_aware_mpi")}
        try:
            spec.package.patch()
            row["patched"] = open(PGMPI).read()
            row["caffe2"] = open(os.path.join("caffe2", "CMakeLists.txt")).read()
        except Exception as err:
            row["patch_error"] = f"{type(err).__name__}: {err}"
        try:
            row["build_env"] = mods_of(spec.package, "setup_build_environment")
            row["mpi_prefix"] = str(spec["mpi"].prefix)
            row["gtl_library"] = spec.package.gtl_library  # what the install hook loads
        except Exception as err:
            row["build_env_error"] = f"{type(err).__name__}: {err}"
        out["torch"][key] = row

out["mpi4py"] = {}
for aware in (True, False):
    key = f"cray-mpich {'+' if aware else '~'}cuda_aware_mpi"
    spec = repointed(mpi4py, "cray-mpich", {"cuda_aware_mpi": aware})
    spec["mpi"].package.setup_dependent_package(None, spec)  # spec["mpi"].mpicc
    out["mpi4py"][key] = mods_of(spec.package, "setup_build_environment")
print(json.dumps(out))
"""


@pytest.fixture(scope="session")
def cray_site_methods(spack, tmp_path_factory) -> dict:
    """A Cray MPICH ``+cuda`` site (cray-mpich, cuda externals; ``+cuda
    cuda_arch=80`` for all), its plain py-torch and py-mpi4py, and every
    package method run on each provider's spec."""
    base = tmp_path_factory.mktemp("methods")
    ext = base / "ext"
    cray_root = ext / "mpich" / "8.1.29"
    _stub_library(cray_root / "gtl" / "lib" / "libmpi_gtl_cuda.so")
    mpich = _touch(cray_root / "ofi" / "gnu" / "12.3", "include/mpi.h", "lib/libmpi.so")
    cuda = _touch(ext / "cuda", "bin/nvcc", "include/cuda.h", "lib64/libcudart.so")
    env = base / "env"
    env.mkdir()
    config = {"spack": {
        "specs": [], "view": False,
        "config": {"install_tree": {"root": str(base / "store")}},
        "packages": {
            "all": {"variants": "+cuda cuda_arch=80"},
            "mpi": {"require": ["cray-mpich"]},
            "cray-mpich": {"buildable": False, "externals": [
                {"spec": "cray-mpich@8.1.29 +cuda cuda_arch=80", "prefix": str(mpich)}]},
            "cuda": {"buildable": False, "externals": [
                {"spec": "cuda@12.8.0", "prefix": str(cuda)}]},
        },
    }}
    (env / "spack.yaml").write_text(json.dumps(config, indent=2))
    stage = base / "stage"
    stage.mkdir()
    proc = spack.python(SCRIPT, str(stage), str(FIXTURE), CAFFE2_LINE, env_dir=env)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["gtl_dir"] = str(cray_root / "gtl" / "lib")
    return result


# --- with the repo registered, a user who asks nothing gets builtin's build ------


def test_plain_py_torch_on_a_cray_cuda_site_has_cuda_aware_mpi_off(cray_site_methods) -> None:
    plain = cray_site_methods["plain"]
    assert plain["torch_mpi"] == "cray-mpich"
    torch = plain["py-torch"]
    assert torch["cuda"] == "True" and torch["mpi"] == "True", torch  # the variant exists here
    assert torch["cuda_aware_mpi"] == "False", torch


def test_plain_py_mpi4py_on_a_cray_cuda_site_has_cuda_aware_mpi_off(cray_site_methods) -> None:
    plain = cray_site_methods["plain"]
    assert plain["mpi4py_mpi"] == "cray-mpich"
    assert plain["py-mpi4py"]["cuda_aware_mpi"] == "False", plain["py-mpi4py"]


# --- py-torch patch(): the staged upstream source, per provider -------------------


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("aware", [True, False], ids=["+cuda_aware_mpi", "~cuda_aware_mpi"])
def test_patch_edits_process_group_mpi_for_the_mpich_family_only(
    cray_site_methods, provider: str, aware: bool
) -> None:
    """patch() adds the MPICH branch for cray-mpich and mpich with +cuda_aware_mpi;
    Open MPI (recognised upstream) and ~cuda_aware_mpi keep the upstream bytes.
    Builtin's own edit (caffe2's linker language) is made in every case."""
    key = f"{provider} {'+' if aware else '~'}cuda_aware_mpi"
    row = cray_site_methods["torch"][key]
    assert row["mpi"] == provider and row["satisfies"] is aware
    assert "patch_error" not in row, row.get("patch_error")
    upstream = FIXTURE.read_text()
    if aware and provider in MPICH_FAMILY:
        patched = row["patched"]
        assert patched != upstream
        assert "#elif defined(MPICH_VERSION)" in patched
        assert "return torchmpiMpichCudaAware();" in patched
        assert 'std::getenv("MPICH_GPU_SUPPORT_ENABLED")' in patched
    else:
        assert row["patched"] == upstream, key
    assert "LINKER_LANGUAGE CXX" in row["caffe2"], "builtin's patch() did not run"


# --- py-torch setup_build_environment(), per provider ------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("aware", [True, False], ids=["+cuda_aware_mpi", "~cuda_aware_mpi"])
def test_build_environment_per_provider(cray_site_methods, provider: str, aware: bool) -> None:
    """+cuda_aware_mpi points FindMPI at the DAG's MPI and FindNCCL at its NCCL;
    no provider links GTL (it is loaded at import, docs/design.md "GTL without a
    driver"), and only cray-mpich +cuda_aware_mpi names a GTL library for the
    install hook to load; ~cuda_aware_mpi adds nothing of ours."""
    key = f"{provider} {'+' if aware else '~'}cuda_aware_mpi"
    row = cray_site_methods["torch"][key]
    assert "build_env_error" not in row, row.get("build_env_error")
    env = row["build_env"]
    assert env["USE_MPI"] == "ON"
    assert "-lmpi_gtl_cuda" not in env.get("LDFLAGS", "").split(), (provider, env)
    if not aware:
        assert "MPI_HOME" not in env and "NCCL_ROOT" not in env, env
        assert row["gtl_library"] == ""
        return
    assert env["MPI_HOME"] == row["mpi_prefix"]
    assert env["NCCL_ROOT"] and env["NCCL_LIB_DIR"].startswith(env["NCCL_ROOT"])
    if provider == "cray-mpich":
        gtl = row["gtl_library"]
        assert gtl.startswith(cray_site_methods["gtl_dir"] + "/libmpi_gtl_cuda"), gtl
    else:
        assert row["gtl_library"] == "", (provider, row["gtl_library"])


# --- py-mpi4py setup_build_environment() on cray-mpich --------------------------


def test_mpi4py_build_environment_links_no_gtl(cray_site_methods) -> None:
    """GTL is loaded at import (test_packages' install-hook tests), never linked."""
    for aware in ("+", "~"):
        env = cray_site_methods["mpi4py"][f"cray-mpich {aware}cuda_aware_mpi"]
        assert "-lmpi_gtl_cuda" not in env.get("LDFLAGS", "").split(), env
