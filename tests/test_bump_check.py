"""``torchmpi bump-check`` against a stand-in of a site after a stack bump.

The stand-in is a tree in tmp (``--root``; no site path is created) shaped
as NCAR's would be after moving on from ncarenv/23.09: cray-mpich 8.1.29
instead of 8.1.27, CUDA 12.4.1 instead of 12.2.1, libfabric 1.22.0 instead of
1.15.2.0, a 24.12 deployment beside the missing 23.09; and a module tree that
real Lmod's ``spider`` reads (MODULEPATH), with the new versions only.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.sites import edited_site
from torchmpi import bump
from torchmpi import site as sitemod
from torchmpi.cli import main

MODULES = ("gcc/12.2.0", "gcc/13.2.0", "ncarenv/24.12", "cray-mpich/8.1.29",
           "cuda/12.4.1", "cudnn/8.8.1.3-12")


def _tool(path: Path, version: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho {version}\n")
    path.chmod(0o755)


@pytest.fixture
def bumped(tmp_path: Path, monkeypatch) -> Path:
    """The stand-in root of Derecho after the bump, and MODULEPATH for it."""
    root = tmp_path / "root"
    gcc = root / "opt/cray/pe/gcc/12.2.0/snos/bin"
    for exe in ("gcc", "g++", "gfortran"):
        _tool(gcc / exe, "12.2.0")
    (root / "opt/cray/pe/mpich/8.1.29/ofi/gnu/9.1").mkdir(parents=True)
    spack = root / "glade/u/apps/common/23.08/spack/opt/spack"
    (spack / "cuda/12.4.1").mkdir(parents=True)
    (spack / "cudnn/8.8.1.3-12").mkdir(parents=True)
    (root / "opt/cray/libfabric/1.22.0").mkdir(parents=True)
    (root / "usr").mkdir()
    (root / "glade/u/apps/derecho/24.12").mkdir(parents=True)
    modulepath = tmp_path / "modulefiles"
    for name in MODULES:
        f = modulepath / f"{name}.lua"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(f'whatis("{name} stand-in")\n')
    monkeypatch.setenv("MODULEPATH", str(modulepath))
    return root


def _run(capsys, *argv: str) -> tuple[int, dict]:
    rc = main(["bump-check", *argv, "--json"])
    return rc, json.loads(capsys.readouterr().out)


def _by_key(report: dict) -> dict[str, dict]:
    return {f["key"]: f for f in report["findings"]}


def test_missing_paths_and_what_replaces_them(bumped: Path, capsys) -> None:
    rc, report = _run(capsys, "derecho", "--root", str(bumped), "--no-modules")
    assert rc == 1
    found = _by_key(report)
    mpi = found["mpi.prefix"]
    assert mpi["named"] == "/opt/cray/pe/mpich/8.1.27/ofi/gnu/9.1"
    assert mpi["offered"] == ["/opt/cray/pe/mpich/8.1.29/ofi/gnu/9.1"]  # the whole path
    assert "nearest that exists: /opt/cray/pe/mpich" in mpi["problem"]
    assert found["gpu.cuda.prefix"]["offered"] == [
        "/glade/u/apps/common/23.08/spack/opt/spack/cuda/12.4.1"]
    assert found["libfabric.prefix"]["offered"] == ["/opt/cray/libfabric/1.22.0"]
    # A whole deployment gone: its sibling, not a path under it that does not exist.
    assert found["externals[8].prefix"]["offered"] == ["/glade/u/apps/derecho/24.12"]
    # What is there is not listed: the compiler, cuDNN, /usr externals.
    assert not any(k.startswith(("compilers", "gpu.cudnn", "externals[0]")) for k in found)
    # file:line:column at the key.
    text = Path(mpi["file"]).read_text().splitlines()[mpi["line"] - 1]
    assert text[mpi["column"] - 1:].startswith("prefix: /opt/cray/pe/mpich/8.1.27")


def test_missing_modules_through_lmod_spider(bumped: Path, capsys) -> None:
    if bump._lmod() is None:
        pytest.skip("Lmod not installed (apt install lmod, or make setup)")
    rc, report = _run(capsys, "derecho", "--root", str(bumped))
    assert rc == 1 and report["modules_checked"]
    found = _by_key(report)
    assert found["compilers[0].modules[0]"]["named"] == "ncarenv/23.09"
    assert found["compilers[0].modules[0]"]["offered"] == ["ncarenv/24.12"]
    assert found["mpi.modules[0]"]["offered"] == ["cray-mpich/8.1.29"]
    assert found["gpu.cuda.modules[0]"]["offered"] == ["cuda/12.4.1"]
    assert "compilers[0].modules[1]" not in found  # gcc/12.2.0 is there
    assert "gpu.cudnn.modules[0]" not in found


def test_compiler_reporting_another_version(bumped: Path, tmp_path: Path, capsys) -> None:
    for exe in ("gcc", "g++", "gfortran"):  # the same path, a rebuilt compiler
        _tool(bumped / "opt/cray/pe/gcc/12.2.0/snos/bin" / exe, "12.2.1")
    rc, report = _run(capsys, "derecho", "--root", str(bumped), "--no-modules")
    assert rc == 1
    spec = _by_key(report)["compilers[0].spec"]
    assert spec["problem"] == "/opt/cray/pe/gcc/12.2.0/snos/bin/gcc reports 12.2.1"
    assert spec["offered"] == ["gcc@12.2.1"]


def _everything_there(tmp_path: Path) -> tuple[Path, Path]:
    """A stand-in of generic-ib whose every path is under the returned root."""
    site = edited_site(tmp_path, "generic-ib")
    root = tmp_path / "root"
    for key, entry in bump._entries(site.data):
        if entry.get("prefix"):
            (root / entry["prefix"].lstrip("/")).mkdir(parents=True, exist_ok=True)
        for exe in (entry.get("languages") or {}).values():
            _tool(root / exe.lstrip("/"), entry["spec"].partition("@")[2])
    return site.path, root


def test_nothing_missing_exits_zero(tmp_path: Path, capsys) -> None:
    """A site file whose every path is there (a stand-in of generic-ib)."""
    path, root = _everything_there(tmp_path)
    rc = main(["bump-check", str(path), "--root", str(root), "--no-modules"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "generic-ib: all " in out and "modules not checked: --no-modules" in out


def test_nothing_missing_exits_zero_with_json_too(tmp_path: Path, capsys) -> None:
    path, root = _everything_there(tmp_path)
    rc = main(["bump-check", str(path), "--root", str(root), "--no-modules", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert (rc, report["findings"], report["modules_checked"]) == (0, [], False), report


def test_modules_not_checked_are_not_counted(bumped: Path, capsys) -> None:
    """Derecho names 5 modules; with --no-modules the total counts paths and compiler
    executables only (what was looked at), in JSON and in the text line."""
    counts = bump.named_count(sitemod.load("derecho").data)
    assert counts["module"] > 0
    rc, report = _run(capsys, "derecho", "--root", str(bumped), "--no-modules",
                      "--no-versions")
    assert rc == 1 and report["named"] == counts["path"] + counts["compiler"]
    main(["bump-check", "derecho", "--root", str(bumped), "--no-modules", "--no-versions"])
    first = capsys.readouterr().out.splitlines()[0]
    assert first.endswith(f"of {counts['path'] + counts['compiler']} paths, compilers and"
                          " modules the site file names are missing or changed here"), first


def test_run_elsewhere_hint_only_when_nothing_is_here(bumped: Path, tmp_path: Path,
                                                      capsys) -> None:
    """Everything missing means the wrong host; some things missing means a bump."""
    hint = "nothing the site file names is here: run this on derecho's login node"
    argv = ["bump-check", "derecho", "--no-modules", "--no-versions", "--root"]
    assert main([*argv, str(bumped)]) == 1
    assert hint not in capsys.readouterr().out
    (tmp_path / "empty").mkdir()
    assert main([*argv, str(tmp_path / "empty")]) == 1
    assert hint in capsys.readouterr().out


def test_text_report(bumped: Path, capsys) -> None:
    rc = main(["bump-check", "derecho", "--root", str(bumped), "--no-modules"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "mpi.prefix: /opt/cray/pe/mpich/8.1.27/ofi/gnu/9.1 missing" in out
    assert "    offered: /opt/cray/pe/mpich/8.1.29/ofi/gnu/9.1" in out


def _script(path: Path, banner: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho '{banner}'\n")
    path.chmod(0o755)


def test_version_drift_of_externals_at_usr(bumped: Path, capsys) -> None:
    """/usr is always there, so a missing path never shows an OS update: Derecho's
    tar@1.34 at /usr now reports 1.35 (the stand-in's tools print what GNU's do),
    found by Spack's own detection (``spack external find --path``), at the line
    of the external's spec; m4 and diffutils, unchanged, are not listed."""
    usr = bumped / "usr" / "bin"
    _script(usr / "tar", "tar (GNU tar) 1.35")
    _script(usr / "m4", "m4 (GNU M4) 1.4.18")
    _script(usr / "diff", "diff (GNU diffutils) 3.6")
    rc, report = _run(capsys, "derecho", "--root", str(bumped), "--no-modules")
    assert rc == 1 and report["versions_checked"]
    found = _by_key(report)
    drift = [f for f in found.values() if f["kind"] == "version"]
    assert [f["named"] for f in drift] == ["tar@1.34"], drift
    tar = drift[0]
    assert tar["problem"] == "/usr has tar@1.35 (spack external find)"
    assert tar["offered"] == ["tar@1.35"]
    assert tar["key"].endswith(".spec") and tar["key"].startswith("externals[")
    line = Path(tar["file"]).read_text().splitlines()[tar["line"] - 1]
    assert "tar@1.34" in line, line
    assert main(["bump-check", "derecho", "--root", str(bumped), "--no-modules"]) == 1
    assert "/usr has tar@1.35" in capsys.readouterr().out


def test_no_versions_flag_skips_detection(bumped: Path, capsys) -> None:
    _script(bumped / "usr" / "bin" / "tar", "tar (GNU tar) 1.35")
    rc, report = _run(capsys, "derecho", "--root", str(bumped), "--no-modules",
                      "--no-versions")
    assert rc == 1 and not report["versions_checked"]  # (the missing paths)
    assert not [f for f in report["findings"] if f["kind"] == "version"]


def test_a_prefix_without_tools_does_not_end_the_drift_check(bumped: Path, tmp_path: Path,
                                                            capsys) -> None:
    """An external whose prefix is there but has no ``bin/`` (nothing to detect) is passed
    over; the externals after it are still checked."""
    from support.sites import write_site

    def first_an_external_without_bin(data: dict) -> None:
        data["externals"].insert(0, {"spec": "zlib@1.2.13",
                                     "prefix": "/glade/u/apps/derecho/24.12"})
    site = write_site(tmp_path / "site", "derecho", first_an_external_without_bin)
    _script(bumped / "usr" / "bin" / "tar", "tar (GNU tar) 1.35")
    rc, report = _run(capsys, str(site), "--root", str(bumped), "--no-modules")
    drift = [f["named"] for f in report["findings"] if f["kind"] == "version"]
    assert rc == 1 and drift == ["tar@1.34"], drift


def test_the_nearest_folder_of_a_relative_path_is_under_the_root(tmp_path: Path) -> None:
    (tmp_path / "opt" / "here").mkdir(parents=True)
    assert bump.nearest(Path("opt/here/gone/lib"), tmp_path) == "opt/here"
    assert bump.nearest(Path("/opt/here/gone/lib"), tmp_path) == "/opt/here"


def test_an_lmod_that_cannot_start_gives_no_module_list(tmp_path: Path) -> None:
    """``None`` (no answer), not an empty set (every module missing)."""
    assert bump.available_modules(str(tmp_path / "no-lmod")) is None
    not_a_program = tmp_path / "lmod"
    not_a_program.write_text("not a program\n")  # exec fails: no execute permission
    assert bump.available_modules(str(not_a_program)) is None
