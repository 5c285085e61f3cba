"""The container environment concretizes off-site with the pinned Spack.

One shared, session-scoped solve (minutes): Derecho's, the Cray CUDA-aware site,
where the stand-in MPICH must carry ``+cuda`` for torch's ``+cuda_aware_mpi`` and
the image must pair NCCL with the plugin the wrapper binds.  The rendered
spack.yaml names in-image paths (/opt/torchmpi, /opt/spack-packages); the only
change made here is mapping those onto this host's copies, as the image's build
context does.  All five sites are rendered and parsed back in test_container.py;
the other four are not solved in the suite (time), see docs/containers.md.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml
from torchmpi import container, paths
from torchmpi import site as sitemod
from torchmpi.lock import Lock

pytestmark = [pytest.mark.spack, pytest.mark.concretize]

SOLVED = "derecho"


@pytest.fixture(scope="session")
def container_lock(spack, tmp_path_factory) -> Lock:
    env_dir = tmp_path_factory.mktemp("container-env")
    site = sitemod.load(SOLVED)
    text = container.render(site)["spack.yaml"]
    data = yaml.safe_load(text)
    env = data["spack"]
    assert env["repos"] == {"torchmpi": "/opt/torchmpi/spack_repo/torchmpi",
                            "builtin": "/opt/spack-packages/repos/spack_repo/builtin"}
    env["repos"] = {"torchmpi": str(paths.torchmpi_repo()), "builtin": str(spack.builtin)}
    env["develop"]["py-torchmpi"]["path"] = str(paths.root())
    env["config"]["install_tree"]["root"] = str(env_dir / "store")
    env["view"] = False
    (env_dir / "spack.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    start = time.monotonic()
    proc = spack.run("-e", str(env_dir), "concretize", "-f", check=False, timeout=1800)
    print(f"container concretize {SOLVED}: {time.monotonic() - start:.0f} s")
    if proc.returncode != 0:
        pytest.fail(f"container env of {SOLVED} did not concretize:\n{proc.stderr[-4000:]}")
    return Lock(env_dir / "spack.lock")


def test_one_torch_with_the_mpi_backend_cuda_aware(container_lock: Lock) -> None:
    torches = container_lock.named("py-torch")
    assert len(torches) == 1
    variants = torches[0].variants
    assert variants["mpi"] is True and variants["cuda_aware_mpi"] is True
    assert variants["cuda"] is True and variants["cuda_arch"] == ["80"]
    assert container_lock.root_mismatches() == []


def test_mpi_is_the_mpich_abi_stand_in(container_lock: Lock) -> None:
    [mpi] = container_lock.mpi()
    assert (mpi.name, mpi.version) == ("mpich", "3.4.3")
    assert mpi.variants["device"] == "ch4" and mpi.variants["netmod"] == "ofi"
    assert mpi.variants["cuda"] is True and not mpi.external


def test_nccl_pairs_with_the_plugin_the_site_injects(container_lock: Lock) -> None:
    pair = sitemod.load(SOLVED).data["nccl"]
    assert [n.version for n in container_lock.named("nccl")] == [pair["version"]]
    assert [n.version for n in container_lock.named("aws-ofi-nccl")] == [pair["plugin"]]


def test_no_external_outside_the_image(container_lock: Lock) -> None:
    outside = {n.label: n.external_path for n in container_lock.externals
               if n.external_path not in ("/usr", "/usr/local/cuda")}
    assert outside == {}
    versions = {n.name: n.version for n in container_lock.externals}
    # glibc: Spack 1.1 takes the libc from the compiler it runs, so an off-site
    # lock records this host's (docs/sites.md, offsite); the image's own solve
    # (the Containerfile concretizes inside the image) records the image's.
    assert versions.pop("glibc", None) is not None
    assert versions == {"gcc": "11.4.0", "cuda": "12.2.1"}


def test_every_node_is_built_for_the_generic_target(container_lock: Lock) -> None:
    targets = {n.target for n in container_lock.nodes.values() if n.name != "cuda"}
    assert targets == {"x86_64_v3"}


def test_lock_records_the_in_image_build_of_the_tool(container_lock: Lock) -> None:
    [tool] = container_lock.named("py-torchmpi")
    assert tool.variants.get("dev_path") == str(Path(paths.root()))
