"""py-torch's GTL preload on the Cray EX node stand-in: the loader and the stand-ins.

``spack_repo/torchmpi/packages/py_torch/gtl_preload.py`` sits in a Spack
package directory whose ``package.py`` imports Spack, so it is loaded by path.
The GTL tests for CUDA (tests/test_gtl_preload.py) and for HSA
(tests/test_gtl_hsa.py) install it into the same stand-in ``torch`` and import
that the same way; one copy of each here, so both vendors are tested through
the same package and the same import.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from support import ROOT, cray_ex

#: torchmpi's Spack package directories.
PACKAGES = ROOT / "spack_repo" / "torchmpi" / "packages"

#: The preload py-torch installs into its package.
PATH = PACKAGES / "py_torch" / "gtl_preload.py"

#: What writes the preload (and the patcher) as the patch files Spack applies.
AS_PATCH = PACKAGES / "py_torch" / "as_patch.py"

#: Where :func:`libtorch` puts the plain libtorch stand-in under a node's root.
TORCH_DIR = Path("torchmpi-test") / "torch"

#: What the stand-in ``torch``'s import runs: the import, then MPI_Init.
IMPORT_AND_INIT = "import sys, torch\nprint('imported')\nsys.exit(torch.init())\n"


def load() -> ModuleType:
    """The preload module, freshly executed from :data:`PATH`."""
    spec = importlib.util.spec_from_file_location("torchmpi_gtl_preload", PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def as_patch() -> ModuleType:
    """``py_torch/as_patch.py``, loaded by path as :func:`load` loads the preload."""
    spec = importlib.util.spec_from_file_location("torchmpi_as_patch", AS_PATCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def libtorch(node: cray_ex.Node, out: Path, name: str, *link: str) -> Path:
    """A libtorch stand-in that NEEDs (``link``, then) the node's libmpi.so.12, with
    RUNPATHs to them as Spack links (``shared_linking: runpath``)."""
    src = out / "torch.c"
    src.write_text("extern int MPI_Init(void *, void *);\n"
                   "int torch_mpi_init(void) { return MPI_Init(0, 0); }\n")
    mpi = node.path("libmpi").parent
    cray_ex._cc("-shared", "-fPIC", "-o", str(out / name), str(src), *link,
                f"-L{mpi}", f"-Wl,--enable-new-dtags,-rpath,{mpi}", "-l:libmpi.so.12")
    return out / name


def plain_libtorch(node: cray_ex.Node) -> Path:
    """The node's plain ``libtorch.so`` stand-in (built by :func:`libtorch`)."""
    return node.root / TORCH_DIR / "libtorch.so"


def torch_package(tmp: Path, lib: Path, gtl: Path | None, **record) -> Path:
    """A stand-in ``torch`` package whose __init__ loads ``lib`` as an extension
    would; with ``gtl``, the preload installed the way the package installs it.
    The __init__ has a docstring and a ``__future__`` import, as torch's has, so
    the preload's import must go after both.  Returns the site directory."""
    pkg = tmp / "site" / "torch"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        '"""stand-in torch"""\nfrom __future__ import annotations\n\nimport ctypes, os, sys\n'
        f"_C = ctypes.CDLL({str(lib)!r}, mode=sys.getdlopenflags())\n"
        "def init():\n    return _C.torch_mpi_init()\n")
    if gtl is not None:
        load().add_to_package(str(pkg), "torch", str(gtl), **record)
    return tmp / "site"


def run(site: Path, node: cray_ex.Node, gpu_switch: str, modules: tuple[str, ...] = (),
        code: str = IMPORT_AND_INIT) -> subprocess.CompletedProcess:
    """``code`` run by Python with ``site`` on its path, on ``node`` with ``modules``
    loaded and ``MPICH_GPU_SUPPORT_ENABLED=gpu_switch``."""
    env = node.env(modules=modules, PYTHONPATH=str(site), MPICH_GPU_SUPPORT_ENABLED=gpu_switch)
    return subprocess.run([sys.executable, "-c", code], check=False, env=env,
                          capture_output=True, text=True, timeout=60)


def run_preload(node: cray_ex.Node, body: str, before: str = "") -> subprocess.CompletedProcess:
    """Python on ``node`` (no module loaded): ``before`` (say, another extension's
    library loaded first), then this preload module as ``m``, then ``body``, which calls
    ``m.preload`` as the installed ``_torchmpi_gtl`` would; ``sys`` is imported."""
    code = ("import importlib.util, sys\n" + before
            + f"spec = importlib.util.spec_from_file_location('p', {str(PATH)!r})\n"
            "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n" + body)
    return subprocess.run([sys.executable, "-c", code], env=node.env(), check=False,
                          capture_output=True, text=True, timeout=60)
