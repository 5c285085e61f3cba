"""A user venv over the site's torch that pip cannot quietly replace it in.

Users add transformers, DeepSpeed or Lightning on top of ``module load
py-torch-mpi``; a requirement such as ``torch>=X`` then makes pip fetch a PyPI
wheel, which has no MPI backend and brings its own NCCL.  Two documented
defences, combined here:

* ``python -m venv --system-site-packages`` on the module's Python, so the
  site's packages stay visible and satisfy requirements (CSCS documents it for
  its PyTorch: eth-cscs/cscs-docs docs/software/ml/pytorch.md, without it
  packages "may accidentally be re-installed shadowing a version that is
  already present");
* a pip constraints file pinning every Python package of the site's stack at
  its installed version (NVIDIA's PyTorch containers ship
  ``/etc/pip/constraint.txt`` "to prevent unintentional overwriting" since
  25.03: docs.nvidia.com/deeplearning/frameworks/pytorch-release-notes/
  rel-25-12.html), wired through
  ``<venv>/pip.conf``, which pip reads for any pip run from the venv, activated
  or not (pip's configuration docs: the "site" file ``$VIRTUAL_ENV/pip.conf``),
  and ``PIP_CONSTRAINT`` in ``bin/activate`` for pips started by other means.

A requirement the site's stack cannot meet is then refused by pip's resolver
instead of replacing the site's torch.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

from torchmpi import render, site
from torchmpi.errors import UserError
from torchmpi.lock import Lock

CONSTRAINTS = "constraints.txt"
PIP_CONF = "pip.conf"
#: Spack package name -> PyPI project name, where they are not ``py-<name>``.
PYPI_NAMES = {"py-torch": "torch"}
#: Spack Python packages that are not PyPI projects (bundles, this tool).
NOT_ON_PYPI = {"py-torch-mpi", "py-torchmpi", "py-pip", "py-setuptools", "py-wheel"}
_VERSION = re.compile(r"^[0-9]+(\.[0-9]+)*((a|b|rc|\.post|\.dev)[0-9]+)?$")


def pins_from_lock(lock: Lock) -> dict[str, str]:
    """PyPI name -> version for every Python package in the lock that pip could replace.

    pip, setuptools and wheel are left free: pinning them would stop users
    from upgrading the installer itself, which never touches torch.
    """
    pins: dict[str, str] = {}
    for node in sorted(lock.nodes.values(), key=lambda n: n.name):
        if not node.name.startswith("py-") or node.name in NOT_ON_PYPI:
            continue
        if not _VERSION.match(node.version):
            continue  # a Spack-only version (e.g. a branch name) has no PyPI equivalent
        pins[PYPI_NAMES.get(node.name, node.name[3:])] = node.version
    return pins


def pins_from_python(python: str) -> dict[str, str]:
    """PyPI name -> version of every distribution the base Python sees (no lock at hand)."""
    code = ("import importlib.metadata as m, json; print(json.dumps("
            "{d.metadata['Name']: d.version for d in m.distributions() if d.metadata['Name']}))")
    proc = subprocess.run([python, "-c", code], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise UserError(f"{python}: cannot list its packages: {proc.stderr.strip()[-300:]}")
    found = json.loads(proc.stdout)
    return {name: ver for name, ver in sorted(found.items(), key=lambda kv: kv[0].lower())
            if name.lower() not in ("pip", "setuptools", "wheel")}


def constraints_text(pins: dict[str, str], source: str) -> str:
    """``name==version`` lines; a local version label (``+cpu``) is matched by ``==X`` too."""
    lines = [f"# The site's Python packages, pinned so pip cannot replace them ({source}).",
             "# Written by `torchmpi venv`; pip reads it through pip.conf / PIP_CONSTRAINT."]
    lines += [f"{name}=={version.split('+')[0]}" for name, version in pins.items()]
    return "\n".join(lines) + "\n"


def find_lock(site_name: str) -> Path:
    """The site's concretized environment: environments/<site>/spack.lock."""
    loaded = site.load(site_name)
    path = render.default_outdir(loaded) / "spack.lock"
    if not path.is_file():
        raise UserError(f"{path}: no spack.lock for site '{loaded.name}'; run `torchmpi "
                        f"concretize {loaded.name}` first, or give the lock with --lock FILE")
    return path


def create(target: Path, *, python: str, pins: dict[str, str], source: str) -> Path:
    """Make the venv, write the constraints, wire pip to them; returns the constraints file."""
    if target.exists() and any(target.iterdir()):
        raise UserError(f"{target}: exists and is not empty; choose a new directory")
    exe = shutil.which(python)
    if exe is None:
        raise UserError(f"--python {python}: not found on PATH")
    proc = subprocess.run([exe, "-m", "venv", "--system-site-packages", str(target)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise UserError(f"{exe} -m venv failed: {proc.stderr.strip()[-500:]}")
    constraints = target.absolute() / CONSTRAINTS
    constraints.write_text(constraints_text(pins, source))
    (target / PIP_CONF).write_text(
        "# Written by `torchmpi venv`: every pip install in this venv honours the site's pins.\n"
        f"[install]\nconstraint = {constraints}\n")
    activate = target / "bin" / "activate"
    if activate.is_file():
        text = activate.read_text()
        # `deactivate` forgets the pins as it forgets the venv (venv's own bash script).
        text = text.replace("deactivate () {\n", "deactivate () {\n    unset PIP_CONSTRAINT\n", 1)
        text += ("\n# torchmpi venv: the site's pins for any pip this shell starts\n"
                 f"PIP_CONSTRAINT={shlex.quote(str(constraints))}\n"
                 "export PIP_CONSTRAINT\n")
        activate.write_text(text)
    return constraints
