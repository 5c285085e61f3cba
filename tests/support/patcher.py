"""torchmpi's patcher of PyTorch's MPI backend, loaded from its file.

``spack_repo/torchmpi/packages/py_torch/cuda_aware_mpi.py`` is plain Python,
but it sits in a Spack package directory whose ``package.py`` imports Spack:
it is loaded by path, not imported as ``spack_repo...``, so that tests run it
without Spack.  One loader for every test file that needs it.
"""

from __future__ import annotations

import importlib.util
from types import ModuleType

from support import ROOT

#: The patcher ``py-torch``'s ``patch()`` runs.
PATH = ROOT / "spack_repo" / "torchmpi" / "packages" / "py_torch" / "cuda_aware_mpi.py"


def load() -> ModuleType:
    """The patcher module, freshly executed from :data:`PATH`."""
    spec = importlib.util.spec_from_file_location("torchmpi_cuda_aware_mpi", PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
