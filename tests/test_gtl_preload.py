"""Cray GTL on a Cray EX node stand-in (tests/cray_ex.py): real ld.so, gcc-built libraries.

``libmpi_gtl_cuda.so`` calls the CUDA driver and runtime and, in some releases,
the C++ runtime, without NEEDing all of them (the recorded forms are in
tests/fixtures/cray_ex/manifest.yaml, with their sources).  The node stand-in
has Cray's libmpi with its real dependency closure, each GTL form, and the
CUDA driver (``gpu`` node) or none (``login`` node, which also hides a host
driver, so these tests mean the same on a GPU machine).  A stand-in libtorch
NEEDs ``libmpi.so.12`` and is loaded the way Python loads an extension
(``RTLD_NOW``, local).  docs/design.md, "GTL without a driver", draws the
conclusions.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import ROOT, cray_ex, gtl_preload

FORMS = ("8.1.21", "8.1.27", "8.1.30")


@pytest.fixture(scope="module")
def nodes(tmp_path_factory) -> dict[str, cray_ex.Node]:
    """A ``gpu`` and a ``login`` node, each with libtorch.so (plain) and
    libtorch-gtl-<form>.so (linked to GTL as py-torch once linked it)."""
    out = {}
    for kind in ("gpu", "login"):
        node = cray_ex.build(tmp_path_factory.mktemp(kind), kind)
        lib = node.root / gtl_preload.TORCH_DIR
        lib.mkdir(parents=True)
        gtl_preload.libtorch(node, lib, "libtorch.so")
        for form in FORMS:
            gtl = node.path(f"gtl-{form}").parent
            # py-torch's link before: cray_gtl_link_tokens = -L, -Wl,-rpath, --no-as-needed, -l.
            gtl_preload.libtorch(node, lib, f"libtorch-gtl-{form}.so", f"-L{gtl}",
                                 f"-Wl,-rpath,{gtl}", "-Wl,--no-as-needed", "-lmpi_gtl_cuda")
        out[kind] = node
    return out


def _recorded(node: cray_ex.Node) -> dict:
    """What the package records at install (``gtl_preload.build_needs``): this host's
    g++ runtime and the node's CUDA (the build's cuda prefix)."""
    cuda = node.path("libcudart").parent.parent
    return {"needs": tuple(gtl_preload.load().build_needs(shutil.which("g++"), str(cuda)))}


def _mpi4py(tmp: Path, libmpi4py: Path, gtl: Path | None, **record) -> Path:
    """A stand-in ``mpi4py``: ``from mpi4py import MPI`` loads an extension that
    NEEDs libmpi.so.12 and calls MPI_Init, as mpi4py does by default (``rc.initialize``)."""
    pkg = tmp / "site" / "mpi4py"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text('"""stand-in mpi4py"""\n')
    (pkg / "MPI.py").write_text(
        "import ctypes, sys\n"
        f"_C = ctypes.CDLL({str(libmpi4py)!r}, mode=sys.getdlopenflags())\n"
        "if _C.torch_mpi_init():\n    raise SystemExit('MPI_Init failed')\n")
    if gtl is not None:
        gtl_preload.load().add_to_package(str(pkg), "mpi4py", str(gtl), **record)
    return tmp / "site"


def test_a_login_node_hides_a_host_driver(nodes, tmp_path) -> None:
    """The login node has no libcuda.so.1 even where the host has one later on the
    search path (ld.so.cache, /usr/lib): a GPU test machine stays a login node here."""
    login = nodes["login"]
    host = nodes["gpu"].path("libcuda").parent  # a driver ld.so would find after the node's
    code = ("import ctypes, sys\ntry:\n    ctypes.CDLL('libcuda.so.1')\nexcept OSError as e:\n"
            "    sys.exit(str(e))\nprint('driver')\n")
    env = login.env()
    env["LD_LIBRARY_PATH"] += os.pathsep + str(host)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=False, timeout=60)
    assert proc.returncode != 0 and "driver" not in proc.stdout, proc.stdout
    assert "libcuda.so.1" in proc.stderr, proc.stderr
    gpu = subprocess.run([sys.executable, "-c", code], env=nodes["gpu"].env(), check=False,
                         capture_output=True, text=True, timeout=60)
    assert gpu.stdout.strip() == "driver", gpu.stderr


@pytest.mark.parametrize("form", FORMS)
def test_torch_that_needs_gtl_does_not_import_without_a_driver(nodes, tmp_path, form) -> None:
    """Why GTL is not linked any more: with it NEEDED, the import fails on a
    node without libcuda.so.1, whichever form the GTL has."""
    node = nodes["login"]
    site = gtl_preload.torch_package(
        tmp_path, node.root / gtl_preload.TORCH_DIR / f"libtorch-gtl-{form}.so", gtl=None)
    proc = gtl_preload.run(site, node, gpu_switch="0", modules=("cudatoolkit",))
    assert proc.returncode != 0 and "imported" not in proc.stdout
    assert ("libcuda.so.1" in proc.stderr) if form == "8.1.21" else (
        "libmpi_gtl_cuda.so.0: undefined symbol: cu" in proc.stderr), proc.stderr


@pytest.mark.parametrize("form", FORMS)
def test_without_a_driver_torch_imports_and_mpi_init_says_why(nodes, tmp_path, form) -> None:
    """Login/build node: the preload loads nothing, torch imports, MPI_Init runs
    with GPU support off and refuses it, as Cray MPICH does, when asked."""
    node = nodes["login"]
    site = gtl_preload.torch_package(tmp_path, gtl_preload.plain_libtorch(node),
                                     node.path(f"gtl-{form}"), **_recorded(node))
    off = gtl_preload.run(site, node, gpu_switch="0")
    assert off.returncode == 0 and "imported" in off.stdout, off.stderr
    on = gtl_preload.run(site, node, gpu_switch="1")
    assert "imported" in on.stdout and on.returncode == 1
    assert "GTL library is not linked" in on.stderr, on.stderr


def test_with_a_driver_mpi_init_finds_gtl(nodes, tmp_path) -> None:
    """GPU node, cudatoolkit loaded, the 8.1.30 GTL: the driver loads, so GTL is
    loaded globally before libmpi and MPI_Init with MPICH_GPU_SUPPORT_ENABLED=1
    finds it (a stand-in libmpi whose GTL reference is weak, bound when libmpi
    is loaded)."""
    node = nodes["gpu"]
    libtorch = gtl_preload.plain_libtorch(node)
    site = gtl_preload.torch_package(tmp_path, libtorch, node.path("gtl-8.1.30"))
    proc = gtl_preload.run(site, node, gpu_switch="1", modules=("cudatoolkit",))
    assert proc.returncode == 0 and "imported" in proc.stdout, proc.stderr
    # Without the preload, the same node fails: the test can tell the difference.
    plain = gtl_preload.run(gtl_preload.torch_package(tmp_path / "plain", libtorch, gtl=None),
                            node, gpu_switch="1", modules=("cudatoolkit",))
    assert plain.returncode == 1 and "GTL library is not linked" in plain.stderr


@pytest.mark.parametrize("form", FORMS)
def test_each_gtl_form_loads_on_a_gpu_node(nodes, tmp_path, form) -> None:
    """GPU node, no cudatoolkit module loaded: with what the build recorded (its
    libstdc++ and libcudart), every recorded GTL form loads before libmpi, so
    ``import torch`` works and MPI_Init with MPICH_GPU_SUPPORT_ENABLED=1 finds GTL
    (the old preload refused 8.1.21's form, "undefined symbol: _ZNSt13runtime_errorD1Ev")."""
    node = nodes["gpu"]
    site = gtl_preload.torch_package(tmp_path, gtl_preload.plain_libtorch(node),
                                     node.path(f"gtl-{form}"), **_recorded(node))
    proc = gtl_preload.run(site, node, gpu_switch="1")
    assert proc.returncode == 0 and "imported" in proc.stdout, proc.stderr


@pytest.mark.parametrize("form", FORMS)
def test_mpi4py_first_finds_gtl_on_a_gpu_node_and_imports_without_a_driver(
        nodes, tmp_path, form) -> None:
    """``from mpi4py import MPI`` (MPI_Init at import) with each GTL form: GTL found on
    a GPU node; on a driverless node the import works with GPU support off and
    MPI_Init says GTL is missing when it is asked for."""
    code = "from mpi4py import MPI\nprint('imported')\n"
    for kind, switch, ok in (("gpu", "1", True), ("login", "0", True), ("login", "1", False)):
        node = nodes[kind]
        site = _mpi4py(tmp_path / kind / switch, gtl_preload.plain_libtorch(node),
                                        node.path(f"gtl-{form}"), **_recorded(node))
        proc = gtl_preload.run(site, node, gpu_switch=switch, code=code)
        if ok:
            assert proc.returncode == 0 and "imported" in proc.stdout, (kind, proc.stderr)
        else:
            assert "GTL library is not linked" in proc.stderr, proc.stderr


@pytest.mark.parametrize("form", FORMS)
def test_gtl_that_cannot_load_names_the_symbol_and_its_library(nodes, tmp_path, form) -> None:
    """The recorded runtime removed since the build: the import error names the
    undefined symbol and the library that provides it (cudatoolkit loaded, so
    8.1.21's NEEDED cudart is found), or the NEEDED library not found (8.1.30
    without the module), and does not blame a missing cray-mpich."""
    node = nodes["gpu"]
    site = gtl_preload.torch_package(tmp_path, gtl_preload.plain_libtorch(node),
                                     node.path(f"gtl-{form}"), needs=("/gone/libstdc++.so.6",))
    modules = () if form == "8.1.30" else ("cudatoolkit",)
    proc = gtl_preload.run(site, node, gpu_switch="1", modules=modules)
    assert proc.returncode != 0 and "imported" not in proc.stdout
    assert "/gone/libstdc++.so.6 did not load" in proc.stderr
    assert "still installed" not in proc.stderr
    if form == "8.1.30":
        assert "GTL NEEDs libcudart.so.12, which is not on this node's library path" in (
            proc.stderr), proc.stderr
        return
    said = re.search(r"GTL calls (\S+), which (.+?) provides", proc.stderr)
    assert said, proc.stderr
    symbol, library = said.groups()
    want = {"_Z": "libstdc++", "__gxx": "libstdc++", "cuda": "libcudart", "cu": "libcuda.so.1"}
    assert library.startswith(next(v for k, v in want.items() if symbol.startswith(k))), said


def test_build_needs_records_the_runtimes(nodes) -> None:
    """At install, the C++ runtime of the build's compiler and the CUDA's
    libcudart.so.<major> (not a link or a full version); the rendered module keeps them."""
    node = nodes["gpu"]
    needs = _recorded(node)["needs"]
    assert len(needs) == 2 and Path(needs[0]).name == "libstdc++.so.6", needs
    assert Path(needs[0]).is_file() and needs[1] == str(node.path("libcudart")), needs
    text = gtl_preload.load().render("/x/libmpi_gtl_cuda.so", needs)
    assert f"\nNEEDS: tuple = {needs!r}\n" in text


def test_a_runtime_already_loaded_is_not_loaded_twice(nodes, tmp_path) -> None:
    """Another extension brought its own libcudart.so.12 first: the preload makes that
    one global instead of mapping the recorded one beside it, and GTL binds to it."""
    node = nodes["gpu"]
    other = tmp_path / "other" / "libcudart.so.12"
    other.parent.mkdir()
    other.write_bytes(node.path("libcudart").read_bytes())
    proc = gtl_preload.run_preload(
        node,
        f"m.preload({str(node.path('gtl-8.1.27'))!r}, needs={_recorded(node)['needs']!r})\n"
        "maps = {l.split()[-1] for l in open('/proc/self/maps') if 'libcudart' in l}\n"
        "print(sorted(maps))\n",
        # local, as an extension's dependency would be
        before=f"import ctypes\nctypes.CDLL({str(other)!r})\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str([str(other)]), proc.stdout


def test_a_driver_without_gtl_is_an_import_error(nodes, tmp_path) -> None:
    """GPU node whose GTL went away (cray-mpich removed): a clear import error
    naming the file, not an MPI_Init abort later."""
    node = nodes["gpu"]
    site = gtl_preload.torch_package(tmp_path, gtl_preload.plain_libtorch(node),
                                     tmp_path / "gone" / "libgtl.so")
    proc = gtl_preload.run(site, node, gpu_switch="1")
    assert proc.returncode != 0 and "does not load" in proc.stderr, proc.stderr
    assert str(tmp_path / "gone" / "libgtl.so") in proc.stderr


def test_preload_import_goes_after_docstring_and_future(tmp_path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text('"""doc"""\nfrom __future__ import annotations\nX = 1\n')
    mod = gtl_preload.load()
    mod.add_to_package(str(pkg), "pkg", "/x/libmpi_gtl_cuda.so")
    mod.add_to_package(str(pkg), "pkg", "/x/libmpi_gtl_cuda.so")  # idempotent
    lines = (pkg / "__init__.py").read_text().splitlines()
    assert lines[2].startswith("from pkg import _torchmpi_gtl") and lines[3] == "X = 1", lines
    assert "GTL = '/x/libmpi_gtl_cuda.so'" in (pkg / "_torchmpi_gtl.py").read_text()


def test_preload_reaches_the_build_as_a_patch(tmp_path) -> None:
    """Spack's package hash covers package.py and its patch files, not the modules it
    imports: the preload reaches py-torch and py-mpi4py as a patch that creates it in
    the stage (``py_torch/as_patch.py`` writes it from gtl_preload.py), so ``spack
    spec`` shows it (``patches=``) and a change to it is a new build of each.  Each
    package's copy must be this module exactly, applied as Spack applies patches
    (``patch -p1``), with its sha256 in that package.py (the stale patch index), and
    no hand-kept digest of the module itself remains."""
    as_patch = gtl_preload.as_patch()
    gtl = as_patch.GTL_PRELOAD
    for package in gtl.packages:
        package_dir = gtl_preload.PACKAGES / package
        patch_file = package_dir / gtl.patch
        assert patch_file.is_file() and patch_file.read_text() == as_patch.expected(gtl), (
            f"gtl_preload.py changed: run python {gtl_preload.AS_PATCH.relative_to(ROOT)}")
        recorded = gtl.sha_line.search((package_dir / "package.py").read_text())
        assert recorded and recorded.group(2) == as_patch.sha256(gtl) == hashlib.sha256(
            patch_file.read_bytes()).hexdigest(), (
            f"{package}/package.py: run python {gtl_preload.AS_PATCH.relative_to(ROOT)}")
        stage = tmp_path / package
        stage.mkdir()
        subprocess.run(["patch", "-s", "-p1", "-i", str(patch_file)], cwd=stage, check=True)
        assert (stage / gtl.staged).read_bytes() == gtl_preload.PATH.read_bytes()
    torch_package = (gtl_preload.PACKAGES / "py_torch" / "package.py").read_text()
    assert "GTL_PRELOAD_SHA256" not in torch_package and "_check_digest" not in torch_package
