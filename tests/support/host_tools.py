"""A ``PATH`` on which some of this host's programs are missing, and the local site
loaded whether or not this host has the compilers its ``auto`` needs.

A GPU node may lack ``gfortran``; a CPU host lacks ``nvidia-smi`` that a GPU node
has.  Tests that must not depend on either run the real programs through a
directory of symlinks to everything on ``PATH`` except the names hidden, so
the same test means the same thing on every host.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import yaml
from torchmpi import detect, paths
from torchmpi import site as sitemod


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


def local_data() -> dict:
    """sites/local.yaml as data; where this host lacks the GNU compilers that
    ``compilers: auto`` needs (a GPU node without gfortran), with them listed by hand --
    the fix the refusal names -- so a test of rendering, detection or the doctor means
    the same on every host.  The refusal itself is tested with gfortran hidden
    (tests/test_sites.py)."""
    data = yaml.safe_load((paths.sites_dir() / "local.yaml").read_text())
    if not detect.missing_compilers():
        return data
    cc = Path(shutil.which("gcc") or "/usr/bin/gcc")
    version = subprocess.run([str(cc), "-dumpfullversion"], capture_output=True, text=True,
                             check=False).stdout.strip() or "12.2.0"
    data["compilers"] = [{"spec": f"gcc@{version}", "prefix": str(cc.parent.parent),
                          "languages": {lang: str(cc.with_name(exe)) for lang, exe, _ in
                                        detect.GNU_COMPILERS}}]
    return data


def load_site(name: str, tmp_path: Path | None = None) -> sitemod.Site:
    """``sitemod.load(name)``, but ``local`` from :func:`local_data` where this host
    lacks its compilers (written under ``tmp_path``, or a new temporary folder)."""
    if name != "local" or not detect.missing_compilers():
        return sitemod.load(name)
    folder = Path(tempfile.mkdtemp(prefix="torchmpi-local-")) if tmp_path is None \
        else tmp_path / "hand-listed"
    folder.mkdir(exist_ok=True)
    (folder / "local.yaml").write_text(yaml.safe_dump(local_data(), sort_keys=False))
    return sitemod.load(str(folder / "local.yaml"))
