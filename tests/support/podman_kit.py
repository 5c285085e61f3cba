"""Real podman for the container tests: project settings, a tiny cached image, stub libraries.

Podman runs rootful with the project's ``scripts/podman/containers.conf``
(``CONTAINERS_CONF``) and a storage.conf written into the torchmpi cache
(``CONTAINERS_STORAGE_CONF``), so nothing in /etc or ~/.config is touched.

No registry is reachable, so the image is imported from a tarball of a
minimal root file system made of this host's files: busybox (static), the
dynamic loader and libc, a probe program and the *image's* copies of the
libraries a site injects (each a stub whose ``torchmpi_stub_origin()`` says
"image").  The probe is linked with a RUNPATH to those copies, as the
container environment's ``shared_linking: runpath`` links torch: a library on
``LD_LIBRARY_PATH`` (the injected host one) wins over it.  The image is keyed
by the hash of its inputs and built once per cache.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

from torchmpi import paths

#: The libraries a Cray site's descriptors inject, by soname.
LIBS = ("libmpi.so.12", "libfabric.so.1", "libnccl-net.so", "libmpi_gtl_cuda.so.0")
IMAGE_LIB = "/opt/image/lib"
#: busybox applets the image links (podman-hpc's shared-run mode starts ``sleep infinity``).
APPLETS = ("sh", "sleep", "cat", "ls", "env", "echo")

PROBE_C = r"""
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
/* dlopen each library by name, as libtorch/NCCL do, then list what is mapped. */
int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    void *h = dlopen(argv[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) { printf("MISSING %s\n", argv[i]); continue; }
    const char *(*origin)(void) = (const char *(*)(void))dlsym(h, "torchmpi_stub_origin");
    printf("ORIGIN %s %s\n", argv[i], origin ? origin() : "?");
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

STUB_C = 'const char *torchmpi_stub_origin(void) { return ORIGIN; }\n'

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


def stub(path: Path, origin: str) -> Path:
    """A shared library with the soname of ``path``'s name that answers ``origin``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    src = path.parent / f".{path.name}.c"
    src.write_text(STUB_C)
    gcc("-shared", "-fPIC", f'-DORIGIN="{origin}"', f"-Wl,-soname,{path.name}",
        "-o", str(path), str(src))
    src.unlink()
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
    for lib in LIBS:
        stub(root / IMAGE_LIB.lstrip("/") / lib, "image")
    image_lib = root / IMAGE_LIB.lstrip("/")
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
    """({soname: origin}, {soname: mapped path}) from the probe's output."""
    origins, maps = {}, {}
    for line in out.splitlines():
        words = line.split()
        if words[:1] == ["ORIGIN"]:
            origins[words[1]] = words[2]
        elif words[:1] == ["MAP"]:
            path = words[1]
            maps.setdefault(Path(path).name, path)
    return origins, maps
