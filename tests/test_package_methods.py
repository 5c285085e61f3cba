"""The torchmpi package methods that change a build, run for real per MPI provider.

A property test (``mpich_cuda_patch`` is True) cannot see ``patch()`` skip
cray-mpich; so here each method a build runs -- ``patch()``,
``setup_build_environment()`` -- is called by the pinned Spack on a concrete
spec for every MPI provider and each ``cuda_aware_mpi`` setting, and the test
reads what it produced: the staged ProcessGroupMPI.cpp (upstream's v2.6.0 text,
fetched by ``make setup``; the package's own patch files applied first, as
Spack's ``do_patch`` does), the environment modifications.

One py-torch solve serves all of it (a py-torch solve takes minutes): the
plain ``py-torch`` of a Cray MPICH ``+cuda`` site, solved together with a plain
``py-mpi4py`` (one environment of both: a second solve would cost half again).
That solve is itself a test -- registered site-wide, the overrides' new
variants stay off for a user who never asks -- and its concrete DAG is then
re-pointed at each provider (the ``mpi`` node renamed, ``cuda_aware_mpi`` set)
to give each method the spec it reads; the methods read only the spec, never a
solver.

The run environments need py-torch-mpi's DAG: it is put together from that
solve and the nodes the bundle, nccl-ss11 and aws-ofi-nccl declare for each
provider, cuda setting and fabric (no second solve).  What it cannot show: the
CPU-only cases keep the +cuda py-torch's own dependencies (cuda, cudnn), and
the solver's choices (versions, which plugin) are taken, not re-derived.

The linked artefact: py-torch's build environment given to CMake's real
FindMPI (the call PyTorch's build makes) against a gcc-built stand-in MPI in
the DAG MPI's prefix, read back with ``readelf``.  It proves which MPI that
environment makes a FindMPI-driven link take, and that no GTL is linked; it
does not build PyTorch.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from support import cray_ex
from support.spack import CHEAP_SOLVE
from torchmpi import paths, runtime

pytestmark = pytest.mark.spack

#: Upstream's v2.6.0 file (the whole file: the stream order edits enqueue()
#: and the device guards, which the fixtures' excerpts do not have).
FIXTURE = paths.cache() / "reference" / "torch-2.6.0" / "src" / "ProcessGroupMPI.cpp"
PGMPI = Path("torch", "csrc", "distributed", "c10d", "ProcessGroupMPI.cpp")
#: The line builtin py-torch's own patch() edits (pytorch/pytorch#52208).
CAFFE2_LINE = "set_target_properties(torch_global_deps PROPERTIES LINKER_LANGUAGE C)\n"

PROVIDERS = ("cray-mpich", "mpich", "openmpi", "openmpi-cuda")
#: Providers whose CUDA-awareness PyTorch cannot see without torchmpi's patch.
MPICH_FAMILY = ("cray-mpich", "mpich")



def _touch(root: Path, *files: str) -> Path:
    for rel in files:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).touch()
    return root


SCRIPT = r"""
import copy, json, os, sys
import spack.build_environment
import spack.concretize
import spack.patch
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

# Both plain roots in one solve, as one environment holding them: py-mpi4py adds
# little to py-torch's problem (81 CPU-s together against 89 + 41 apart).
(_, torch), (_, mpi4py) = spack.concretize.concretize_together(
    [(spack.spec.Spec("py-torch"), None), (spack.spec.Spec("py-mpi4py"), None)])
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
            # The patch files of torchmpi's override whose condition holds
            # (builtin's own, which the subclass inherits, target other
            # releases' files), then patch().
            for when, patches in type(spec.package).patches.items():
                for patch in patches:
                    if "/torchmpi/packages/" in (patch.path or "") and spec.satisfies(when):
                        spack.patch.apply_patch(src, patch.path, patch.level, patch.working_dir)
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
"""

#: The run environments: py-torch-mpi's concrete DAG built, without a solve,
#: from the solved py-torch and py-mpi4py re-pointed at each provider, plus the
#: nodes that py-torch-mpi, nccl-ss11 and aws-ofi-nccl *declare* (their
#: ``depends_on`` conditions, evaluated on the variants asked) -- so a fabric
#: condition edited in a package changes the DAG here as it would in a solve.
RUN_ENVIRONMENTS = r"""
import base64, hashlib, subprocess
import spack.deptypes as dt
import spack.repo
import spack.user_environment
from spack_repo.torchmpi.packages.nccl_ss11.package import vouched_plugins

def fake_hash(label):
    return base64.b32encode(hashlib.sha256(label.encode()).digest()).decode().lower()[:32]

def declared(name, abstract):
    # The link/run dependencies package `name` declares for what `abstract` asks.
    found = {}
    for when, deps in spack.repo.PATH.get_pkg_class(name).dependencies.items():
        if abstract.satisfies(when):
            for dep_name, dep in deps.items():
                if dep.depflag & (dt.LINK | dt.RUN):
                    found[dep_name] = found.get(dep_name, 0) | dep.depflag
    return found

def bundle_dag(provider, cuda, aware, fabric, nccl_version=None):
    flags = {"cuda": cuda, "cuda_aware_mpi": aware} if cuda else {"cuda": False}
    t = repointed(torch, provider, flags).to_dict()
    nodes = {n["hash"]: n for n in t["spec"]["nodes"]}
    by_name = {n["name"]: n for n in nodes.values()}
    by_name["mpi"] = by_name[provider]
    if nccl_version:
        by_name["nccl"]["version"] = nccl_version
    # py-mpi4py's node, on py-torch's python and MPI (one python in the DAG).
    m4 = repointed(mpi4py, provider, {}).to_dict()["spec"]["nodes"][0]
    m4["dependencies"] = [dict(e, hash=by_name[e["name"]]["hash"])
                          for e in m4["dependencies"] if e["name"] in by_name]
    nodes[m4["hash"]] = by_name["py-mpi4py"] = m4
    mpi_dep = f" ^[virtuals=mpi] {provider}"

    def abstract(name, version, params, extra=""):
        return spack.spec.Spec(f"{name}@{version} " + " ".join(
            ("+" if v else "~") + k if isinstance(v, bool)
            else f"{k}={','.join(v) if isinstance(v, list) else v}"
            for k, v in params.items()) + extra)

    def add(name, version, namespace, params, extra=""):
        asked = abstract(name, version, params, extra)
        node = {"name": name, "version": version, "arch": dict(by_name["nccl"]["arch"]),
                "namespace": namespace, "parameters": dict(params),
                "hash": fake_hash(f"{asked} {provider}"), "dependencies": []}
        for dep_name, flag in sorted(declared(name, asked).items()):
            if dep_name in by_name:
                node["dependencies"].append({
                    "name": by_name[dep_name]["name"], "hash": by_name[dep_name]["hash"],
                    "parameters": {"deptypes": list(dt.flag_to_tuple(flag)),
                                   "virtuals": ["mpi"] if dep_name == "mpi" else []}})
        nodes[node["hash"]] = by_name[name] = node

    params = {"build_system": "bundle", "cuda": cuda, "fabric": fabric, "mpi4py": True}
    if cuda:
        params.update(cuda_arch=["80"], cuda_aware_mpi=aware)
    # Leaves first, each only where its dependent declares it for these variants.
    if "nccl-ss11" in declared("py-torch-mpi", abstract("py-torch-mpi", "0.1.0", params)):
        nccl = by_name["nccl"]["version"]
        ss11 = {"build_system": "bundle", "cuda": True, "cuda_arch": ["80"]}
        # The plugin nccl-ss11 allows with this NCCL (its VOUCHED_PAIRS), with
        # the variants nccl-ss11 asks of it (+cuda +cxi).
        plugin = {"build_system": "autotools", "cuda": True, "cuda_arch": ["80"], "cxi": True,
                  "rocm": False}
        if "aws-ofi-nccl" in declared("nccl-ss11", abstract("nccl-ss11", nccl, ss11)):
            asked = abstract("aws-ofi-nccl", vouched_plugins(nccl)[0], plugin, mpi_dep)
            if "libfabric" in declared("aws-ofi-nccl", asked):
                add("libfabric", "1.22.0", "builtin",
                    {"build_system": "autotools", "fabrics": ["cxi"]})
            add("aws-ofi-nccl", vouched_plugins(nccl)[0], "torchmpi", plugin, mpi_dep)
        add("nccl-ss11", nccl, "torchmpi", ss11)
    add("py-torchmpi", "0.1.0", "torchmpi", {"build_system": "python_pip"})
    add("py-torch-mpi", "0.1.0", "torchmpi", params, mpi_dep)
    root = by_name["py-torch-mpi"]
    ordered = [root] + [n for h, n in nodes.items() if h != root["hash"]]
    return spack.spec.Spec.from_dict({"spec": {"_meta": t["spec"]["_meta"], "nodes": ordered}})

def runnable_prefixes(spec):
    # What `spack load` asks of a fake install: python and python-venv answer
    # as the interpreter running this script; mkl's run environment sources a file.
    for node in spec.traverse():
        if node.name == "python-venv" and not os.path.exists(str(node.prefix.bin.python3)):
            subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(node.prefix)],
                           check=True)
        if node.name == "python" and not node.external:
            exe = os.path.join(str(node.prefix), "bin", "python3")
            os.makedirs(os.path.dirname(exe), exist_ok=True)
            if not os.path.lexists(exe):
                os.symlink(sys.executable, exe)
        if node.name == "intel-oneapi-mkl":
            env_dir = os.path.join(str(node.prefix), "mkl", str(node.version.up_to(2)), "env")
            os.makedirs(env_dir, exist_ok=True)
            open(os.path.join(env_dir, "vars.sh"), "a").close()

def rows(mods):
    return [[type(m).__name__, m.name, str(getattr(m, "value", ""))]
            for m in mods.env_modifications]

def applied(mods):
    env = {}
    mods.apply_modifications(env)
    return env

def run_row(spec):
    row = {"deps": sorted(d.name for d in spec.dependencies()), "mpi": spec["mpi"].name,
           "prefixes": {n.name: str(n.prefix) for n in spec.traverse()}, "own": {}}
    # Each of torchmpi's run environments, as the package sets it ...
    for name in ("py-torch-mpi", "nccl-ss11", "aws-ofi-nccl"):
        if name in spec:
            mods = EnvironmentModifications()
            spec[name].package.setup_run_environment(mods)
            row["own"][name] = rows(mods)
    if "nccl-ss11" in spec:
        mods = EnvironmentModifications()
        spec["aws-ofi-nccl"].package.setup_dependent_run_environment(mods, spec["nccl-ss11"])
        row["own"]["aws-ofi-nccl for nccl-ss11"] = rows(mods)
    # ... and the whole DAG's, as `spack load` / `spack env activate` compute it.
    runnable_prefixes(spec)
    try:
        mods = spack.user_environment.environment_modifications_for_specs(spec)
        row["dag"], row["dag_env"] = rows(mods), applied(mods)
    except Exception as err:
        row["dag_error"] = f"{type(err).__name__}: {err}"
    return row

out["run"] = {}
for provider in ("cray-mpich", "mpich", "openmpi", "openmpi-cuda"):
    cases = [(False, False, "tcp")] + [
        (True, aware, fabric) for aware in (True, False) for fabric in ("slingshot", "ib", "tcp")]
    for cuda, aware, fabric in cases:
        key = (f"{provider} {'+' if cuda else '~'}cuda {'+' if aware else '~'}cuda_aware_mpi "
               f"fabric={fabric}")
        out["run"][key] = run_row(bundle_dag(provider, cuda, aware, fabric))
# NCAR's pair (NCCL 2.21.5-1 with plugin 1.6.0, which answers only to "AWS Libfabric").
out["run"]["ncar"] = run_row(bundle_dag("cray-mpich", True, True, "slingshot", "2.21.5-1"))
out["slingshot_defaults"] = list(spack.repo.PATH.get_pkg_class("nccl-ss11").slingshot_defaults)
"""


@pytest.fixture(scope="session")
def cray_site_methods(spack, tmp_path_factory) -> dict:
    """A Cray MPICH ``+cuda`` site (cray-mpich, cuda externals; ``+cuda
    cuda_arch=80`` for all), its plain py-torch and py-mpi4py, and every
    package method run on each provider's spec."""
    base = tmp_path_factory.mktemp("methods")
    ext = base / "ext"
    # Cray MPICH from the Cray EX stand-in (tests/support/cray_ex.py); its mpi.h
    # defines MPICH_VERSION: py-torch's patch() preprocesses the patched check
    # with the provider's headers and stops where no MPICH branch would compile
    # (check_mpi_headers).
    node = cray_ex.build(ext / "cray-ex", "gpu")
    mpich = cray_ex.spack_external(node)
    cuda = _touch(ext / "cuda", "bin/nvcc", "include/cuda.h", "lib64/libcudart.so")
    env = base / "env"
    env.mkdir()
    config = {"spack": {
        "specs": [], "view": False,
        # No claim here is about targets, duplicates or reuse.
        "concretizer": CHEAP_SOLVE,
        "config": {"install_tree": {"root": str(base / "store")}},
        "packages": {
            "all": {"variants": "+cuda cuda_arch=80"},
            "mpi": {"require": ["cray-mpich"]},
            "cray-mpich": {"buildable": False, "externals": [
                {"spec": "cray-mpich@8.1.30 +cuda cuda_arch=80", "prefix": str(mpich)}]},
            "cuda": {"buildable": False, "externals": [
                {"spec": "cuda@12.8.0", "prefix": str(cuda)}]},
        },
    }}
    (env / "spack.yaml").write_text(json.dumps(config, indent=2))
    stage = base / "stage"
    stage.mkdir()
    script = SCRIPT + RUN_ENVIRONMENTS + "print(json.dumps(out))\n"
    proc = spack.python(script, str(stage), str(FIXTURE), CAFFE2_LINE, env_dir=env)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["gtl_dir"] = str(node.path("gtl-8.1.30").parent)
    # What the loader and linker search on that node (ld.so.conf's Cray PE and
    # libfabric directories): Cray's libmpi has no RUNPATH to its PMI or libfabric.
    result["node_library_path"] = node.library_path()
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
    """patch() adds the stream order for every provider with +cuda_aware_mpi and
    the MPICH branch for cray-mpich and mpich only (Open MPI is recognised
    upstream), running the patcher the patch file put in the stage;
    ~cuda_aware_mpi keeps the upstream bytes.  Builtin's own edit (caffe2's
    linker language) is made in every case."""
    key = f"{provider} {'+' if aware else '~'}cuda_aware_mpi"
    row = cray_site_methods["torch"][key]
    assert row["mpi"] == provider and row["satisfies"] is aware
    assert "patch_error" not in row, row.get("patch_error")
    upstream = FIXTURE.read_text()
    patched = row["patched"]
    assert ("torchmpiOrderStreams(entry);" in patched) is aware, key
    assert ("return torchmpiMpichCudaAware();" in patched) is (aware and provider in MPICH_FAMILY)
    if aware and provider in MPICH_FAMILY:
        assert "#elif defined(MPICH_VERSION)" in patched
        assert 'std::getenv("MPICH_GPU_SUPPORT_ENABLED")' in patched
    if not aware:
        assert patched == upstream, key
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


# --- run environments: py-torch-mpi, nccl-ss11, aws-ofi-nccl, per provider and fabric --

#: Every case of the bundle whose run environment differs: CPU-only, then +cuda
#: with and without cuda_aware_mpi on each fabric.
RUN_CASES = [("~cuda", "~cuda_aware_mpi", "tcp")] + [
    ("+cuda", aware, fabric)
    for aware in ("+cuda_aware_mpi", "~cuda_aware_mpi") for fabric in ("slingshot", "ib", "tcp")]
SWITCH = "MPICH_GPU_SUPPORT_ENABLED"


def _run_row(methods: dict, provider: str, cuda: str, aware: str, fabric: str) -> dict:
    row = methods["run"][f"{provider} {cuda} {aware} fabric={fabric}"]
    assert "dag_error" not in row, row.get("dag_error")
    assert row["mpi"] == provider
    return row


def _slingshot_names(methods: dict) -> set[str]:
    return {name for name, _ in methods["slingshot_defaults"]} | {"NCCL_NET", "NCCL_NET_PLUGIN"}


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize(("cuda", "aware", "fabric"), RUN_CASES)
def test_gpu_switch_only_for_cuda_aware_cray_mpich(
    cray_site_methods, provider: str, cuda: str, aware: str, fabric: str
) -> None:
    """py-torch-mpi sets MPICH_GPU_SUPPORT_ENABLED=1 (a set, not a default or a
    path) exactly for +cuda_aware_mpi on cray-mpich, and nothing else ever; no
    other package of the DAG sets it, so `spack load` gives the same."""
    row = _run_row(cray_site_methods, provider, cuda, aware, fabric)
    wanted = provider == "cray-mpich" and aware == "+cuda_aware_mpi"
    assert row["own"]["py-torch-mpi"] == ([["SetEnv", SWITCH, "1"]] if wanted else [])
    in_dag = [m for m in row["dag"] if m[1] == SWITCH]
    assert in_dag == ([["SetEnv", SWITCH, "1"]] if wanted else []), in_dag
    assert row["dag_env"].get(SWITCH) == ("1" if wanted else None)


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("aware", ["+cuda_aware_mpi", "~cuda_aware_mpi"])
def test_slingshot_run_environment(cray_site_methods, provider: str, aware: str) -> None:
    """On fabric=slingshot the DAG has nccl-ss11 and its plugin: nccl-ss11 sets
    HPE's defaults (each a plain set, the same values the rendered Slingshot
    fabric defaults carry), aws-ofi-nccl appends its lib dir for NCCL to find
    the plugin and sets NCCL_NET to the name plugin 1.19.0 answers to ("OFI",
    after builtin's "AWS Libfabric"); libfabric (cxi) is on LD_LIBRARY_PATH."""
    row = _run_row(cray_site_methods, provider, "+cuda", aware, "slingshot")
    assert {"nccl-ss11", "nccl", "py-torch", "py-mpi4py"} <= set(row["deps"]), row["deps"]
    defaults = [tuple(pair) for pair in cray_site_methods["slingshot_defaults"]]
    _, fabric = runtime.fabric_defaults("slingshot")
    assert defaults and set(defaults) <= set(fabric), "package and rendered defaults differ"
    assert row["own"]["nccl-ss11"] == [["SetEnv", name, value] for name, value in defaults]
    plugin_lib = row["prefixes"]["aws-ofi-nccl"] + "/lib"
    assert "aws-ofi-nccl-1.19.0-" in plugin_lib
    assert row["own"]["aws-ofi-nccl"] == [
        ["AppendPath", "LD_LIBRARY_PATH", plugin_lib],
        ["SetEnv", "NCCL_NET", "AWS Libfabric"],  # builtin's, then the override's
        ["SetEnv", "NCCL_NET", "OFI"]]
    assert row["own"]["aws-ofi-nccl for nccl-ss11"] == [
        ["AppendPath", "LD_LIBRARY_PATH", plugin_lib]]
    env = row["dag_env"]
    assert {name: env.get(name) for name, _ in defaults} == dict(defaults)
    assert env["NCCL_NET"] == "OFI" and "NCCL_NET_PLUGIN" not in env
    paths = env["LD_LIBRARY_PATH"].split(":")
    assert plugin_lib in paths
    assert row["prefixes"]["libfabric"] + "/lib" in paths


def test_ncar_plugin_is_named_the_only_way_it_answers(cray_site_methods) -> None:
    """NCAR's pair (NCCL 2.21.5-1, aws-ofi-nccl 1.6.0): 1.6.0 registers only as
    "AWS Libfabric" (aws/aws-ofi-nccl#530 added "OFI" in 1.13.0), so no "OFI"."""
    row = cray_site_methods["run"]["ncar"]
    assert "dag_error" not in row, row.get("dag_error")
    assert "aws-ofi-nccl-1.6.0-" in row["prefixes"]["aws-ofi-nccl"]
    nets = [m for m in row["dag"] if m[1] == "NCCL_NET"]
    assert nets and all(m == ["SetEnv", "NCCL_NET", "AWS Libfabric"] for m in nets), nets
    assert row["dag_env"]["NCCL_NET"] == "AWS Libfabric"


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize(("cuda", "aware", "fabric"),
                         [case for case in RUN_CASES if case[2] != "slingshot"])
def test_nothing_slingshot_off_slingshot(
    cray_site_methods, provider: str, cuda: str, aware: str, fabric: str
) -> None:
    """fabric=ib/tcp (and CPU-only): no nccl-ss11 or plugin in the DAG, so no
    HPE default, no NCCL_NET, no FI_* and no plugin or libfabric library path."""
    row = _run_row(cray_site_methods, provider, cuda, aware, fabric)
    assert not {"nccl-ss11", "aws-ofi-nccl", "libfabric"} & set(row["prefixes"]), row["deps"]
    assert set(row["own"]) == {"py-torch-mpi"}
    slingshot = _slingshot_names(cray_site_methods)
    named = [m for m in row["dag"] if m[1] in slingshot or m[1].startswith("FI_")]
    assert named == [], named
    paths = row["dag_env"].get("LD_LIBRARY_PATH", "")
    assert "aws-ofi-nccl" not in paths and "libfabric" not in paths, paths
    assert ("nccl" in row["deps"]) == (cuda == "+cuda")


# --- the linked artefact: what CMake's FindMPI links under py-torch's build environment --

#: A stand-in MPI: header, a shared libmpi with the provider's ABI soname (MPICH
#: family 12, Open MPI 40), ``mpiexec`` (FindMPI derives the install from it,
#: with MPI_HOME as the hint) and compiler wrappers that answer FindMPI's
#: interrogation the way each family's do (MPICH ``-show``, Open MPI ``-showme:*``).
MPI_H = """#define MPI_VERSION 3
#define MPI_SUBVERSION 1
#ifdef __cplusplus
extern "C" {
#endif
int MPI_Init(int *argc, char ***argv);
int MPI_Finalize(void);
#ifdef __cplusplus
}
#endif
"""
WRAPPER = """#!/bin/sh
# {family} compiler wrapper stand-in
inc="-I{prefix}/include"; link="-L{prefix}/lib -Wl,-rpath,{prefix}/lib -lmpi"
case "$1" in
  -show) [ {family} = mpich ] && {{ echo "{cc} $inc $link"; exit 0; }}; exit 1 ;;
  -showme:compile) [ {family} = openmpi ] && {{ echo "$inc"; exit 0; }}; exit 1 ;;
  -showme:link) [ {family} = openmpi ] && {{ echo "$link"; exit 0; }}; exit 1 ;;
  -showme*|-compile_info|-link_info|-compile-info|-link-info) exit 1 ;;
esac
exec {cc} $inc "$@" $link
"""
#: The part of PyTorch's build that links MPI: cmake/Dependencies.cmake, "---[ MPI"
#: (pytorch/pytorch v2.9.1): find_package(MPI), then MPI_CXX_LIBRARIES joins
#: Caffe2_DEPENDENCY_LIBS, linked into libtorch.
PROBE_CMAKE = """cmake_minimum_required(VERSION 3.18)
project(torchmpi_link_probe C CXX)
find_package(MPI)
if(NOT MPI_CXX_FOUND)
  message(FATAL_ERROR "Not compiling with MPI")
endif()
add_library(probe SHARED probe.cpp)
target_include_directories(probe SYSTEM PRIVATE ${MPI_CXX_INCLUDE_PATH})
target_link_libraries(probe PRIVATE ${MPI_CXX_LIBRARIES})
"""
PROBE_CPP = '#include <mpi.h>\nextern "C" int probe_init(void) { return MPI_Init(0, 0); }\n'


def _stand_in_mpi(prefix: Path, provider: str) -> str:
    """Lay a working stand-in MPI into the DAG's MPI prefix; its libmpi soname.

    cray-mpich's prefix is the Cray EX stand-in's (``cray_ex.spack_external``):
    its ``lib/libmpi.so`` is the node's ``lib-abi-mpich/libmpi.so.12`` with the
    NEEDED closure the record shows (libpmi, libpmi2, libpals, libfabric ->
    libcxi), kept as built; only the headers' declarations and the compiler
    wrappers are added.  The other providers get a dependency-free libmpi: their
    closure is not what these tests are about."""
    family = "openmpi" if provider.startswith("openmpi") else "mpich"
    soname = "libmpi.so.40" if family == "openmpi" else "libmpi.so.12"
    for sub in ("bin", "include", "lib"):
        (prefix / sub).mkdir(parents=True, exist_ok=True)
    header = prefix / "include" / "mpi.h"
    kept = header.read_text() if provider == "cray-mpich" and header.is_file() else ""
    header.write_text(kept + MPI_H if "MPI_Init" not in kept else kept)
    if provider != "cray-mpich":
        source = prefix / "lib" / "stand_in_mpi.c"
        source.write_text("int MPI_Init(int *a, char ***b) { return 0; }\n"
                          "int MPI_Finalize(void) { return 0; }\n")
        subprocess.run(["gcc", "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o",
                        str(prefix / "lib" / soname), str(source)], check=True)
        link = prefix / "lib" / "libmpi.so"
        link.unlink(missing_ok=True)  # the empty placeholder of the fake install
        link.symlink_to(soname)
    for name, cc in (("mpicc", "gcc"), ("mpicxx", "g++")):
        (prefix / "bin" / name).write_text(WRAPPER.format(family=family, prefix=prefix, cc=cc))
    (prefix / "bin" / "mpiexec").write_text("#!/bin/sh\nexit 1\n")
    for name in ("mpicc", "mpicxx", "mpiexec"):
        (prefix / "bin" / name).chmod(0o755)
    return soname


def _dynamic(library: Path) -> tuple[list[str], list[str]]:
    """(NEEDED, RUNPATH/RPATH directories) of a real ELF, read by readelf."""
    text = subprocess.run(["readelf", "-d", str(library)], check=True, capture_output=True,
                          text=True).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", text)
    paths = [d for m in re.findall(r"\((?:RUNPATH|RPATH)\)\s+Library r(?:un)?path: \[(.+?)\]",
                                   text) for d in m.split(":")]
    return needed, paths


def _assert_cray_closure(linked: Path, prefix: Path, library_path: str) -> None:
    """``linked`` NEEDs the libmpi the DAG's ``lib/libmpi.so`` is, the Cray EX
    stand-in's, whose closure (PMI, PALS, libfabric and its libcxi) resolves,
    each inside the stand-in node (searched as ``library_path``, the node's
    loader path), none from this host's MPI or libfabric."""
    libmpi = (prefix / "lib" / "libmpi.so").resolve()
    node = Path(str(prefix).removesuffix(cray_ex.SPACK_PREFIX))
    assert libmpi.is_relative_to(node), libmpi
    soname = re.search(r"\(SONAME\)\s+Library soname: \[(.+?)\]",
                       cray_ex.readelf("-d", str(libmpi)))
    assert soname and soname.group(1) in _dynamic(linked)[0], (soname, linked)
    ldd = subprocess.run(["ldd", str(libmpi)], check=True, capture_output=True, text=True,
                         env=dict(os.environ, LD_LIBRARY_PATH=library_path)).stdout
    found = dict(re.findall(r"^\s*(\S+) => (\S+)", ldd, re.MULTILINE))
    assert "not found" not in ldd, ldd
    for lib in ("libpmi.so.0", "libpmi2.so.0", "libpals.so.0", "libfabric.so.1",
                "libcxi.so.1"):
        assert lib in found and Path(found[lib]).resolve().is_relative_to(node), (lib, ldd)


def _build_env(extra: dict[str, str]) -> dict[str, str]:
    """This machine's environment (its own Open MPI's mpicc on PATH, as a build
    host with a second MPI has) under the package's build variables only."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MPI", "LDFLAGS", "LIBRARY_PATH", "CMAKE_"))}
    env.update(extra)
    return env


@pytest.mark.parametrize("provider", PROVIDERS)
def test_find_mpi_links_the_dags_mpi_and_no_gtl(cray_site_methods, tmp_path, provider) -> None:
    """py-torch +cuda_aware_mpi's build environment (MPI_HOME, LDFLAGS: what
    setup_build_environment set) given to CMake's real FindMPI, as PyTorch's
    cmake/Dependencies.cmake calls it, on a host whose PATH has another MPI
    (Debian's Open MPI): the linked library NEEDs the DAG MPI's libmpi, finds
    it in the DAG MPI's prefix, and has no GTL -- neither NEEDED nor a GTL
    directory in its run path (GTL is loaded at import: _torchmpi_gtl.py)."""
    if not (shutil.which("cmake") and shutil.which("g++") and shutil.which("readelf")):
        pytest.fail("cmake, g++ and readelf are needed (make setup installs them)")
    row = cray_site_methods["torch"][f"{provider} +cuda_aware_mpi"]
    prefix = Path(row["mpi_prefix"])
    soname = _stand_in_mpi(prefix, provider)
    src, build = tmp_path / "src", tmp_path / "build"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(PROBE_CMAKE)
    (src / "probe.cpp").write_text(PROBE_CPP)
    env = _build_env(row["build_env"])
    if provider == "cray-mpich":  # a Cray node's linker finds libmpi's PMI and libfabric
        env["LD_LIBRARY_PATH"] = cray_site_methods["node_library_path"]
    for step in (["cmake", "-S", str(src), "-B", str(build)], ["cmake", "--build", str(build)]):
        proc = subprocess.run(step, env=env, capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    needed, paths = _dynamic(build / "libprobe.so")
    assert soname in needed, (needed, paths)
    if provider == "cray-mpich":
        _assert_cray_closure(build / "libprobe.so", prefix,
                             cray_site_methods["node_library_path"])
    assert f"{prefix}/lib" in paths, (paths, "libmpi not taken from the DAG's MPI")
    assert not [p for p in paths if not p.startswith(str(prefix))], paths
    assert not [n for n in needed if "gtl" in n], needed
    assert not [p for p in paths if "gtl" in p], paths


@pytest.mark.parametrize("aware", ["+cuda_aware_mpi", "~cuda_aware_mpi"])
def test_mpi4py_link_on_cray_mpich_has_no_gtl(cray_site_methods, tmp_path, aware) -> None:
    """py-mpi4py's build environment on cray-mpich (MPICC, LDFLAGS) linking an
    extension the way mpi4py's build does (through $MPICC): Cray's libmpi, no GTL."""
    env_vars = cray_site_methods["mpi4py"][f"cray-mpich {aware}"]
    prefix = Path(cray_site_methods["torch"]["cray-mpich +cuda_aware_mpi"]["mpi_prefix"])
    soname = _stand_in_mpi(prefix, "cray-mpich")
    assert env_vars["MPICC"] == f"{prefix}/bin/mpicc", env_vars
    (tmp_path / "ext.c").write_text(PROBE_CPP.replace('extern "C" ', ""))
    out = tmp_path / "MPI.so"
    build_env = dict(_build_env(env_vars),
                     LD_LIBRARY_PATH=cray_site_methods["node_library_path"])
    subprocess.run([env_vars["MPICC"], "-shared", "-fPIC", *env_vars.get("LDFLAGS", "").split(),
                    "-o", str(out), str(tmp_path / "ext.c")], env=build_env, check=True)
    needed, paths = _dynamic(out)
    assert soname in needed and f"{prefix}/lib" in paths, (needed, paths)
    _assert_cray_closure(out, prefix, cray_site_methods["node_library_path"])
    assert not [n for n in needed if "gtl" in n] and not [p for p in paths if "gtl" in p]
