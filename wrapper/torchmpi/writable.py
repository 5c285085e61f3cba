"""Output paths checked before any work starts.

A solve takes minutes and an all-reduce run longer: finding only at the end
that the output directory or file cannot be written wastes all of it and, in
the worst case, ends in a traceback.  These checks run first and name the flag.
(``os.access`` is what the kernel will allow this user; root passes it for any
directory, so a directory still to be made is also made once and removed: procfs
refuses it even to root.)
"""

from __future__ import annotations

import os
from pathlib import Path

from torchmpi.errors import UserError


def _existing_ancestor(path: Path) -> Path:
    probe = path.absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return probe


def check_dir(path: Path, flag: str) -> None:
    """Raise UserError unless ``path`` is, or can be created as, a writable directory."""
    if path.exists():
        if not path.is_dir():
            raise UserError(f"{flag} {path}: exists and is not a directory")
        if not os.access(path, os.W_OK | os.X_OK):
            raise UserError(f"{flag} {path}: directory is not writable")
        return
    base = _existing_ancestor(path)
    if not base.is_dir():
        raise UserError(f"{flag} {path}: cannot create it: {base} is not a directory")
    if not os.access(base, os.W_OK | os.X_OK):
        raise UserError(f"{flag} {path}: cannot create it: {base} is not writable")
    _probe_mkdir(base / path.absolute().relative_to(base).parts[0], path, flag)


def _probe_mkdir(first: Path, path: Path, flag: str) -> None:
    """Make and remove ``first``, the first missing directory of ``path``: access(2)
    lets root write anywhere, but a file system may still refuse a directory (procfs,
    sysfs: ENOENT), which would otherwise surface only at write time, after the work."""
    try:
        first.mkdir()
    except FileExistsError:
        return  # made meanwhile by someone else: creatable, and not ours to remove
    except OSError as err:
        raise UserError(f"{flag} {path}: cannot create it: {first.parent} refuses a new"
                        f" directory ({err.strerror})") from None
    first.rmdir()


def check_file(path: Path, flag: str) -> None:
    """Raise UserError unless ``path`` can be written as a file (its directory must exist)."""
    if path.is_dir():
        raise UserError(f"{flag} {path}: is a directory; give a file name")
    parent = path.absolute().parent
    if not parent.is_dir():
        raise UserError(f"{flag} {path}: directory {parent} does not exist")
    target = path if path.exists() else parent
    if not os.access(target, os.W_OK):
        raise UserError(f"{flag} {path}: not writable")
