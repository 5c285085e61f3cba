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

The venv's pip is upgraded to 26.2 or newer.  Older pips hand a constraints file
given through a configuration file or ``PIP_CONSTRAINT`` on to the pip that
fills an sdist's isolated build environment (pypa/pip#13300: "The
``PIP_CONSTRAINT`` env var does influence the isolated build environment"; pip
25.3 added ``--build-constraint`` and deprecated the leak, pypa/pip#13534; 26.2
ended it, pypa/pip#14094).
With the site's ``numpy==1.25.2`` pinned, every sdist whose ``[build-system]
requires`` a newer numpy (as numpy 2 builds that run on numpy 1 and 2 do) then
fails, though the wheel it builds runs on the site's numpy.  The pip a new venv
starts with is its Python's bundled one (ensurepip: 23.2.1 on CPython 3.11.7)
and the sites' py-pip is 23.1 or 25.1.  A newer pip keeps every pin and fixes
every build; pinning fewer packages (torch and mpi4py only) would let pip
replace numpy under a torch compiled against it, so the pins stay.  Where no
pip >= 26.2 can be fetched (no index, no ``PIP_FIND_LINKS`` wheel), ``--keep-pip``
accepts the old pip and its build failures.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

from torchmpi import output, parseback, site
from torchmpi.errors import UserError
from torchmpi.lock import Lock

CONSTRAINTS = "constraints.txt"
PIP_CONF = "pip.conf"
#: Spack package name -> PyPI project name, where they are not ``py-<name>``.
PYPI_NAMES = {"py-torch": "torch"}
#: Spack Python packages that are not PyPI projects (bundles, this tool).
NOT_ON_PYPI = {"py-torch-mpi", "py-torchmpi", "py-pip", "py-setuptools", "py-wheel"}
_VERSION = re.compile(r"^[0-9]+(\.[0-9]+)*((a|b|rc|\.post|\.dev)[0-9]+)?$")
#: The first pip whose isolated build environments ignore the install's constraints.
PIP_MIN = (26, 2)
PIP_REQUIREMENT = "pip>=26.2"


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


def constraints_pins(pins: dict[str, str]) -> dict[str, str]:
    """The versions constraints.txt pins: a local label (``+cpu``) dropped, as ``==X``
    matches ``X+cpu`` too."""
    return {name: version.split("+")[0] for name, version in pins.items()}


def constraints_text(pins: dict[str, str], source: str) -> str:
    """The body of constraints.txt: ``name==version`` lines under what they pin."""
    lines = [f"# The site's Python packages, pinned so pip cannot replace them ({source}).",
             "# pip reads it through pip.conf / PIP_CONSTRAINT."]
    lines += [f"{name}=={version}" for name, version in constraints_pins(pins).items()]
    return "\n".join(lines) + "\n"


def origin(path: Path, data: bytes) -> output.Origin:
    """What the header names as the pins' source: a spack.lock (``data``: its bytes) or
    the base Python (``data``: the pins it reported)."""
    return output.Origin(path=path, name=path.name, sha256=hashlib.sha256(data).hexdigest())


def wired_activate(text: str, constraints: Path) -> str:
    """venv's ``bin/activate`` exporting ``PIP_CONSTRAINT``, which ``deactivate`` unsets;
    the same text again for a script already wired (a re-pin)."""
    block = "\n# torchmpi venv: the site's pins for any pip this shell starts\n"
    text = text.split(block, 1)[0]
    if "    unset PIP_CONSTRAINT\n" not in text:
        # `deactivate` forgets the pins as it forgets the venv (venv's own bash script).
        text = text.replace("deactivate () {\n", "deactivate () {\n    unset PIP_CONSTRAINT\n", 1)
    return text + block + (f"PIP_CONSTRAINT={shlex.quote(str(constraints))}\n"
                           "export PIP_CONSTRAINT\n")


def find_lock(site_name: str) -> Path:
    """The site's concretized environment: environments/<site>/spack.lock."""
    loaded = site.load(site_name)
    path = output.default_outdir("render", loaded) / "spack.lock"
    if not path.is_file():
        raise UserError(f"{path}: no spack.lock for site '{loaded.name}'; run `torchmpi "
                        f"concretize {loaded.name}` first, or give the lock with --lock FILE")
    return path


def pip_in(target: Path) -> tuple[tuple[int, ...], str]:
    """The version and location of the pip that ``<venv>/bin/python -m pip`` runs.

    Asked of the venv's Python in the caller's environment: a ``PYTHONPATH`` that
    carries a pip (a module that puts py-pip on it) wins over the venv's own.
    """
    code = "import pip; print(pip.__version__); print(pip.__file__)"
    proc = subprocess.run([str(target / "bin" / "python"), "-c", code],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        return (), ""
    version, where = (proc.stdout.splitlines() + ["", ""])[:2]
    numbers = re.match(r"[0-9]+(\.[0-9]+)*", version)
    return tuple(int(x) for x in numbers.group(0).split(".")) if numbers else (), where


def upgrade_pip(target: Path) -> None:
    """Bring the venv's pip to PIP_MIN or newer, through pip's own index settings.

    Run before the pins are wired in (pip is never pinned anyway), so the upgrade
    sees the user's index, ``PIP_FIND_LINKS`` and proxy and nothing of ours.
    """
    version, _ = pip_in(target)
    if version >= PIP_MIN:
        return
    proc = subprocess.run([str(target / "bin" / "python"), "-m", "pip", "install",
                           "--disable-pip-version-check", "--upgrade", PIP_REQUIREMENT],
                          capture_output=True, text=True, check=False)
    version, where = pip_in(target)
    if proc.returncode != 0 or version < PIP_MIN:
        why = (proc.stderr.strip().splitlines() or ["no error"])[-1] if proc.returncode \
            else f"pip {'.'.join(map(str, version))} from {where} runs instead (PYTHONPATH?)"
        raise UserError(
            f"{target}: could not install {PIP_REQUIREMENT} into the venv ({why}); older pips "
            "pass the site's pins into sdist build environments (pypa/pip#13300), so builds "
            "that need a newer numpy fail.  Give pip a source (PIP_INDEX_URL, or "
            "PIP_FIND_LINKS=DIR holding a pip wheel), or --keep-pip to keep the old pip")


def create(target: Path, *, python: str, pins: dict[str, str], source: str,
           pinned_from: output.Origin, keep_pip: bool = False, force: bool = False) -> Path:
    """Make the venv (or take an existing one), write the constraints and wire pip to
    them through the one writer (:mod:`torchmpi.output`); returns the constraints file.

    An existing venv is re-pinned: its files are kept where the writer's policy says
    so (edited by hand, not ours, pinned from another source) unless ``force``.  A venv
    this call made is removed again when the pip upgrade fails, so a retry does not
    meet "exists and is not empty".
    """
    fresh = not (target.exists() and any(target.iterdir()))
    if not fresh and not (target / "pyvenv.cfg").is_file():
        raise UserError(f"{target}: exists and is not empty, and is not a venv; choose a new"
                        " directory (or a venv, to pin it)")
    if fresh:
        _make(target, python, keep_pip)
    constraints = target.absolute() / CONSTRAINTS
    activate = target / "bin" / "activate"
    theirs = {"bin/activate": wired_activate(activate.read_text(), constraints)} \
        if activate.is_file() else {}
    for name, text in theirs.items():
        parseback.shell_text(text, None, name)
    files = output.assemble("venv", pinned_from, {
        CONSTRAINTS: output.Body(constraints_text(pins, source), constraints_pins(pins)),
        PIP_CONF: output.Body(
            "# Every pip install in this venv honours the site's pins.\n"
            f"[install]\nconstraint = {constraints}\n",
            {"install": {"constraint": str(constraints)}}),
    })
    output.write(target, files, force=force, theirs=theirs)
    if not fresh and not keep_pip:
        upgrade_pip(target)
    return constraints


def _make(target: Path, python: str, keep_pip: bool) -> None:
    """``python -m venv --system-site-packages`` and the pip upgrade, before any pin is
    wired (so the upgrade sees the user's index and nothing of ours)."""
    exe = shutil.which(python)
    if exe is None:
        raise UserError(f"--python {python}: not found on PATH")
    existed = target.exists()
    proc = subprocess.run([exe, "-m", "venv", "--system-site-packages", str(target)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise UserError(f"{exe} -m venv failed: {proc.stderr.strip()[-500:]}")
    if not keep_pip:
        try:
            upgrade_pip(target)
        except UserError:
            if existed:
                for child in target.iterdir():
                    shutil.rmtree(child) if child.is_dir() and not child.is_symlink() \
                        else child.unlink()
            else:
                shutil.rmtree(target)
            raise
