"""Cray GTL for HSA (AMD GPUs) on a Cray EX node stand-in: real ld.so, gcc-built libraries.

``py-torch +rocm +cuda_aware_mpi`` on ``cray-mpich +rocm`` loads
``libmpi_gtl_hsa`` at import with the same preload as ``libmpi_gtl_cuda``
(spack_repo/torchmpi/packages/py_torch/gtl_preload.py), chosen by the vendor
the build recorded.  The node stand-in (tests/fixtures/cray_ex/manifest.yaml,
every fact cited there) has the three recorded GTL forms -- HSA symbols left
undefined (8.1.4), ROCm dlopened (8.1.23), ``libamdhip64.so.6`` NEEDED
(8.1.31) -- and ROCm's HSA and HIP runtimes as separate libraries, present on
the ``amd-gpu`` node only.  A stand-in libtorch NEEDs ``libmpi.so.12`` and is
loaded the way Python loads an extension (``RTLD_NOW``, local).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import cray_ex, gtl_preload

FORMS = ("8.1.4", "8.1.23", "8.1.31")


@pytest.fixture(scope="module")
def nodes(tmp_path_factory) -> dict[str, cray_ex.Node]:
    """An ``amd-gpu``, an NVIDIA ``gpu`` and a ``login`` node, each with a libtorch.so
    stand-in that NEEDs the node's libmpi.so.12 (RUNPATH to it, as Spack links)."""
    out = {}
    for kind in ("amd-gpu", "gpu", "login"):
        node = cray_ex.build(tmp_path_factory.mktemp(kind), kind)
        lib = node.root / gtl_preload.TORCH_DIR
        lib.mkdir(parents=True)
        gtl_preload.libtorch(node, lib, "libtorch.so")
        out[kind] = node
    return out


def _package(tmp: Path, node: cray_ex.Node, gtl: Path | None, **record) -> Path:
    """The stand-in ``torch`` over the node's libtorch; with ``gtl``, the preload
    installed as the py-torch package installs it."""
    return gtl_preload.torch_package(tmp, gtl_preload.plain_libtorch(node), gtl, **record)


def _recorded(node: cray_ex.Node) -> dict:
    """What the package records at install for +rocm: the vendor of the GTL and
    ``build_needs`` over the build's hsa-rocr-dev and hip prefixes (here the node's
    ROCm, /opt/rocm-6.2.0, one prefix for both)."""
    rocm = str(node.at("/opt/rocm-6.2.0"))
    return {"vendor": "hsa",
            "needs": tuple(gtl_preload.load().build_needs(shutil.which("g++"), None, (rocm,)))}


def test_hsa_forms_and_rocm_runtimes_are_what_the_record_shows(nodes) -> None:
    """readelf (not the builder) reads the stand-ins back: 8.1.4 leaves an HSA symbol
    undefined and NEEDs no ROCm library, 8.1.23 neither, 8.1.31 NEEDs
    libamdhip64.so.6; HIP calls the HSA runtime through its ROCR_1 version node."""
    node = nodes["amd-gpu"]

    def needed(key: str) -> list[str]:
        return [n for n in re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]",
                                      cray_ex.readelf("-d", str(node.path(key))))
                if not n.startswith("libc.so")]

    undefined = set(re.findall(r"UND (\S+)$", cray_ex.readelf("--dyn-syms", str(
        node.path("gtl-hsa-8.1.4"))), re.MULTILINE))
    assert "hsa_amd_memory_pool_allocate" in undefined and needed("gtl-hsa-8.1.4") == []
    assert needed("gtl-hsa-8.1.23") == [] and not [
        s for s in re.findall(r"UND (\S+)$", cray_ex.readelf("--dyn-syms", str(
            node.path("gtl-hsa-8.1.23"))), re.MULTILINE) if s.startswith(("hsa", "hip"))]
    assert needed("gtl-hsa-8.1.31") == ["libamdhip64.so.6"]
    assert needed("libamdhip64") == ["libhsa-runtime64.so.1"]
    assert "hsa_amd_vmem_address_reserve@ROCR_1" in cray_ex.readelf("--dyn-syms", str(
        node.path("libamdhip64")))


def test_amd_node_libraries_match_the_manifest(nodes) -> None:
    """SONAME, NEEDED (in order) and RUNPATH of every library the AMD node has."""
    cray_ex.assert_libraries_match_manifest(nodes["amd-gpu"])


@pytest.mark.parametrize(("kind", "other", "soname"), [
    ("amd-gpu", "gpu", "libcuda.so.1"), ("gpu", "amd-gpu", "libhsa-runtime64.so.1"),
    ("login", "amd-gpu", "libamdhip64.so.6")])
def test_a_node_hides_the_hosts_gpu_runtimes_it_lacks(nodes, kind, other, soname) -> None:
    """A runtime ld.so would find after the node's search path (the host's, on a GPU
    test machine: here another node's) is not found: an AMD node has no CUDA driver,
    an NVIDIA or login node no ROCm, whatever the host has."""
    host = nodes[other].path({"libcuda.so.1": "libcuda", "libhsa-runtime64.so.1":
                              "libhsa-runtime64", "libamdhip64.so.6": "libamdhip64"}[soname])
    env = nodes[kind].env()
    env["LD_LIBRARY_PATH"] += ":" + str(host.parent)
    code = f"import ctypes\nctypes.CDLL({soname!r})\nprint('found')\n"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, check=False, timeout=60)
    assert proc.returncode != 0 and "found" not in proc.stdout, proc.stdout
    assert soname in proc.stderr, proc.stderr


def test_rocm_is_on_amd_gpu_nodes_only(nodes) -> None:
    amd, gpu, login = nodes["amd-gpu"], nodes["gpu"], nodes["login"]
    assert amd.has("libhsa-runtime64") and amd.has("libamdhip64") and not amd.has("libcuda")
    for other in (gpu, login):
        assert not other.has("libhsa-runtime64") and not other.has("libamdhip64")


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("modules", [("rocm",), ()], ids=["rocm-module", "no-module"])
def test_each_hsa_form_loads_on_an_amd_gpu_node(nodes, tmp_path, form, modules) -> None:
    """AMD GPU node, with or without the rocm module loaded: the preload loads the HSA
    runtime (by soname, else at the recorded path), HIP, then GTL, before libmpi, so
    ``import torch`` works and MPI_Init with MPICH_GPU_SUPPORT_ENABLED=1 finds GTL."""
    node = nodes["amd-gpu"]
    site = _package(tmp_path, node, node.path(f"gtl-hsa-{form}"), **_recorded(node))
    proc = gtl_preload.run(site, node, "1", modules)
    assert proc.returncode == 0 and "imported" in proc.stdout, proc.stderr
    plain = gtl_preload.run(_package(tmp_path / "plain", node, None), node, "1", modules)
    assert plain.returncode == 1 and "GTL library is not linked" in plain.stderr


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("kind", ["login", "gpu"])
def test_without_rocm_torch_imports_and_mpi_init_says_why(nodes, tmp_path, form, kind) -> None:
    """A node without ROCm (login/build node, or an NVIDIA node): the HSA preload loads
    nothing, torch imports, MPI_Init runs with GPU support off and refuses it when asked.
    The recorded ROCm paths point into the AMD node's tree, absent here."""
    node = nodes[kind]
    site = _package(tmp_path, node, node.at(f"/opt/cray/pe/mpich/{form}/gtl/lib/"
                                            "libmpi_gtl_hsa.so.0"), **_recorded(node))
    off = gtl_preload.run(site, node, "0")
    assert off.returncode == 0 and "imported" in off.stdout, off.stderr
    on = gtl_preload.run(site, node, "1")
    assert "imported" in on.stdout and on.returncode == 1
    assert "GTL library is not linked" in on.stderr, on.stderr


def test_the_preload_follows_the_recorded_vendor(nodes, tmp_path) -> None:
    """The vendor decides which driver gates the load: an HSA GTL recorded as ``cuda``
    is never loaded on an AMD node (no libcuda.so.1), so MPI_Init refuses GPU support;
    recorded as ``hsa`` it is loaded and MPI_Init finds it."""
    node = nodes["amd-gpu"]
    gtl = node.path("gtl-hsa-8.1.31")
    record = _recorded(node)
    wrong = gtl_preload.run(_package(tmp_path / "cuda", node, gtl, needs=record["needs"],
                                     vendor="cuda"), node, "1")
    assert wrong.returncode == 1 and "GTL library is not linked" in wrong.stderr, wrong.stderr
    right = gtl_preload.run(_package(tmp_path / "hsa", node, gtl, **record), node, "1")
    assert right.returncode == 0, right.stderr


def test_a_gtl_that_cannot_load_names_the_library(nodes, tmp_path) -> None:
    """The build's HIP runtime removed since the install and no rocm module: the HSA
    runtime loads (recorded path) but 8.1.31's GTL NEEDs libamdhip64.so.6: the import
    error names it, and the recorded library that did not load, not a missing cray-mpich."""
    node = nodes["amd-gpu"]
    hsa = str(node.path("libhsa-runtime64"))
    site = _package(tmp_path, node, node.path("gtl-hsa-8.1.31"), vendor="hsa",
                    needs=(hsa, "/gone/libamdhip64.so.6"))
    proc = gtl_preload.run(site, node, "1")
    assert proc.returncode != 0 and "imported" not in proc.stdout
    assert "the ROCm (HSA) runtime is here but Cray's GTL" in proc.stderr, proc.stderr
    assert ("GTL NEEDs libamdhip64.so.6, which is not on this node's library path"
            in proc.stderr), proc.stderr
    assert "/gone/libamdhip64.so.6 did not load" in proc.stderr
    assert "still installed" not in proc.stderr


def test_an_undefined_hsa_symbol_is_named_with_its_library(nodes) -> None:
    """8.1.4's form with a driver that is not the HSA runtime (``driver=``, the
    preload's explicit override): ld.so's own "undefined symbol" message becomes the
    symbol and the library that provides it."""
    node = nodes["amd-gpu"]
    proc = gtl_preload.run_preload(node, (
        "try:\n"
        f"    m.preload({str(node.path('gtl-hsa-8.1.4'))!r}, driver='libc.so.6', needs=(),"
        " vendor='hsa')\n"
        "except ImportError as e:\n    sys.exit(str(e))\n"))
    assert proc.returncode == 1, proc.stderr
    assert ("GTL calls hsa_amd_memory_pool_allocate, which libhsa-runtime64.so.1 (ROCm's HSA "
            "runtime) provides") in proc.stderr, proc.stderr


def test_build_needs_records_the_hsa_and_hip_runtimes(nodes) -> None:
    """At install for +rocm: the C++ runtime, then the HSA runtime, then HIP (the order
    the preload loads them: HIP NEEDs HSA), each its soname file; render keeps them
    and the vendor."""
    node = nodes["amd-gpu"]
    record = _recorded(node)
    needs = record["needs"]
    assert [Path(n).name for n in needs] == [
        "libstdc++.so.6", "libhsa-runtime64.so.1", "libamdhip64.so.6"], needs
    assert needs[1:] == (str(node.path("libhsa-runtime64")), str(node.path("libamdhip64")))
    text = gtl_preload.load().render("/x/libmpi_gtl_hsa.so", needs, "hsa")
    assert f"\nNEEDS: tuple = {needs!r}\n" in text and "\nVENDOR = 'hsa'\n" in text


def test_the_vendor_is_read_from_the_gtl_the_build_linked() -> None:
    """``vendor_of`` is what the package records: cray-mpich's gtl_lib gives
    libmpi_gtl_cuda for +cuda and libmpi_gtl_hsa for +rocm; anything else is refused
    (the install stops) rather than recorded as one of them."""
    module = gtl_preload.load()
    assert module.vendor_of("/opt/cray/pe/mpich/8.1.31/gtl/lib/libmpi_gtl_hsa.so") == "hsa"
    assert module.vendor_of("/opt/cray/pe/mpich/8.1.30/gtl/lib/libmpi_gtl_cuda.so.0") == "cuda"
    for bad in ("/x/libmpi_gtl_ze.so", "/x/libmpi.so.12"):
        with pytest.raises(ValueError, match="not a Cray GTL library"):
            module.vendor_of(bad)
    with pytest.raises(ValueError, match="GTL vendor 'ze'"):
        module.render("/x/libmpi_gtl_ze.so", (), "ze")
