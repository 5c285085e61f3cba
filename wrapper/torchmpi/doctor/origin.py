"""Whether torch, mpi4py and NCCL come from the site's install, not from a pip wheel.

A ``pip install`` on top of the module can put a PyPI torch (no MPI backend)
and the ``nvidia-nccl-cu*`` wheel's ``libnccl.so`` (no Slingshot plugin
settings, its own version) ahead of the site's.  Everything else the doctor
checks then describes the wheel, so this check names the files actually in use.

Two signs, either enough for FAIL:

* a file under the site's install tree is expected (``--site``); one outside it
  is someone else's.  The tree is the one this doctor was installed into: Spack
  keeps its database (``.spack-db``) at the root of every install tree, written
  at install time, so walking up from the tool's own files finds the tree the
  site's module points at, the same for every user.  The site file's
  ``install.root`` is no substitute where it names ``$user``, ``$PSCRATCH`` or
  any variable: expanded with the caller's environment it names the caller's
  tree, not the installer's, and everyone but the installer got FAIL.  It is
  used only when the doctor runs outside an install tree (a checkout) and the
  root names no variable;
* NCCL loaded from ``site-packages/nvidia/nccl/`` is the PyPI wheel's, whatever
  the site's install tree (the layout of NVIDIA's ``nvidia-nccl-cu12`` wheel, which PyPI torch
  depends on).
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Mapping
from typing import Any

from torchmpi.doctor.core import FAIL, PASS, SKIP, Check

NAME = "site.prefix"
FIX = ("a pip install replaced the site's package: pip uninstall it from your venv (or user "
       "site), and add packages with torchmpi venv (docs/users.md, Your own packages)")
_WHEEL_NCCL = re.compile(r"/site-packages/nvidia/nccl/")
#: Spack's database directory at the root of an install tree (``_DB_DIRNAME`` in
#: Spack's lib/spack/spack/database.py; tests/test_doctor_site.py reads it there).
SPACK_DB = ".spack-db"
_VARIABLE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")


def recorded_tree(start: str | None = None) -> str | None:
    """The Spack install tree holding ``start`` (default: this tool's own files), or None.

    The nearest directory above with Spack's database in it: the tree the site's
    install wrote, whoever runs the doctor.  None for a checkout or a pip install.
    Links are followed: an environment view links each file into the tree.
    """
    here = os.path.dirname(os.path.realpath(start or __file__))
    while True:
        if os.path.isdir(os.path.join(here, SPACK_DB)):
            return os.path.normpath(here)
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def locate(loaded_libs: list[str]) -> dict[str, str | None]:
    """Where torch and mpi4py import from, and the libnccl this process loaded (or None)."""
    out: dict[str, str | None] = {}
    for module in ("torch", "mpi4py"):
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            spec = None
        out[module] = spec.origin if spec is not None else None
    out["libnccl"] = next((p for p in loaded_libs if "/libnccl.so" in p), None)
    return out


def install_root(site_data: Mapping[str, Any] | None, env: Mapping[str, str]) -> str | None:
    """The site's Spack install tree as a path on this node, or None when it is not stated."""
    root = ((site_data or {}).get("install") or {}).get("root")
    if not root:
        return None
    user = env.get("USER", "")
    root = re.sub(r"\$(\{user\}|user\b)", user, str(root))
    root = re.sub(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?",
                  lambda m: env.get(m.group(1), m.group(0)), root)
    return os.path.normpath(root)


def check_site_prefix(found: Mapping[str, str | None], site_data: Mapping[str, Any] | None,
                      env: Mapping[str, str], tree: str | None = None) -> Check:
    """FAIL when torch, mpi4py or NCCL is a pip wheel's or lies outside the site's install tree.

    ``tree``: the install tree the doctor was installed into (:func:`recorded_tree`);
    without one, the site file's ``install.root`` where it names no variable.

    Only against a site: without one there is no "site's package" to be replaced
    (a pip torch with pip NCCL is a coherent stack; backend.mpi judges its lack of
    MPI), and in a torchmpi image torch is the image's by design.
    """
    present = {k: v for k, v in found.items() if v}
    if not present:
        return Check(NAME, SKIP, "neither torch, mpi4py nor libnccl found in this process")
    listed = ", ".join(f"{name} {path}" for name, path in present.items())
    if site_data is None:
        return Check(NAME, SKIP, f"no site given (--site NAME or FILE): {listed}")
    image = env.get("TORCHMPI_CONTAINER")
    if image:
        return Check(NAME, SKIP, f"in a torchmpi container ({image}): torch is the image's; "
                                 "container.* say whether the host's libraries were injected")
    wheel = [f"libnccl from a pip wheel ({present['libnccl']})"
             for _ in [0] if _WHEEL_NCCL.search(present.get("libnccl") or "")]
    stated = ((site_data or {}).get("install") or {}).get("root")
    variable = _VARIABLE.search(str(stated or ""))
    root = tree or (None if variable else install_root(site_data, env))
    if root is None and variable and not wheel:
        return Check(NAME, SKIP, f"install.root {stated} names ${variable.group(1)}, which "
                                 "is the installer's, and this doctor lies in no install "
                                 "tree (run the one the site's module provides), so there "
                                 f"is no install tree to compare with: {listed}")
    outside = []
    if root is not None:
        prefix = root.rstrip("/") + "/"
        outside = [f"{name} from {path}" for name, path in present.items()
                   if not any(p.startswith(prefix) for p in (os.path.normpath(path),
                                                             os.path.realpath(path)))
                   and not (name == "libnccl" and wheel)]
    if wheel or outside:
        where = f" (the site installs under {root})" if outside else ""
        return Check(NAME, FAIL, "; ".join(wheel + outside) + where, FIX)
    if root is None:
        return Check(NAME, SKIP, f"site {site_data.get('name', '')} states no install.root, "
                                 f"so there is no install tree to compare with: {listed}")
    how = " (the install tree this doctor was installed into)" if tree else ""
    return Check(NAME, PASS, f"under {root}{how}: {listed}")
