"""The one writer under every verb that writes files: header, parse-back, policy, folders.

``torchmpi render``, ``container``, ``reframe`` and ``venv`` build their files as
data and hand the bodies here; this module alone decides how they reach the disk:

* **the header** (:func:`assemble`): comment lines naming the tool version, the
  site file (for ``venv``, the lock or Python it pins: an :class:`Origin`), the
  verb that writes the file again, the pins (where the verb's wording has them),
  the site file's sha256 and the sha256 of the body below.
  A ``#!`` line stays first and is not part of the body.  The wording of each
  verb is data (:data:`WORDING`), kept as each verb has always written it.
* **one parse-back per format** (:mod:`torchmpi.parseback`), run on every body
  before any header is added, so a file that does not parse never exists;
* **one write policy** (:func:`write`): an unchanged file is left alone; a file
  there without our header, one whose body no longer has the sha256 its header
  recorded (edited by hand), and one written by another verb or from another
  site file are replaced only with ``--force``; all checks run before the first
  write, and the files are replaced all or none (:func:`replace_files`), so a
  refused or interrupted write leaves every old file whole (a file of another tool
  that a verb edits in place, a venv's ``bin/activate``, is replaced with them); a
  file with a ``#!`` line is written executable, every other one ``0644``;
* **one rule for default output folders** (:func:`outdir`): ``<checkout>/<folder
  of the verb>/<site>``, and only for the checkout's own site files -- a site file
  elsewhere needs ``-o``, so it can never replace a shipped site's files; and one
  check that the folder can be written, before any work (:func:`writable_outdir`).
"""

from __future__ import annotations

import difflib
import hashlib
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchmpi import __version__, parseback, paths, writable
from torchmpi.errors import UserError
from torchmpi.site import Site
from torchmpi.yamltext import comment

#: Each writing verb's header wording: the first line (which names the site file), the line
#: that says how to write the file again, and whether the Spack pins are recorded.
WORDING: dict[str, tuple[str, str, bool]] = {
    "render": ("Rendered by torchmpi {version} from {label}; do not edit by hand:",
               "change the site file and run `torchmpi render {name}` (docs/sites.md).", True),
    "container": ("Rendered by torchmpi {version} from {label}; do not edit by hand:",
                  ("change the site file and run `torchmpi container {name}`"
                   " (docs/containers.md)."), True),
    "reframe": ("Written by torchmpi reframe {version} from {file}; do not edit by hand:",
                "run `torchmpi reframe {name}` again after changing the site file.", False),
    "venv": ("Written by torchmpi venv {version} from {label}; do not edit by hand:",
             "run `torchmpi venv DIR` again to re-pin this venv (docs/users.md).", False),
}

#: Each writing verb's default output folder in the checkout, one directory per site.
FOLDERS = {"render": "environments", "container": "containers", "reframe": "reframe"}
#: What an error calls each verb's default folder when it cannot be written (a directory
#: given with -o is called by the flag).
FOLDER_NAMES = {"render": "environment directory", "container": "container directory",
                "reframe": "output directory"}

_BODY_RE = re.compile(r"^# body-sha256: ([0-9a-f]{64})$", re.MULTILINE)
_SITE_RE = re.compile(r"^# (?:Rendered|Written) by torchmpi .*? from (.+?); do not edit by hand:$",
                      re.MULTILINE)
_VERB_RE = re.compile(r"^# .*?run `torchmpi ([a-z][a-z-]*) ", re.MULTILINE)


# -- the header ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Origin:
    """What a file not rendered from a site file was written from (``torchmpi venv``: the
    spack.lock or the Python whose packages it pins): the three things a header reads
    of a :class:`Site`, so one header and one policy serve both."""
    path: Path
    name: str
    sha256: str


def site_label(site: Site | Origin) -> str:
    """The site file as the header names it: relative to the checkout, else its file name."""
    root = paths.root()
    for path, base in ((site.path.absolute(), root), (site.path.resolve(), root.resolve())):
        try:
            return path.relative_to(base).as_posix()
        except ValueError:
            continue
    return site.path.name


def header(verb: str, site: Site | Origin, body: str) -> str:
    """The provenance lines above ``body`` for a file ``torchmpi VERB`` writes."""
    first, again, with_pins = WORDING[verb]
    fill = {"version": __version__, "label": site_label(site), "file": site.path.name,
            "name": site.name}
    lines = [first.format(**fill), again.format(**fill)]
    if with_pins:
        pins = paths.pins()
        lines.append(f"spack {pins.get('TORCHMPI_SPACK_TAG', '?')},"
                     f" builtin spack-packages {pins.get('TORCHMPI_SPACK_PACKAGES_TAG', '?')}")
    lines += [f"{'source' if isinstance(site, Origin) else 'site'}-sha256: {site.sha256}",
              f"body-sha256: {hashlib.sha256(body.encode()).hexdigest()}"]
    return comment(*lines)


@dataclass(frozen=True)
class Body:
    """A file's text below the header, with the data it must load back to (None: only parse).

    For a Python file ``data`` maps each checked variable to its value.
    """
    text: str
    data: Any = None


def assemble(verb: str, site: Site | Origin, bodies: dict[str, str | Body]) -> dict[str, str]:
    """File name -> full text: each body parsed back by its format, then headed."""
    out = {}
    for name, body in bodies.items():
        text, data = (body.text, body.data) if isinstance(body, Body) else (body, None)
        parseback.check(name, text, data)
        first = ""
        if text.startswith("#!"):
            first, _, text = text.partition("\n")
            first += "\n"
        out[name] = first + header(verb, site, text) + text
    return out


def hand_edited(text: str) -> bool:
    """True if a file is not ours or its body was changed after it was written."""
    match = _BODY_RE.search(text)
    if not match:
        return True
    body = text[match.end() + 1:]
    return hashlib.sha256(body.encode()).hexdigest() != match.group(1)


def rendered_from(text: str) -> str | None:
    """The site file a written file names in its header, or None for a file not ours."""
    match = _SITE_RE.search(text)
    return match.group(1) if match else None


def written_by(text: str) -> str | None:
    """The verb whose header a file carries (``render``, ``container``, ``reframe``)."""
    match = _VERB_RE.search(text)
    return match.group(1) if match else None


# -- the write policy ------------------------------------------------------------------------

@dataclass
class Result:
    written: list[str]


def diff(outdir: Path, files: dict[str, str]) -> str:
    """Unified diff, on disk -> fresh render; empty when they agree."""
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


def mode(text: str) -> int:
    """A script with a ``#!`` line is run by name, so it is executable; the rest is data."""
    return 0o755 if text.startswith("#!") else 0o644


def write(outdir: Path, files: dict[str, str], force: bool = False,
          theirs: dict[str, str] | None = None) -> Result:
    """Write the files (full texts from :func:`assemble`), all or none.

    Refused without ``force``, before anything is written: a file there without
    our header, one edited by hand, one written by another verb, and one written
    from another site file (``render A -o environments/B`` must not replace B's
    environment silently).  ``theirs`` (name -> full text) are files of another
    tool that the verb edits in place (a venv's ``bin/activate``): no header, so
    no policy, but replaced together with ``files``, all or none.
    """
    try:
        outdir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"{outdir}: cannot create the output directory: {err.strerror}") from None
    if not os.access(outdir, os.W_OK | os.X_OK):
        raise UserError(f"{outdir}: output directory is not writable")
    first = next(iter(files.values()), "")
    verb, label = written_by(first), rendered_from(first)
    changed, alien, edited, other_verb, other_site = [], [], [], set(), set()
    for name, text in files.items():
        path = outdir / name
        try:
            old = path.read_text() if path.is_file() else None
        except (OSError, UnicodeDecodeError):
            old = ""  # unreadable or not text: not ours
        if old == text:
            continue
        changed.append(name)
        if old is None:
            continue
        if written_by(old) is None:
            alien.append(name)
        elif hand_edited(old):
            edited.append(name)
        elif written_by(old) != verb:
            other_verb.add(written_by(old))
        elif rendered_from(old) != label:
            other_site.add(rendered_from(old))
    refusal = _refusal(verb, label, alien, edited, other_verb, other_site)
    if refusal and not force:
        raise UserError(f"{outdir}: {refusal}")
    for name, text in (theirs or {}).items():
        path = outdir / name
        if not path.is_file() or path.read_text() != text:
            changed.append(name)
    replace_files(outdir, {name: {**files, **(theirs or {})}[name] for name in changed})
    return Result(written=changed)


def _refusal(verb: str | None, label: str | None, alien: list[str], edited: list[str],
             other_verb: set[str | None], other_site: set[str | None]) -> str | None:
    """Why the files there may not be replaced without ``--force`` (None: they may)."""
    if alien:
        return (f"{', '.join(alien)} edited by hand, or not written by torchmpi {verb};"
                " choose another directory, or re-run with --force to replace it")
    if edited:
        return (f"{', '.join(edited)} edited by hand since it was written; move the change"
                " into the site file, or re-run with --force to overwrite it")
    if other_verb:
        return (f"written by `torchmpi {', '.join(sorted(map(str, other_verb)))}`, not"
                f" `torchmpi {verb}`; choose another output directory, or re-run with"
                " --force to replace those files")
    if other_site:
        return (f"rendered from {', '.join(sorted(map(str, other_site)))}, not from {label};"
                " choose another output directory, or re-run with --force to replace"
                " that environment")
    return None


def replace_files(outdir: Path, files: dict[str, str]) -> None:
    """Replace ``outdir/NAME`` with each text, all or none.

    Every text goes to a temporary file beside its destination first; only when
    all are written are they renamed into place (a rename within a directory is
    atomic), so a full disk or a kill midway leaves every old file whole and no
    temporary file behind.
    """
    temps = []
    try:
        for name, text in files.items():
            dest = outdir / name  # NAME may be in a subfolder: bin/activate
            fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", dir=dest.parent)
            temps.append((tmp, dest))  # before writing: a failed write is removed too
            with os.fdopen(fd, "w") as fh:
                fh.write(text)
            os.chmod(tmp, mode(text))
    except OSError as err:
        for tmp, _ in temps:
            os.unlink(tmp)
        raise UserError(f"{outdir}: cannot write: {err.strerror}") from None
    for tmp, dest in temps:
        os.replace(tmp, dest)


# -- default output folders ------------------------------------------------------------------

def default_outdir(verb: str, site: Site) -> Path:
    """``<checkout>/<folder>/<site>``: where ``torchmpi VERB`` writes without ``-o``."""
    return paths.root() / FOLDERS[verb] / site.name


def in_sites_dir(path: Path) -> bool:
    """Whether a site file is (really, after symlinks) one of the checkout's sites/."""
    try:
        path.resolve().relative_to(paths.sites_dir().resolve())
    except ValueError:
        return False
    return True


def outdir(verb: str, site: Site, given: Path | None) -> Path:
    """The directory ``torchmpi VERB`` writes: ``-o``, else the default folder -- which
    holds only the checkout's own sites, so a site file elsewhere needs ``-o``."""
    if given is not None:
        return given
    if not in_sites_dir(site.path):
        real = site.path.resolve()
        link = f" (a link to {real})" if real != site.path.absolute() else ""
        raise UserError(
            f"{site.path}{link}: not a file under {paths.sites_dir()}, and {FOLDERS[verb]}/"
            " holds only the checkout's own sites; give the output directory with -o DIR,"
            " or copy the file into sites/"
        )
    return default_outdir(verb, site)


def writable_outdir(verb: str, site: Site, given: Path | None) -> Path:
    """:func:`outdir`, refused now if it cannot be written or created, so a bad ``-o``
    stops the verb before it renders or solves anything; the error names ``-o/--output``
    when the directory was given, else the verb's default folder (:data:`FOLDER_NAMES`)."""
    path = outdir(verb, site, given)
    writable.check_dir(path, "-o/--output" if given is not None else FOLDER_NAMES[verb])
    return path
