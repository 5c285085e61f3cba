"""A Cray EX node stand-in, built with gcc from tests/fixtures/cray_ex/manifest.yaml.

Cray's libraries cannot run here, so the tests stand in for them; a stub with
no dependencies would hide what fails on a real node (a GTL that needs a C++
runtime nobody loaded, a libmpi whose libfabric is not on the path).  Each
stand-in has what the manifest lays out from the public record: soname, path,
NEEDED entries, RUNPATH, symbol versions, undefined references.  The loader is
the host's real ld.so; only the libraries are stand-ins.

A node is a directory tree (``<root>/opt/cray/...``, ``<root>/usr/lib64/...``)
plus the search path ld.so would use there (:meth:`Node.env`).  A ``login``
node has no CUDA driver, and hides the host's if the host has one (an empty
``libcuda.so.1`` first on the search path: ld.so stops at it with "file too
short" instead of searching on into ld.so.cache), so tests that model a node
without a driver mean the same on a GPU machine.  Every node type hides so the
GPU runtimes it lacks (:data:`HIDDEN_WHEN_ABSENT`): an AMD node the CUDA
driver, an NVIDIA or login node ROCm's HSA and HIP runtimes.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

MANIFEST = Path(__file__).resolve().parents[1] / "fixtures" / "cray_ex" / "manifest.yaml"
#: The directory, under a login node's root, that hides any host CUDA driver.
HIDE_DRIVER = "torchmpi-test/no-driver"
#: GPU runtimes a node type without them must not find on the host either (an
#: NVIDIA or AMD test machine): empty files of their sonames in :data:`HIDE_DRIVER`.
HIDDEN_WHEN_ABSENT = ("libcuda", "libhsa-runtime64", "libamdhip64")

#: libmpi's MPI_Init: refuses GPU support unless a GTL symbol was bound when libmpi
#: loaded (Cray's message, quoted in eth-cscs/cscs-docs#40).
MPI_ROLE = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
extern int mpi_gtl_cuda_stub(void) __attribute__((weak));
extern int mpi_gtl_hsa_stub(void) __attribute__((weak));
int MPI_Init(void *argc, void *argv) {
  const char *on = getenv("MPICH_GPU_SUPPORT_ENABLED");
  if (on && strcmp(on, "1") == 0 && !mpi_gtl_cuda_stub && !mpi_gtl_hsa_stub) {
    fprintf(stderr, "MPICH ERROR [Rank 0] - Abort(-1) (rank 0 in comm 0): MPIDI_CRAY_init: "
            "GPU_SUPPORT_ENABLED is requested, but GTL library is not linked\n");
    return 1;
  }
  return 0;
}
int MPI_Finalize(void) { return 0; }
"""


def manifest() -> dict:
    """The manifest, as loaded (tests check its shape and its citations)."""
    return yaml.safe_load(MANIFEST.read_text(encoding="utf-8"))


def soname(entry: dict) -> str:
    return Path(entry["path"]).name


@dataclass
class Node:
    """A built node: ``root`` holds the node's file system, ``kind`` is gpu or login."""

    root: Path
    kind: str
    libraries: dict[str, dict]
    search: list[str]
    modules: dict[str, list[str]]

    def path(self, key: str) -> Path:
        """The host path of manifest entry ``key`` on this node."""
        return self.at(self.libraries[key]["path"])

    def at(self, node_path: str) -> Path:
        return self.root / node_path.lstrip("/")

    def has(self, key: str) -> bool:
        return self.path(key).is_file()

    def library_path(self, modules: tuple[str, ...] = ()) -> str:
        """LD_LIBRARY_PATH that makes ld.so search as it would on the node, with
        ``modules`` (manifest ``nodes.modules``) loaded."""
        dirs = [str(self.at(d)) for m in modules for d in self.modules[m]]
        dirs += [str(self.at(d)) for d in self.search]
        if (self.root / HIDE_DRIVER).is_dir():
            dirs.insert(0, str(self.root / HIDE_DRIVER))
        return os.pathsep.join(dirs)

    def env(self, base: dict[str, str] | None = None, modules: tuple[str, ...] = (),
            **extra: str) -> dict[str, str]:
        """``base`` (default: this process's) without LD_* and with the node's search path."""
        env = {k: v for k, v in (base if base is not None else os.environ).items()
               if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}
        env["LD_LIBRARY_PATH"] = self.library_path(modules)
        env.update(extra)
        return env


def _cc(*args: str) -> None:
    cc = shutil.which("gcc")
    if not cc:
        raise RuntimeError("no gcc for the Cray EX stand-in (apt install gcc)")
    proc = subprocess.run([cc, *args], check=False, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"gcc {' '.join(args)}:\n{proc.stderr}")


def _source(key: str, entry: dict) -> str:
    """C for one stand-in: its exports, and a table that references ``refs`` (bound at load)."""
    lines = []
    if entry.get("role") == "mpi":
        lines.append(MPI_ROLE)
    defined = set()
    for name in entry.get("defines", []):
        if entry.get("role") == "mpi" and name in ("MPI_Init", "MPI_Finalize"):
            continue
        lines.append(f"int {name}(void) {{ return 0; }}")
        defined.add(name)
    refs = [r for r in entry.get("refs", []) if r not in defined]
    for name in refs:
        lines.append(f"extern int {name}(void);")
    if refs:
        ident = "".join(c if c.isalnum() else "_" for c in key)
        table = ", ".join(f"(void *)&{name}" for name in refs)
        lines.append(f"__attribute__((used)) void *const torchmpi_refs_{ident}[] = {{{table}}};")
    return "\n".join(lines) + "\n"


def _order(libraries: dict[str, dict]) -> list[str]:
    """Keys with every NEEDED soname's provider built first."""
    by_soname = {soname(e): k for k, e in libraries.items()}
    done: list[str] = []

    def visit(key: str, stack: tuple[str, ...]) -> None:
        if key in done:
            return
        if key in stack:
            raise ValueError(f"manifest: NEEDED cycle through {key}")
        for need in libraries[key].get("needed", []):
            if need not in by_soname:
                raise ValueError(f"manifest: {key} NEEDs {need}, which no entry provides")
            visit(by_soname[need], (*stack, key))
        done.append(key)

    for key in libraries:
        visit(key, ())
    return done


def build(root: Path, kind: str, mounted: bool = False) -> Node:
    """Build the ``kind`` node (gpu or login) under ``root`` (created).

    ``mounted``: for a tree a container binds at the node's own paths (``root``/opt/cray
    at /opt/cray, tests/test_container_podman.py): RUNPATHs are the node paths the
    record shows and links point relative, so both resolve inside the container; the
    host-side tests (default) need RUNPATHs below ``root``."""
    data = manifest()
    if kind not in data["nodes"]["types"]:
        raise ValueError(f"node type {kind!r}: not one of {data['nodes']['types']}")
    libraries = data["libraries"]
    node = Node(root=root, kind=kind, libraries=libraries, search=data["nodes"]["search"],
                modules=data["nodes"].get("modules", {}))
    src = root / "torchmpi-test" / "src"
    src.mkdir(parents=True, exist_ok=True)
    by_soname = {soname(e): k for k, e in libraries.items()}
    for key in _order(libraries):
        entry = libraries[key]
        out = node.path(key)
        out.parent.mkdir(parents=True, exist_ok=True)
        c = src / f"{key}.c"
        c.write_text(_source(key, entry), encoding="utf-8")
        args = ["-shared", "-fPIC", f"-Wl,-soname,{soname(entry)}", "-Wl,--no-as-needed",
                "-o", str(out), str(c)]
        if entry.get("version"):
            script = src / f"{key}.map"
            script.write_text(f"{entry['version']} {{ global: *; }};\n", encoding="utf-8")
            args.append(f"-Wl,--version-script={script}")
        runpath = [d if mounted else str(node.at(d)) for d in entry.get("runpath", [])]
        if runpath:
            args.append("-Wl,--enable-new-dtags,-rpath," + ":".join(runpath))
        for need in entry.get("needed", []):
            provider = node.path(by_soname[need])
            args += [f"-L{provider.parent}", f"-l:{need}"]
        _cc(*args)
        for link in entry.get("links", []):
            target = node.at(link)
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.is_symlink() or target.exists():
                target.unlink()
            target.symlink_to(os.path.relpath(out, target.parent) if mounted else out)
    # Files the node type does not have were needed only to link the others.
    for key, entry in libraries.items():
        if kind not in entry.get("nodes", data["nodes"]["types"]):
            node.path(key).unlink()
    for key in HIDDEN_WHEN_ABSENT:
        entry = libraries.get(key)
        if entry and kind not in entry.get("nodes", data["nodes"]["types"]):
            hide = root / HIDE_DRIVER
            hide.mkdir(parents=True, exist_ok=True)
            (hide / soname(entry)).write_bytes(b"")
    return node


#: Where Spack's external ``cray-mpich`` prefix is on a built node: the manifest's
#: libmpi release, ``<mpich>/ofi/<compiler>/<version>``, whose ``../../../gtl/lib``
#: builtin cray-mpich's ``gtl_lib`` searches (its package.py says so).
SPACK_PREFIX = "/opt/cray/pe/mpich/8.1.30/ofi/gnu/9.1"


def spack_external(node: Node) -> Path:
    """The node's cray-mpich as a Spack external prefix (:data:`SPACK_PREFIX`), with
    what Spack reads there and the stand-in does not build: ``include/mpi.h``
    defining ``MPICH_VERSION`` (Cray MPICH 8 is MPICH 3.4a2 based: the value the
    tests have used) and ``lib/libmpi.so`` (a link to the stand-in libmpi).  GTL
    stays the manifest's 8.1.30 form, at the path ``gtl_lib`` finds."""
    prefix = node.at(SPACK_PREFIX)
    (prefix / "include").mkdir(parents=True, exist_ok=True)
    (prefix / "include" / "mpi.h").write_text('#define MPICH_VERSION "3.4a2"\n')
    lib = prefix / "lib" / "libmpi.so"
    lib.parent.mkdir(parents=True, exist_ok=True)
    if lib.is_symlink() or lib.exists():
        lib.unlink()
    lib.symlink_to(os.path.relpath(node.path("libmpi"), lib.parent))
    return prefix


def readelf(*args: str) -> str:
    """``readelf -W`` (binutils, not the builder): how the tests read the stand-ins back."""
    return subprocess.run(["readelf", "-W", *args], check=True, capture_output=True,
                          text=True).stdout


def assert_libraries_match_manifest(node: Node) -> None:
    """SONAME, NEEDED (in order) and RUNPATH of every library ``node`` has, read back
    with :func:`readelf`, are the manifest's; another node type's entries are skipped."""
    for key, entry in node.libraries.items():
        if not node.has(key):
            continue
        dyn = readelf("-d", str(node.path(key)))
        assert re.search(rf"soname: \[{re.escape(soname(entry))}\]", dyn), key
        needed = [n for n in re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", dyn)
                  if not n.startswith("libc.so")]
        assert needed == entry.get("needed", []), (key, needed)
        runpath = re.findall(r"\(RUNPATH\)\s+Library runpath: \[(.+?)\]", dyn)
        want = [":".join(str(node.at(d)) for d in entry.get("runpath", []))]
        assert runpath == (want if entry.get("runpath") else []), (key, runpath)
