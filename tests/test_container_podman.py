"""The generated descriptors inject the host's libraries for real (podman, podman-hpc).

A stand-in host tree of stub libraries (Cray MPICH's ``lib-abi-mpich/libmpi.so.12``,
GTL, ``libfabric.so.1``, the site's ``libnccl-net.so``), each answering "host",
is built with gcc in a tmp dir; the site file's prefixes point there.  The
*generated* run script starts a small image whose own copies answer "image";
a probe in the container dlopens the libraries by name and prints
``/proc/self/maps``.  With injection on, what is mapped comes from the host
paths; with ``TORCHMPI_CONTAINER_INJECT=0`` from the image (negative control).

The whole closure: a Cray EX node stand-in (tests/cray_ex.py) bound by the generated
script, and ``ldd`` of the image's torch stand-in (NEEDs ``libmpi.so.12``) in the
container: every NEEDED from the host, nothing "not found".
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from support import cray_ex
from support.podman_kit import IMAGE_LIB, build_image, parse_probe, podman_env, stub
from support.sites import edited_site
from torchmpi import container
from torchmpi.doctor import container as doctor_container

pytestmark = pytest.mark.skipif(
    not shutil.which("podman") or os.geteuid() != 0,
    reason="needs rootful podman (scripts/check-system.sh installs it)")

PROBED = ("libmpi.so.12", "libfabric.so.1", "libnccl-net.so")


@pytest.fixture(scope="session")
def image(tmp_path_factory) -> str:
    return build_image(tmp_path_factory.mktemp("probe-image"))


def host_tree(root: Path, mpi_version: str) -> dict[str, Path]:
    """Stub libraries at a Cray layout below ``root`` (never at the real /opt/cray)."""
    mpich = root / "opt/cray/pe/mpich" / mpi_version
    tree = {
        "libmpi.so.12": mpich / "ofi/gnu/9.1/lib-abi-mpich/libmpi.so.12",
        "libmpi_gtl_cuda.so.0": mpich / "gtl/lib/libmpi_gtl_cuda.so.0",
        "libfabric.so.1": root / "opt/cray/libfabric/1.15.2.0/lib64/libfabric.so.1",
        "libnccl-net.so": root / "plugin/lib/libnccl-net.so",
    }
    for path in tree.values():
        stub(path, "host")
    (root / "usr/lib64").mkdir(parents=True, exist_ok=True)  # bound as /host/lib64
    return tree


def inside(root: Path, path: Path) -> str:
    """Where the descriptors bind a file of the stand-in host tree ``root``: its node path."""
    return "/" + str(path.relative_to(root))


def _point_at(root: Path):
    def edit(data):
        data["mpi"]["prefix"] = f"{root}/opt/cray/pe/mpich/8.1.27/ofi/gnu/9.1"
        data["libfabric"]["prefix"] = f"{root}/opt/cray/libfabric/1.15.2.0"
    return edit


def _run(script: Path, image: str, env: dict[str, str], *args: str) -> str:
    proc = subprocess.run(["bash", str(script), *args], env=podman_env(env),
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_apptainer_bind_model_maps_the_host_libraries(image, tmp_path: Path) -> None:
    """derecho's descriptor, run through plain podman (run-podman.sh, the same injection)."""
    host = tmp_path / "host"
    tree = host_tree(host, "8.1.27")
    site = edited_site(tmp_path, "derecho", _point_at(host))
    out = tmp_path / "out"
    out.mkdir()
    for name, text in container.render(site).items():
        (out / name).write_text(text)
    env = dict(os.environ, TORCHMPI_IMAGE=image,
               TORCHMPI_PLUGIN_LIB=str(tree["libnccl-net.so"].parent))

    origins, maps = parse_probe(_run(out / "run-podman.sh", image, env, "/usr/bin/probe",
                                     *PROBED))
    assert origins == dict.fromkeys(PROBED, "host")
    assert maps["libmpi.so.12"] == inside(host, tree["libmpi.so.12"])
    assert maps["libfabric.so.1"] == inside(host, tree["libfabric.so.1"])
    assert maps["libnccl-net.so"] == f"{container.PLUGIN_DIR}/libnccl-net.so"
    # CUDA-aware site: GTL preloaded from the host, before anything else asked for it.
    assert maps["libmpi_gtl_cuda.so.0"] == inside(host, tree["libmpi_gtl_cuda.so.0"])
    # The doctor's rule, on this container's real mount table: injected = bind-mounted.
    mounts = doctor_container.mount_points(
        _run(out / "run-podman.sh", image, env, "/bin/cat", "/proc/self/mountinfo"))
    assert {doctor_container.origin(maps[lib], mounts) for lib in (*PROBED,
                                                                   "libmpi_gtl_cuda.so.0")} \
        == {"host"}

    # Negative control: the same script with injection off runs on the image's copies.
    off = dict(env, TORCHMPI_CONTAINER_INJECT="0")
    origins, maps = parse_probe(_run(out / "run-podman.sh", image, off, "/usr/bin/probe",
                                     *PROBED))
    assert origins == dict.fromkeys(PROBED, "image")
    assert {maps[lib] for lib in PROBED} == {f"{IMAGE_LIB}/{lib}" for lib in PROBED}
    assert "libmpi_gtl_cuda.so.0" not in maps
    mounts = doctor_container.mount_points(
        _run(out / "run-podman.sh", image, off, "/bin/cat", "/proc/self/mountinfo"))
    assert {doctor_container.origin(maps[lib], mounts) for lib in PROBED} == {"image"}


def test_site_without_cuda_aware_mpi_preloads_no_gtl(image, tmp_path: Path) -> None:
    host = tmp_path / "host"
    host_tree(host, "8.1.27")

    def edit(data):
        _point_at(host)(data)
        data["mpi"]["cuda_aware"] = False
        data["runtime"]["env"]["MPICH_GPU_SUPPORT_ENABLED"] = 0

    files = container.render(edited_site(tmp_path, "derecho", edit))
    script = tmp_path / "run-podman.sh"
    script.write_text(files["run-podman.sh"])
    origins, maps = parse_probe(_run(script, image, dict(os.environ, TORCHMPI_IMAGE=image),
                                     "/usr/bin/probe", "libmpi.so.12"))
    assert origins == {"libmpi.so.12": "host"}
    assert "libmpi_gtl_cuda.so.0" not in maps


@pytest.fixture(scope="session")
def podman_hpc() -> str:
    exe = Path(sys.executable).parent / "podman-hpc"
    if not exe.exists():
        pytest.skip("podman-hpc not installed in the venv (requirements.txt)")
    return str(exe)


def test_podman_hpc_module_maps_the_host_libraries(image, podman_hpc, tmp_path: Path,
                                                   request) -> None:
    """perlmutter's run.sh through podman-hpc, with the module the tool generated."""
    host = tmp_path / "host"
    tree = host_tree(host, "8.1.27")

    def edit(data):
        data["mpi"]["prefix"] = f"{host}/opt/cray/pe/mpich/8.1.27/ofi/gnu/9.1"
        data["mpi"]["version"] = "8.1.27"
        data["libfabric"]["prefix"] = f"{host}/opt/cray/libfabric/1.15.2.0"

    site = edited_site(tmp_path, "perlmutter", edit)
    files = container.render(site)
    modules = tmp_path / "modules.d"
    modules.mkdir()
    (modules / "torchmpi.yaml").write_text(files["torchmpi-podman-hpc.yaml"])
    # run.sh also passes NERSC's --gpu; its module binds NVIDIA's driver, absent
    # here, so a stand-in that only declares the flag.
    (modules / "gpu.yaml").write_text(yaml.safe_dump(
        {"name": "gpu", "cli_arg": "gpu", "help": "stand-in for NERSC's gpu module",
         "env": "ENABLE_GPU", "additional_args": []}))
    hooks = tmp_path / "hooks.d"
    subprocess.run([sys.executable, "-m", "podman_hpc.configure_hooks", "--hooksd", str(hooks)],
                   check=True, capture_output=True)
    # podman refuses a runroot longer than 50 characters: pytest's tmp paths are.
    store = Path(tempfile.mkdtemp(prefix="phpc", dir="/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(store, ignore_errors=True))
    config = tmp_path / "podman_hpc.yaml"
    config.write_text(yaml.safe_dump({
        "podman_bin": shutil.which("podman"), "modules_dir": str(modules),
        "hooks_dir": str(hooks),
        "graph_root_template": str(store / "storage"), "run_root_template": str(store / "run"),
        "config_home_template": str(store / "config")}))
    env = podman_env(dict(os.environ, PODMANHPC_CONFIG_FILE=str(config),
                          USER=os.environ.get("USER", "root"),
                          PATH=f"{Path(podman_hpc).parent}:{os.environ['PATH']}"))
    # podman-hpc keeps its own store: copy the probe image into it.
    archive = tmp_path / "probe.tar"
    subprocess.run(["podman", "save", "-o", str(archive), image], env=podman_env(),
                   check=True, capture_output=True)
    load = subprocess.run([podman_hpc, "load", "-i", str(archive)], env=env,
                          capture_output=True, text=True, check=False)
    assert load.returncode == 0, load.stderr
    script = tmp_path / "run.sh"
    script.write_text(files["run.sh"])
    env["TORCHMPI_IMAGE"] = image
    origins, maps = parse_probe(_run(script, image, env, "/usr/bin/probe", "libmpi.so.12",
                                     "libfabric.so.1"))
    assert origins == {"libmpi.so.12": "host", "libfabric.so.1": "host"}
    assert maps["libmpi.so.12"] == inside(host, tree["libmpi.so.12"])
    assert maps["libmpi_gtl_cuda.so.0"] == inside(host, tree["libmpi_gtl_cuda.so.0"])

    env["TORCHMPI_CONTAINER_INJECT"] = "0"
    origins, maps = parse_probe(_run(script, image, env, "/usr/bin/probe", "libmpi.so.12"))
    assert origins == {"libmpi.so.12": "image"}


def test_site_paths_are_added_to_inside_the_container(image, tmp_path: Path) -> None:
    """runtime.prepend_path/append_path (docs/sites.md) add to the *container's* list:
    the image's PATH stays after the site's directory, an unset list gets the site's
    directory alone, the injected host libraries stay behind the site's, and
    runtime.env still arrives.  Until 2026-11-24 only the CE EDF carried them: every
    shell descriptor dropped them without a word."""
    host = tmp_path / "host"
    host_tree(host, "8.1.27")

    def edit(data):
        _point_at(host)(data)
        data["runtime"]["prepend_path"] = {"PATH": "/opt/site/bin",
                                           "LD_LIBRARY_PATH": "/opt/site/lib"}
        data["runtime"]["append_path"] = {"TORCHMPI_TEST_LIST": "/opt/site/share"}

    site = edited_site(tmp_path, "derecho", edit)
    script = tmp_path / "run-podman.sh"
    script.write_text(container.render(site)["run-podman.sh"])
    out = _run(script, image, dict(os.environ, TORCHMPI_IMAGE=image), "/bin/env")
    env = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    path = env["PATH"].split(":")
    assert path[0] == "/opt/site/bin" and "/usr/bin" in path, env["PATH"]
    assert env["TORCHMPI_TEST_LIST"] == "/opt/site/share"
    libs = env["LD_LIBRARY_PATH"].split(":")
    assert libs == ["/opt/site/lib", *container.plan(site).lib_path], libs
    assert env["MPICH_GPU_SUPPORT_ENABLED"] == "1"
    assert env[container.MARKER] == "podman"


LOADER = "/lib64/ld-linux-x86-64.so.2"


def _ldd(script: Path, env: dict[str, str], lib: str, *env_words: str) -> dict[str, str]:
    """{soname: resolved path or 'not found'} of ``lib`` in the container, as glibc's
    ``ldd`` script gets it (the image has none): the loader run on ``lib`` with
    LD_TRACE_LOADED_OBJECTS=1.  Without the descriptor's LD_PRELOAD (GTL's CUDA
    runtime is not in this image)."""
    proc = subprocess.run(["bash", str(script), "/bin/env", "-u", "LD_PRELOAD",
                           "LD_TRACE_LOADED_OBJECTS=1", *env_words, LOADER, lib],
                          env=podman_env(env), capture_output=True, text=True, timeout=300,
                          check=False)
    out = proc.stdout
    found = {}
    for line in out.splitlines():
        name, arrow, rest = line.strip().partition(" => ")
        if arrow:
            found[name] = rest.split(" (")[0].strip()
    return found


@pytest.fixture(scope="module")
def cray_node(tmp_path_factory):
    """A Cray EX GPU node stand-in (tests/cray_ex.py) laid out to be bound at /opt/cray."""
    return cray_ex.build(tmp_path_factory.mktemp("cray-node"), "gpu", mounted=True)


def test_images_torch_loads_with_every_needed_from_the_host(image, cray_node,
                                                            tmp_path: Path) -> None:
    """In the container derecho's injection makes the image's torch (NEEDs libmpi.so.12)
    resolve libmpi.so.12 to the host's lib-abi-mpich copy and everything that NEEDs in
    turn (libpmi, libpmi2, libpals, Cray's gcc-libs, libfabric, libcxi, libxpmem) to
    the host's files: nothing "not found".  Negative controls: the old injection
    (lib-abi-mpich, libfabric and GTL alone on LD_LIBRARY_PATH) leaves libpmi,
    libpals' link, libxpmem and libcxi "not found"; with injection off the image's own
    libmpi.so.12 is the one found."""
    node = cray_node
    mpich = node.path("libmpi").parent.parent  # .../ofi/gnu/9.1

    def edit(data):
        data["mpi"]["prefix"] = str(mpich)
        data["mpi"]["version"] = node.libraries["libmpi"]["path"].split("/")[5]
        data["libfabric"]["prefix"] = str(node.path("libfabric").parent.parent)

    site = edited_site(tmp_path, "derecho", edit)
    script = tmp_path / "run-podman.sh"
    script.write_text(container.render(site)["run-podman.sh"])
    env = dict(os.environ, TORCHMPI_IMAGE=image)
    torch = f"{IMAGE_LIB}/libtorch_cpu.so"

    found = _ldd(script, env, torch)
    missing = sorted(k for k, v in found.items() if v == "not found")
    assert missing == [], found
    node_path = {soname: node.libraries[key]["path"]
                 for key, soname in (("libmpi", "libmpi.so.12"), ("libpmi", "libpmi.so.0"),
                                     ("libpmi2", "libpmi2.so.0"),
                                     ("libfabric", "libfabric.so.1"),
                                     ("libxpmem", "libxpmem.so.0"),
                                     ("libatomic", "libatomic.so.1"),
                                     ("libgfortran", "libgfortran.so.5"))}
    for soname, path in node_path.items():
        assert found[soname] == path, (soname, found)
    assert found["libpals.so.0"] == "/opt/cray/pe/lib64/libpals.so.0", found
    assert found["libcxi.so.1"] == f"{container.HOST_LIB64}/libcxi.so.1", found
    # ldd of the injected libmpi itself (docs/containers.md, acceptance step 1).
    assert "not found" not in _ldd(script, env, found["libmpi.so.12"]).values()
    # And it loads: dlopen(RTLD_NOW) of torch maps the closure from the host.
    out = _run(script, image, env, "/usr/bin/probe", torch)
    assert f"ORIGIN {torch} ?" in out and "MISSING" not in out, out
    _, maps = parse_probe(out)
    for soname, path in node_path.items():
        assert maps[soname] == path, (soname, maps)
    assert maps["libcxi.so.1"] == f"{container.HOST_LIB64}/libcxi.so.1", maps

    # Negative control 1: what the descriptor put on LD_LIBRARY_PATH before (no closure).
    gtl = str(Path(node_path["libmpi.so.12"]).parents[4] / "gtl" / "lib")
    old = ":".join([str(Path(node_path["libmpi.so.12"]).parent),
                    str(Path(node_path["libfabric.so.1"]).parent), gtl])
    found = _ldd(script, env, torch, f"LD_LIBRARY_PATH={old}")
    missing = sorted(k for k, v in found.items() if v == "not found")
    assert missing == ["libcxi.so.1", "libpmi.so.0", "libpmi2.so.0", "libxpmem.so.0"], found

    # Negative control 2: injection off, the image's own libmpi.so.12.
    found = _ldd(script, dict(env, TORCHMPI_CONTAINER_INJECT="0"), torch)
    assert found["libmpi.so.12"] == f"{IMAGE_LIB}/libmpi.so.12", found


@pytest.mark.parametrize("form", ["8.1.21", "8.1.27", "8.1.30"])
def test_descriptors_gtl_preload_loads_every_recorded_gtl_form(image, cray_node, form: str,
                                                                tmp_path: Path) -> None:
    """Each GTL form of the record (tests/fixtures/cray_ex/manifest.yaml: C++ runtime
    undefined, CUDA runtime undefined, driver symbols undefined) loads in the container
    through derecho's LD_PRELOAD, which puts the driver (the node's, from /host/lib64),
    the image's libstdc++ and libcudart before GTL.  Negative control: GTL alone, the
    descriptor's LD_PRELOAD before, stops every process with an undefined symbol."""
    node = cray_node

    def edit(data):
        data["mpi"]["prefix"] = str(node.root / f"opt/cray/pe/mpich/{form}/ofi/gnu/9.1")
        data["mpi"]["version"] = form
        data["libfabric"]["prefix"] = str(node.path("libfabric").parent.parent)

    site = edited_site(tmp_path, "derecho", edit)
    script = tmp_path / "run-podman.sh"
    script.write_text(container.render(site)["run-podman.sh"])
    env = dict(os.environ, TORCHMPI_IMAGE=image)
    gtl = node.libraries[f"gtl-{form}"]["path"]

    proc = subprocess.run(["bash", str(script), "/usr/bin/probe", "libmpi_gtl_cuda.so.0"],
                          env=podman_env(env), capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0 and "ERROR" not in proc.stderr, proc.stderr
    _, maps = parse_probe(proc.stdout)
    assert maps["libmpi_gtl_cuda.so.0"] == gtl, maps
    assert maps["libcuda.so.1"] == f"{container.HOST_LIB64}/libcuda.so.1", maps
    assert "libstdc++.so.6" in maps and "libcudart.so.12" in maps, maps

    proc = subprocess.run(["bash", str(script), "/bin/env", f"LD_PRELOAD={gtl}",
                           "/usr/bin/probe"], env=podman_env(env), capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode != 0 and "undefined symbol" in proc.stderr, proc.stderr
