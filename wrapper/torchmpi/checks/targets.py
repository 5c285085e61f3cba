"""CPU targets: the site's ``target`` and each compiler's, as archspec names them.

A name archspec does not know is refused with the close ones, and a vendor's
CPU name (``grace``, ``milan``) with the archspec name for it.  Whether a
compiler's target is the site's is :mod:`torchmpi.checks.compilers`.
"""

from __future__ import annotations

import difflib
import re
from typing import Any

from torchmpi.autokeys import LOCAL
from torchmpi.checks.common import Problem

#: CPU names from vendors' product pages, for the archspec microarchitecture
#: (archspec-json microarchitectures.json) of that CPU.  archspec has none of
#: these names, and difflib finds no close archspec name for them.
VENDOR_CPUS = {
    "grace": "neoverse_v2",  # NVIDIA Grace: Arm Neoverse V2 cores
    "gh200": "neoverse_v2",
    "gb200": "neoverse_v2",
    "graviton2": "neoverse_n1",
    "graviton3": "neoverse_v1",
    "graviton4": "neoverse_v2",
    "naples": "zen",
    "rome": "zen2",
    "milan": "zen3",
    "trento": "zen3",  # Frontier's and LUMI-G's custom EPYC 7A53: Zen 3
    "genoa": "zen4",
    "bergamo": "zen4",
    "turin": "zen5",
    "skylake-sp": "skylake_avx512",
    "cascade-lake": "cascadelake",
    "ice-lake": "icelake",
    "sapphire-rapids": "sapphirerapids",
    "spr": "sapphirerapids",
}

def vendor_hint(value: str) -> str | None:
    """The archspec name for a vendor's CPU name (``grace`` -> ``neoverse_v2``), or None."""
    key = re.sub(r"[\s_]+", "-", value.strip().lower())
    for prefix in ("amd-", "epyc-", "nvidia-", "intel-", "xeon-", "aws-"):
        key = key.removeprefix(prefix)
    return VENDOR_CPUS.get(key) or VENDOR_CPUS.get(key.replace("-", ""))


def target_error(value: Any, what: str) -> str | None:
    """Why ``value`` is not an archspec microarchitecture (with close names), or None."""
    import archspec.cpu

    if not isinstance(value, str) or value in archspec.cpu.TARGETS:
        return None
    vendor = vendor_hint(value)
    close = [vendor] if vendor else difflib.get_close_matches(
        value, list(archspec.cpu.TARGETS), n=3, cutoff=0.6)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    if vendor:
        hint = f"{value!r} is a vendor's name; did you mean {vendor}? "
    return (f"{value!r} is not a microarchitecture archspec knows; {hint}allowed: {what}"
            "an archspec name such as zen3, zen4, icelake, sapphirerapids, neoverse_v2,"
            " x86_64_v3 (`spack arch -t` on a compute node prints it)")


def problems(data: dict[str, Any], build: bool) -> list[Problem]:
    """The site's and each compiler's ``target``, where archspec does not know it."""
    errors: list[Problem] = []
    local = data.get("name") == LOCAL
    target = data.get("target")
    why = target_error(target, "'auto' (this host) or " if local else "")
    if target != "auto" and why:
        errors.append((("target",), why))
    for i, comp in enumerate(data["compilers"] if isinstance(data["compilers"], list) else []):
        why = target_error(comp.get("target"), "")
        if why:
            errors.append((("compilers", i, "target"), why))
    return errors
