"""torchmpi venv: a real venv and a real pip, a local wheel directory, no network.

The "site's torch" is the checkout venv's torch 2.13.0+cpu, put on PYTHONPATH the
way `module load py-torch-mpi` puts Spack's on it (less pip and wheel: build
dependencies of Spack's Python packages, not on a module's PYTHONPATH, and a pip
there would shadow the venv's own; setuptools stays, torch requires it at run
time); the venv's base is the
Python behind the checkout venv, whose ensurepip brings pip 23.2.1 into a new
venv.  A wheel that wants a newer torch (a fake torch 2.99.0 beside it) must be
refused, and one that any torch satisfies must install without touching torch.
The control shows the same pip install replacing torch in a plain
`--system-site-packages` venv, so the test can fail.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import zipfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest
from torchmpi import output, paths
from torchmpi import venv as venvmod
from torchmpi.cli import main
from torchmpi.lock import Lock
from torchmpi.venv import pins_from_lock

CHECKOUT_PACKAGES = Path(sysconfig.get_paths()["purelib"])  # the checkout venv's: torch
#: The installer, which a module's PYTHONPATH does not carry.
INSTALLER = re.compile(r"^(pip|wheel)([-.].*)?$")


def _site_packages() -> str:
    """The checkout venv's packages less pip and wheel, linked one by one into a folder."""
    folder = Path(tempfile.mkdtemp(prefix="torchmpi-site-packages-"))
    for entry in CHECKOUT_PACKAGES.iterdir():
        if not INSTALLER.match(entry.name):
            (folder / entry.name).symlink_to(entry)
    return str(folder)


SITE_PACKAGES = _site_packages()
BASE_PYTHON = getattr(sys, "_base_executable", sys.executable)


def wheel(directory: Path, name: str, version: str, requires: list[str],
          files: dict[str, str] | None = None) -> Path:
    """A minimal pure-Python wheel (PEP 427), written by hand: no build backend, no network."""
    dist = f"{name.replace('-', '_')}-{version}"
    path = directory / f"{dist}-py3-none-any.whl"
    meta = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    meta += [f"Requires-Dist: {r}" for r in requires]
    contents = dict(files or {})
    contents[f"{dist}.dist-info/METADATA"] = "\n".join(meta) + "\n"
    contents[f"{dist}.dist-info/WHEEL"] = ("Wheel-Version: 1.0\nGenerator: torchmpi-tests\n"
                                          "Root-Is-Purelib: true\nTag: py3-none-any\n")
    record = f"{dist}.dist-info/RECORD"
    contents[record] = "".join(f"{n},,\n" for n in [*contents, record])
    with zipfile.ZipFile(path, "w") as archive:
        for member, text in contents.items():
            archive.writestr(member, text)
    return path


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("wheels")
    wheel(directory, "torch", "2.99.0", [],
          {"torch/__init__.py": "__version__ = '2.99.0 (a PyPI wheel, no MPI backend)'\n"})
    wheel(directory, "needs-new-torch", "1.0", ["torch>=2.99"], {"needs_new_torch.py": ""})
    wheel(directory, "needs-any-torch", "1.0", ["torch>=2.0"], {"needs_any_torch.py": ""})
    return directory


#: An empty folder for pip's global and user configuration (created once, never written).
NO_HOST_PIP_CONFIG = Path(tempfile.mkdtemp(prefix="torchmpi-no-pip-config-"))


def site_env() -> dict[str, str]:
    """A job after `module load`: the site's torch on PYTHONPATH, no pip settings of ours.

    Nor the host's: pip reads a global file from every ``$XDG_CONFIG_DIRS/pip/pip.conf``
    (default ``/etc/xdg``) and a user file from ``$XDG_CONFIG_HOME/pip/pip.conf``, so a
    machine whose ``/etc/xdg/pip/pip.conf`` sets ``constraint`` (``torch<=2.14.1`` on the
    build hosts of this project) would refuse the control's torch 2.99.0 for a reason that
    has nothing to do with torchmpi.  The venv's own ``pip.conf`` (pip's "site" file) is
    still read: that is the wiring under test.
    """
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PIP_", "VIRTUAL_ENV", "PYTHON"))}
    env["PYTHONPATH"] = SITE_PACKAGES
    env["XDG_CONFIG_DIRS"] = str(NO_HOST_PIP_CONFIG)
    env["XDG_CONFIG_HOME"] = str(NO_HOST_PIP_CONFIG)
    return env


#: The stack the fake lock describes: what the "site" (the checkout venv) really has installed.
INSTALLED = {name: metadata.version(name) for name in ("numpy", "mpi4py", "typing_extensions")}


def fake_lock(path: Path) -> Path:
    """A spack.lock as Spack 1.1 writes it, reduced to the fields torchmpi.lock reads."""
    specs = {
        "h1": {"name": "py-torch-mpi", "version": "0.1.0", "namespace": "torchmpi"},
        "h2": {"name": "py-torch", "version": "2.13.0", "namespace": "torchmpi"},
        "h3": {"name": "py-numpy", "version": INSTALLED["numpy"], "namespace": "builtin"},
        "h4": {"name": "py-mpi4py", "version": INSTALLED["mpi4py"], "namespace": "torchmpi"},
        "h5": {"name": "python", "version": "3.11.7", "namespace": "builtin"},
        "h6": {"name": "py-pip", "version": "25.1", "namespace": "builtin"},
        "h7": {"name": "py-typing-extensions", "version": INSTALLED["typing_extensions"],
               "namespace": "builtin"},
        # A Spack-only version (a git branch, as py-torch@main): `==main` is no PEP 440
        # version, so pinning it would make pip refuse every install in the venv.
        "h8": {"name": "py-einops", "version": "main", "namespace": "builtin"},
    }
    path.write_text(json.dumps({"roots": [{"hash": "h1", "spec": "py-torch-mpi"}],
                                "concrete_specs": specs}))
    return path


def pip(venv: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(venv / "bin" / "python"), "-m", "pip", *args,
                           "--disable-pip-version-check"], env=site_env(),
                          capture_output=True, text=True, timeout=300, check=False)


def torch_in(venv: Path) -> str:
    proc = subprocess.run([str(venv / "bin" / "python"), "-c",
                           "import torch; print(torch.__version__, torch.__file__)"],
                          env=site_env(), capture_output=True, text=True, timeout=300,
                          check=True)
    return proc.stdout.strip()


def venv_torch_dists(venv: Path) -> list[str]:
    return sorted(p.name for p in venv.glob("lib/python*/site-packages/torch-*.dist-info"))


def test_pins_come_from_the_lock(tmp_path):
    pins = pins_from_lock(Lock(fake_lock(tmp_path / "spack.lock")))
    assert pins == {"mpi4py": INSTALLED["mpi4py"], "numpy": INSTALLED["numpy"],
                    "torch": "2.13.0", "typing-extensions": INSTALLED["typing_extensions"]}


#: Wheels `make setup` fetched (scripts/get-reference.sh): the sites' pips, a newer one,
#: setuptools.
PIP_WHEELS = paths.cache() / "pip-wheels"
NEW_PIP = "26.3"


def pip_wheels() -> Path:
    """The fetched wheels; a failure (never a skip) without them."""
    if not (PIP_WHEELS / f"pip-{NEW_PIP}-py3-none-any.whl").is_file():
        pytest.fail(f"{PIP_WHEELS}: no pip wheels; run `make setup` "
                    "(scripts/get-reference.sh fetches them)")
    return PIP_WHEELS


@contextlib.contextmanager
def offline_pip(links: Path, pythonpath: str = SITE_PACKAGES) -> Iterator[None]:
    """`torchmpi venv` run in process as a user with a local wheel mirror would run it.

    pip's own settings (PIP_NO_INDEX, PIP_FIND_LINKS) point its pip upgrade at ``links``;
    the host's pip settings and configuration files are kept out, as in site_env().
    """
    with pytest.MonkeyPatch.context() as mp:
        for key in [k for k in os.environ if k.startswith(("PIP_", "VIRTUAL_ENV"))]:
            mp.delenv(key)
        mp.setenv("PYTHONPATH", pythonpath)
        mp.setenv("XDG_CONFIG_DIRS", str(NO_HOST_PIP_CONFIG))
        mp.setenv("XDG_CONFIG_HOME", str(NO_HOST_PIP_CONFIG))
        mp.setenv("PIP_NO_INDEX", "1")
        mp.setenv("PIP_FIND_LINKS", str(links))
        yield


def make_venv(target: Path, *extra: str) -> Path:
    with offline_pip(pip_wheels()):
        assert main(["venv", str(target), "--lock", str(fake_lock(target.parent / "spack.lock")),
                     "--python", BASE_PYTHON, *extra]) == 0
    return target


@pytest.fixture(scope="module")
def site_venv(tmp_path_factory) -> Path:
    return make_venv(tmp_path_factory.mktemp("venv") / "train")


def test_venv_is_wired_to_the_constraints(site_venv):
    constraints = site_venv / "constraints.txt"
    assert "torch==2.13.0" in constraints.read_text().splitlines()
    assert "include-system-site-packages = true" in (site_venv / "pyvenv.cfg").read_text()
    assert f"constraint = {constraints}" in (site_venv / "pip.conf").read_text()
    # printenv is a child process, as pip is: the variable must be exported, not just set.
    script = (f". {site_venv}/bin/activate && printenv PIP_CONSTRAINT"
              " && deactivate && echo after=$PIP_CONSTRAINT")
    proc = subprocess.run(["bash", "-c", script],
                          capture_output=True, text=True, check=True)
    assert proc.stdout.split() == [str(constraints), "after="]


def test_control_plain_venv_lets_pip_install_another_torch(tmp_path, wheels):
    """Without torchmpi's wiring the same install brings torch 2.99 into the venv."""
    plain = tmp_path / "plain"
    subprocess.run([BASE_PYTHON, "-m", "venv", "--system-site-packages", str(plain)],
                   check=True, capture_output=True)
    assert torch_in(plain).startswith("2.13.0")
    proc = pip(plain, "install", "--no-index", "--find-links", str(wheels), "needs-new-torch")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert venv_torch_dists(plain) == ["torch-2.99.0.dist-info"]


def test_pip_refuses_a_package_that_needs_another_torch(site_venv, wheels):
    proc = pip(site_venv, "install", "--no-index", "--find-links", str(wheels),
               "needs-new-torch")
    assert proc.returncode != 0, proc.stdout
    assert "torch" in proc.stderr and ("2.13.0" in proc.stderr or "conflict" in proc.stderr)
    assert venv_torch_dists(site_venv) == []
    assert torch_in(site_venv).startswith("2.13.0")


def test_a_package_the_sites_torch_satisfies_installs_without_touching_it(site_venv, wheels):
    proc = pip(site_venv, "install", "--no-index", "--find-links", str(wheels),
               "needs-any-torch")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert venv_torch_dists(site_venv) == []
    assert torch_in(site_venv).startswith("2.13.0") and SITE_PACKAGES in torch_in(site_venv)


def test_existing_directory_is_refused(tmp_path, capsys):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "keep").write_text("mine")
    assert main(["venv", str(tmp_path / "x"), "--lock",
                 str(fake_lock(tmp_path / "spack.lock"))]) == 2
    assert "not empty" in capsys.readouterr().err


def test_a_hand_edited_constraints_file_is_kept_without_force(tmp_path, capsys):
    """`torchmpi venv` again on its own venv re-pins it through the one writer: a
    constraints.txt edited by hand is kept unless --force, as render keeps its files."""
    venv = make_venv(tmp_path / "train", "--keep-pip")
    constraints = venv / "constraints.txt"
    assert output.written_by(constraints.read_text()) == "venv"
    edited = constraints.read_text() + "einops==0.1\n"
    constraints.write_text(edited)
    capsys.readouterr()
    with pytest.raises(AssertionError):
        make_venv(venv, "--keep-pip")
    err = capsys.readouterr().err
    assert "constraints.txt edited by hand since it was written" in err and "--force" in err
    assert constraints.read_text() == edited
    make_venv(venv, "--keep-pip", "--force")
    assert "einops==0.1" not in constraints.read_text()
    assert not output.hand_edited(constraints.read_text())
    assert (venv / "bin" / "activate").read_text().count("PIP_CONSTRAINT=") == 1


_INTERRUPTED = """
import resource, signal, sys
from torchmpi.cli import main
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a kill
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
sys.exit(main(sys.argv[2:]))
"""


def test_pinning_a_plain_venv_interrupted_leaves_it_as_it_was(tmp_path):
    """The writer replaces constraints.txt, pip.conf and bin/activate all or none: with the
    file-size limit below the wired activate (as a full disk), the first two are not left
    behind half a venv's wiring; the same call without the limit wires it."""
    plain = tmp_path / "plain"
    subprocess.run([BASE_PYTHON, "-m", "venv", "--without-pip", str(plain)], check=True)
    before = {p: p.read_bytes() for p in plain.rglob("*") if p.is_file()}
    activate = len((plain / "bin" / "activate").read_bytes())
    argv = ["venv", str(plain), "--lock", str(fake_lock(tmp_path / "spack.lock")),
            "--keep-pip", "--python", BASE_PYTHON]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run([sys.executable, "-c", _INTERRUPTED, str(activate), *argv],
                          env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 2, proc.stderr
    assert "cannot write: File too large" in proc.stderr and "Traceback" not in proc.stderr
    assert {p: p.read_bytes() for p in plain.rglob("*") if p.is_file()} == before
    assert main(argv) == 0
    assert (plain / "constraints.txt").is_file() and (plain / "pip.conf").is_file()
    assert "PIP_CONSTRAINT=" in (plain / "bin" / "activate").read_text()


def test_lock_without_torch_is_refused(tmp_path, capsys):
    lock = tmp_path / "spack.lock"
    lock.write_text(json.dumps({"roots": [], "concrete_specs": {
        "h": {"name": "py-numpy", "version": "2.4.6"}}}))
    assert main(["venv", str(tmp_path / "v"), "--lock", str(lock)]) == 2
    assert "no torch among the pins" in capsys.readouterr().err
    assert not (tmp_path / "v").exists()


def test_pins_from_the_python_leave_the_installer_free(tmp_path):
    """Without a lock the pins are what --python has installed, less pip, setuptools and
    wheel (pinned, `pip install -U pip` in the venv would be refused), and torch's local
    label dropped (``==2.13.0`` admits the installed 2.13.0+cpu)."""
    assert metadata.version("pip")  # the base has pip: leaving it out is a real choice
    target = tmp_path / "v"
    with offline_pip(pip_wheels()):
        assert main(["venv", str(target), "--python", sys.executable]) == 0
    lines = (target / "constraints.txt").read_text().splitlines()
    pins = dict(line.split("==") for line in lines if not line.startswith("#"))
    assert pins["torch"] == metadata.version("torch").split("+")[0]
    assert pins["numpy"] == INSTALLED["numpy"]
    assert not {"pip", "setuptools", "wheel"} & {name.lower() for name in pins}


# --- pip's isolated build environments ----------------------------------------------
#
# Before pip 26.2 a constraints file given through pip.conf or PIP_CONSTRAINT also binds the
# pip that installs an sdist's [build-system] requires (pypa/pip#13300; 26.2 ended it,
# pypa/pip#14094).  The site's numpy pin then breaks
# every sdist whose build needs a newer numpy (numpy>=2 to build for both ABIs), though the
# wheel it builds runs on the site's numpy.  The sites' pips are 23.1 and 25.1.  (25.3 added
# --build-constraint and deprecated the leak, pypa/pip#13534.)

SDIST = "needs-new-numpy-to-build"


def sdist(directory: Path, name: str, version: str, build_requires: list[str],
          requires: list[str]) -> Path:
    """A minimal sdist (PEP 517/621, setuptools backend), written by hand."""
    dist = f"{name.replace('-', '_')}-{version}"
    module = name.replace("-", "_")
    pyproject = ("[build-system]\n"
                 f"requires = {json.dumps(build_requires)}\n"
                 'build-backend = "setuptools.build_meta"\n\n'
                 "[project]\n"
                 f'name = "{name}"\nversion = "{version}"\n'
                 f"dependencies = {json.dumps(requires)}\n")
    files = {"pyproject.toml": pyproject,
             "PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{module}/__init__.py": "import numpy  # built against a newer one, runs on any\n"}
    path = directory / f"{dist}.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        for member, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{dist}/{member}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture(scope="module")
def build_links(tmp_path_factory) -> Path:
    """What the sdist's build needs, offline: setuptools, a numpy newer than the pin, itself."""
    directory = tmp_path_factory.mktemp("build-links")
    shutil.copy(pip_wheels() / "setuptools-80.9.0-py3-none-any.whl", directory)
    wheel(directory, "numpy", "99.0", [], {"numpy/__init__.py": "__version__ = '99.0'\n"})
    sdist(directory, SDIST, "1.0", ["setuptools>=61", f"numpy>{INSTALLED['numpy']}"],
          ["numpy"])
    return directory


def pip_version(venv: Path, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "--version"],
                          env=env or site_env(), capture_output=True, text=True, check=True)
    return proc.stdout.split()[1]


def install_sdist(venv: Path, links: Path, env: dict[str, str] | None = None
                  ) -> subprocess.CompletedProcess:
    """Install the sdist; no wheel cache, so pip really builds it every time."""
    return subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--no-cache-dir",
                           "--disable-pip-version-check", "--no-index", "--find-links",
                           str(links), SDIST], env=env or site_env(),
                          capture_output=True, text=True, timeout=300, check=False)


def venv_dists(venv: Path, name: str) -> list[str]:
    return sorted(p.name for p in venv.glob(f"lib/python*/site-packages/{name}-*.dist-info"))


@pytest.mark.parametrize("wiring", ["pip.conf", "activate"])
def test_sdist_whose_build_needs_a_newer_pin_builds(site_venv, build_links, wiring):
    """`torchmpi venv` leaves a pip (>= 26.2) that keeps the pins out of build environments,
    whichever way the pins reach it; the built package still runs on the site's numpy."""
    env = site_env()
    if wiring == "activate":  # a shell after `. bin/activate`: PIP_CONSTRAINT, exported
        env["PIP_CONSTRAINT"] = str(site_venv / "constraints.txt")
    proc = install_sdist(site_venv, build_links, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    version = pip_version(site_venv, env)
    assert tuple(int(x) for x in version.split(".")[:2]) >= (26, 2), version
    assert venv_dists(site_venv, "needs_new_numpy_to_build") == [
        "needs_new_numpy_to_build-1.0.dist-info"]
    assert venv_dists(site_venv, "numpy") == []  # the pin held at the top: the site's numpy
    proc = subprocess.run([str(site_venv / "bin" / "python"), "-c",
                           "import needs_new_numpy_to_build, numpy; print(numpy.__version__)"],
                          env=env, capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == INSTALLED["numpy"]


@pytest.mark.parametrize("old_pip", ["23.1", "25.1"])
def test_the_sites_pips_put_the_pins_into_build_environments(tmp_path, build_links, old_pip):
    """With the sites' pip (kept by --keep-pip) the same install fails on the numpy pin, in
    the build environment; the pip upgrade `torchmpi venv` makes by default cures it."""
    venv = make_venv(tmp_path / "train", "--keep-pip")
    proc = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--no-index",
                           "--disable-pip-version-check",
                           str(pip_wheels() / f"pip-{old_pip}-py3-none-any.whl")],
                          env=site_env(), capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert pip_version(venv) == old_pip
    proc = install_sdist(venv, build_links)
    assert proc.returncode != 0, proc.stdout
    out = proc.stdout + proc.stderr
    assert "build dependencies" in out and f"numpy=={INSTALLED['numpy']}" in out, out
    with offline_pip(pip_wheels()):
        venvmod.upgrade_pip(venv)
    assert pip_version(venv) == NEW_PIP
    proc = install_sdist(venv, build_links)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_no_newer_pip_at_hand_is_a_clear_error(tmp_path, capsys):
    """Offline without a pip >= 26.2 wheel: a one-line error naming the ways out, no venv."""
    target = tmp_path / "train"
    empty = tmp_path / "no-wheels"
    empty.mkdir()
    with offline_pip(empty):
        assert main(["venv", str(target), "--lock", str(fake_lock(tmp_path / "spack.lock")),
                     "--python", BASE_PYTHON]) == 2
    err = capsys.readouterr().err
    assert "pip>=26.2" in err and "--keep-pip" in err and "PIP_FIND_LINKS" in err, err
    assert "Traceback" not in err
    assert not target.exists()


def test_a_pip_on_the_modules_pythonpath_is_named(tmp_path, capsys):
    """A module that puts py-pip 25.1 on PYTHONPATH shadows the upgraded pip: said, no venv."""
    shadow = tmp_path / "py-pip" / "site-packages"
    with zipfile.ZipFile(pip_wheels() / "pip-25.1-py3-none-any.whl") as archive:
        archive.extractall(shadow)
    target = tmp_path / "train"
    with offline_pip(pip_wheels(), f"{shadow}{os.pathsep}{SITE_PACKAGES}"):
        assert main(["venv", str(target), "--lock", str(fake_lock(tmp_path / "spack.lock")),
                     "--python", BASE_PYTHON]) == 2
    err = capsys.readouterr().err
    assert f"pip 25.1 from {shadow}" in err and "PYTHONPATH" in err, err
    assert not target.exists()


def test_a_pip_at_exactly_the_minimum_is_not_upgraded(tmp_path) -> None:
    """pip 26.2 is the first release that keeps the pins out of build environments:
    at exactly that version nothing is installed (offline, nothing could be).
    The venv's python is a stand-in that answers as one with pip 26.2 would and
    records any other use."""
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text('#!/bin/sh\nif [ "$1" = "-c" ]; then\n'
                      '  echo 26.2; echo /venv/lib/python3.11/site-packages/pip/__init__.py\n'
                      f'  exit 0\nfi\necho "$@" > {tmp_path}/installed\nexit 1\n')
    python.chmod(0o755)
    assert venvmod.pip_in(tmp_path / "venv")[0] == venvmod.PIP_MIN == (26, 2)
    venvmod.upgrade_pip(tmp_path / "venv")
    assert not (tmp_path / "installed").exists()
