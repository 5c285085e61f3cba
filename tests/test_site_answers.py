"""What `Site` answers once for every consumer: local or not, cross-family, auto keys."""

from __future__ import annotations

from pathlib import Path

import archspec.cpu
import pytest
import yaml
from torchmpi import paths
from torchmpi import render as renderer
from torchmpi import site as sitemod


def test_auto_keys_are_those_written_auto() -> None:
    local = sitemod.load("local")
    written = yaml.safe_load((paths.sites_dir() / "local.yaml").read_text())
    assert written["target"] == "auto" and local.data["target"] != "auto"  # filled in
    assert sitemod.auto_keys(written) == list(sitemod.AUTO_KEYS)
    assert local.is_local
    for name in sitemod.available():
        if name != "local":
            site = sitemod.load(name)
            assert sitemod.auto_keys(site.data) == [] and not site.is_local


def test_local_site_renders_without_cross_target_settings(tmp_path: Path) -> None:
    """The host-detected site: its target is this host's, so no target in roots."""
    site = sitemod.load("local")
    spack = yaml.safe_load(renderer.render(site, tmp_path / "env")["spack.yaml"])["spack"]
    assert all("target=" not in spec for spec in spack["specs"])
    assert "targets" not in spack["concretizer"]


@pytest.mark.parametrize("host,expected", [
    ("zen3", {"derecho": False, "alps-gh200": True}),
    ("neoverse_v2", {"derecho": True, "alps-gh200": False}),
])
def test_cross_family(host: str, expected: dict, monkeypatch) -> None:
    monkeypatch.setattr(archspec.cpu, "host", lambda: archspec.cpu.TARGETS[host])
    for name, cross in expected.items():
        assert sitemod.load(name).cross_family is cross, name


def test_rendering_does_not_depend_on_the_host_family(monkeypatch, tmp_path: Path) -> None:
    """Committed files must be byte-identical whichever machine renders them."""
    out = {}
    for host in ("zen3", "neoverse_v2"):
        monkeypatch.setattr(archspec.cpu, "host", lambda h=host: archspec.cpu.TARGETS[h])
        out[host] = renderer.render(sitemod.load("alps-gh200"), tmp_path / "env")
    assert out["zen3"] == out["neoverse_v2"]


def _mpi(kind: str, **keys):
    def edit(data: dict) -> None:
        if data["mpi"]["kind"] != kind:  # another family: none of the old MPI's keys
            data["mpi"] = {}
        data["mpi"].pop("cuda_aware", None)
        data["mpi"].update(kind=kind, **keys)
        # The Cray switch goes with GTL (a load-time rule): the site's own value leaves.
        ((data.get("runtime") or {}).get("env") or {}).pop("MPICH_GPU_SUPPORT_ENABLED", None)
    return edit


@pytest.mark.parametrize("base,kind,keys,torch_aware,moves", [
    # Cray MPICH: GTL is loaded exactly when the torch variant is on.
    ("derecho", "cray-mpich", {}, True, True),
    ("derecho", "cray-mpich", {"cuda_aware": False}, False, False),
    # openmpi-cuda is built +cuda whatever torch's variant: mpi4py's device buffers
    # still travel even where torch's MPI backend refuses CUDA tensors.
    ("generic-ib", "openmpi-cuda", {}, True, True),
    ("generic-ib", "openmpi-cuda", {"cuda_aware": False}, False, True),
    # A Spack-built Open MPI under +cuda_aware_mpi is solved +cuda (py-torch's conflicts):
    # the two functions named cuda_aware answered False (reframe) and True (torches) here.
    ("generic-ib", "openmpi", {}, True, True),
    ("generic-ib", "openmpi", {"cuda_aware": False}, False, False),
    # A centre's Open MPI declared +cuda moves device buffers whatever torch's variant.
    ("generic-ib", "openmpi", {"cuda_aware": False, "variants": "+cuda",
                               "prefix": "/opt/openmpi"}, False, True),
])
def test_torch_variant_and_device_buffers_are_two_answers(tmp_path, base, kind, keys,
                                                          torch_aware, moves) -> None:
    from support.sites import edited_site

    site = edited_site(tmp_path, base, _mpi(kind, **keys))
    assert site.torch_cuda_aware is torch_aware
    assert site.mpi_moves_device_buffers is moves


def test_a_cpu_site_has_neither() -> None:
    site = sitemod.load("generic-ib")
    cpu = sitemod.Site(site.name, site.path, {**site.data, "gpu": None}, site.raw)
    assert cpu.torch_cuda_aware is False and cpu.mpi_moves_device_buffers is False


@pytest.mark.parametrize("name", [n for n in sitemod.available() if n != "local"])
def test_the_root_spec_is_built_once(name: str) -> None:
    """The native environment and the container environment install the same root: the
    image's roots are Site's answer for the image's target and MPI, not rebuilt."""
    from torchmpi import container, spackenv

    site = sitemod.load(name)
    native = spackenv.roots(site)[0]
    assert native.startswith(site.root_spec)
    if "container" not in site.data:
        return
    p = container.plan(site)
    assert p.device_buffers is (site.gpu_vendor != "amd"), name  # plan.AMD_OVERRIDE
    assert container.roots(site, p) == site.image_roots(p.target, p.device_buffers)
    assert container.roots(site, p)[0].startswith(
        site.root_spec if p.device_buffers else "py-torch-mpi ")


def test_an_image_without_device_buffers_gets_the_torch_variant_off() -> None:
    """Site's answer for an image whose MPI cannot take device buffers (the AMD image's
    MPICH ABI stand-in): ``~cuda_aware_mpi`` whatever the site answers, every root at the
    image's target, the torch release pinned as the native root pins it."""
    from torchmpi import spackenv

    site = sitemod.load("lumi")
    assert site.torch_cuda_aware and "+cuda_aware_mpi" in site.root_spec.split()
    native = spackenv.roots(site)[0]
    pin = native.partition(" ^")[2]
    assert pin == "py-torch@=" + site.data["torch"]["versions"][0], native
    roots = site.image_roots("x86_64_v3", device_buffers=False)
    want = site.root_spec.replace("+cuda_aware_mpi", "~cuda_aware_mpi")
    assert roots[0] == f"{want} target=x86_64_v3 ^{pin}"
    assert roots[1:] == [f"{s} target=x86_64_v3" for s in site.data["extra_specs"]]
    # With device buffers the site's own variant.
    assert site.image_roots("x86_64_v3")[0].startswith(f"{site.root_spec} target=x86_64_v3")
    for name in ("derecho", "generic-ib"):  # no torch.versions: nothing to pin
        other = sitemod.load(name)
        off = other.image_roots("x86_64", device_buffers=False)[0]
        assert "+cuda_aware_mpi" not in off.split() and "^" not in off, off
    # The site's extra specs are the image's roots too, at its target (derecho has some).
    extra = sitemod.load("derecho").data["extra_specs"]
    assert extra and sitemod.load("derecho").image_roots("x86_64_v3")[1:] == [
        f"{s} target=x86_64_v3" for s in extra]


def test_the_root_states_the_torch_variant_the_site_answers() -> None:
    """``+cuda_aware_mpi`` exactly where the site's answer is yes, ``~`` where no, and no
    such variant on a CPU site; the shipped sites have both answers."""
    seen = set()
    for name in (n for n in sitemod.available() if n != "local"):
        site = sitemod.load(name)
        words = site.root_spec.split()
        if not site.gpu:
            assert not [w for w in words if w.endswith("cuda_aware_mpi")], name
            continue
        want = "+cuda_aware_mpi" if site.torch_cuda_aware else "~cuda_aware_mpi"
        assert [w for w in words if w.endswith("cuda_aware_mpi")] == [want], (name, words)
        seen.add(want)
    assert seen == {"+cuda_aware_mpi", "~cuda_aware_mpi"}, seen


def test_the_libfabric_release_is_the_one_the_spec_names() -> None:
    """``Site.libfabric_release``: what the render note and the doctor's tests read, parsed
    once from ``libfabric.spec`` (a module-only site, LUMI-G, has nothing else)."""
    lumi, frontier = sitemod.load("lumi"), sitemod.load("frontier")
    assert "prefix" not in lumi.data["libfabric"] and lumi.libfabric_release == "1.22.0"
    assert frontier.libfabric_release == "2.3.1"
    assert frontier.data["libfabric"]["prefix"].endswith("/" + frontier.libfabric_release)
    assert sitemod.load("generic-ib").libfabric_release is None  # no libfabric: key
