"""What a site file names that the site no longer has, and what it has instead.

Site files age: a centre moves to a new programming environment and the
prefixes, compilers and modules a file names disappear (Perlmutter's did).
Run on the site's login node, :func:`check` lists every external prefix,
compiler executable and module the file names that is missing, and where it
can tell, what the centre offers in its place:

* a path: the nearest directory that still exists, and its entries that look
  like other versions of the missing one (``8.1.30`` beside a missing
  ``8.1.27``), with the rest of the path followed under each when it exists;
* a compiler whose executable is there but reports another version;
* an external whose prefix is there (``/usr`` always is) but whose tools
  report another version: an OS update moves ``tar@1.34`` to 1.35 without a
  path going missing.  Spack's own detection (``spack external find --path
  <prefix>/bin``, run by :func:`detected_versions` with a throw-away scope)
  reads the versions, as it would when the site's externals were written;
* a module: through Lmod's ``spider`` (the whole hierarchy, not only what is
  loadable now), the other versions of the same name.

``root`` re-roots every path (a mounted image of the site, or a stand-in tree
in tests); nothing is created.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchmpi import offsite

#: Debian's and the usual Lmod install location, when ``LMOD_CMD`` is unset.
LMOD_DEFAULT = "/usr/share/lmod/lmod/libexec/lmod"


@dataclass
class Finding:
    """One thing the site file names, missing (or changed) on this host."""

    key: tuple  # key path in the site file
    kind: str  # "path", "compiler", "module" or "version"
    named: str
    problem: str
    offered: list[str] = field(default_factory=list)


def _entries(data: dict[str, Any]) -> list[tuple[tuple, dict[str, Any]]]:
    """(key path, mapping) of everything external: compilers, MPI, CUDA, cuDNN, libfabric, ..."""
    out: list[tuple[tuple, dict[str, Any]]] = []
    for i, comp in enumerate(data.get("compilers") if isinstance(data.get("compilers"),
                                                                 list) else []):
        out.append((("compilers", i), comp))
    if isinstance(data.get("mpi"), dict):
        out.append((("mpi",), data["mpi"]))
    gpu = data.get("gpu") if isinstance(data.get("gpu"), dict) else {}
    for key in ("cuda", "cudnn"):
        if isinstance(gpu.get(key), dict):
            out.append((("gpu", key), gpu[key]))
    if isinstance(data.get("libfabric"), dict):
        out.append((("libfabric",), data["libfabric"]))
    for i, ext in enumerate(data.get("externals") if isinstance(data.get("externals"),
                                                                list) else []):
        out.append((("externals", i), ext))
    return out


def _vkey(name: str) -> tuple:
    return tuple(int(p) for p in re.findall(r"\d+", name))


def _stem(name: str) -> str:
    """The text before a name's first digit (``cuda-12.2`` -> ``cuda-``)."""
    return re.split(r"\d", name, maxsplit=1)[0]


def offered_paths(missing: Path, root: Path) -> list[str]:
    """Other versions of ``missing`` that the site has, as site paths (not re-rooted)."""
    parts = missing.parts
    here = root
    for depth, part in enumerate(parts[1:], start=1):
        if not (here / part).exists():
            break
        here = here / part
    else:
        return []
    gone, rest = parts[depth], parts[depth + 1:]
    if not re.search(r"\d", gone) or not here.is_dir():
        return []
    siblings = [p for p in here.iterdir() if p.is_dir() and re.search(r"\d", p.name)
                and _stem(p.name) == _stem(gone)]
    out = []
    for sib in sorted(siblings, key=lambda p: _vkey(p.name), reverse=True):
        whole = sib.joinpath(*rest)
        site_path = Path(*parts[:depth], sib.name, *rest) if whole.exists() \
            else Path(*parts[:depth], sib.name)
        out.append(str(site_path))
    return out


def nearest(missing: Path, root: Path) -> str:
    """The deepest directory of ``missing`` that exists (as a site path)."""
    for parent in missing.parents:
        if _rooted(str(parent), root).exists():
            return str(parent)
    return missing.anchor


def _missing(path: str, root: Path) -> str:
    return f"missing (nearest that exists: {nearest(Path(path), root)})"


def _rooted(path: str, root: Path) -> Path:
    p = Path(path)
    return root / p.relative_to(p.anchor) if p.is_absolute() else root / p


def _lmod() -> str | None:
    cmd = os.environ.get("LMOD_CMD") or LMOD_DEFAULT
    return cmd if shutil.which(cmd) or Path(cmd).is_file() else None


def available_modules(lmod: str) -> set[str] | None:
    """Every module Lmod's ``spider`` finds from the current MODULEPATH, or None."""
    try:
        proc = subprocess.run([lmod, "bash", "-t", "spider"], capture_output=True, text=True,
                              timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    names = set()
    for line in proc.stderr.splitlines():
        line = line.strip()
        if line and not line.endswith((":", "/")) and " " not in line:
            names.add(line)
    return names


def check(data: dict[str, Any], root: Path = Path("/"),
          modules: set[str] | None = None) -> list[Finding]:
    """Everything the site file names that this host (under ``root``) lacks.

    ``modules``: the modules the site has (Lmod's spider); None skips modules.
    """
    found: list[Finding] = []
    for key, entry in _entries(data):
        prefix = entry.get("prefix")
        if isinstance(prefix, str) and not _rooted(prefix, root).exists():
            found.append(Finding(key + ("prefix",), "path", prefix, _missing(prefix, root),
                                 offered_paths(Path(prefix), root)))
        languages = entry.get("languages") or {}
        for lang, exe in languages.items():
            where = _rooted(exe, root)
            if not where.exists():
                found.append(Finding(key + ("languages", lang), "compiler", exe,
                                     _missing(exe, root),
                                     offered_paths(Path(exe), root)))
            elif lang == "c":
                stated = str(entry.get("spec", "")).partition("@")[2]
                version = offsite.compiler_version(where)
                if version and stated and version != stated:
                    found.append(Finding(key + ("spec",), "compiler", entry["spec"],
                                         f"{exe} reports {version}",
                                         [f"gcc@{version}"]))
        if modules is None:
            continue
        for i, name in enumerate(entry.get("modules") or []):
            if name in modules:
                continue
            family = name.rpartition("/")[0] or name
            others = sorted((m for m in modules if m.rpartition("/")[0] == family),
                            key=lambda m: _vkey(m), reverse=True)
            found.append(Finding(key + ("modules", i), "module", name,
                                 "not found by `module spider`", others))
    return found


def _versioned_externals(data: dict[str, Any], root: Path) -> list[tuple[tuple, str, str, str]]:
    """(key, package, stated version, prefix) of each ``externals`` entry whose
    prefix is here and states a numbered version (``hwloc@os`` is not one)."""
    out = []
    for key, entry in _entries(data):
        spec, prefix = str(entry.get("spec", "")), entry.get("prefix")
        found = re.match(r"([a-z0-9-]+)@=?(\d[\w.-]*)", spec)
        if key[0] == "externals" and found and isinstance(prefix, str) \
                and _rooted(prefix, root).is_dir():
            out.append((key, found.group(1), found.group(2), prefix))
    return out


def detected_versions(names: list[str], bindir: Path) -> dict[str, list[str]] | None:
    """Versions Spack's detection finds for packages ``names`` in ``bindir``
    (package -> versions); None when the pinned Spack cannot run here."""
    from torchmpi import spackrun
    from torchmpi.errors import UserError

    try:
        exe = spackrun.executable()
    except UserError:
        return None
    with tempfile.TemporaryDirectory(prefix="torchmpi-bump-versions-") as tmp:
        (Path(tmp) / "repos.yaml").write_text("repos:\n  builtin: ${TORCHMPI_BUILTIN_REPO}\n")
        env = dict(spackrun.environ(), SPACK_USER_CONFIG_PATH=tmp)
        try:
            subprocess.run([str(exe), "external", "find", "--scope", "user", "--path",
                            str(bindir), *names], env=env, capture_output=True, text=True,
                           timeout=600, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
        found = Path(tmp) / "packages.yaml"
        text = found.read_text() if found.is_file() else ""
    # packages.yaml as Spack writes it: "  <name>:" then "    - spec: <name>@<version> ...".
    out: dict[str, list[str]] = {}
    for spec in re.findall(r"^\s*- spec: (\S+)", text, re.MULTILINE):
        name, _, version = spec.partition("@")
        out.setdefault(name, []).append(re.split(r"[+~ ]", version)[0])
    return out


def version_drift(data: dict[str, Any], root: Path = Path("/")) -> list[Finding] | None:
    """Externals present here whose tools report another version than the file
    states; None when Spack's detection could not run."""
    by_prefix: dict[str, list[tuple[tuple, str, str, str]]] = {}
    for item in _versioned_externals(data, root):
        by_prefix.setdefault(item[3], []).append(item)
    found: list[Finding] = []
    for prefix, items in by_prefix.items():
        bindir = _rooted(prefix, root) / "bin"
        if not bindir.is_dir():
            continue
        seen = detected_versions(sorted({name for _, name, _, _ in items}), bindir)
        if seen is None:
            return None
        for key, name, stated, _ in items:
            versions = seen.get(name) or []
            if versions and not any(v == stated or v.startswith(stated + ".")
                                    for v in versions):
                found.append(Finding(
                    key + ("spec",), "version", f"{name}@{stated}",
                    f"{prefix} has {', '.join(f'{name}@{v}' for v in versions)}"
                    " (spack external find)", [f"{name}@{v}" for v in versions]))
    return found


def named_count(data: dict[str, Any]) -> dict[str, int]:
    """How many paths, compiler executables and modules the site file names."""
    counts = {"path": 0, "compiler": 0, "module": 0}
    for _, entry in _entries(data):
        counts["path"] += isinstance(entry.get("prefix"), str)
        counts["compiler"] += len(entry.get("languages") or {})
        counts["module"] += len(entry.get("modules") or [])
    return counts
