"""The two CUDA-awareness questions of a site, answered once on its data.

* :func:`torch_variant`: the root is ``py-torch +cuda_aware_mpi``, so PyTorch's
  MPI backend takes CUDA tensors -- a GPU site, unless ``mpi.cuda_aware: false``;
* :func:`mpi_moves_device_buffers`: the MPI itself moves CUDA buffers (mpi4py's,
  or torch's where the variant is on).

They differ: ``openmpi-cuda`` and a centre's MPI declared ``+cuda`` move device
buffers even under ``~cuda_aware_mpi``.  Both read site data after the schema's
defaults are filled in (``mpi.cuda_aware`` is true by default), so the load-time
checks (:mod:`torchmpi.checks`), which run before a ``Site`` exists, and
``Site.torch_cuda_aware`` / ``Site.mpi_moves_device_buffers`` ask the same
functions.  Imports nothing of torchmpi: it sits below the checks, the package
readers (:mod:`torchmpi.torches`) and the site, so none of them reaches up.
"""

from __future__ import annotations

from typing import Any


def _gpu(data: dict[str, Any]) -> bool:
    return isinstance(data.get("gpu"), dict)


def torch_variant(data: dict[str, Any]) -> bool:
    """Whether the site's py-torch is ``+cuda_aware_mpi``."""
    return _gpu(data) and bool(data["mpi"]["cuda_aware"])


def mpi_moves_device_buffers(data: dict[str, Any]) -> bool:
    """Whether the site's MPI moves CUDA buffers.

    A Spack-built Open MPI is solved ``+cuda`` only because ``+cuda_aware_mpi``
    asks for it (py-torch's conflicts); Cray MPICH moves them only with GTL,
    which the tool loads exactly for ``+cuda_aware_mpi``.
    """
    if not _gpu(data):
        return False
    mpi = data["mpi"]
    declared = "+cuda" in str(mpi.get("variants") or "").split()
    return mpi["kind"] == "openmpi-cuda" or declared or torch_variant(data)
