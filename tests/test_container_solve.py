"""Every site's container environment concretizes off-site with the pinned Spack.

All five sites, each solved once per session (a few minutes each): the Cray
sites with the MPICH ABI stand-in (Derecho and Perlmutter CUDA-aware, so the
stand-in carries ``+cuda``; Alps not), the Slingshot sites with the NCCL/plugin
pair their runtime injects or the image carries, generic-ib with the image's
CUDA Open MPI, local with a CPU torch.  The rendered spack.yaml names in-image
paths (/opt/torchmpi, /opt/spack-packages); the only change made here is
mapping those onto this host's copies, as the image's build context does.  The
rendering and parsing back of all five is tests/test_container.py.

Time: each site's tests carry their own ``xdist_group`` (``container-solve-<site>``),
so under ``make test`` the five solves spread over the workers instead of
queueing on the one that would hold a single shared fixture; a worker solves
a site the first time one of its tests asks and keeps the lock for the rest.
(That needs tests/conftest.py's fix for pytest 9.2, tests/test_xdist_groups.py.)
The rendered environment sets generic targets, static analysis and no duplicate
nodes (container.py), which take about 40 % off each solve with the same DAG
(docs/performance.md): about 1-1.5 min of CPU per site here.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from torchmpi import container, gpuvendor, pairs, paths
from torchmpi import site as sitemod
from torchmpi.lock import Lock

pytestmark = [pytest.mark.spack, pytest.mark.concretize]

#: Sites with a container descriptor (the AMD sites' are ROCm images: ROCm externals,
#: RCCL).  LUMI-G's image cannot share Frontier's solve: its ROCm (7.0.3 against 7.1.1),
#: plugin (1.20.0 against 1.19.2) and ROCm externals differ, so it is a second DAG of the
#: same shape (about 70 CPU-s).
SITES = [n for n in sitemod.available()
         if "container" in (yaml.safe_load((paths.sites_dir() / f"{n}.yaml").read_text()) or {})]
#: One xdist group per site: the solves spread over the workers (tests/conftest.py
#: leaves an explicit group alone).
BY_SITE = [pytest.param(name, id=name, marks=pytest.mark.xdist_group(f"container-solve-{name}"))
           for name in SITES]

#: Where the base images keep what the container environment takes as external
#: (and an AMD image its ROCm, /opt/rocm-<version>: :func:`_image_prefixes`).
IMAGE_PREFIXES = ("/usr", "/usr/local/cuda")


def _image_prefixes(site: sitemod.Site) -> tuple[str, ...]:
    return IMAGE_PREFIXES + ((f"/opt/rocm-{site.rocm['version']}",) if site.rocm else ())


@dataclass
class Solved:
    site: sitemod.Site
    plan: container.Plan
    proc: subprocess.CompletedProcess
    lock: Lock | None


class Solves:
    """Each site's container solve, done on first request in this worker, then kept."""

    def __init__(self, spack, tmp_path_factory: pytest.TempPathFactory):
        self.spack = spack
        self.tmp = tmp_path_factory
        self.done: dict[str, Solved] = {}

    def lock(self, name: str) -> tuple[Solved, Lock]:
        if name not in self.done:
            self.done[name] = self._solve(name)
        res = self.done[name]
        if res.lock is None:
            pytest.fail(f"container env of {name} did not concretize (exit"
                        f" {res.proc.returncode}):\n{res.proc.stderr[-4000:]}")
        return res, res.lock

    def _solve(self, name: str) -> Solved:
        spack = self.spack
        env_dir = self.tmp.mktemp(f"container-env-{name}")
        site = sitemod.load(name)
        data = yaml.safe_load(container.render(site)["spack.yaml"])
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
        print(f"container concretize {name}: {time.monotonic() - start:.0f} s")
        lock_path = env_dir / "spack.lock"
        lock = Lock(lock_path) if proc.returncode == 0 and lock_path.is_file() else None
        return Solved(site, container.plan(site), proc, lock)


@pytest.fixture(scope="session")
def solves(spack, tmp_path_factory) -> Solves:
    return Solves(spack, tmp_path_factory)


def _cuda_aware(site: sitemod.Site) -> bool:
    """The image's torch takes device tensors through MPI: a CUDA-aware NVIDIA site
    (an AMD image's torch is ``~cuda_aware_mpi``: container.plan.AMD_OVERRIDE)."""
    return bool(site.gpu) and not site.rocm and site.data["mpi"].get("cuda_aware", True)


@pytest.mark.parametrize("name", BY_SITE)
def test_one_torch_with_the_mpi_backend(solves: Solves, name: str) -> None:
    """One torch, ``+mpi``; ``+cuda_aware_mpi`` exactly where the site is CUDA-aware."""
    res, lock = solves.lock(name)
    torches = lock.named("py-torch")
    assert len(torches) == 1, [t.label for t in torches]
    variants = torches[0].variants
    assert variants["mpi"] is True
    assert variants["cuda"] is (bool(res.site.gpu) and not res.site.rocm)
    assert bool(variants.get("rocm")) is bool(res.site.rocm)
    assert bool(variants.get("cuda_aware_mpi")) is _cuda_aware(res.site)
    if res.site.rocm:
        assert variants["amdgpu_target"] == res.site.amdgpu_targets
        assert torches[0].version == str(res.site.data["torch"]["versions"][0])
    elif res.site.gpu:
        assert variants["cuda_arch"] == res.site.cuda_archs  # [80, 86] on Delta
    assert lock.root_mismatches() == []
    assert sorted(n.name for n in lock.roots) == sorted(
        r.split()[0] for r in container.roots(res.site, res.plan))


@pytest.mark.parametrize("name", BY_SITE)
def test_mpi_is_the_stand_in_or_the_images_own(solves: Solves, name: str) -> None:
    """Cray sites: MPICH 3.4.3 ch4:ofi (the ABI stand-in; 4.3.1 +xpmem under CE),
    ``+cuda`` only where the site is CUDA-aware; the others: the site's Open MPI kind,
    built in the image."""
    res, lock = solves.lock(name)
    [mpi] = lock.mpi()
    assert not mpi.external
    if res.site.data["mpi"]["kind"] == "cray-mpich" and res.plan.runtime == "ce":
        # CE injects no Cray MPICH: MPICH as CSCS builds it for containers.
        assert (mpi.name, mpi.version) == ("mpich", "4.3.1")
        assert mpi.variants["xpmem"] is True
    elif res.site.data["mpi"]["kind"] == "cray-mpich":
        assert (mpi.name, mpi.version) == ("mpich", "3.4.3")
        assert mpi.variants["device"] == "ch4" and mpi.variants["netmod"] == "ofi"
        assert mpi.variants["cuda"] is _cuda_aware(res.site)
        if _cuda_aware(res.site):
            assert mpi.variants["cuda_arch"] == [res.site.cuda_arch]
    elif res.plan.launch:  # apptainer binds the centre's Open MPI over the image's
        want = res.site.data["mpi"]
        assert (mpi.name, mpi.version) == (want["kind"], want["version"])
        assert res.plan.mpi == f"{want['kind']}@{want['version']}"
        if _cuda_aware(res.site):  # torch's MPI backend takes CUDA tensors in the image too
            assert mpi.variants["cuda"] is True
    else:
        assert mpi.name == res.site.data["mpi"]["kind"] == res.plan.mpi
        assert mpi.name in ("openmpi", "openmpi-cuda")
        assert (mpi.name == "openmpi-cuda") is bool(res.site.gpu)


@pytest.mark.parametrize("name", BY_SITE)
def test_nccl_pairs_with_the_plugin_the_site_injects(solves: Solves, name: str) -> None:
    """The pinned pair where the runtime injects a plugin (CE, the apptainer
    wrapper); on a Slingshot site with nothing injected (podman-hpc) the image's own
    newest Slingshot pair; NCCL without a plugin off Slingshot; none on a CPU site."""
    res, lock = solves.lock(name)
    nccl = [n.version for n in lock.named("nccl")]
    plugin = [n.version for n in lock.named("aws-ofi-nccl")]
    pin = res.plan.nccl
    if res.site.rocm:  # RCCL, ROCm's release, with the plugin vouched with it (+rocm)
        rccl = [n.version for n in lock.named("rccl")]
        assert (nccl, rccl, plugin) == ([], [pin["rccl"]], [pin["plugin"]])
        assert pin["rccl"] == str(res.site.rocm["version"])
        [node] = lock.named("aws-ofi-nccl")
        assert node.variants["rocm"] is True and node.variants["cuda"] is False
    elif not res.site.gpu:
        assert (nccl, plugin) == ([], [])
    elif res.site.data["fabric"] == "slingshot":
        chosen = pairs.choose(pin)
        assert chosen is not None
        if pin.get("plugin"):
            assert (chosen.nccl, chosen.plugin) == (pin["version"], pin["plugin"])
        assert (nccl, plugin) == ([chosen.nccl], [chosen.plugin])
    else:
        assert len(nccl) == 1 and plugin == []
        if pin.get("version"):
            assert nccl == [pin["version"]]


@pytest.mark.parametrize("name", BY_SITE)
def test_no_external_outside_the_image(solves: Solves, name: str) -> None:
    res, lock = solves.lock(name)
    outside = {n.label: n.external_path for n in lock.externals
               if n.external_path not in _image_prefixes(res.site)}
    assert outside == {}
    versions = {n.name: n.version for n in lock.externals}
    # glibc: Spack 1.1 takes the libc from the compiler it runs, so an off-site
    # lock records this host's (docs/sites.md, offsite); the image's own solve
    # (the Containerfile concretizes inside the image) records the image's.
    assert versions.pop("glibc", None) is not None
    want = {"gcc": container.OS_IMAGES[res.plan.os]["gcc"]}
    if res.site.rocm:  # ROCm's components, and the libraries the site takes from it (LUMI)
        present = {n.name for n in lock.externals}
        names = [*gpuvendor.table()["amd"]["rocm_components"],  # always; the libraries
                 *(s.split("@")[0] for s in container.image.rocm_libraries(res.site)
                   if s.split("@")[0] in present)]  # where torch's DAG has them
        want.update({c: str(res.site.rocm["version"]) for c in names})
    elif res.site.gpu:
        want["cuda"] = res.site.gpu["cuda"]["spec"].split("@", 1)[1].split()[0]
    assert versions == want


@pytest.mark.parametrize("name", BY_SITE)
def test_every_node_is_built_for_the_generic_target(solves: Solves, name: str) -> None:
    res, lock = solves.lock(name)
    targets = {n.target for n in lock.to_build}
    assert targets == {container.generic_target(res.site)}


@pytest.mark.parametrize("name", BY_SITE)
def test_lock_records_the_in_image_build_of_the_tool(solves: Solves, name: str) -> None:
    _, lock = solves.lock(name)
    [tool] = lock.named("py-torchmpi")
    assert tool.variants.get("dev_path") == str(Path(paths.root()))
