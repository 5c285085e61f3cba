"""A ``PATH`` on which some of this host's programs are missing.

A GPU node may lack ``gfortran``; a CPU host lacks ``nvidia-smi`` that a GPU node
has.  Tests that must not depend on either run the real programs through a
directory of symlinks to everything on ``PATH`` except the names hidden, so
the same test means the same thing on every host.
"""

from __future__ import annotations

import os
from pathlib import Path


def path_without(folder: Path, *hidden: str, path: str | None = None) -> str:
    """A ``PATH`` (one folder of symlinks) with every program of ``path`` but ``hidden``.

    The first program of a name wins, as the shell's lookup would have it.
    """
    folder.mkdir(parents=True, exist_ok=True)
    for entry in (path if path is not None else os.environ.get("PATH", "")).split(os.pathsep):
        if not entry or not os.path.isdir(entry):
            continue
        for item in os.scandir(entry):
            link = folder / item.name
            if item.name in hidden or link.exists() or link.is_symlink():
                continue
            if os.access(item.path, os.X_OK) and not item.is_dir():
                link.symlink_to(item.path)
    return str(folder)
