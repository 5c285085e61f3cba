"""Is this host the site?  And what does a lock solved elsewhere not show?

A directory such as ``/glade`` proves nothing: anyone (or an earlier, buggy
test) can create it.  The evidence that a host *is* the site is what the site
file says is installed there: each compiler's executables and the prefixes of
its MPI, CUDA, cuDNN, libfabric and other externals.  The host counts as the
site only when every one of those paths exists (and the file names at least
one).  Off the site, ``torchmpi concretize`` solves against a private install
tree, labels the lock an *off-site preview*, and lists what such a lock cannot
show (:func:`differences`): Spack 1.1 only uses a compiler it can run and only
the libc that compiler links, so an off-site lock carries this host's OS, libc
and compiler-runtime nodes, not the site's.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

from torchmpi.errors import UserError


def _compilers(data: dict[str, Any]) -> list[dict[str, Any]]:
    comps = data.get("compilers")
    return comps if isinstance(comps, list) else []


def evidence(data: dict[str, Any]) -> list[Path]:
    """Paths that exist on the site's login nodes, from the site file."""
    paths: list[str] = []
    for comp in _compilers(data):
        languages = comp.get("languages") or {}
        paths += [p for p in languages.values() if isinstance(p, str)]
        if not languages and comp.get("prefix"):
            paths.append(comp["prefix"])
    gpu = data.get("gpu") if isinstance(data.get("gpu"), dict) else {}
    for entry in (data.get("mpi") or {}, gpu.get("cuda") or {}, gpu.get("cudnn") or {},
                  data.get("libfabric") or {}, *(data.get("externals") or [])):
        if isinstance(entry, dict) and entry.get("prefix"):
            paths.append(entry["prefix"])
    return [Path(p) for p in dict.fromkeys(paths)]


def missing(data: dict[str, Any]) -> list[Path]:
    """The site's evidence paths that this host lacks."""
    return [p for p in evidence(data) if not p.exists()]


def on_site(data: dict[str, Any]) -> bool:
    """Whether this host is the site: it has every path the site file names."""
    return bool(evidence(data)) and not missing(data)


def compiler_version(executable: Path) -> str | None:
    """The full version a GCC-compatible ``executable`` reports, or None."""
    try:
        proc = subprocess.run([str(executable), "-dumpfullversion", "-dumpversion"],
                              capture_output=True, text=True, timeout=30, check=False)
    except OSError:
        return None
    out = proc.stdout.strip()
    return out if proc.returncode == 0 and re.fullmatch(r"\d+(\.\d+)*", out) else None


def compiler_mismatches(data: dict[str, Any], path: Path) -> list[str]:
    """Compilers whose executable here reports another version than the site file states.

    Spack trusts the version written in packages.yaml: a ``gcc@12.3.0`` whose
    ``bin/gcc`` is 12.2.0 would be recorded as 12.3.0 in every node it builds.
    """
    problems = []
    for i, comp in enumerate(_compilers(data)):
        name, _, stated = str(comp.get("spec", "")).partition("@")
        cc = (comp.get("languages") or {}).get("c")
        if name != "gcc" or not cc or not Path(cc).exists():
            continue
        found = compiler_version(Path(cc))
        if found and found != stated:
            problems.append(f"{path}: compilers[{i}].spec: states {name}@{stated}, but {cc} "
                            f"reports {found}; write {name}@{found} or point languages.c at "
                            f"the {stated} compiler")
    return problems


def check_compilers(data: dict[str, Any], path: Path) -> None:
    """Raise a UserError when this host is the site and a compiler contradicts the site file."""
    if not on_site(data):
        return
    problems = compiler_mismatches(data, path)
    if problems:
        raise UserError("\n".join(problems))


#: The package each builtin compiler's ``runtime_constraints`` adds as a link
#: dependency of whatever it compiles (builtin gcc and intel-oneapi-compilers
#: are the two that define it in spack-packages v2026.06.0); Spack 1.1 also
#: adds ``compiler-wrapper`` as a build dependency for every compiler it uses.
RUNTIME_PACKAGES = {"gcc": "gcc-runtime", "intel-oneapi-compilers": "intel-oneapi-runtime"}

_LANGUAGES = frozenset(("c", "cxx", "fortran"))


def _runtime_gap(lock: Any, spec: str) -> str | None:
    """A line when nodes compiled by the site compiler ``spec`` lack its runtime nodes.

    Spack 1.1 keeps an external compiler it cannot run as a node (it compiles
    the DAG), but injects the runtime dependencies only for compilers it can
    run (``define_runtime_constraints`` loops over the accepted ones), so such
    a lock has neither gcc-runtime nor compiler-wrapper: every node built by
    the compiler gets another hash on the site.
    """
    name, _, version = spec.partition("@")
    compilers = {h for h, n in lock.nodes.items() if n.name == name and n.version == version}
    runtime = RUNTIME_PACKAGES.get(name)
    wanted = ([runtime] if runtime else []) + ["compiler-wrapper"]
    lacking = [node for node in lock.nodes.values()
               if any(h in compilers and _LANGUAGES & set(v) for _, h, v in node.deps)
               and not set(wanted) <= {dep for dep, _, _ in node.deps}]
    if not lacking:
        return None
    names = " and ".join(([f"{runtime}@{version}"] if runtime else []) + ["compiler-wrapper"])
    return (f"compiler runtime: {len(lacking)} node(s) compiled by {spec} here have no "
            f"{names} dependency (Spack 1.1 adds them only for a compiler it can run); on "
            "the site each of these nodes gets them, so its hash differs")


def differences(data: dict[str, Any], lock: Any) -> list[str]:
    """What an off-site lock shows that the site would not build, one line each.

    ``lock`` is a :class:`torchmpi.lock.Lock`.  Empty on the site itself.
    """
    if on_site(data):
        return []
    out = ["install tree: a private store, not the site's (no reuse of its installs)"]
    built = [n for n in lock.nodes.values() if not n.external]
    oses = sorted({n.os for n in built if n.os})
    if data.get("os") and oses != [data["os"]]:
        out.append(f"os: the lock says {', '.join(oses) or '-'}; the site's nodes run "
                   f"{data['os']}")
    elif oses and not data.get("os"):
        out.append(f"os: the lock says {', '.join(oses)} (this host's); the site file states "
                   "none (key `os`)")
    libcs = sorted({n.label for n in lock.nodes.values() if n.name in ("glibc", "musl")})
    site_libc = data.get("libc")
    if not libcs and built:
        out.append("libc: the lock has no libc node (Spack 1.1 takes the libc from a compiler "
                   "it can run); on the site every built node links "
                   + (site_libc or "the compute nodes' libc (state it: key `libc`)"))
    elif site_libc and libcs != [site_libc]:
        out.append(f"libc: the lock has {', '.join(libcs) or 'none'}; the site has {site_libc}")
    elif libcs and not site_libc:
        out.append(f"libc: the lock has {', '.join(libcs)} from this host")
    lock_compilers = {n.label for n in lock.nodes.values()
                      if n.name in ("gcc", "llvm", "intel-oneapi-compilers", "nvhpc", "cce")}
    for comp in _compilers(data):
        spec = str(comp.get("spec", ""))
        cc = (comp.get("languages") or {}).get("c")
        if spec not in lock_compilers:
            out.append(f"compiler: the site's {spec} cannot run here, so Spack did not use it "
                       f"(lock compilers: {', '.join(sorted(lock_compilers)) or 'none'}); "
                       "the site also gets gcc-runtime/compiler-wrapper nodes for it")
        elif cc and Path(cc).exists():
            found = compiler_version(Path(cc))
            if found and not spec.endswith("@" + found):
                out.append(f"compiler: {spec} was solved with this host's {cc}, which is "
                           f"{found}, not the site's compiler")
        missing_runtime = _runtime_gap(lock, spec)
        if missing_runtime:
            out.append(missing_runtime)
    absent = missing(data)
    if absent:
        shown = ", ".join(str(p) for p in absent[:3]) + (" ..." if len(absent) > 3 else "")
        out.append(f"externals: {len(absent)} site path(s) absent here ({shown}); Spack "
                   "trusts packages.yaml, so their nodes are as the site file states")
    return out
