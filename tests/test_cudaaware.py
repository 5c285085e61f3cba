"""torchmpi.cudaaware: the two CUDA-awareness questions, answered once on site data.

The torch variant (``+cuda_aware_mpi``) and "the MPI moves device buffers" are
different questions (plain Open MPI on a GPU site with ``mpi.cuda_aware: false``
is ``~cuda_aware_mpi``, and yet ``openmpi-cuda`` moves device buffers); the
load-time checks, which run before a ``Site`` exists, and ``Site`` ask the same
functions, so they cannot drift apart.
"""

from __future__ import annotations

import pytest
from support.sites import site_data
from torchmpi import cudaaware, paths
from torchmpi import site as sitemod
from torchmpi.checks.schema import fill_defaults


def _data(gpu: bool, kind: str = "openmpi", cuda_aware: bool = True,
          variants: str | None = None) -> dict:
    mpi = {"kind": kind, "cuda_aware": cuda_aware}
    if variants is not None:
        mpi["variants"] = variants
    return {"mpi": mpi, **({"gpu": {"models": ["A100"]}} if gpu else {})}


@pytest.mark.parametrize(("data", "variant", "moves"), [
    (_data(gpu=False), False, False),  # a CPU site: neither, whatever mpi.cuda_aware says
    (_data(gpu=True), True, True),
    (_data(gpu=True, cuda_aware=False), False, False),
    (_data(gpu=True, kind="openmpi-cuda", cuda_aware=False), False, True),
    (_data(gpu=True, kind="openmpi", cuda_aware=False, variants="+cuda +ucx"), False, True),
    (_data(gpu=True, kind="cray-mpich", cuda_aware=False, variants="+cudaish"), False, False),
])
def test_the_variant_and_the_mpi_are_two_answers(data, variant, moves) -> None:
    assert cudaaware.torch_variant(data) is variant
    assert cudaaware.mpi_moves_device_buffers(data) is moves


def test_the_schema_default_makes_a_gpu_site_cuda_aware() -> None:
    """The default of ``mpi.cuda_aware`` lives in the schema, filled in at load."""
    data = site_data("generic-ib", lambda d: d["mpi"].pop("cuda_aware", None))
    fill_defaults(data)
    assert cudaaware.torch_variant(data) is True


@pytest.mark.parametrize("name", sorted(p.stem for p in paths.sites_dir().glob("*.yaml")
                                        if p.stem != "local"))
def test_site_asks_the_same_functions(name: str) -> None:
    site = sitemod.load(name)
    assert site.torch_cuda_aware is cudaaware.torch_variant(site.data)
    assert site.mpi_moves_device_buffers is cudaaware.mpi_moves_device_buffers(site.data)
