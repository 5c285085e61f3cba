"""Derecho's site file: facts from NCAR's published Spack deployment, one ncarenv release.

The site lowers Derecho's from-source count with externals taken from NCAR's
own Spack configuration (github.com/NCAR/spack-derecho), each citing where NCAR
states it, and asks that compiler, CUDA, cuDNN, cray-mpich and libfabric come
from one ncarenv release.  These checks read the committed site file (data with
a YAML parser, citations from its comments) and need no Spack solve; the count
itself is measured by `torchmpi concretize derecho` and `make bench`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from torchmpi import paths

SITE = paths.sites_dir() / "derecho.yaml"
#: NCAR's install trees: the per-release stack and the tree shared by releases.
RELEASE_TREE = re.compile(r"^/glade/u/apps/derecho/(?P<release>[^/]+)/spack/opt/spack/")
COMMON_TREE = re.compile(r"^/glade/u/apps/common/(?P<tree>[^/]+)/spack/opt/spack/")
CITATION = re.compile(r"#.*\[(?P<key>[a-z]+)\]")


@pytest.fixture(scope="module")
def text() -> str:
    return SITE.read_text()


@pytest.fixture(scope="module")
def data(text: str) -> dict[str, Any]:
    return yaml.safe_load(text)


def _pkg(spec: str) -> tuple[str, str]:
    """(name, version) of a spec string `name@version [variants]`."""
    name, _, rest = spec.partition("@")
    return name, rest.split()[0]


def _externals_by_role(data: dict[str, Any]) -> Iterator[tuple[str, str, str]]:
    """(what, spec, prefix) of every package the site file places on the site."""
    for comp in data["compilers"]:
        yield "compiler", comp["spec"], comp["prefix"]
    gpu = data.get("gpu") or {}
    for key in ("cuda", "cudnn"):
        if gpu.get(key):
            yield key, gpu[key]["spec"], gpu[key].get("prefix", "")
    mpi = data["mpi"]
    yield "mpi", f"{mpi['kind']}@{mpi['version']}", mpi["prefix"]
    yield "libfabric", data["libfabric"]["spec"], data["libfabric"]["prefix"]
    for ext in data.get("externals", []):
        yield "externals", ext["spec"], ext.get("prefix", "")


def _defined_keys(text: str) -> set[str]:
    """Citation keys the header defines, e.g. `[db] its .spack-db/index.json`."""
    header = text[: text.index("\nname:")]
    return set(re.findall(r"\[([a-z]+)\] (?:is )?its\s+(?:#\s*)?[\w./-]+", header))


def test_header_cites_ncar_repository_commit_and_files(text: str) -> None:
    header = text[: text.index("\nname:")]
    assert "github.com/NCAR/spack-derecho" in header
    assert re.search(r"commit\s+(?:#\s*)?[0-9a-f]{40}\b", header), "no full NCAR commit hash"
    keys = _defined_keys(text)
    assert {"pkgs", "db"} <= keys, f"citation keys defined in the header: {sorted(keys)}"
    for cited in ("config/packages.yaml", ".spack-db/index.json"):
        assert cited in header


def test_every_external_cites_a_defined_source(text: str, data: dict[str, Any]) -> None:
    """Each `externals:` entry names its NCAR source on its own lines."""
    externals = data.get("externals") or []
    assert len(externals) >= 20, "Derecho reuses NCAR's build tools and libraries"
    body = text[text.index("\nexternals:\n") + 1:]
    body = body[: re.search(r"\n[a-z_]+:", body[1:]).start() + 1]
    entries = re.split(r"\n(?=- spec: )", body)[1:]
    assert len(entries) == len(externals)
    keys = _defined_keys(text)
    for entry, ext in zip(entries, externals):
        assert entry.startswith(f"- spec: {ext['spec']}\n")
        cited = {m["key"] for m in CITATION.finditer(entry)}
        assert cited and cited <= keys, f"{ext['spec']}: cites {sorted(cited)}, defined {keys}"


def test_one_ncarenv_release(data: dict[str, Any]) -> None:
    """Every per-release prefix lies in the release the compiler's modules load."""
    modules = data["compilers"][0]["modules"]
    release = next(m.split("/", 1)[1] for m in modules if m.startswith("ncarenv/"))
    releases = {what + " " + spec: m["release"]
                for what, spec, prefix in _externals_by_role(data)
                if (m := RELEASE_TREE.match(prefix))}
    assert releases, "no package from NCAR's per-release stack"
    assert set(releases.values()) == {release}, releases
    commons = {m["tree"] for _, _, prefix in _externals_by_role(data)
               if (m := COMMON_TREE.match(prefix))}
    assert len(commons) <= 1, f"CUDA/cuDNN from several shared trees: {commons}"


def test_prefixes_name_the_versions_they_claim(data: dict[str, Any]) -> None:
    """A prefix in NCAR's or Cray's layout spells the spec's own name and version."""
    for what, spec, prefix in _externals_by_role(data):
        name, version = _pkg(spec)
        if m := RELEASE_TREE.match(prefix) or COMMON_TREE.match(prefix):
            parts = Path(prefix[m.end():]).parts
            assert parts[:2] == (name, version), f"{what} {spec}: {prefix}"
        elif prefix.startswith("/opt/cray/"):
            assert f"/{version}/" in prefix + "/", f"{what} {spec}: {prefix}"
        else:
            assert prefix == "/usr", f"{what} {spec}: prefix {prefix!r} has no known layout"


def test_no_unverified_paths_left(text: str) -> None:
    assert "verify" not in text.lower()
