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
