"""The site's compilers: the version their paths show, and their target.

* a compiler version that the compiler's own paths contradict (typically
  taken from a module name such as ``gcc-native/12.3``; in a Spack install
  tree only the innermost ``<name>-<version>-<hash>`` counts, and
  ``path_version: false`` turns the rule off for a layout it misreads);
* a compiler ``target`` other than the site's (``aarch64`` for a
  ``neoverse_v2`` site: "Version requirement ... on c for gcc cannot match any
  known version", since every package, the compiler included, must have the
  site's target).
"""

from __future__ import annotations

import re
from typing import Any

from torchmpi.checks.common import Problem, vtuple

#: A gcc version inside a path: ``gcc/12.2.0/``, ``gcc-12.2.0``, ``gcc-12``.
_PATH_VERSION = re.compile(r"gcc[-/@](\d+(?:\.\d+){0,2})(?![\d.]*\d)")

#: A path component Spack's default install layout gives a package:
#: ``<name>-<version>-<hash>`` (``{name}-{version}-{hash}`` in
#: spack/spack lib/spack/spack/directory_layout.py; the hash is base32,
#: possibly shortened by a projection such as ``{hash:7}``).
_SPACK_DIR = re.compile(r"[a-z0-9][a-z0-9_-]*?-\d[\w.]*-[a-z0-9]{7,32}")

def _own_part(place: str) -> str:
    """The part of ``place`` that can name its own compiler's version.

    In a Spack install tree a gcc lives at ``.../gcc-8.5.0/gcc-11.4.0-<hash>``:
    the directory before the innermost ``<name>-<version>-<hash>`` names the
    compiler that built it, not this one, so only that component and what
    follows it are read.
    """
    parts = place.split("/")
    for i in range(len(parts) - 1, -1, -1):
        if _SPACK_DIR.fullmatch(parts[i]):
            return "/".join(parts[i:])
    return place

def _compilers(data: dict[str, Any]) -> list[Problem]:
    """A compiler version its own paths contradict; a compiler target other than the site's."""
    out: list[Problem] = []
    comps = data.get("compilers")
    if not isinstance(comps, list):
        return out
    target = data.get("target")
    for i, comp in enumerate(comps):
        spec = str(comp.get("spec", ""))
        version = spec.partition("@")[2]
        places = [comp.get("prefix") or ""] + list((comp.get("languages") or {}).values())
        if comp.get("path_version") is False:  # the site says its paths mislead the rule
            places = []
        for place in places:
            for seen in _PATH_VERSION.findall(_own_part(str(place))):
                if vtuple(version)[:len(vtuple(seen))] == vtuple(seen):
                    continue
                taken = [m for m in comp.get("modules") or []
                         if vtuple(m.rpartition("/")[2])
                         and vtuple(version)[:len(vtuple(m.rpartition("/")[2]))]
                         == vtuple(m.rpartition("/")[2])]
                why = f" (it looks taken from the module {taken[0]})" if taken else ""
                out.append(((("compilers", i, "spec")), (
                    f"{spec}{why} contradicts {place}, a gcc {seen}; allowed: the version"
                    f" `{(comp.get('languages') or {}).get('c', 'gcc')} -dumpfullversion`"
                    " prints on the site")))
                break
            else:
                continue
            break
        ctarget = comp.get("target")
        known = ctarget in _archspec_names()  # an unknown name has its own error
        if known and target not in (None, "auto") and ctarget != target:
            out.append((("compilers", i, "target"), (
                f"{ctarget!r} differs from the site's target {target!r}: packages.yaml requires"
                f" target={target} of every package, the compiler's external included, so"
                " the solve finds no gcc (\"Version requirement ... on c for gcc cannot match"
                f" any known version\"); allowed: {target}")))
    return out

def _archspec_names() -> set[str]:
    import archspec.cpu

    return set(archspec.cpu.TARGETS)


def problems(data: dict[str, Any], build: bool) -> list[Problem]:
    """Rules for what a solve would find late: applied where Spack builds (``build``)."""
    return _compilers(data) if build else []
