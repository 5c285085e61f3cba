"""The local site reuses the host's build tools, found by Spack itself.

``externals: auto`` runs the pinned ``spack external find`` with a throw-away
user scope; the rendered packages.yaml carries what it found, buildable, so
Spack may reuse them (and still build a package whose external does not fit).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import yaml
from support.host_tools import load_site
from torchmpi import detect, paths
from torchmpi import render as renderer

pytestmark = pytest.mark.spack


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "-"


def test_build_tools_come_from_spack_external_find(spack) -> None:
    user_scope = paths.root() / ".spack-user" / "packages.yaml"
    before = _digest(user_scope)
    found = detect.build_tools()
    assert _digest(user_scope) == before, "detection must not write the project's user scope"
    names = {e["spec"].split("@")[0] for e in found}
    # Debian with build-essential (what `make setup` checks for) has GNU make and tar.
    assert {"gmake", "tar"} <= names, names
    assert not names & set(detect.EXCLUDED_EXTERNALS)
    for entry in found:
        assert Path(entry["prefix"]).is_dir(), entry


def test_local_site_renders_the_host_externals(spack, tmp_path: Path) -> None:
    site = load_site("local", tmp_path)
    assert site.data["externals"] == "auto", "found at render time, not at load"
    files = renderer.render(site, tmp_path / "env")
    body = "\n".join(line for line in files["packages.yaml"].splitlines()
                     if not line.startswith("#"))
    # `name::` (replace lower scopes) parses as the key "name:".
    packages = {k.rstrip(":"): v for k, v in yaml.safe_load(body)["packages"].items()}
    for entry in detect.build_tools():
        name = entry["spec"].split("@")[0]
        assert name in packages, name
        assert entry["spec"] in [e["spec"] for e in packages[name]["externals"]], name
        assert packages[name].get("buildable", True) is True, name
