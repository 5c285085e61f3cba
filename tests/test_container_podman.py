"""The generated descriptors inject the host's libraries for real (podman, podman-hpc).

The host is a Cray EX GPU node stand-in (tests/support/cray_ex.py, built by gcc from
tests/fixtures/cray_ex/manifest.yaml): ``lib-abi-mpich/libmpi.so.12`` with what it
NEEDs (libpmi, libpmi2, libpals, Cray's gcc-libs, libfabric, libcxi, libxpmem),
GTL, the driver in ``/usr/lib64`` and the site's ``libnccl-net.so`` (NEEDs
libfabric), laid out below a tmp dir; the site file's prefixes point there.  The
*generated* run script starts a small image with its own simple copies
(tests/support/podman_kit.py: the image's MPICH, libfabric and plugin, not Cray's);
a probe in the container dlopens the libraries by name with ``RTLD_NOW`` (every
NEEDED and symbol resolved, or the loader's reason) and prints ``/proc/self/maps``.
Whose copy was loaded is judged from the mapped path and the container's own mount
table (the doctor's rule, ``doctor_container.origin``): with injection on, the
host's whole closure; with ``TORCHMPI_CONTAINER_INJECT=0`` the image's (negative
control).  A host libmpi whose libpals is not there does not load.

And ``ldd`` of the image's torch stand-in (NEEDs ``libmpi.so.12``) in the container:
every NEEDED from the host, nothing "not found".
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
from support.podman_kit import IMAGE_LIB, build_image, parse_probe, podman_env
from support.sites import edited_site
from torchmpi import container
from torchmpi.doctor import container as doctor_container

pytestmark = pytest.mark.skipif(
    not shutil.which("podman") or os.geteuid() != 0,
    reason="needs rootful podman (scripts/check-system.sh installs it)")

PROBED = ("libmpi.so.12", "libfabric.so.1", "libnccl-net.so")
GTL = "libmpi_gtl_cuda.so.0"
#: What libmpi.so.12 and libfabric.so.1 NEED on the node, by manifest key.
CLOSURE = ("libmpi", "libpmi", "libpmi2", "libpals", "libatomic", "libquadmath",
           "libgfortran", "libfabric", "libcxi", "libxpmem")


@pytest.fixture(scope="session")
def image(tmp_path_factory) -> str:
    return build_image(tmp_path_factory.mktemp("probe-image"))


def host_node(root: Path) -> cray_ex.Node:
    """The host: a Cray EX GPU node stand-in below ``root`` (never the real /opt/cray),
    laid out to be bound at the node's own paths."""
    return cray_ex.build(root, "gpu", mounted=True)


@pytest.fixture(scope="module")
def cray_node(tmp_path_factory) -> cray_ex.Node:
    """One host node for the tests that leave it as built."""
    return host_node(tmp_path_factory.mktemp("cray-node"))


def _point_at(node: cray_ex.Node):
    """A site edit: Cray MPICH and libfabric at ``node``'s (the manifest's release)."""
    def edit(data):
        data["mpi"]["prefix"] = str(node.path("libmpi").parent.parent)  # .../ofi/gnu/9.1
        data["mpi"]["version"] = node.libraries["libmpi"]["path"].split("/")[5]
        data["libfabric"]["prefix"] = str(node.path("libfabric").parent.parent)
    return edit


def node_path(node: cray_ex.Node, key: str) -> str:
    """Where the container maps manifest entry ``key``: its node path, links resolved
    (/proc/self/maps names the file opened, libpals' under /opt/cray/pals)."""
    return "/" + str(node.path(key).resolve().relative_to(node.root.resolve()))


def _run(script: Path, image: str, env: dict[str, str], *args: str) -> str:
    proc = subprocess.run(["bash", str(script), *args], env=podman_env(env),
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _origins(script: Path, image: str, env: dict[str, str],
             maps: dict[str, str]) -> dict[str, str]:
    """{soname: "host" | "image"} of every mapped library, by the doctor's rule on this
    container's real mount table (injected = on a bind mount)."""
    mounts = doctor_container.mount_points(
        _run(script, image, env, "/bin/cat", "/proc/self/mountinfo"))
    return {lib: doctor_container.origin(path, mounts) for lib, path in maps.items()}


def _assert_host_closure(node: cray_ex.Node, maps: dict[str, str],
                         origins: dict[str, str]) -> None:
    """libmpi.so.12, libfabric.so.1 and everything they NEED mapped from the host node."""
    for key in CLOSURE:
        lib = cray_ex.soname(node.libraries[key])
        want = (f"{container.HOST_LIB64}/{lib}" if key == "libcxi"
                else node_path(node, key))
        assert maps.get(lib) == want, (lib, maps)
        assert origins[lib] == "host", (lib, origins)


def test_apptainer_bind_model_maps_the_host_libraries(image, cray_node,
                                                      tmp_path: Path) -> None:
    """derecho's descriptor, run through plain podman (run-podman.sh, the same injection)."""
    node = cray_node
    site = edited_site(tmp_path, "derecho", _point_at(node))
    out = tmp_path / "out"
    out.mkdir()
    for name, text in container.render(site).items():
        (out / name).write_text(text)
    script = out / "run-podman.sh"
    env = dict(os.environ, TORCHMPI_IMAGE=image,
               TORCHMPI_PLUGIN_LIB=str(node.path("libnccl-net").parent))

    loaded, maps = parse_probe(_run(script, image, env, "/usr/bin/probe", *PROBED))
    assert loaded == dict.fromkeys(PROBED, "loaded"), loaded
    origins = _origins(script, image, env, maps)
    _assert_host_closure(node, maps, origins)
    assert maps["libnccl-net.so"] == f"{container.PLUGIN_DIR}/libnccl-net.so"
    assert origins["libnccl-net.so"] == "host"
    # CUDA-aware site: GTL preloaded from the host, before anything else asked for it,
    # with the driver it leaves undefined from the node's /usr/lib64.
    assert maps[GTL] == node_path(node, "gtl-8.1.30"), maps
    assert maps["libcuda.so.1"] == f"{container.HOST_LIB64}/libcuda.so.1", maps
    assert origins[GTL] == origins["libcuda.so.1"] == "host"

    # Negative control: the same script with injection off runs on the image's copies,
    # and nothing of Cray's closure is mapped.
    off = dict(env, TORCHMPI_CONTAINER_INJECT="0")
    loaded, maps = parse_probe(_run(script, image, off, "/usr/bin/probe", *PROBED))
    assert loaded == dict.fromkeys(PROBED, "loaded"), loaded
    assert {lib: maps[lib] for lib in PROBED} == {lib: f"{IMAGE_LIB}/{lib}" for lib in PROBED}
    origins = _origins(script, image, off, maps)
    assert {origins[lib] for lib in PROBED} == {"image"}
    cray = {cray_ex.soname(node.libraries[key]) for key in CLOSURE} | {GTL}
    assert cray & set(maps) == {"libmpi.so.12", "libfabric.so.1"}, maps
    assert "host" not in origins.values(), origins


def test_site_without_cuda_aware_mpi_preloads_no_gtl(image, cray_node,
                                                     tmp_path: Path) -> None:
    def edit(data):
        _point_at(cray_node)(data)
        data["mpi"]["cuda_aware"] = False
        data["runtime"]["env"]["MPICH_GPU_SUPPORT_ENABLED"] = 0

    files = container.render(edited_site(tmp_path, "derecho", edit))
    script = tmp_path / "run-podman.sh"
    script.write_text(files["run-podman.sh"])
    env = dict(os.environ, TORCHMPI_IMAGE=image)
    loaded, maps = parse_probe(_run(script, image, env, "/usr/bin/probe", "libmpi.so.12"))
    assert loaded == {"libmpi.so.12": "loaded"}, loaded
    _assert_host_closure(cray_node, maps, _origins(script, image, env, maps))
    assert GTL not in maps and "libcuda.so.1" not in maps, maps


@pytest.fixture(scope="session")
def podman_hpc() -> str:
    exe = Path(sys.executable).parent / "podman-hpc"
    if not exe.exists():
        pytest.skip("podman-hpc not installed in the venv (requirements.txt)")
    return str(exe)


def test_podman_hpc_module_maps_the_host_libraries(image, podman_hpc, cray_node,
                                                   tmp_path: Path, request) -> None:
    """perlmutter's run.sh through podman-hpc, with the module the tool generated."""
    node = cray_node
    site = edited_site(tmp_path, "perlmutter", _point_at(node))
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
    loaded, maps = parse_probe(_run(script, image, env, "/usr/bin/probe", "libmpi.so.12",
                                    "libfabric.so.1"))
    assert loaded == {"libmpi.so.12": "loaded", "libfabric.so.1": "loaded"}, loaded
    origins = _origins(script, image, env, maps)
    _assert_host_closure(node, maps, origins)
    assert maps[GTL] == node_path(node, "gtl-8.1.30"), maps
    assert origins[GTL] == "host"

    env["TORCHMPI_CONTAINER_INJECT"] = "0"
    loaded, maps = parse_probe(_run(script, image, env, "/usr/bin/probe", "libmpi.so.12"))
    assert loaded == {"libmpi.so.12": "loaded"}, loaded
    assert maps["libmpi.so.12"] == f"{IMAGE_LIB}/libmpi.so.12", maps
    assert "host" not in _origins(script, image, env, maps).values()


def test_site_paths_are_added_to_inside_the_container(image, cray_node,
                                                      tmp_path: Path) -> None:
    """runtime.prepend_path/append_path (docs/sites.md) add to the *container's* list:
    the image's PATH stays after the site's directory, an unset list gets the site's
    directory alone, the injected host libraries stay behind the site's, and
    runtime.env still arrives.  Until 2026-11-24 only the CE EDF carried them: every
    shell descriptor dropped them without a word."""
    def edit(data):
        _point_at(cray_node)(data)
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
    site = edited_site(tmp_path, "derecho", _point_at(node))
    script = tmp_path / "run-podman.sh"
    script.write_text(container.render(site)["run-podman.sh"])
    env = dict(os.environ, TORCHMPI_IMAGE=image)
    torch = f"{IMAGE_LIB}/libtorch_cpu.so"

    found = _ldd(script, env, torch)
    missing = sorted(k for k, v in found.items() if v == "not found")
    assert missing == [], found
    where = {soname: node.libraries[key]["path"]
                 for key, soname in (("libmpi", "libmpi.so.12"), ("libpmi", "libpmi.so.0"),
                                     ("libpmi2", "libpmi2.so.0"),
                                     ("libfabric", "libfabric.so.1"),
                                     ("libxpmem", "libxpmem.so.0"),
                                     ("libatomic", "libatomic.so.1"),
                                     ("libgfortran", "libgfortran.so.5"))}
    for soname, path in where.items():
        assert found[soname] == path, (soname, found)
    assert found["libpals.so.0"] == "/opt/cray/pe/lib64/libpals.so.0", found
    assert found["libcxi.so.1"] == f"{container.HOST_LIB64}/libcxi.so.1", found
    # ldd of the injected libmpi itself (docs/containers.md, acceptance step 1).
    assert "not found" not in _ldd(script, env, found["libmpi.so.12"]).values()
    # And it loads: dlopen(RTLD_NOW) of torch maps the closure from the host.
    out = _run(script, image, env, "/usr/bin/probe", torch)
    assert parse_probe(out)[0] == {torch: "loaded"}, out
    _, maps = parse_probe(out)
    for soname, path in where.items():
        assert maps[soname] == path, (soname, maps)
    assert maps["libcxi.so.1"] == f"{container.HOST_LIB64}/libcxi.so.1", maps

    # Negative control 1: what the descriptor put on LD_LIBRARY_PATH before (no closure).
    gtl = str(Path(where["libmpi.so.12"]).parents[4] / "gtl" / "lib")
    old = ":".join([str(Path(where["libmpi.so.12"]).parent),
                    str(Path(where["libfabric.so.1"]).parent), gtl])
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


def test_host_libmpi_whose_libpals_is_not_bound_does_not_load(image, tmp_path: Path) -> None:
    """The host tree is Cray's closure, not libraries that load on their own: with PALS
    gone from the host (libpmi2.so.0 NEEDs libpals.so.0, spack/spack#29392) the
    injected libmpi.so.12 cannot load in the container, and the loader names what is
    missing.  A dependency-free stand-in loaded here all the same."""
    node = host_node(tmp_path / "host")
    shutil.rmtree(node.path("libpals").parent)  # /opt/cray/pals/<v>/lib; pe/lib64's link dangles
    site = edited_site(tmp_path, "derecho", _point_at(node))
    script = tmp_path / "run-podman.sh"
    script.write_text(container.render(site)["run-podman.sh"])
    env = dict(os.environ, TORCHMPI_IMAGE=image)
    loaded, maps = parse_probe(_run(script, image, env, "/usr/bin/probe", "libmpi.so.12"))
    assert "libpals.so.0" in loaded["libmpi.so.12"], loaded
    assert "libmpi.so.12" not in maps, maps
    # The image's own libmpi, which NEEDs nothing of Cray's, still loads without injection.
    loaded, _ = parse_probe(_run(script, image, dict(env, TORCHMPI_CONTAINER_INJECT="0"),
                                 "/usr/bin/probe", "libmpi.so.12"))
    assert loaded == {"libmpi.so.12": "loaded"}, loaded
