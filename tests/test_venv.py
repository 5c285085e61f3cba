"""torchmpi venv: a real venv and a real pip, a local wheel directory, no network.

The "site's torch" is the checkout venv's torch 2.13.0+cpu, put on PYTHONPATH the
way `module load py-torch-mpi` puts Spack's on it; the venv's base is the Python
behind the checkout venv.  A wheel that wants a newer torch (a fake torch 2.99.0
beside it) must be refused, and one that any torch satisfies must install without
touching torch.  The control shows the same pip install replacing torch in a plain
`--system-site-packages` venv, so the test can fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from torchmpi.cli import main
from torchmpi.lock import Lock
from torchmpi.venv import pins_from_lock

SITE_PACKAGES = sysconfig.get_paths()["purelib"]  # the checkout venv's: torch is there
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


@pytest.fixture(scope="module")
def site_venv(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("venv")
    target = tmp / "train"
    assert main(["venv", str(target), "--lock", str(fake_lock(tmp / "spack.lock")),
                 "--python", BASE_PYTHON]) == 0
    return target


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
    assert main(["venv", str(target), "--python", sys.executable]) == 0
    lines = (target / "constraints.txt").read_text().splitlines()
    pins = dict(line.split("==") for line in lines if not line.startswith("#"))
    assert pins["torch"] == metadata.version("torch").split("+")[0]
    assert pins["numpy"] == INSTALLED["numpy"]
    assert not {"pip", "setuptools", "wheel"} & {name.lower() for name in pins}
