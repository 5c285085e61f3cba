"""Real podman for the container tests: project settings, a tiny cached image.

Podman runs rootful with the project's ``scripts/podman/containers.conf``
(``CONTAINERS_CONF``) and a storage.conf written into the torchmpi cache
(``CONTAINERS_STORAGE_CONF``), so nothing in /etc or ~/.config is touched.

No registry is reachable, so the image is imported from a tarball of a
minimal root file system made of this host's files: busybox (static), the
dynamic loader and libc, a probe program and the *image's* own copies of the
libraries a site injects.  Those copies stand for the image's MPICH, libfabric
and plugin (``mpich@3.4.3``, built by Spack into the image), not for Cray's: they
are plain libraries with the soname and the exports callers bind, and no GTL
(the image's MPICH has none).  The host side is the Cray EX stand-in
(tests/support/cray_ex.py) with its NEEDED closure; which copy a process loaded
is judged from the path it maps (``/proc/self/maps``) and the container's mount
table, never from a library's word about itself.  The probe is linked with a
RUNPATH to the image's copies, as the container environment's
``shared_linking: runpath`` links torch: a library on ``LD_LIBRARY_PATH`` (the
injected host one) wins over it.  The image is keyed by the hash of its inputs
and built once per cache.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

from torchmpi import paths

#: The image's own copies of what a Cray site's descriptors inject: soname -> exports
#: (those of the host stand-ins in tests/fixtures/cray_ex/manifest.yaml).
LIBS = {"libmpi.so.12": ("MPI_Init", "MPI_Finalize"),
        "libfabric.so.1": ("fi_getinfo", "fi_fabric"),
        "libnccl-net.so": ("ncclNetPlugin_v6",)}
IMAGE_LIB = "/opt/image/lib"
#: busybox applets the image links (podman-hpc's shared-run mode starts ``sleep infinity``).
APPLETS = ("sh", "sleep", "cat", "ls", "env", "echo")

PROBE_C = r"""
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
/* dlopen each library by name, as libtorch/NCCL do (RTLD_NOW: every NEEDED and
   every symbol resolved, or the loader's reason), then list what is mapped. */
int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    void *h = dlopen(argv[i], RTLD_NOW | RTLD_LOCAL);
    if (h) printf("LOADED %s\n", argv[i]);
    else printf("MISSING %s %s\n", argv[i], dlerror());
  }
  FILE *maps = fopen("/proc/self/maps", "r");
  char line[4096];
  while (maps && fgets(line, sizeof line, maps)) {
    char *path = strchr(line, '/');
    if (path && strstr(path, ".so")) printf("MAP %s", path);
  }
  return 0;
}
"""

#: The image's torch stand-in: libtorch_cpu.so NEEDs libmpi.so.12 (torch built
#: +mpi against the image's MPICH), RUNPATH to the image's copy as Spack's
#: ``shared_linking: runpath`` links it, so an injected libmpi.so.12 on
#: LD_LIBRARY_PATH wins.
TORCH = "libtorch_cpu.so"
TORCH_C = ("extern int MPI_Init(void *, void *);\n"
           "int torch_mpi_init(void) { return MPI_Init(0, 0); }\n")


#: The image's C++ and CUDA runtimes, which Cray GTL leaves undefined (the descriptors
#: preload them by soname): this host's libstdc++ with what it NEEDs, and a CUDA
#: runtime stand-in with the exports and version node of tests/fixtures/cray_ex's
#: ``libcudart`` (the image's CUDA; its path in a CUDA image is found through
#: ld.so.conf, here a directory the loader searches by default).
CXX_RUNTIME = ("libstdc++.so.6", "libm.so.6", "libgcc_s.so.1")
SYSTEM_LIB = "/lib/x86_64-linux-gnu"


def podman_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment podman runs with: the project's settings, storage in the cache."""
    store = paths.cache() / "podman"
    store.mkdir(parents=True, exist_ok=True)
    conf = store / "storage.conf"
    text = (f'[storage]\ndriver = "overlay"\ngraphroot = "{store / "graph"}"\n'
            f'runroot = "{store / "run"}"\n')
    if not conf.is_file() or conf.read_text() != text:
        conf.write_text(text)
    env = dict(base if base is not None else os.environ)
    env["CONTAINERS_CONF"] = str(paths.root() / "scripts" / "podman" / "containers.conf")
    env["CONTAINERS_STORAGE_CONF"] = str(conf)
    return env


def gcc(*args: str) -> None:
    subprocess.run(["gcc", *args], check=True, capture_output=True, text=True)


def image_library(path: Path, exports: tuple[str, ...], work: Path) -> Path:
    """One of the image's own copies: ``path``'s name as soname, ``exports`` defined."""
    src = work / f"{path.name}.c"
    src.write_text("".join(f"int {name}(void) {{ return 0; }}\n" for name in exports))
    gcc("-shared", "-fPIC", f"-Wl,-soname,{path.name}", "-o", str(path), str(src))
    return path


def _host_file(*candidates: str) -> Path:
    for name in candidates:
        if Path(name).is_file():
            return Path(name).resolve()
    raise FileNotFoundError(candidates[0])


def build_image(work: Path) -> str:
    """The probe image's tag, imported once (its inputs' hash is the tag)."""
    busybox = _host_file("/bin/busybox", "/usr/bin/busybox")
    loader = _host_file("/lib64/ld-linux-x86-64.so.2")
    libc = _host_file("/lib/x86_64-linux-gnu/libc.so.6")
    digest = hashlib.sha256()
    # This file too: how the image's libraries are linked is part of the image.
    for part in (Path(__file__).read_bytes(), " ".join(APPLETS).encode(),
                 busybox.read_bytes(), libc.read_bytes()):
        digest.update(hashlib.sha256(part).digest())
    tag = f"localhost/torchmpi-test-probe:{digest.hexdigest()[:16]}"
    env = podman_env()
    if subprocess.run(["podman", "image", "exists", tag], env=env, check=False).returncode == 0:
        return tag
    root = work / "rootfs"
    shutil.rmtree(root, ignore_errors=True)
    for sub in ("bin", "lib64", "lib/x86_64-linux-gnu", "usr/bin", IMAGE_LIB.lstrip("/"),
                "tmp", "proc", "dev", "etc", "run"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    shutil.copy2(busybox, root / "bin" / "busybox")
    for applet in APPLETS:
        (root / "bin" / applet).symlink_to("busybox")
    shutil.copy2(loader, root / "lib64" / "ld-linux-x86-64.so.2")
    shutil.copy2(libc, root / "lib/x86_64-linux-gnu/libc.so.6")
    src = work / "probe.c"
    src.write_text(PROBE_C)
    gcc("-O1", f"-Wl,--enable-new-dtags,-rpath,{IMAGE_LIB}", "-o",
        str(root / "usr/bin/probe"), str(src))
    image_lib = root / IMAGE_LIB.lstrip("/")
    for lib, exports in LIBS.items():
        image_library(image_lib / lib, exports, work)
    for name in CXX_RUNTIME:
        shutil.copy2(_host_file(f"{SYSTEM_LIB}/{name}", f"/usr{SYSTEM_LIB}/{name}"),
                     root / SYSTEM_LIB.lstrip("/") / name)
    cudart(root / SYSTEM_LIB.lstrip("/") / "libcudart.so.12", work)
    torch = work / "torch.c"
    torch.write_text(TORCH_C)
    gcc("-shared", "-fPIC", "-o", str(image_lib / TORCH), str(torch), f"-L{image_lib}",
        f"-Wl,--enable-new-dtags,-rpath,{IMAGE_LIB}", "-Wl,--no-as-needed", "-l:libmpi.so.12")
    tarball = work / "rootfs.tar"
    with tarfile.open(tarball, "w") as tar:
        tar.add(root, arcname=".")
    subprocess.run(["podman", "import", str(tarball), tag], env=env, check=True,
                   capture_output=True, text=True)
    return tag


def cudart(path: Path, work: Path) -> Path:
    """A CUDA runtime stand-in: the manifest's ``libcudart`` exports and version node."""
    from support import cray_ex

    entry = cray_ex.manifest()["libraries"]["libcudart"]
    src = work / "cudart.c"
    src.write_text("".join(f"int {name}(void) {{ return 0; }}\n" for name in entry["defines"]))
    script = work / "cudart.map"
    script.write_text(f"{entry['version']} {{ global: *; }};\n")
    gcc("-shared", "-fPIC", f"-Wl,-soname,{path.name}", f"-Wl,--version-script={script}",
        "-o", str(path), str(src))
    return path


def parse_probe(out: str) -> tuple[dict[str, str], dict[str, str]]:
    """({name dlopened: "loaded" or the loader's error}, {soname: mapped path}) from the
    probe's output."""
    loaded, maps = {}, {}
    for line in out.splitlines():
        words = line.split(None, 2)
        if words[:1] == ["LOADED"]:
            loaded[words[1]] = "loaded"
        elif words[:1] == ["MISSING"]:
            loaded[words[1]] = words[2] if len(words) > 2 else "?"
        elif words[:1] == ["MAP"]:
            path = words[1]
            maps.setdefault(Path(path).name, path)
    return loaded, maps
