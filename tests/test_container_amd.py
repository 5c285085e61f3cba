"""An AMD site's container: ROCm's image, RCCL at the vouched pair, the centre's binding modules.

OLCF Frontier runs apptainer with the host's Cray MPICH and ROCm bound by OLCF's
modules (``olcf-container-tools``, ``apptainer-enable-mpi``, ``apptainer-enable-gpu``),
with ``--rocm`` for the GPUs; ``torchmpi container frontier`` writes the image
recipe on AMD's ROCm image of the site's ROCm and a wrapper that checks the
modules are loaded before it starts the image.  The wrapper runs for real in bash
with a stand-in ``apptainer`` on PATH that records its arguments and the
``APPTAINERENV_LD_LIBRARY_PATH`` it was given (Apptainer has no Debian 12 package
and no PyPI wheel: tests/test_centre_mpi_container.py).  What an AMD image cannot
be is refused over broken copies of the shipped AMD site (file:line, key, what is
allowed, exit 2, nothing written).  The solve is tests/test_container_solve.py.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from support.sites import write_site
from torchmpi import container, gpuvendor, output, pairs, paths
from torchmpi import site as sitemod
from torchmpi.cli import main


def _raw(name: str) -> dict:
    return yaml.safe_load((paths.sites_dir() / f"{name}.yaml").read_text()) or {}


def _is_amd(data: dict) -> bool:
    gpu = data.get("gpu")
    return isinstance(gpu, dict) and gpu.get("vendor") == "amd"


#: Shipped AMD sites with a container key (read as written: no load at collection).
AMD = [n for n in sitemod.available() if _is_amd(_raw(n)) and "container" in _raw(n)]

FRONTIER_MODULES = ["olcf-container-tools", "apptainer-enable-mpi", "apptainer-enable-gpu"]


def test_every_shipped_amd_site_has_a_container() -> None:
    amd = [n for n in sitemod.available() if _is_amd(_raw(n))]
    assert "frontier" in amd
    assert sorted(AMD) == sorted(amd)


@pytest.mark.parametrize("name", AMD)
def test_the_image_is_rocms_of_the_sites_release(name: str) -> None:
    site = sitemod.load(name)
    rocm = str(site.rocm["version"])
    files = container.render(site)
    assert sorted(files) == ["Containerfile", "run.sh", "spack.yaml"]
    froms = [a.split(" AS ")[0] for w, a in container.parse_containerfile(files["Containerfile"])
             if w == "FROM" and not a.startswith("bootstrap")]
    os_ = site.data["container"]["os"].replace("ubuntu", "ubuntu-")
    libraries = container.image.rocm_libraries(site)  # LUMI's: the -complete image
    tag = f"{rocm}-complete" if libraries else rocm
    assert froms == [f"docker.io/rocm/dev-{os_}:{tag}"] * 2
    assert "libcudart" not in files["Containerfile"]
    env = yaml.safe_load(files["spack.yaml"])["spack"]
    externals = {k.rstrip(":"): v["externals"] for k, v in env["packages"].items()
                 if isinstance(v, dict) and "externals" in v}
    components = gpuvendor.table()["amd"]["rocm_components"]
    assert sorted(externals) == sorted(["gcc", *components,
                                        *(spec.split("@")[0] for spec in libraries)])
    for name_ in components:
        assert externals[name_] == [{"spec": f"{name_}@{rocm}", "prefix": f"/opt/rocm-{rocm}"}]
    assert "cuda:" not in env["packages"]


@pytest.mark.parametrize("name", AMD)
def test_rccl_is_the_roc_release_with_its_vouched_plugin(name: str) -> None:
    site = sitemod.load(name)
    rccl, plugin, *_ = pairs.rccl(str(site.rocm["version"]))
    files = container.render(site)
    packages = yaml.safe_load(files["spack.yaml"])["spack"]["packages"]
    assert (packages.get("rccl") or packages["rccl:"])["require"] == [f"@{rccl}"]
    assert packages["aws-ofi-nccl"] == {"require": [f"@{plugin}"]}
    assert "nccl" not in packages
    labels = container.labels(site, container.plan(site))
    assert (labels["org.torchmpi.rccl"], labels["org.torchmpi.aws-ofi-nccl"]) == (rccl, plugin)
    assert "org.torchmpi.nccl" not in labels


def _on_infiniband(data: dict) -> None:
    """Frontier's file moved to InfiniBand: no Slingshot libfabric, no Slingshot centre
    (data/fabrics/ib.yaml has none for AMD); the same ROCm, whose RCCL has a vouched
    Slingshot plugin."""
    data["fabric"] = "ib"
    data.pop("libfabric")
    data["runtime"].pop("centre")


def test_an_amd_image_off_slingshot_carries_no_slingshot_plugin(tmp_path: Path) -> None:
    """The aws-ofi-nccl plugin vouched with an RCCL is a pair for Slingshot (the cxi
    provider): on InfiniBand RCCL uses the fabric itself, so the image pins RCCL at the
    ROCm release and neither pins, labels nor binds the Slingshot plugin."""
    site = sitemod.load(str(write_site(tmp_path / "sites", "frontier", _on_infiniband)))
    assert pairs.rccl(str(site.rocm["version"])) is not None  # Slingshot has one
    p = container.plan(site)
    assert p.nccl == {"rccl": "7.1.1"} and container.PLUGIN_DIR not in p.lib_path
    files = container.render(site)
    packages = yaml.safe_load(files["spack.yaml"])["spack"]["packages"]
    assert (packages.get("rccl") or packages["rccl:"])["require"] == ["@7.1.1"]
    assert "aws-ofi-nccl" not in packages
    labels = container.labels(site, p)
    assert labels["org.torchmpi.rccl"] == "7.1.1" and "org.torchmpi.aws-ofi-nccl" not in labels
    assert "aws-ofi-nccl" not in files["run.sh"] and "TORCHMPI_PLUGIN_LIB" not in files["run.sh"]
    assert container.PLUGIN_DIR not in files["run.sh"]


def test_rocm_libraries_the_site_takes_from_its_rocm_come_from_the_complete_image(
        tmp_path: Path) -> None:
    """A site that takes RCCL (and the like) from its ROCm as externals (LUMI: builtin
    has no such release) gets them from the image's ROCm, the ``-complete`` image
    (``rocm-libs``), at the image's prefix, without the site's modules."""
    def rccl_external(data: dict) -> None:
        data["externals"] = [{"spec": "rccl@7.1.1 amdgpu_target=gfx90a",
                              "prefix": "/opt/rocm-7.1.1", "modules": ["rocm/7.1.1"],
                              "buildable": False},
                             {"spec": "zlib@1.3", "prefix": "/usr"}]
    path = write_site(tmp_path / "sites", "frontier", rccl_external)
    site = sitemod.load(str(path))
    files = container.render(site)
    packages = yaml.safe_load(files["spack.yaml"])["spack"]["packages"]
    # One key for RCCL (Spack refuses a package named twice): the external and the pair.
    assert packages["rccl:"] == {"buildable": False, "externals": [
        {"spec": "rccl@7.1.1 amdgpu_target=gfx90a", "prefix": "/opt/rocm-7.1.1"}],
        "require": ["@7.1.1"]}
    assert "rccl" not in packages
    assert "zlib:" not in packages  # a host library outside ROCm stays out of the image
    froms = {a.split(" AS ")[0] for w, a in container.parse_containerfile(files["Containerfile"])
             if w == "FROM" and not a.startswith("bootstrap")}
    assert froms == {"docker.io/rocm/dev-ubuntu-24.04:7.1.1-complete"}


@pytest.mark.parametrize("name", AMD)
def test_the_root_is_the_sites_torch_without_mpi_device_buffers(name: str) -> None:
    """``~cuda_aware_mpi`` (py-torch refuses ``+rocm +cuda_aware_mpi`` on the MPICH
    stand-in), the site's torch pinned, MPICH 3.4.3 ch4:ofi as Cray MPICH's ABI."""
    site = sitemod.load(name)
    p = container.plan(site)
    [root] = container.roots(site, p)
    words = root.split()
    assert "~cuda_aware_mpi" in words and "+cuda_aware_mpi" not in words
    assert f"amdgpu_target={','.join(site.amdgpu_targets)}" in words
    assert words[-1] == f"^py-torch@={site.data['torch']['versions'][0]}"
    assert p.mpi == f"{container.CRAY_STANDIN} ~cuda"
    assert p.override == {"MPICH_GPU_SUPPORT_ENABLED": "0"}


@pytest.mark.parametrize("name", AMD)
def test_the_committed_container_files_are_a_fresh_render(name: str) -> None:
    """environments/<site>/container/ is what `torchmpi container SITE -o` writes now."""
    outdir = paths.environments_dir() / name / "container"
    files = container.render(sitemod.load(name))
    assert sorted(p.name for p in outdir.iterdir()) == sorted(files)
    assert output.diff(outdir, files) == ""
    assert os.access(outdir / "run.sh", os.X_OK)


# -- the wrapper, in bash ---------------------------------------------------------------------

def _run(tmp_path: Path, name: str, env: dict[str, str],
         command: str = "apptainer") -> subprocess.CompletedProcess:
    """run.sh under bash with a stand-in ``command`` that prints its arguments, one a
    line, then the ``<COMMAND>ENV_LD_LIBRARY_PATH`` it sees."""
    out = tmp_path / "out"
    assert main(["container", name, "-o", str(out)]) == 0
    bindir = tmp_path / "bin"
    bindir.mkdir()
    stand_in = bindir / command
    var = f"{command.upper()}ENV_LD_LIBRARY_PATH"
    stand_in.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n'
                        f'printf "{var}=%s\\n" "${{{var}:-}}"\n')
    stand_in.chmod(0o755)
    base = {"PATH": f"{bindir}:{os.environ['PATH']}", "HOME": str(tmp_path)}
    return subprocess.run(["bash", str(out / "run.sh"), "python", "-c", "print(1)"],
                           env={**base, **env}, capture_output=True, text=True, timeout=60,
                          check=False)


def test_the_wrapper_stops_without_the_centres_modules(tmp_path: Path) -> None:
    proc = _run(tmp_path, "frontier",
                {"LOADEDMODULES": "olcf-container-tools/1.0:apptainer-enable-mpi/1.0"})
    assert proc.returncode == 2
    assert "module apptainer-enable-gpu is not loaded" in proc.stderr
    assert proc.stdout == ""  # apptainer never ran


def test_the_wrapper_runs_the_image_with_rocm_and_the_sites_plugin(tmp_path: Path) -> None:
    loaded = ":".join(f"{m}/1.0" for m in FRONTIER_MODULES)
    proc = _run(tmp_path, "frontier", {
        "LOADEDMODULES": f"craype/2.7:{loaded}",
        "APPTAINERENV_LD_LIBRARY_PATH": "/opt/cray/pe/lib64:/opt/rocm/lib",  # the module's
        "TORCHMPI_PLUGIN_LIB": "/ccs/proj/x/aws-ofi-nccl/lib"})
    assert proc.returncode == 0, proc.stderr
    args = proc.stdout.splitlines()
    assert args[:2] == ["exec", "--rocm"]
    assert args[args.index("--bind") + 1] == "/ccs/proj/x/aws-ofi-nccl/lib:/opt/host/plugin:ro"
    envs = [args[i + 1] for i, a in enumerate(args) if a == "--env"]
    assert "TORCHMPI_CONTAINER=apptainer" in envs
    assert "MPICH_GPU_SUPPORT_ENABLED=0" in envs and "MPICH_GPU_SUPPORT_ENABLED=1" not in envs
    assert "NCCL_SOCKET_IFNAME=hsn0,hsn1,hsn2,hsn3" in envs  # the site's runtime values
    assert args[-5:-1] == ["frontier.sif", "python", "-c", "print(1)"]
    # The plugin first, the module's library path kept behind it.
    assert args[-1] == ("APPTAINERENV_LD_LIBRARY_PATH="
                        "/opt/host/plugin:/opt/cray/pe/lib64:/opt/rocm/lib")


def test_injection_off_needs_no_modules_and_binds_nothing(tmp_path: Path) -> None:
    proc = _run(tmp_path, "frontier", {"TORCHMPI_CONTAINER_INJECT": "0",
                                       "TORCHMPI_PLUGIN_LIB": "/ccs/proj/x/lib"})
    assert proc.returncode == 0, proc.stderr
    args = proc.stdout.splitlines()
    assert "--bind" not in args
    assert args[-1] == "APPTAINERENV_LD_LIBRARY_PATH="


def test_singularity_runs_with_the_centres_module_and_no_rocm_flag(tmp_path: Path) -> None:
    """``runtime: singularity`` (LUMI's command, with its bindings module): the same
    wrapper, the ``SINGULARITYENV_`` prefix, no ``--rocm`` (LUMI passes none)."""
    def lumi_like(data: dict) -> None:
        data["container"]["runtime"] = "singularity"
        data["container"]["modules"] = ["lumi-aif-singularity-bindings"]
        data["container"]["modulepath"] = "/appl/local/laifs/modules"
    path = write_site(tmp_path / "sites", "frontier", lumi_like)
    text = container.render(sitemod.load(str(path)))["run.sh"]
    assert ("# before srun: module use /appl/local/laifs/modules; module load"
            " lumi-aif-singularity-bindings\n") in text
    proc = _run(tmp_path, str(path), {
        "LOADEDMODULES": "lumi-aif-singularity-bindings",
        "SINGULARITYENV_LD_LIBRARY_PATH": "/opt/cray/pe/lib64",
        "TORCHMPI_PLUGIN_LIB": "/project/x/lib"}, command="singularity")
    assert proc.returncode == 0, proc.stderr
    args = proc.stdout.splitlines()
    assert args[:2] == ["exec", "--bind"] and "--rocm" not in args
    assert "TORCHMPI_CONTAINER=singularity" in args
    assert args[-1] == "SINGULARITYENV_LD_LIBRARY_PATH=/opt/host/plugin:/opt/cray/pe/lib64"


# -- refusals over broken copies of the shipped AMD site ------------------------------------

def _set(*path: str, value=None, drop: bool = False):
    def edit(data: dict) -> None:
        node = data
        for key in path[:-1]:
            node = node[key]
        if drop:
            node.pop(path[-1])
        else:
            node[path[-1]] = value
    return edit


def _both(*edits):
    def edit(data: dict) -> None:
        for e in edits:
            e(data)
    return edit


CASES = [
    # (edit, the key path refused, words the message must have)
    (_both(_set("container", "runtime", value="ce"), _set("container", "modules", drop=True)),
     ("container", "runtime"), "ce has no AMD image here"),
    (_both(_set("container", "modules", drop=True),
           _set("mpi", "prefix", value="/opt/cray/pe/mpich/9.1.0/ofi/gnu/12.3")),
     ("container", "runtime"), "through the centre's modules"),
    (_set("container", "os", value="debian12"), ("container", "os"),
     "AMD publishes no ROCm development image for it"),
    (_set("container", "nccl", value={"version": "2.29.2-1", "plugin": "1.18.0"}),
     ("container", "nccl"), "an AMD image's RCCL is its ROCm release"),
    # Found at load, by every verb alike, and so by this one.
    (_set("container", "modules", drop=True), ("container", "runtime"),
     "container.modules naming the centre's modules"),
    (_set("container", "runtime", value="podman-hpc"), ("container", "modules"),
     "container.modules names the centre's apptainer binding modules"),
    (_set("gpu", "rocm", "version", value="7.0.2"), ("gpu", "rocm", "version"),
     "no source vouches for RCCL 7.0.2"),
]


def test_singularity_without_modules_and_modules_on_an_nvidia_site_are_refused(
        tmp_path: Path, capsys) -> None:
    """singularity only with the centre's modules (at load); the modules serve AMD
    images only (an NVIDIA image binds from mpi.prefix: NCAR's model)."""
    def singularity(data: dict) -> None:
        data["container"]["runtime"] = "singularity"
        data["container"].pop("modules")
    def nvidia_modules(data: dict) -> None:
        data["container"]["modules"] = ["some-bindings"]
    for name, edit, key, words in (
            ("frontier", singularity, "container.runtime", "singularity runs here with"),
            ("derecho", nvidia_modules, "container.modules", "serve AMD images here")):
        path = write_site(tmp_path / name, name, edit)
        out = tmp_path / name / "out"
        assert main(["container", str(path), "-o", str(out)]) == 2
        err = capsys.readouterr().err
        assert words in err and "allowed" in err and "Traceback" not in err, err
        assert re.search(rf"{re.escape(str(path))}:\d+:\d+: {re.escape(key)}: ", err), err
        assert not out.exists()


@pytest.mark.parametrize("edit, key, words", CASES,
                         ids=[f"{'.'.join(c[1])}-{i}" for i, c in enumerate(CASES)])
def test_an_amd_container_refusal_names_the_keys_line(tmp_path: Path, capsys, edit, key,
                                                      words) -> None:
    path = write_site(tmp_path / "sites", "frontier", edit)
    out = tmp_path / "out"
    assert main(["container", str(path), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and words in err, err
    dotted = ".".join(key)
    assert re.search(rf"{re.escape(str(path))}:\d+:\d+: {re.escape(dotted)}: ", err), err
    assert "allowed" in err
    assert not out.exists()
