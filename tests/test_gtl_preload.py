"""Cray GTL without a CUDA driver: stand-ins built here with gcc, real ld.so.

``libmpi_gtl_cuda.so`` calls the CUDA driver API; depending on the release it
NEEDs ``libcuda.so.1`` (CSCS patches that in: eth-cscs/stackinator#158) or
leaves the ``cu*`` symbols undefined (cray-mpich 8.1.27 and 8.1.30:
eth-cscs/stackinator#158, spectral-compute/scale-validation#66).  Both forms
are built here, with a stub driver that is then absent ("login node") or
present ("GPU node"), a stand-in libmpi whose ``MPI_Init`` aborts like Cray
MPICH when ``MPICH_GPU_SUPPORT_ENABLED=1`` and no GTL symbol is in scope, and
a stand-in libtorch loaded the way Python loads an extension (``RTLD_NOW``,
local).  docs/design.md, "GTL without a driver", draws the conclusions.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

PRELOAD_FILE = ROOT / "spack_repo/torchmpi/packages/py_torch/gtl_preload.py"


def _module():
    spec = importlib.util.spec_from_file_location("gtl_preload", PRELOAD_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cc(*args: str) -> None:
    cc = shutil.which("gcc") or shutil.which("cc")
    if not cc:
        pytest.fail("no C compiler for the stand-in libraries (apt install gcc)")
    subprocess.run([cc, *args], check=True)


@pytest.fixture(scope="module")
def libs(tmp_path_factory) -> dict[str, Path]:
    """driver/libcuda.so.1, gtl-needs/ (NEEDs libcuda.so.1), gtl-undef/ (cu* undefined),
    mpi/libmpi.so, and libtorch linked as py-torch linked it (NEEDED GTL) or not."""
    d = tmp_path_factory.mktemp("gtl")
    src = d / "src"
    src.mkdir()
    (src / "cuda.c").write_text("int cuCtxEnablePeerAccess(void *c, unsigned f) { return 0; }\n")
    (src / "gtl.c").write_text(
        "extern int cuCtxEnablePeerAccess(void *, unsigned);\n"
        "int mpi_gtl_cuda_stub(void) { return cuCtxEnablePeerAccess(0, 0); }\n")
    (src / "mpi.c").write_text(
        "#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n"
        "extern int mpi_gtl_cuda_stub(void) __attribute__((weak));\n"
        "int MPI_Init(void) {\n"
        "  const char *on = getenv(\"MPICH_GPU_SUPPORT_ENABLED\");\n"
        "  if (on && strcmp(on, \"1\") == 0 && !mpi_gtl_cuda_stub) {\n"
        "    fprintf(stderr, \"GPU_SUPPORT_ENABLED is requested, but GTL library is not "
        "linked\\n\");\n    return 1;\n  }\n  return 0;\n}\n")
    (src / "torch.c").write_text(
        "extern int MPI_Init(void);\nint torch_mpi_init(void) { return MPI_Init(); }\n")
    out = {name: d / name for name in ("driver", "gtl-needs", "gtl-undef", "mpi", "torch")}
    for path in out.values():
        path.mkdir()
    _cc("-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(out["driver"] / "libcuda.so.1"),
        str(src / "cuda.c"))
    gtl = "libmpi_gtl_cuda.so"
    _cc("-shared", "-fPIC", f"-Wl,-soname,{gtl}", "-o", str(out["gtl-needs"] / gtl),
        str(src / "gtl.c"), f"-L{out['driver']}", "-l:libcuda.so.1")
    _cc("-shared", "-fPIC", f"-Wl,-soname,{gtl}", "-o", str(out["gtl-undef"] / gtl),
        str(src / "gtl.c"))
    _cc("-shared", "-fPIC", "-Wl,-soname,libmpi.so", "-o", str(out["mpi"] / "libmpi.so"),
        str(src / "mpi.c"))
    mpi = [f"-L{out['mpi']}", f"-Wl,-rpath,{out['mpi']}", "-lmpi"]
    for kind in ("needs", "undef"):
        g = out[f"gtl-{kind}"]
        # py-torch's link before: cray_gtl_link_tokens = -L, -Wl,-rpath, --no-as-needed, -l.
        _cc("-shared", "-fPIC", "-o", str(out["torch"] / f"libtorch-gtl-{kind}.so"),
            str(src / "torch.c"), f"-L{g}", f"-Wl,-rpath,{g}", "-Wl,--no-as-needed",
            "-lmpi_gtl_cuda", *mpi)
    _cc("-shared", "-fPIC", "-o", str(out["torch"] / "libtorch.so"), str(src / "torch.c"), *mpi)
    # The stub driver was needed to link; a login node has none on its search path.
    return out


def _package(tmp: Path, libtorch: Path, gtl: Path | None) -> Path:
    """A stand-in ``torch`` package whose __init__ loads ``libtorch`` as an extension
    would; with ``gtl``, installed the way the package installs the preload."""
    pkg = tmp / "site" / "torch"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        '"""stand-in torch"""\nfrom __future__ import annotations\n\nimport ctypes, os, sys\n'
        f"_C = ctypes.CDLL({str(libtorch)!r}, mode=sys.getdlopenflags())\n"
        "def init():\n    return _C.torch_mpi_init()\n")
    if gtl is not None:
        _module().add_to_package(str(pkg), "torch", str(gtl))
    return tmp / "site"


def _run(site: Path, driver: Path | None, gpu_switch: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}
    env.update(PYTHONPATH=str(site), MPICH_GPU_SUPPORT_ENABLED=gpu_switch)
    if driver is not None:
        env["LD_LIBRARY_PATH"] = str(driver)
    code = "import sys, torch\nprint('imported')\nsys.exit(torch.init())\n"
    return subprocess.run([sys.executable, "-c", code], check=False, env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("form", ["needs", "undef"])
def test_torch_that_needs_gtl_does_not_import_without_a_driver(libs, tmp_path, form) -> None:
    """Why GTL is not linked any more: with it NEEDED, the import fails on a
    node without libcuda.so.1, whichever form the GTL has."""
    site = _package(tmp_path, libs["torch"] / f"libtorch-gtl-{form}.so", gtl=None)
    proc = _run(site, driver=None, gpu_switch="0")
    assert proc.returncode != 0 and "imported" not in proc.stdout
    assert ("libcuda.so.1" in proc.stderr) if form == "needs" else (
        "undefined symbol: cuCtxEnablePeerAccess" in proc.stderr), proc.stderr


@pytest.mark.parametrize("form", ["needs", "undef"])
def test_without_a_driver_torch_imports_and_mpi_init_says_why(libs, tmp_path, form) -> None:
    """Login/build node: the preload loads nothing, torch imports, MPI_Init runs
    with GPU support off and refuses it, as Cray MPICH does, when asked."""
    site = _package(tmp_path, libs["torch"] / "libtorch.so", libs[f"gtl-{form}"] /
                    "libmpi_gtl_cuda.so")
    off = _run(site, driver=None, gpu_switch="0")
    assert off.returncode == 0 and "imported" in off.stdout, off.stderr
    on = _run(site, driver=None, gpu_switch="1")
    assert "imported" in on.stdout and on.returncode == 1
    assert "GTL library is not linked" in on.stderr, on.stderr


@pytest.mark.parametrize("form", ["needs", "undef"])
def test_with_a_driver_mpi_init_finds_gtl(libs, tmp_path, form) -> None:
    """GPU node: the driver loads, so GTL is loaded globally before libmpi and
    MPI_Init with MPICH_GPU_SUPPORT_ENABLED=1 finds it (a stand-in libmpi whose
    GTL reference is weak, bound when libmpi is loaded)."""
    site = _package(tmp_path, libs["torch"] / "libtorch.so", libs[f"gtl-{form}"] /
                    "libmpi_gtl_cuda.so")
    proc = _run(site, driver=libs["driver"], gpu_switch="1")
    assert proc.returncode == 0 and "imported" in proc.stdout, proc.stderr
    # Without the preload, the same node fails: the test can tell the difference.
    plain = _run(_package(tmp_path / "plain", libs["torch"] / "libtorch.so", gtl=None),
                 driver=libs["driver"], gpu_switch="1")
    assert plain.returncode == 1 and "GTL library is not linked" in plain.stderr


def test_a_driver_without_gtl_is_an_import_error(libs, tmp_path) -> None:
    """GPU node whose GTL went away (cray-mpich removed): a clear import error
    naming the file, not an MPI_Init abort later."""
    site = _package(tmp_path, libs["torch"] / "libtorch.so", tmp_path / "gone" / "libgtl.so")
    proc = _run(site, driver=libs["driver"], gpu_switch="1")
    assert proc.returncode != 0 and "does not load" in proc.stderr, proc.stderr
    assert str(tmp_path / "gone" / "libgtl.so") in proc.stderr


def test_preload_import_goes_after_docstring_and_future(tmp_path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text('"""doc"""\nfrom __future__ import annotations\nX = 1\n')
    mod = _module()
    mod.add_to_package(str(pkg), "pkg", "/x/libmpi_gtl_cuda.so")
    mod.add_to_package(str(pkg), "pkg", "/x/libmpi_gtl_cuda.so")  # idempotent
    lines = (pkg / "__init__.py").read_text().splitlines()
    assert lines[2].startswith("from pkg import _torchmpi_gtl") and lines[3] == "X = 1", lines
    assert "GTL = '/x/libmpi_gtl_cuda.so'" in (pkg / "_torchmpi_gtl.py").read_text()


def test_preload_digest_is_recorded_in_the_package() -> None:
    """Spack's package hash covers package.py only: the preload's sha256 is
    written there, so a change to it is a new py-torch (and py-mpi4py) build."""
    import hashlib
    import re

    package = (ROOT / "spack_repo/torchmpi/packages/py_torch/package.py").read_text()
    recorded = re.search(r'^GTL_PRELOAD_SHA256 = "([0-9a-f]{64})"$', package, re.MULTILINE)
    assert recorded, "GTL_PRELOAD_SHA256 missing from py_torch/package.py"
    assert recorded.group(1) == hashlib.sha256(PRELOAD_FILE.read_bytes()).hexdigest(), (
        "gtl_preload.py changed: update GTL_PRELOAD_SHA256 in py_torch/package.py")
