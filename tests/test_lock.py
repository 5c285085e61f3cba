"""torchmpi.lock: reading a Spack lock (what the summary and the off-site checks see)."""

from __future__ import annotations

import json
from pathlib import Path

from support.spack import LOCK, compiled_lock
from torchmpi.lock import Lock


def test_lock_reader(tmp_path: Path) -> None:
    path = tmp_path / "spack.lock"
    path.write_text(json.dumps(LOCK))
    lock = Lock(path)
    assert [n.name for n in lock.mpi()] == ["cray-mpich"]
    assert lock.named("py-torch")[0].target == "zen3"
    assert [n.label for n in lock.externals] == ["cray-mpich@8.1.27"]


def test_only_an_mpi_edge_makes_an_mpi(tmp_path: Path) -> None:
    """The summary's MPI is what a dependent uses *as* ``mpi``: the compiler a node
    is built with (virtuals c, cxx) is not one."""
    lock = compiled_lock(tmp_path, runtimes=True)
    assert lock.mpi() == []
    assert lock.summary()["mpi"] == "-"
