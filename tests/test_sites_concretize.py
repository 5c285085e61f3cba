"""Every site environment concretizes with the pinned Spack, and its DAG is right.

The committed environments are copied byte for byte into a scratch tree that
mirrors the checkout (``environments/<site>`` next to a ``spack_repo`` link), so
the relative repository path in spack.yaml is exercised as committed and
parallel sessions never share a spack.lock.  Each environment is solved exactly
once per run, for this module and tests/test_modules.py alike
(:mod:`support.solves`), and all DAG checks read the resulting spack.lock.
"""

from __future__ import annotations

import pytest
from support.solves import SiteSolves, Solved
from torchmpi import pairs, paths
from torchmpi import site as sitemod
from torchmpi.lock import Lock

SITES = sitemod.available()  # every site file; the host-detected ones are rendered here

pytestmark = [pytest.mark.spack, pytest.mark.concretize]


@pytest.fixture(scope="session")
def solved(spack, tmp_path_factory) -> dict[str, Solved]:
    """Every site solved once per run (support.solves: shared with test_modules and
    the other worker), two at a time: the solver is single-threaded."""
    results = SiteSolves(spack, tmp_path_factory).get_all(SITES)
    for name, res in results.items():
        print(f"concretize {name}: {res.seconds:.0f} s, rc={res.returncode}")
    return results


def _lock(solved: dict[str, Solved], name: str) -> Lock:
    res = solved[name]
    if res.lock is None:
        pytest.fail(f"{name} did not concretize (exit {res.returncode}):\n"
                    f"{res.stdout}\n{res.stderr}")
    return res.lock


@pytest.mark.parametrize("name", SITES)
def test_site_concretizes_to_one_torch_on_the_sites_mpi(solved, name) -> None:
    lock = _lock(solved, name)
    site = solved[name].site
    d = site.data

    torches = lock.named("py-torch")
    assert len(torches) == 1, [t.label for t in torches]
    torch = torches[0]
    assert torch.namespace == "torchmpi"
    assert torch.variants.get("mpi") is True and torch.variants.get("distributed") is True
    if site.gpu_vendor == "amd":  # builtin py-torch conflicts +gloo+rocm
        _amd_checks(lock, site, torch)
        return
    # gloo: builtin py-torch defaults to ~gloo; allreduce/doctor's CPU path needs it.
    assert torch.variants.get("gloo") is True
    assert "gloo" in {n for n, _, _ in torch.deps}

    mpis = lock.mpi()
    assert len(mpis) == 1, [m.label for m in mpis]
    mpi = mpis[0]
    assert mpi.name == d["mpi"]["kind"]
    if d["mpi"].get("version"):
        assert mpi.version == str(d["mpi"]["version"])
    assert mpi.external == bool(d["mpi"].get("prefix") or d["mpi"].get("modules"))
    if d["mpi"]["kind"] == "cray-mpich":
        assert mpi.external

    ncc = lock.named("nccl")
    plugin = lock.named("aws-ofi-nccl")
    if site.gpu:
        assert len(ncc) == 1, [n.label for n in ncc]
        # One architecture per GPU model ([80, 86] on Delta: A100 and A40).
        assert torch.variants.get("cuda_arch") == site.cuda_archs
        assert ncc[0].variants.get("cuda_arch") == site.cuda_archs
        want_aware = d["mpi"].get("cuda_aware", True)
        assert torch.variants.get("cuda_aware_mpi") is want_aware
    else:
        assert ncc == [] and torch.variants.get("cuda") is False
    assert bool(plugin) == (d["fabric"] == "slingshot")
    if d.get("nccl"):  # the site's pin, a vouched pair (nccl-ss11 VOUCHED_PAIRS)
        assert ncc[0].version == d["nccl"]["version"]
        if d["nccl"].get("plugin"):
            assert plugin[0].version == d["nccl"]["plugin"]
    chosen = pairs.choose(d.get("nccl") or {}) if d["fabric"] == "slingshot" else None
    if chosen is not None:  # a Slingshot site gets a Slingshot-run pair unless it pins one
        assert (ncc[0].version, plugin[0].version) == (chosen.nccl, chosen.plugin)
    if plugin:
        assert len(plugin) == 1
        deps = {n for n, _, _ in plugin[0].deps}
        assert "nccl" in deps and "libfabric" in deps
        assert all(f.external for f in lock.named("libfabric"))
        assert lock.named("libfabric")[0].variants.get("fabrics") == ["cxi"]


def _amd_checks(lock: Lock, site: sitemod.Site, torch) -> None:
    """An AMD site: py-torch +rocm for its targets, RCCL of its ROCm release, no CUDA
    and no NVIDIA NCCL, Cray MPICH +rocm (GTL for HSA), the site's ROCm externals, and
    on Slingshot the plugin built +rocm at the pair vouched with that RCCL."""
    from torchmpi import gpuvendor

    d, rocm = site.data, site.rocm["version"]
    assert torch.variants.get("rocm") is True and torch.variants.get("cuda") is False
    assert torch.variants.get("amdgpu_target") == site.amdgpu_targets
    assert torch.variants.get("gloo") is False and torch.variants.get("nccl") is True
    assert torch.variants.get("cuda_aware_mpi") is d["mpi"].get("cuda_aware", True)
    assert not lock.named("cuda") and not lock.named("nccl")
    (rccl,) = lock.named("rccl")
    assert rccl.version == rocm and rccl.variants.get("amdgpu_target") == site.amdgpu_targets
    # RCCL is built against the ROCm externals, unless the site declares its own
    # (LUMI-G: builtin has no release of its ROCm 7.0.3, so the system ROCm's
    # libraries are externals, as LUMI's own Spack declares them).
    declared = {e["spec"].split("@")[0] for e in d.get("externals") or []}
    assert rccl.external == ("rccl" in declared)
    if rccl.external:
        assert rccl.external_path == site.rocm["prefix"]
    (mpi,) = lock.mpi()
    assert mpi.external and mpi.variants.get("rocm") is True
    for name in gpuvendor.table()["amd"]["rocm_components"]:
        found = lock.named(name)
        assert found and all(n.external and n.version == rocm for n in found), name
    plugin = lock.named("aws-ofi-nccl")
    assert bool(plugin) == (d["fabric"] == "slingshot")
    if plugin:
        (plugin,) = plugin
        assert plugin.version == pairs.rccl(rocm).plugin
        assert plugin.variants.get("rocm") is True and plugin.variants.get("cxi") is True
        assert {"hip", "libfabric"} <= {n for n, _, _ in plugin.deps}
        assert all(f.external for f in lock.named("libfabric"))


@pytest.mark.parametrize("name", SITES)
def test_target_is_the_sites(solved, name) -> None:
    lock = _lock(solved, name)
    targets = {n.target for n in lock.to_build}
    assert targets == {solved[name].site.data["target"]}


def test_derecho_torchvision_shares_the_torch(solved) -> None:
    lock = _lock(solved, "derecho")
    (torch,) = lock.named("py-torch")
    (vision,) = lock.named("py-torchvision")
    assert torch.hash in {h for n, h, _ in vision.deps if n == "py-torch"}


@pytest.mark.parametrize("name", SITES)
def test_compiler_is_the_sites(solved, name) -> None:
    """The site's compiler external, never one Spack detected on this host."""
    lock = _lock(solved, name)
    prefixes = {n.external_path for n in lock.named("gcc")}
    assert prefixes == {solved[name].site.data["compilers"][0]["prefix"]}


def test_cray_sites_reuse_the_site_externals(solved) -> None:
    for name in ("derecho", "perlmutter", "alps-gh200"):
        lock = _lock(solved, name)
        ext = {n.name for n in lock.externals}
        assert {"cray-mpich", "cuda", "libfabric", "gcc"} <= ext, (name, ext)


def test_perlmutter_reuses_nerscs_hwloc(solved) -> None:
    """NERSC's hwloc@os at /usr (spack-infrastructure spack-configs/base/spack.yaml,
    the site file's [base]) is what aws-ofi-nccl links: no hwloc, libpciaccess or
    util-macros build (docs/performance.md, perlmutter)."""
    lock = _lock(solved, "perlmutter")
    assert [(n.version, n.external_path) for n in lock.named("hwloc")] == [("os", "/usr")]
    assert not lock.named("libpciaccess") and not lock.named("util-macros")


def _from_source_targets() -> dict[str, int]:
    """The per-site from-source targets, where `make bench` keeps them."""
    import importlib.util

    path = paths.root() / "scripts" / "bench.py"
    spec = importlib.util.spec_from_file_location("torchmpi_bench", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench.FROM_SOURCE_TARGET


@pytest.mark.parametrize("name", sorted(_from_source_targets()))
def test_site_builds_at_most_its_target_from_source(solved, name) -> None:
    lock = _lock(solved, name)
    built = sorted(n.name for n in lock.to_build)
    assert len(built) <= _from_source_targets()[name], (len(built), built)
    # The centre's python stack (NCAR's, CSCS's uenv) is reused, not rebuilt.
    assert all(n.external for n in lock.named("python")), "python must be the centre's"


@pytest.mark.parametrize("name", [n for n in SITES if not sitemod.load(n).is_local])
def test_offsite_lock_says_what_the_site_gets_instead(solved, name) -> None:
    """The real off-site lock, read as the site would build it: every node a site
    compiler compiles without that compiler's runtime nodes, and a DAG without a
    libc, is named in the preview's differences (derecho, alps-gh200: their gcc
    cannot run here, so Spack 1.1 adds no gcc-runtime, compiler-wrapper or glibc)."""
    from torchmpi import offsite

    site = solved[name].site
    lock = _lock(solved, name)
    lines = offsite.differences(site.data, lock)
    assert lines and lines[0].startswith("install tree:"), "off the site: a preview"
    for comp in site.data["compilers"]:
        compiler, _, version = comp["spec"].partition("@")
        compiled = [n for n in lock.nodes.values()
                    if any(d == compiler and {"c", "cxx", "fortran"} & set(v)
                           for d, _, v in n.deps)]
        without = [n for n in compiled
                   if not {"gcc-runtime", "compiler-wrapper"} <= {d for d, _, _ in n.deps}]
        named = [line for line in lines if line.startswith("compiler runtime:")
                 and comp["spec"] in line]
        if without:
            assert named and f"{len(without)} node(s)" in named[0], (without[:3], lines)
            assert f"gcc-runtime@{version}" in named[0]
        else:
            assert not named, lines
    if not lock.named("glibc") and not lock.named("musl"):
        assert any(line.startswith("libc: the lock has no libc node") for line in lines), lines
    if name == "derecho":  # Spack 1.1 cannot run the Cray PE's gcc here
        assert not lock.named("gcc-runtime") and not lock.named("glibc")
