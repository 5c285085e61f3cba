"""Render a site into a Spack environment directory, deterministically.

The files are built as data (:mod:`torchmpi.spackenv`, :mod:`torchmpi.modules`,
:mod:`torchmpi.runtime`) and written with a YAML emitter and
:func:`shlex.quote`; free text reaches only comment lines, escaped
(:mod:`torchmpi.yamltext`).  Each file is parsed back before it is returned --
YAML must load to the data it was built from, runtime.sh must pass ``bash -n``
-- so a file that does not parse never replaces a good one.

Each rendered file starts with a header: the tool version, the site file (by
its path relative to the checkout), the Spack and builtin-repo pins, the sha256
of the site file and the sha256 of the body below the header.  The body hash
is how a hand edit is recognised: a file whose body no longer matches its own
recorded hash was changed after rendering, and is only overwritten with
``--force``.  Files are written to a temporary name in the same directory and
renamed, so an interrupted render never leaves half a file; all checks run
before the first write, so a refused render writes nothing.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from torchmpi import __version__, paths, runtime, spackenv
from torchmpi import modules as modmod
from torchmpi.errors import InternalError, UserError
from torchmpi.site import Site
from torchmpi.yamltext import comment, document

#: Rendered files, in the order they are written and diffed.
FILES = ("spack.yaml", "packages.yaml", "modules.yaml", "runtime.sh")

_BODY_RE = re.compile(r"^# body-sha256: ([0-9a-f]{64})$", re.MULTILINE)
_SITE_RE = re.compile(r"^# Rendered by torchmpi \S+ from (.+?); do not edit by hand:$",
                      re.MULTILINE)


def site_label(site: Site) -> str:
    """The site file as the header names it: relative to the checkout, else its file name."""
    root = paths.root()
    for path, base in ((site.path.absolute(), root), (site.path.resolve(), root.resolve())):
        try:
            return path.relative_to(base).as_posix()
        except ValueError:
            continue
    return site.path.name


def header(site: Site, body: str) -> str:
    pins = paths.pins()
    return comment(
        f"Rendered by torchmpi {__version__} from {site_label(site)}; do not edit by hand:",
        f"change the site file and run `torchmpi render {site.name}` (docs/sites.md).",
        f"spack {pins.get('TORCHMPI_SPACK_TAG', '?')},"
        f" builtin spack-packages {pins.get('TORCHMPI_SPACK_PACKAGES_TAG', '?')}",
        f"site-sha256: {site.sha256}",
        f"body-sha256: {hashlib.sha256(body.encode()).hexdigest()}",
    )


def runtime_sh(site: Site) -> str:
    """runtime.sh: one ``export`` per variable of :func:`torchmpi.runtime.resolve`."""
    rt = runtime.resolve(site.data)
    lines = [(f"Runtime variables for jobs on '{site.name}'"
              f" (launcher: {site.data['launcher']}, fabric: {site.data['fabric']})."),
             "Source this file in the job script; it changes nothing at build time."]
    if not rt:
        return comment(*lines, "No runtime variables for this site.")
    lines += [f"{what}: {source}" for what, source in rt.sources if source]
    return comment(*lines) + "".join(line + "\n" for line in runtime.shell_lines(rt))


def _check_shell(text: str) -> None:
    """``bash -n``: runtime.sh must at least parse (skipped where there is no bash)."""
    bash = shutil.which("bash")
    if not bash:
        return
    proc = subprocess.run([bash, "-n"], input=text, capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        raise InternalError(f"runtime.sh: the rendered text does not parse"
                            f" ({proc.stderr.strip()}); nothing was written"
                            " (a torchmpi bug, please report it)")


def bodies(site: Site, outdir: Path) -> dict[str, str]:
    """File name -> body (below the header), each parsed back before it is returned."""
    out = {}
    parts, expected = spackenv.spack_yaml(site, outdir)
    out["spack.yaml"] = document(parts, expected, "spack.yaml")
    parts, expected = spackenv.packages_yaml(site)
    out["packages.yaml"] = document(parts, expected, "packages.yaml")
    parts, expected = modmod.parts(site)
    out["modules.yaml"] = document(parts, expected, "modules.yaml")
    out["runtime.sh"] = runtime_sh(site)
    _check_shell(out["runtime.sh"])
    return out


def render(site: Site, outdir: Path) -> dict[str, str]:
    """File name -> full text (header + body) for one site."""
    return {name: header(site, body) + body for name, body in bodies(site, outdir).items()}


def hand_edited(text: str) -> bool:
    """True if a file is not ours or its body was changed after rendering."""
    match = _BODY_RE.search(text)
    if not match:
        return True
    body = text[match.end() + 1:]
    return hashlib.sha256(body.encode()).hexdigest() != match.group(1)


@dataclass
class Result:
    written: list[str]


def diff(outdir: Path, files: dict[str, str]) -> str:
    """Unified diff, committed -> fresh render; empty when they agree."""
    chunks = []
    for name, new in files.items():
        path = outdir / name
        old = path.read_text() if path.is_file() else ""
        if old != new:
            chunks.extend(difflib.unified_diff(
                old.splitlines(keepends=True), new.splitlines(keepends=True),
                fromfile=f"{path} (on disk)" if old else f"{path} (missing)",
                tofile=f"{path} (fresh render)",
            ))
    return "".join(chunks)


def rendered_from(text: str) -> str | None:
    """The site file a rendered file names in its header, or None for a file not ours."""
    match = _SITE_RE.search(text)
    return match.group(1) if match else None


def write(outdir: Path, files: dict[str, str], force: bool = False) -> Result:
    """Write the rendered files atomically.

    Refused without ``force``: a file edited by hand, and a file rendered from
    another site file (``render A -o environments/B`` must not replace B's
    environment silently).
    """
    try:
        outdir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"{outdir}: cannot create the output directory: {err.strerror}") from None
    if not os.access(outdir, os.W_OK | os.X_OK):
        raise UserError(f"{outdir}: output directory is not writable")
    changed, edited, foreign = [], [], set()
    for name, text in files.items():
        path = outdir / name
        try:
            old = path.read_text() if path.is_file() else None
        except (OSError, UnicodeDecodeError):
            old = ""  # unreadable or not text: not ours, treat as edited
        if old == text:
            continue
        if old is not None and hand_edited(old):
            edited.append(name)
        elif old is not None and rendered_from(old) != rendered_from(text):
            foreign.add(rendered_from(old))
        changed.append(name)
    if edited and not force:
        raise UserError(
            f"{outdir}: {', '.join(edited)} edited by hand since it was rendered;"
            " move the change into the site file, or re-run with --force to overwrite it"
        )
    if foreign and not force:
        raise UserError(
            f"{outdir}: rendered from {', '.join(sorted(foreign))}, not from"
            f" {rendered_from(next(iter(files.values())))}; choose another output directory,"
            " or re-run with --force to replace that environment"
        )
    replace_files(outdir, {name: files[name] for name in changed})
    return Result(written=changed)


def replace_files(outdir: Path, files: dict[str, str], modes: dict[str, int] | None = None,
                  ) -> None:
    """Replace ``outdir/NAME`` with each text, all or none.

    Every text goes to a temporary file beside its destination first; only when
    all are written are they renamed into place (a rename within a directory is
    atomic), so a full disk or a kill midway leaves every old file whole and no
    temporary file behind.  The one writer of every verb that writes files.
    """
    temps = []
    try:
        for name, text in files.items():
            fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=outdir)
            temps.append((tmp, outdir / name))  # before writing: a failed write is removed too
            with os.fdopen(fd, "w") as fh:
                fh.write(text)
            os.chmod(tmp, (modes or {}).get(name, 0o644))
    except OSError as err:
        for tmp, _ in temps:
            os.unlink(tmp)
        raise UserError(f"{outdir}: cannot write: {err.strerror}") from None
    for tmp, dest in temps:
        os.replace(tmp, dest)


def default_outdir(site: Site) -> Path:
    return paths.environments_dir() / site.name
