"""``torchmpi concretize`` without a real solve: a stand-in ``spack`` on TORCHMPI_SPACK_ROOT.

The real solves are in test_sites_concretize.py; here the command's own logic
is checked: the Spack invocation, -f when the lock is stale, the off-site
install tree, the summary from spack.lock, and Spack's reason on failure.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from torchmpi import offsite, paths, spackrun
from torchmpi.cli import main
from torchmpi.errors import UserError
from torchmpi.lock import Lock

LOCK = {
    "_meta": {"lockfile-version": 6},
    "roots": [{"hash": "r", "spec": "py-torch-mpi"}],
    "concrete_specs": {
        "r": {"name": "py-torch-mpi", "version": "0.1.0", "namespace": "torchmpi",
              "arch": {"target": "zen3"},
              "dependencies": [{"name": "py-torch", "hash": "t", "parameters": {}},
                               {"name": "cray-mpich", "hash": "m",
                                "parameters": {"virtuals": ["mpi"]}}]},
        "t": {"name": "py-torch", "version": "2.11.0", "namespace": "torchmpi",
              "arch": {"target": {"name": "zen3"}},
              "parameters": {"cuda_arch": ["80"], "mpi": True},
              "dependencies": [{"name": "nccl", "hash": "n", "parameters": {}},
                               {"name": "cray-mpich", "hash": "m",
                                "parameters": {"virtuals": ["mpi"]}}]},
        "n": {"name": "nccl", "version": "2.29.2-1", "arch": {"target": "zen3"}},
        "p": {"name": "aws-ofi-nccl", "version": "1.19.0", "arch": {"target": "zen3"}},
        "m": {"name": "cray-mpich", "version": "8.1.27", "arch": {"target": "zen3"},
              "external": {"path": "/opt/cray/pe/mpich/8.1.27/ofi/gnu/9.1"}},
    },
}


@pytest.fixture
def fake_spack(tmp_path: Path, monkeypatch) -> Path:
    """A `spack` that logs its argv and writes LOCK (or fails when FAIL is set)."""
    root = tmp_path / "spack"
    (root / "bin").mkdir(parents=True)
    (tmp_path / "lock.json").write_text(json.dumps(LOCK))
    exe = root / "bin" / "spack"
    exe.write_text(f"""#!/bin/sh
echo "$@" >> {tmp_path}/argv
if [ -n "$FAIL" ]; then
  echo "==> Error: failed to concretize py-torch-mpi for the following reasons:"
  echo "     1. cannot satisfy a requirement for package 'cray-mpich'."
  exit 1
fi
while [ "$1" != "-e" ]; do shift; done
echo "==> Concretized 1 spec"
cp {tmp_path}/lock.json "$2/spack.lock"
""")
    exe.chmod(0o755)
    monkeypatch.setenv("TORCHMPI_SPACK_ROOT", str(root))
    monkeypatch.setenv("SPACK_USER_CACHE_PATH", str(tmp_path / "cache"))
    monkeypatch.delenv("FAIL", raising=False)
    return tmp_path


def _argv(tmp: Path) -> list[str]:
    return (tmp / "argv").read_text().splitlines()


def test_summary_and_fresh_then_incremental(fake_spack: Path, capsys, monkeypatch) -> None:
    out = fake_spack / "env"
    # An install root that cannot exist here (whatever another run created).
    site = fake_spack / "derecho.yaml"
    site.write_text((paths.sites_dir() / "derecho.yaml").read_text()
                    .replace("/glade/work/$user", "$TORCHMPI_TEST_UNSET"))
    monkeypatch.delenv("TORCHMPI_TEST_UNSET", raising=False)
    assert main(["concretize", str(site), "-o", str(out), "-q"]) == 0
    text = capsys.readouterr().out
    assert "cray-mpich@8.1.27 (external)" in text
    assert "nccl@2.29.2-1" in text and "aws-ofi-nccl@1.19.0" in text
    assert "5 total, 4 to build from source, 1 external" in text
    first = _argv(fake_spack)[-1]
    assert first.endswith("concretize -f")  # no lock yet: full solve
    assert "config:install_tree:root:" in first  # the site's tree is not on this host
    # Unchanged environment, lock newer than every file: Spack decides (no -f).
    future = time.time() + 5
    os.utime(out / "spack.lock", (future, future))
    assert main(["concretize", str(site), "-o", str(out), "-q"]) == 0
    assert _argv(fake_spack)[-1].endswith("concretize")


def test_failure_shows_spacks_reason(fake_spack: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("FAIL", "1")
    assert main(["concretize", "derecho", "-o", str(fake_spack / "env"), "-q"]) == 1
    err = capsys.readouterr().err
    assert "Spack could not concretize derecho" in err
    assert "cannot satisfy a requirement for package 'cray-mpich'" in err


def test_json_summary(fake_spack: Path, capsys) -> None:
    assert main(["concretize", "derecho", "-o", str(fake_spack / "env"), "-q", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["mpi"] == "cray-mpich@8.1.27 (external)" and data["targets"] == ["zen3"]


def test_lock_reader(tmp_path: Path) -> None:
    path = tmp_path / "spack.lock"
    path.write_text(json.dumps(LOCK))
    lock = Lock(path)
    assert [n.name for n in lock.mpi()] == ["cray-mpich"]
    assert lock.named("py-torch")[0].target == "zen3"
    assert [n.label for n in lock.externals] == ["cray-mpich@8.1.27"]


def _site_like(tmp: Path, root: str = "glade") -> dict:
    """A site whose paths all live under ``tmp``: compiler, MPI, CUDA, install tree."""
    base = tmp / root
    return {
        "compilers": [{"spec": "gcc@12.2.0", "prefix": str(base / "apps/gcc"),
                       "languages": {"c": str(base / "apps/gcc/bin/gcc")}}],
        "mpi": {"kind": "cray-mpich", "prefix": str(base / "opt/cray/pe/mpich")},
        "gpu": {"cuda": {"spec": "cuda@12.2.1", "prefix": str(base / "apps/cuda")}},
        "install": {"root": str(base / "work/$user/install")},
    }


def test_offsite_install_tree(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SPACK_USER_CACHE_PATH", str(tmp_path))
    monkeypatch.delenv("PSCRATCH", raising=False)
    assert spackrun.offsite_install_args({}, "x") == []
    args = spackrun.offsite_install_args({"install": {"root": "$PSCRATCH/sw"}}, "pm")
    assert args == ["-c", f"config:install_tree:root:{tmp_path}/offsite-store/pm"]


def test_onsite_detection_is_not_fooled_by_a_created_directory(tmp_path: Path,
                                                               monkeypatch) -> None:
    """Creating the install tree's top directory (as a test once created /glade)
    does not make this host the site; the site's compiler and externals do.
    (The old rule -- the first two parts of the install root are a directory --
    called this host the site as soon as that directory existed.)"""
    monkeypatch.setenv("SPACK_USER_CACHE_PATH", str(tmp_path / "cache"))
    data = _site_like(tmp_path)
    (tmp_path / "glade" / "work").mkdir(parents=True)
    assert not offsite.on_site(data)
    assert spackrun.offsite_install_args(data, "d"), "a created directory is no evidence"
    assert [p.name for p in offsite.missing(data)] == ["gcc", "mpich", "cuda"]
    # The site's own paths, all of them: now this host is the site.
    gcc = Path(data["compilers"][0]["languages"]["c"])
    gcc.parent.mkdir(parents=True)
    gcc.touch()
    for entry in (data["mpi"], data["gpu"]["cuda"]):
        Path(entry["prefix"]).mkdir(parents=True)
    assert offsite.on_site(data)
    assert spackrun.offsite_install_args(data, "d") == []
    # A site file that names no path at all cannot be recognised.
    assert not offsite.on_site({"install": {"root": str(tmp_path)}})


def test_compiler_contradicting_the_site_file_is_an_error_on_site(tmp_path: Path) -> None:
    """On the site, a gcc whose binary reports another version than the site
    file states is refused before any solve (Spack would record the stated one)."""
    import shutil

    real = shutil.which("gcc")
    if not real:
        pytest.skip("no gcc on this host")
    found = offsite.compiler_version(Path(real))
    data = _site_like(tmp_path)
    data["compilers"][0]["languages"]["c"] = real
    for entry in (data["mpi"], data["gpu"]["cuda"]):
        Path(entry["prefix"]).mkdir(parents=True)
    data["compilers"][0]["spec"] = f"gcc@{found}"
    offsite.check_compilers(data, tmp_path / "x.yaml")  # agrees: no error
    data["compilers"][0]["spec"] = "gcc@1.2.3"
    with pytest.raises(UserError) as err:
        offsite.check_compilers(data, tmp_path / "x.yaml")
    assert f"x.yaml: compilers[0].spec: states gcc@1.2.3, but {real} reports {found}" in str(
        err.value)


def test_offsite_lock_is_labelled_a_preview(fake_spack: Path, capsys) -> None:
    """Derecho solved here: the summary says it is a preview and lists what differs."""
    lock = json.loads(json.dumps(LOCK))
    for spec in lock["concrete_specs"].values():
        spec["arch"]["platform_os"] = "debian12"
    lock["concrete_specs"]["g"] = {"name": "glibc", "version": "2.36",
                                   "arch": {"target": "x86_64", "platform_os": "debian12"},
                                   "external": {"path": "/usr"}}
    (fake_spack / "lock.json").write_text(json.dumps(lock))
    assert main(["concretize", "derecho", "-o", str(fake_spack / "env"), "-q"]) == 0
    out = capsys.readouterr().out
    assert "(OFF-SITE PREVIEW)" in out.splitlines()[0]
    assert "os: the lock says debian12" in out
    assert "libc: the lock has glibc@2.36" in out
    assert "compiler: the site's gcc@12.2.0 cannot run here" in out
    assert main(["concretize", "derecho", "-o", str(fake_spack / "env"), "-q", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["offsite_preview"] is True and data["offsite_differences"]


def test_runtime_only_change_keeps_the_lock(fake_spack: Path, capsys, monkeypatch) -> None:
    """Changing only runtime.env re-renders the files but does not force a
    re-solve; a change the solver reads (packages) does."""
    out = fake_spack / "env"
    site = fake_spack / "sites" / "derecho.yaml"
    site.parent.mkdir()
    text = (paths.sites_dir() / "derecho.yaml").read_text()
    site.write_text(text)
    assert main(["concretize", str(site), "-o", str(out), "-q"]) == 0
    assert _argv(fake_spack)[-1].endswith("concretize -f")
    runtime_change = text.replace("\n  env:\n", "\n  env:\n    NCCL_DEBUG_SUBSYS: INIT\n", 1)
    assert runtime_change != text
    site.write_text(runtime_change)
    assert main(["concretize", str(site), "-o", str(out), "-q"]) == 0
    assert "NCCL_DEBUG_SUBSYS=INIT" in (out / "runtime.sh").read_text(), "re-rendered"
    assert _argv(fake_spack)[-1].endswith("concretize"), "no -f for a runtime-only change"
    site.write_text(runtime_change.replace("version: 2.21.5-1", "version: 2.27.7-1")
                    .replace("plugin: 1.6.0", "plugin: 1.19.0"))
    assert main(["concretize", str(site), "-o", str(out), "-q"]) == 0
    assert _argv(fake_spack)[-1].endswith("concretize -f"), "packages changed: full re-solve"
    capsys.readouterr()


def test_roots_paired_with_another_roots_hash_are_refused(fake_spack: Path, capsys) -> None:
    """A lock whose root points at another package's spec (seen with Spack 1.1's
    concretization cache on a two-root site) is an error, not a summary."""
    swapped = json.loads(json.dumps(LOCK))
    swapped["roots"] = [{"hash": "t", "spec": "py-torch-mpi +cuda"},
                        {"hash": "r", "spec": "torchmpi.py-torch"}]
    (fake_spack / "lock.json").write_text(json.dumps(swapped))
    assert main(["concretize", "derecho", "-o", str(fake_spack / "env"), "-q"]) == 1
    err = capsys.readouterr().err
    assert "root 'py-torch-mpi +cuda' points at py-torch@2.11.0 (hash t)" in err
    assert "root 'torchmpi.py-torch' points at py-torch-mpi@0.1.0 (hash r)" in err
    # The same lock with the roots the right way round is accepted.
    swapped["roots"] = [{"hash": "r", "spec": "py-torch-mpi +cuda"},
                        {"hash": "t", "spec": "torchmpi.py-torch"}]
    (fake_spack / "lock.json").write_text(json.dumps(swapped))
    assert main(["concretize", "derecho", "-o", str(fake_spack / "env"), "-q", "-f"]) == 0


def _compiled_lock(tmp: Path, *, runtimes: bool) -> Lock:
    """Derecho's off-site DAG in small: torch compiled by the site's external
    gcc@12.2.0 (Spack 1.1 keeps that node even when it cannot run the
    compiler), with or without the runtime nodes Spack adds for a compiler it
    can run (gcc-runtime, compiler-wrapper, the libc)."""
    gcc_edge = {"name": "gcc", "hash": "g", "parameters": {"virtuals": ["c", "cxx"]}}
    specs = {
        "t": {"name": "py-torch", "version": "2.11.0", "arch": {"platform_os": "sles15"},
              "dependencies": [gcc_edge]},
        "g": {"name": "gcc", "version": "12.2.0", "arch": {"platform_os": "sles15"},
              "external": {"path": "/opt/cray/pe/gcc/12.2.0/snos"}},
    }
    if runtimes:
        specs["t"]["dependencies"] += [
            {"name": "gcc-runtime", "hash": "gr", "parameters": {}},
            {"name": "compiler-wrapper", "hash": "w", "parameters": {}},
            {"name": "glibc", "hash": "l", "parameters": {"virtuals": ["libc"]}},
        ]
        specs["gr"] = {"name": "gcc-runtime", "version": "12.2.0",
                       "arch": {"platform_os": "sles15"}}
        specs["w"] = {"name": "compiler-wrapper", "version": "1.0",
                      "arch": {"platform_os": "sles15"}}
        specs["l"] = {"name": "glibc", "version": "2.31", "arch": {"platform_os": "sles15"},
                      "external": {"path": "/usr"}}
    path = tmp / ("with.lock" if runtimes else "without.lock")
    path.write_text(json.dumps({"roots": [{"hash": "t", "spec": "py-torch"}],
                                "concrete_specs": specs}))
    return Lock(path)


def test_offsite_differences_name_the_missing_compiler_runtime(tmp_path: Path) -> None:
    """A lock that has the site's gcc node but none of the nodes Spack adds for a
    compiler it can run -- the shape of derecho solved here -- must say so.
    (Before: the gcc node's presence hid it, and a site without `libc` got no
    libc line at all: derecho's preview listed only store, os and paths.)"""
    data = {"os": "sles15", "compilers": [{
        "spec": "gcc@12.2.0", "prefix": "/opt/cray/pe/gcc/12.2.0/snos",
        "languages": {"c": "/opt/cray/pe/gcc/12.2.0/snos/bin/gcc"}}]}
    lines = offsite.differences(data, _compiled_lock(tmp_path, runtimes=False))
    runtime = [line for line in lines if line.startswith("compiler runtime:")]
    assert len(runtime) == 1, lines
    assert "gcc-runtime@12.2.0" in runtime[0] and "compiler-wrapper" in runtime[0]
    assert "1 node" in runtime[0]
    libc = [line for line in lines if line.startswith("libc:")]
    assert libc and "no libc node" in libc[0] and "`libc`" in libc[0], lines
    # With the runtime nodes present (as on the site) neither line appears.
    lines = offsite.differences(data | {"libc": "glibc@2.31"},
                                _compiled_lock(tmp_path, runtimes=True))
    assert not [line for line in lines if line.startswith(("compiler runtime:", "libc:"))]


def test_offsite_differences_name_a_host_binary_and_a_foreign_libc(tmp_path: Path) -> None:
    """Where a binary of the site's compiler path exists here (perlmutter's
    /usr/bin/gcc-12 on Debian) Spack ran it: the preview says which version it
    really is; and a libc other than the one the site states is named."""
    cc = tmp_path / "bin" / "gcc-12"
    cc.parent.mkdir()
    cc.write_text("#!/bin/sh\necho 12.2.0\n")
    cc.chmod(0o755)
    data = {"os": "sles15", "libc": "glibc@2.31",
            "compilers": [{"spec": "gcc@12.2.0", "languages": {"c": str(cc)}}],
            "mpi": {"kind": "cray-mpich", "prefix": str(tmp_path / "absent" / "mpich")}}
    lock = _compiled_lock(tmp_path, runtimes=True)  # glibc@2.31, gcc@12.2.0
    assert not [line for line in offsite.differences(data, lock)
                if line.startswith(("compiler:", "libc:"))], "agrees: nothing to say"
    data["compilers"][0]["spec"] = "gcc@12.3.0"
    data["libc"] = "glibc@2.28"
    lock.nodes["g"].version = "12.3.0"  # the lock records the stated version
    lines = offsite.differences(data, lock)
    assert any(line.startswith(f"compiler: gcc@12.3.0 was solved with this host's {cc}, "
                               "which is 12.2.0") for line in lines), lines
    assert "libc: the lock has glibc@2.31; the site has glibc@2.28" in lines


def test_offsite_libc_line_names_none_when_nothing_is_built(tmp_path: Path) -> None:
    """A lock of externals only (nothing built, no libc node) against a site that
    states its libc: the line says 'none', not an empty list."""
    path = tmp_path / "externals.lock"
    path.write_text(json.dumps({"roots": [{"hash": "m", "spec": "cray-mpich"}],
                                "concrete_specs": {"m": LOCK["concrete_specs"]["m"]}}))
    data = {"libc": "glibc@2.31", "mpi": {"prefix": str(tmp_path / "absent")}}
    lines = offsite.differences(data, Lock(path))
    assert "libc: the lock has none; the site has glibc@2.31" in lines, lines


def test_only_an_mpi_edge_makes_an_mpi(tmp_path: Path) -> None:
    """The summary's MPI is what a dependent uses *as* ``mpi``: the compiler a node
    is built with (virtuals c, cxx) is not one."""
    lock = _compiled_lock(tmp_path, runtimes=True)
    assert lock.mpi() == []
    assert lock.summary()["mpi"] == "-"


def test_gcc_runtimes_own_build_edge_to_gcc_is_not_a_missing_runtime(tmp_path: Path) -> None:
    """In a real Spack 1.1 lock gcc-runtime depends on gcc with deptypes build and
    no virtuals (it is *made from* gcc, not compiled by it); only the edges of a
    language (c, cxx, fortran) make a node compiled by the site's compiler, so a
    site-shaped lock gets no 'compiler runtime' line."""
    lock = _compiled_lock(tmp_path, runtimes=True)
    path = tmp_path / "real-shape.lock"
    data = json.loads(lock.path.read_text())
    data["concrete_specs"]["gr"]["dependencies"] = [
        {"name": "gcc", "hash": "g", "parameters": {"deptypes": ["build"], "virtuals": []}}]
    path.write_text(json.dumps(data))
    site = {"os": "sles15", "libc": "glibc@2.31", "compilers": [{
        "spec": "gcc@12.2.0", "prefix": "/opt/cray/pe/gcc/12.2.0/snos",
        "languages": {"c": "/opt/cray/pe/gcc/12.2.0/snos/bin/gcc"}}]}
    lines = offsite.differences(site, Lock(path))
    assert not [line for line in lines if line.startswith("compiler runtime:")], lines


def test_a_lock_on_two_oses_or_two_libcs_is_not_the_sites(tmp_path: Path) -> None:
    """Built nodes on this host's OS beside the site's, or a second libc beside the
    site's, are nodes the site would not build: the preview names both."""
    lock = _compiled_lock(tmp_path, runtimes=True)
    data = json.loads(lock.path.read_text())
    specs = data["concrete_specs"]
    specs["gr"]["arch"]["platform_os"] = "debian12"
    specs["l2"] = {"name": "glibc", "version": "2.36", "arch": {"platform_os": "debian12"},
                   "external": {"path": "/usr"}}
    specs["gr"]["dependencies"] = [{"name": "glibc", "hash": "l2",
                                    "parameters": {"virtuals": ["libc"]}}]
    path = tmp_path / "mixed.lock"
    path.write_text(json.dumps(data))
    site = {"os": "sles15", "libc": "glibc@2.31",
            "mpi": {"kind": "cray-mpich", "prefix": str(tmp_path / "absent")}}
    lines = offsite.differences(site, Lock(path))
    assert "os: the lock says debian12, sles15; the site's nodes run sles15" in lines, lines
    assert ("libc: the lock has glibc@2.31, glibc@2.36; the site has glibc@2.31"
            in lines), lines
