"""The network: ``fabric``, ``libfabric`` and the ``nccl`` pin.

* a Slingshot libfabric without the ``cxi`` provider: "Cannot build
  libfabric, since it is configured buildable:false" after a two-minute solve;
* an ``nccl`` pin on a site without GPUs, or its aws-ofi-nccl plugin off Slingshot;
* a Slingshot pin that is no vouched NCCL/aws-ofi-nccl pair (:mod:`torchmpi.pairs`);
* :func:`notes`: what render tells the admin about a libfabric whose major
  version no vouched pair names (a note, not a refusal).
"""

from __future__ import annotations

import re
from typing import Any

from torchmpi import gpuvendor, pairs
from torchmpi.autokeys import LOCAL
from torchmpi.checks.common import Problem


def _libfabric(data: dict[str, Any]) -> list[Problem]:
    lib = data.get("libfabric")
    if data.get("fabric") != "slingshot" or not isinstance(lib, dict):
        return []
    spec = str(lib.get("spec", ""))
    fabrics = re.search(r"\bfabrics=(\S+)", spec)
    if fabrics and "cxi" in fabrics.group(1).split(","):
        return []
    return [(("libfabric", "spec"), (
        f"{spec!r} lacks the cxi provider: nccl-ss11 needs libfabric fabrics=cxi and the"
        " site's libfabric is not buildable, so the solve would fail after minutes (\"Cannot"
        " build libfabric\"); allowed: the spec with fabrics=cxi (and the other providers it"
        " has), e.g. libfabric@1.15.2.0 fabrics=cxi"))]


def _listing(pairs: list[pairs.Pair], show: str) -> str:
    if not pairs:
        return "none"
    return "; ".join(f"{getattr(p, show)} ({p.label})" for p in pairs)

def _unvouched(nccl: dict) -> tuple[tuple, str] | None:
    """(key path, message) when a Slingshot site's ``nccl:`` pin is no vouched pair."""
    version, plugin = nccl.get("version"), nccl.get("plugin")
    table = pairs.vouched()
    with_nccl = [p for p in table if p.nccl == version]
    if not with_nccl:
        known = ", ".join(dict.fromkeys(p.nccl for p in table))
        return ("nccl", "version"), (
            f"NCCL {version} is in no vouched NCCL/aws-ofi-nccl pair, so nccl-ss11 cannot"
            f" build it for Slingshot; allowed: {known} (docs/design.md)")
    if plugin is None or any(p.plugin == plugin for p in with_nccl):
        return None
    with_plugin = [p for p in table if p.plugin == plugin]
    return ("nccl", "plugin"), (
        f"aws-ofi-nccl {plugin} with NCCL {version} is not a vouched pair; allowed with"
        f" NCCL {version}: {_listing(with_nccl, 'plugin')}; vouched with aws-ofi-nccl"
        f" {plugin}: {_listing(with_plugin, 'nccl')} (docs/design.md)")


def libfabric_release(data: dict[str, Any]) -> str | None:
    """The release ``libfabric.spec`` names (``libfabric@1.22.0 fabrics=cxi``: ``1.22.0``);
    None without one.  A site that loads libfabric by module names nothing else."""
    lib = data.get("libfabric")
    found = re.match(r"libfabric@(\d\S*)", str(lib.get("spec", ""))) \
        if isinstance(lib, dict) else None
    return found.group(1) if found else None


def notes(data: dict[str, Any]) -> list[str]:
    """What to tell the admin at render about a file that loads, one line each.

    A Slingshot site whose libfabric's major version differs from the one the
    chosen NCCL/aws-ofi-nccl pair is vouched with (libfabric 1.15 against a pair
    CSCS deployed with 2.4.0): nothing vouches for that combination, and a pair
    vouched with the site's major is named where there is one.  A note, not an error:
    the pair may well work (the plugin's libfabric ABI is stable), but no
    source says so.  Only where the table serves the site's GPUs (:data:`pairs.VENDOR`):
    a site whose collectives are another vendor's gets none of its pairs.
    """
    lib = data.get("libfabric")
    if data.get("fabric") != "slingshot" or not isinstance(lib, dict):
        return []
    if gpuvendor.of(data) != pairs.VENDOR:
        return []
    release = libfabric_release(data)
    chosen = pairs.choose(dict(data.get("nccl") or {}))
    if not release or chosen is None or not re.match(r"\d+", chosen.libfabric):
        return []
    have, ran = re.match(r"\d+", release).group(0), chosen.libfabric.split(".")[0]
    if have == ran:
        return []
    minor = ".".join(re.findall(r"\d+", release)[:2])
    same = sorted((p for p in pairs.vouched() if p.fabric == "slingshot"
                   and p.libfabric.split(".")[0] == have),  # the site's minor first
                  key=lambda p: ".".join(p.libfabric.split(".")[:2]) != minor)
    hint = (f"; a pair vouched with libfabric {have}.x: nccl: {{version: {same[0].nccl}, plugin:"
            f" {same[0].plugin}}} ({same[0].label})"
            if same else f"; no vouched pair names libfabric {have}.x")
    return [(f"libfabric {release}: NCCL {chosen.nccl} with"
             f" aws-ofi-nccl {chosen.plugin} was {chosen.label}"
             f", and no source vouches for it with libfabric"
             f" {have}.x{hint} (docs/design.md)")]


def _nccl(data: dict[str, Any]) -> list[Problem]:
    """An ``nccl`` pin without GPUs; the aws-ofi-nccl plugin off Slingshot."""
    errors: list[Problem] = []
    nccl = data.get("nccl") or {}
    if nccl and data.get("gpu") in (None, "auto") and data.get("name") != LOCAL:
        errors.append((("nccl",), "NCCL is for GPUs: this site has no 'gpu' section"))
    if nccl.get("plugin") and data.get("fabric") != "slingshot":
        errors.append((("nccl", "plugin"), (
            "the aws-ofi-nccl plugin is only built for fabric: slingshot"
            f" (this site says fabric: {data.get('fabric')})")))
    return errors


def _pair(data: dict[str, Any]) -> list[Problem]:
    """A Slingshot site's ``nccl`` pin that is no vouched NCCL/aws-ofi-nccl pair."""
    nccl = data.get("nccl") or {}
    if not (nccl and data.get("fabric") == "slingshot"):
        return []
    unvouched = _unvouched(nccl)
    return [unvouched] if unvouched else []


def problems(data: dict[str, Any], build: bool) -> list[Problem]:
    """NCCL's rules always; libfabric's providers and the vouched pairs (what Spack will
    build) where it builds (``build``)."""
    out = _nccl(data)
    return out + _libfabric(data) + _pair(data) if build else out
