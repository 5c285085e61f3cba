"""Site-wide registration: after ``make install-site`` the torchmpi overrides win over builtin.

Runs ``scripts/install-site.sh`` against a throwaway ``git clone --shared`` of
the pinned Spack, so the cached Spack's ``etc/spack`` is never touched, with
empty user and system scopes (only the clone's own scopes count).  Spack ranks
``spack`` ($spack/etc/spack) above ``site`` ($spack/etc/spack/site): with the
builtin repository pinned in ``spack`` a site-scope add is shadowed, which the
script detects and refuses (docs/admins.md).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from torchmpi import paths

pytestmark = pytest.mark.spack

SCRIPT = paths.root() / "scripts" / "install-site.sh"


@pytest.fixture
def site_spack(spack, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A private Spack clone and an environment that sees only its own scopes."""
    clone = tmp_path / "spack"
    subprocess.run(["git", "clone", "-q", "--shared", str(spack.root), str(clone)], check=True,
                   capture_output=True)
    for name in ("user", "system", "cache"):
        (tmp_path / name).mkdir()
    env = dict(spack.env, SPACK_ROOT=str(clone), SPACK=str(clone / "bin" / "spack"),
               SPACK_USER_CONFIG_PATH=str(tmp_path / "user"),
               SPACK_SYSTEM_CONFIG_PATH=str(tmp_path / "system"),
               SPACK_USER_CACHE_PATH=str(tmp_path / "cache"))
    return clone, env


def _pin_builtin(spack, clone: Path, scope_dir: Path) -> None:
    """Pin builtin to the project's offline copy, as an admin would (no git download)."""
    scope_dir.mkdir(parents=True, exist_ok=True)
    (scope_dir / "repos.yaml").write_text(f"repos:\n  builtin: {spack.builtin}\n")


def _install_site(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True,
                          text=True, timeout=300, check=False)


def test_site_scope_add_wins_when_builtin_is_pinned_in_site(spack, site_spack) -> None:
    clone, env = site_spack
    _pin_builtin(spack, clone, clone / "etc" / "spack" / "site")
    proc = _install_site(env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in ("aws-ofi-nccl", "py-torch", "py-torch-mpi"):
        assert f"install-site: {name} torchmpi" in proc.stdout
    repos = (clone / "etc" / "spack" / "site" / "repos.yaml").read_text()
    assert repos.index("torchmpi") < repos.index("builtin"), repos


def test_builtin_in_spack_scope_shadows_a_site_add(spack, site_spack) -> None:
    clone, env = site_spack
    _pin_builtin(spack, clone, clone / "etc" / "spack")
    proc = _install_site(env, "site")
    assert proc.returncode == 1
    assert "install-site: aws-ofi-nccl builtin" in proc.stdout
    assert "scripts/install-site.sh spack" in proc.stderr
    site_repos = clone / "etc" / "spack" / "site" / "repos.yaml"
    assert not site_repos.exists() or "torchmpi" not in site_repos.read_text()  # rolled back
    proc = _install_site(env, "spack")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "install-site: aws-ofi-nccl torchmpi" in proc.stdout
    proc = _install_site(env, "spack")  # idempotent
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (clone / "etc" / "spack" / "repos.yaml").read_text().count("torchmpi:") == 1
