"""The torch release is the admin's choice: ``torch: {versions: [...]}``, several side by side.

Rendering is checked by parsing the rendered files back (no solve: two
torch releases in one environment cost two py-torch solves).  The notes for
releases without a ProcessGroupMPI fixture are checked at render time and,
with the stand-in Spack of test_concretize_cli, at concretize time.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from support.sites import edited_site
from torchmpi import paths, torches
from torchmpi.cli import main
from torchmpi.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "process_group_mpi"


def _with(*versions: str):
    def edit(d: dict) -> None:
        d["torch"] = {"versions": list(versions)}
    return edit


def _site_file(tmp_path: Path, name: str, edit) -> Path:
    edited_site(tmp_path, name, edit)
    return tmp_path / f"{name}.yaml"


def _render(tmp_path: Path, name: str, edit, capsys) -> tuple[dict, str]:
    path = _site_file(tmp_path, name, edit)
    out = tmp_path / "env"
    assert main(["render", str(path), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    files = {f: yaml.safe_load((out / f).read_text())
             for f in ("spack.yaml", "packages.yaml", "modules.yaml")}
    return files, err


def test_two_releases_side_by_side(tmp_path: Path, capsys) -> None:
    # (2.11.0 and 2.10.0: Derecho's cuda@12.2.1 cannot build 2.12, which needs 12.6.)
    files, _ = _render(tmp_path, "derecho", _with("2.11.0", "2.10.0"), capsys)
    env = files["spack.yaml"]["spack"]
    torch_roots = [s for s in env["specs"] if s.startswith("py-torch-mpi")]
    assert torch_roots == [
        "py-torch-mpi +cuda cuda_arch=80 +cuda_aware_mpi fabric=slingshot target=zen3"
        f" ^py-torch@={v}" for v in ("2.11.0", "2.10.0")]
    assert "py-torchvision target=zen3" in env["specs"]  # extra_specs once
    assert env["concretizer"]["unify"] == "when_possible"
    # One NCCL stack: one pinned pair for every release.
    pkgs = files["packages.yaml"]["packages"]
    assert pkgs["nccl"]["require"] == ["@2.21.5-1"]
    assert pkgs["aws-ofi-nccl"]["require"] == ["@1.6.0"]
    # Each release its own module: py-torch-mpi's name carries the torch
    # version, and so does every other package built on torch.
    proj = files["modules.yaml"]["modules"]["default"]["lmod"]["projections"]
    assert proj["py-torch-mpi+cuda"].startswith("{name}/{^py-torch.version}")
    assert proj["^py-torch"] == "{name}/{version}-torch{^py-torch.version}"
    assert list(proj) == ["py-torch-mpi+cuda", "py-torch-mpi", "^py-torch", "all"]


def test_one_release_keeps_one_dag(tmp_path: Path, capsys) -> None:
    files, _ = _render(tmp_path, "perlmutter", _with("2.11.0"), capsys)
    env = files["spack.yaml"]["spack"]
    assert env["specs"][0].endswith("target=zen3 ^py-torch@=2.11.0")
    assert env["concretizer"]["unify"] is True
    assert "deprecated" not in env.get("config", {})
    assert "^py-torch" not in files["modules.yaml"]["modules"]["default"]["lmod"]["projections"]


def test_unset_is_the_newest_allowed(tmp_path: Path, capsys) -> None:
    """No key: no torch constraint on the root, as before the key existed."""
    files, _ = _render(tmp_path, "derecho", None, capsys)
    assert not any("^py-torch" in s for s in files["spack.yaml"]["spack"]["specs"])


def test_release_with_a_fixture_renders_deprecated_config(tmp_path: Path, capsys) -> None:
    files, err = _render(tmp_path, "derecho", _with("2.9.1"), capsys)
    assert files["spack.yaml"]["spack"]["config"]["deprecated"] is True
    assert "note" not in err  # 2.9.1 has a fixture


def test_unverified_release_is_named_at_render_with_the_pin(tmp_path: Path, capsys) -> None:
    _, err = _render(tmp_path, "derecho", _with("2.11.0", "2.9.1"), capsys)
    assert "torch 2.11.0: no ProcessGroupMPI fixture" in err and "PatchError" in err
    assert "mpi.cuda_aware: false" in err
    assert "torch 2.9.1" not in err


@pytest.mark.parametrize("versions", [("2.11.0",), None])
def test_note_never_advises_a_deprecated_release(tmp_path: Path, capsys, versions) -> None:
    """Builtin deprecates every release with a fixture (CVEs): the note names
    none of them as the way out."""
    _, err = _render(tmp_path, "derecho", _with(*versions) if versions else None, capsys)
    assert "ProcessGroupMPI fixture" in err and "mpi.cuda_aware: false" in err
    deprecated = [v for v, old in torches.builtin_releases().items() if old]
    assert deprecated and not [v for v in deprecated if v in err], err
    assert "deprecated" not in err


def test_no_note_without_cuda_aware_mpi(tmp_path: Path, capsys) -> None:
    _, err = _render(tmp_path, "alps-gh200", _with("2.12.0"), capsys)  # cuda_aware: false
    assert "note" not in err


def test_unverified_release_is_named_at_concretize(fake_spack: Path, tmp_path: Path,
                                                   capsys) -> None:
    path = _site_file(tmp_path, "derecho", None)
    assert main(["concretize", str(path), "-o", str(tmp_path / "env"), "-q"]) == 0
    err = capsys.readouterr().err
    # Before the solve (unpinned: every current release is unverified) ...
    assert "torchmpi concretize: note: torch: unpinned" in err
    # ... and after it, the release the lock holds (the stand-in's 2.11.0).
    assert "torchmpi concretize: note: torch 2.11.0: no ProcessGroupMPI fixture" in err


@pytest.mark.parametrize(("versions", "expect"), [
    (["2.13.0"], ("'2.13.0' is no py-torch release of the pinned builtin spack-packages;"
                 " allowed: 2.12.0, 2.11.0, 2.10.0 (current) or 2.9.1, 2.6.0")),
    (["2.8.0"], "torch 2.8.0 cannot be built +cuda_aware_mpi"),
    # Both ends of the 2.7.0-2.9.0 gap, and the last release before 2.6.
    (["2.9.0"], "torch 2.9.0 cannot be built +cuda_aware_mpi"),
    (["2.7.0"], "torch 2.7.0 cannot be built +cuda_aware_mpi"),
    (["2.5.1"], "torch 2.5.1 cannot be built +cuda_aware_mpi"),
    (["2.11"], "'2.11' is not allowed; allowed: a PyTorch release as MAJOR.MINOR.PATCH"),
    (["2.11.0", "2.11.0"], "lists a value twice"),
])
def test_bad_release_is_refused_at_load(tmp_path: Path, versions: list, expect: str) -> None:
    with pytest.raises(UserError) as err:
        edited_site(tmp_path, "derecho", _with(*versions))
    assert expect in str(err.value)
    assert ": torch.versions" in str(err.value)


def test_cuda_aware_rule_only_with_cuda_aware_mpi(tmp_path: Path) -> None:
    assert edited_site(tmp_path, "alps-gh200", _with("2.8.0")).data["torch"]
    # The edges of the allowed ranges load on a +cuda_aware_mpi site.
    for version in ("2.6.0", "2.9.1"):
        assert edited_site(tmp_path, "derecho", _with(version)).data["torch"]


def test_gpu_site_silent_on_cuda_aware_is_cuda_aware(tmp_path: Path, capsys) -> None:
    """mpi.cuda_aware unstated on a GPU site means +cuda_aware_mpi (the rendered
    root says so), so a release that cannot be built that way is refused and an
    unverified one is named, as on a site that states it."""
    with pytest.raises(UserError) as err:
        edited_site(tmp_path, "generic-ib", _with("2.8.0"))
    assert "torch 2.8.0 cannot be built +cuda_aware_mpi" in str(err.value)
    files, err_text = _render(tmp_path, "generic-ib", _with("2.11.0"), capsys)
    assert "+cuda_aware_mpi" in files["spack.yaml"]["spack"]["specs"][0]
    # ... but Open MPI is PyTorch's own branch: the patch never runs there, so no
    # PatchError risk is named.
    assert "ProcessGroupMPI" not in err_text and "PatchError" not in err_text


def test_note_only_where_the_patch_applies() -> None:
    """The patch runs for the MPICH family only (py_torch/package.py
    mpich_cuda_patch): no note for an Open MPI site, whatever its torch."""
    base = {"gpu": {"cuda_arch": 80}, "torch": {"versions": ["2.11.0"]}}
    for kind in ("openmpi", "openmpi-cuda"):
        assert torches.notes({**base, "mpi": {"kind": kind, "cuda_aware": True}}) == [], kind
    for kind in ("cray-mpich", "mpich"):
        assert torches.notes({**base, "mpi": {"kind": kind, "cuda_aware": True}}), kind


def test_verified_releases_are_the_fixtures() -> None:
    """torches.VERIFIED names the release fixtures; the rest are the package's UNVERIFIED_TORCH."""
    fixtures = {p.stem.removeprefix("v") for p in FIXTURES.glob("v*.cpp")}
    assert set(torches.VERIFIED) == fixtures
    current = [v for v, old in torches.builtin_releases().items() if not old]
    assert current and set(current) <= set(torches.unverified()) | set(torches.VERIFIED)
    assert set(torches.unverified()).isdisjoint(torches.VERIFIED)
    assert paths.builtin_repo().is_dir()


@pytest.mark.parametrize(("site", "cuda"), [("derecho", "12.2.1"), ("generic-ib", "12.4.1")])
def test_release_the_sites_cuda_cannot_build_is_refused_at_load(
        tmp_path: Path, capsys, site: str, cuda: str) -> None:
    """Builtin py-torch: ``depends_on("cuda@12.6:", when="@2.12:+cuda")``.  A copy of a
    shipped site pinning 2.12.0 on an older CUDA is refused when the file is
    loaded (file:line at the release, the rule and the site's CUDA), by
    ``render`` with exit 1 and no traceback, before any solve could fail on it."""
    with pytest.raises(UserError) as err:
        edited_site(tmp_path, site, _with("2.11.0", "2.12.0"))
    msg = str(err.value)
    where = re.search(rf"{site}\.yaml:(\d+):\d+: torch\.versions\[1\]: (.*)", msg)
    assert where, msg
    line = (tmp_path / f"{site}.yaml").read_text().splitlines()[int(where.group(1)) - 1]
    assert "2.12.0" in line, line
    assert f"torch 2.12.0 needs cuda@12.6: (builtin py-torch), this site has cuda@{cuda}" in (
        where.group(2)), msg
    assert "gpu.cuda.spec" in where.group(2) and "2.11.0" in where.group(2)
    rc = main(["render", str(tmp_path / f"{site}.yaml"), "-o", str(tmp_path / "env")])
    err_text = capsys.readouterr().err
    assert rc != 0 and "Traceback" not in err_text and "cuda@12.6:" in err_text


def test_release_the_sites_cuda_can_build_loads(tmp_path: Path) -> None:
    """Alps (cuda@12.9.1) takes 2.12.0; a CPU-only copy (no gpu:) has no CUDA rule."""
    assert edited_site(tmp_path, "alps-gh200", _with("2.12.0")).data["torch"]

    def cpu(d: dict) -> None:
        d.pop("gpu")
        d["mpi"] = {k: v for k, v in d["mpi"].items() if k != "cuda_aware"}
        d["mpi"]["kind"] = "openmpi"
        d["torch"] = {"versions": ["2.12.0"]}
    (tmp_path / "cpu").mkdir()
    assert "gpu" not in edited_site(tmp_path / "cpu", "generic-ib", cpu).data


def test_cuda_rules_are_builtins() -> None:
    """The rules come from the pinned builtin py-torch file, not a copy here."""
    rules = torches.cuda_rules()
    assert ("2.12", "", "12.6", "") in rules, rules
    assert torches.cuda_problem("2.12.0", "12.4.1") == "12.6:"
    assert torches.cuda_problem("2.11.0", "12.2.1") is None
    assert torches.cuda_problem("2.3.1", "12.4.1") == "11:12.3"
