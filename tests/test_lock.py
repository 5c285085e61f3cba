"""torchmpi.lock: reading a Spack lock (what the summary and the off-site checks see)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.spack import LOCK, compiled_lock
from torchmpi.lock import Lock, root_name


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


def _write(tmp_path: Path, data: dict) -> Lock:
    path = tmp_path / "spack.lock"
    path.write_text(json.dumps(data))
    return Lock(path)


@pytest.mark.parametrize("spec, name", [
    ("py-torch-mpi", "py-torch-mpi"),
    ("torchmpi.py-torch-mpi@0.1.0 +cuda", "py-torch-mpi"),
    ("builtin.py-torch+cuda", "py-torch"),
    ("py-torch-mpi ^nccl@2.29", "py-torch-mpi"),
    ("  nccl%gcc", "nccl"),
    ("cray-mpich~cuda", "cray-mpich"),
])
def test_a_root_specs_package_name(spec: str, name: str) -> None:
    """The namespace and everything after the name go: version, variants, deps."""
    assert root_name(spec) == name


def test_the_summary_of_a_lock(tmp_path: Path) -> None:
    """Every field ``torchmpi concretize`` prints, from the stand-in lock: one
    external (the Cray MPICH), four to build, a target read from a string and
    from Spack 1.x's ``{"name": ...}`` form."""
    assert _write(tmp_path, LOCK).summary() == {
        "roots": ["py-torch-mpi@0.1.0 (torchmpi)"],
        "nodes": 5,
        "to_build": 4,
        "externals": ["cray-mpich@8.1.27"],
        "mpi": "cray-mpich@8.1.27 (external)",
        "nccl": "nccl@2.29.2-1",
        "rccl": "-",
        "plugin": "aws-ofi-nccl@1.19.0",
        "torch": "py-torch@2.11.0",
        "targets": ["zen3"],
    }


def test_nodes_to_build_are_the_non_externals(tmp_path: Path) -> None:
    lock = _write(tmp_path, LOCK)
    assert sorted(n.name for n in lock.to_build) == [
        "aws-ofi-nccl", "nccl", "py-torch", "py-torch-mpi"]
    assert [n.external_path for n in lock.externals] == ["/opt/cray/pe/mpich/8.1.27/ofi/gnu/9.1"]
    assert [n.name for n in lock.named("nccl")] == ["nccl"] and lock.named("absent") == []


def test_versions_list_every_node_of_a_name_and_mark_externals(tmp_path: Path) -> None:
    data = json.loads(json.dumps(LOCK))
    data["concrete_specs"]["x"] = {"name": "nccl", "version": "2.18.3-1",
                                   "external": {"path": "/opt/nccl"}}
    lock = _write(tmp_path, data)
    assert lock.versions("nccl") == "nccl@2.18.3-1 (external), nccl@2.29.2-1"
    assert lock.versions("absent") == "-"
    assert lock.summary()["mpi"] == "cray-mpich@8.1.27 (external)"
    assert lock.summary()["targets"] == ["zen3"], "an external's (no) target is not built for"


def test_a_node_read_whole(tmp_path: Path) -> None:
    """Target, OS, variants, namespace and edges as the lock states them."""
    data = json.loads(json.dumps(LOCK))
    data["concrete_specs"]["t"]["arch"]["platform_os"] = "sles15"
    torch = _write(tmp_path, data).nodes["t"]
    assert (torch.target, torch.os, torch.namespace, torch.external) == (
        "zen3", "sles15", "torchmpi", False)
    assert torch.variants == {"cuda_arch": ["80"], "mpi": True}
    assert torch.deps == [("nccl", "n", []), ("cray-mpich", "m", ["mpi"])]
    assert torch.label == "py-torch@2.11.0"


def test_roots_that_point_at_another_package_or_nowhere(tmp_path: Path) -> None:
    sound = _write(tmp_path, LOCK)
    assert sound.root_mismatches() == [] and [n.name for n in sound.roots] == ["py-torch-mpi"]
    data = json.loads(json.dumps(LOCK))
    data["roots"] = [{"hash": "t", "spec": "py-torch-mpi"}, {"hash": "gone", "spec": "nccl"},
                     {"hash": "n", "spec": "builtin.nccl@2.29"}, {"hash": "t", "spec": "nccl"}]
    assert _write(tmp_path, data).root_mismatches() == [
        "root 'py-torch-mpi' points at py-torch@2.11.0 (hash t)",
        "root 'nccl' points at hash gone, which is not in the lock",
        "root 'nccl' points at py-torch@2.11.0 (hash t)"]


def test_an_amd_locks_summary_names_its_rccl(tmp_path: Path) -> None:
    """On an AMD site torch's "nccl" backend is RCCL, an external from the site's ROCm
    (LUMI's rccl@7.0.3 at /opt/rocm-7.0.3): the summary says so, where NCCL is "-"."""
    from torchmpi.commands.concretize import format_summary

    data = json.loads(json.dumps(LOCK))
    specs = data["concrete_specs"]
    for key in [k for k, v in specs.items() if v["name"] == "nccl"]:
        del specs[key]
    specs["r"] = {"name": "rccl", "version": "7.0.3", "external": {"path": "/opt/rocm-7.0.3"}}
    summary = _write(tmp_path, data).summary()
    assert (summary["nccl"], summary["rccl"]) == ("-", "rccl@7.0.3 (external)")
    text = format_summary({**summary, "site": "lumi", "lock": "x", "seconds": 1.0})
    assert "  RCCL         rccl@7.0.3 (external)" in text, text
    plain = format_summary({**_write(tmp_path, LOCK).summary(), "site": "d", "lock": "x",
                            "seconds": 1.0})
    assert "RCCL" not in plain, plain
