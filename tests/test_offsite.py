"""torchmpi.offsite: what a lock says about the host it was solved on.

Whether this host is the site's (its install tree, its compilers), and what
an off-site lock differs in: compiler runtimes, host binaries, OS and libc.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from support.spack import LOCK, compiled_lock
from torchmpi import offsite, spackrun
from torchmpi.errors import UserError
from torchmpi.lock import Lock


def _gcc_like(tmp_path: Path, full: str) -> Path:
    """A gcc-compatible driver answering as GCC >= 7 does: -dumpversion alone
    prints the major only, -dumpfullversion the whole version."""
    exe = tmp_path / "bin" / "gcc"
    exe.parent.mkdir(parents=True, exist_ok=True)
    exe.write_text("#!/bin/sh\nfor a in \"$@\"; do\n"
                   f"  [ \"$a\" = -dumpfullversion ] && {{ echo {full}; exit 0; }}\ndone\n"
                   f"echo {full.split('.')[0]}\n")
    exe.chmod(0o755)
    return exe


def test_compiler_version_is_the_full_version(tmp_path: Path) -> None:
    assert offsite.compiler_version(_gcc_like(tmp_path, "12.2.0")) == "12.2.0"


def test_compiler_version_of_the_real_gcc_is_full() -> None:
    gcc = shutil.which("gcc")
    if not gcc:
        pytest.skip("no gcc")
    full = subprocess.run([gcc, "-dumpfullversion"], capture_output=True, text=True,
                          check=True).stdout.strip()
    assert offsite.compiler_version(Path(gcc)) == full and full.count(".") == 2


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


def test_offsite_differences_name_the_missing_compiler_runtime(tmp_path: Path) -> None:
    """A lock that has the site's gcc node but none of the nodes Spack adds for a
    compiler it can run -- the shape of derecho solved here -- must say so.
    (Before: the gcc node's presence hid it, and a site without `libc` got no
    libc line at all: derecho's preview listed only store, os and paths.)"""
    data = {"os": "sles15", "compilers": [{
        "spec": "gcc@12.2.0", "prefix": "/opt/cray/pe/gcc/12.2.0/snos",
        "languages": {"c": "/opt/cray/pe/gcc/12.2.0/snos/bin/gcc"}}]}
    lines = offsite.differences(data, compiled_lock(tmp_path, runtimes=False))
    runtime = [line for line in lines if line.startswith("compiler runtime:")]
    assert len(runtime) == 1, lines
    assert "gcc-runtime@12.2.0" in runtime[0] and "compiler-wrapper" in runtime[0]
    assert "1 node" in runtime[0]
    libc = [line for line in lines if line.startswith("libc:")]
    assert libc and "no libc node" in libc[0] and "`libc`" in libc[0], lines
    # With the runtime nodes present (as on the site) neither line appears.
    lines = offsite.differences(data | {"libc": "glibc@2.31"},
                                compiled_lock(tmp_path, runtimes=True))
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
    lock = compiled_lock(tmp_path, runtimes=True)  # glibc@2.31, gcc@12.2.0
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


def test_gcc_runtimes_own_build_edge_to_gcc_is_not_a_missing_runtime(tmp_path: Path) -> None:
    """In a real Spack 1.1 lock gcc-runtime depends on gcc with deptypes build and
    no virtuals (it is *made from* gcc, not compiled by it); only the edges of a
    language (c, cxx, fortran) make a node compiled by the site's compiler, so a
    site-shaped lock gets no 'compiler runtime' line."""
    lock = compiled_lock(tmp_path, runtimes=True)
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
    lock = compiled_lock(tmp_path, runtimes=True)
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


# --- what the off-site readers accept, at their edges -------------------------------


def test_a_compiler_killed_after_printing_a_version_is_not_believed(tmp_path: Path) -> None:
    """A driver that prints a version and then dies by a signal (exit status < 0)
    has not answered."""
    exe = tmp_path / "gcc"
    exe.write_text("#!/bin/sh\necho 12.2.0\nkill -9 $$\n")
    exe.chmod(0o755)
    assert offsite.compiler_version(exe) is None


def test_only_gcc_entries_are_checked_against_their_executable(tmp_path: Path) -> None:
    """A clang entry whose C compiler reports another version is not a GCC
    contradiction (its version scheme is its own); the same entry named gcc is."""
    cc = str(_gcc_like(tmp_path, "12.2.0"))
    entry = {"spec": "clang@99.0.0", "languages": {"c": cc}}
    assert offsite.compiler_mismatches({"compilers": [entry]}, tmp_path / "s.yaml") == []
    entry["spec"] = "gcc@99.0.0"
    [problem] = offsite.compiler_mismatches({"compilers": [entry]}, tmp_path / "s.yaml")
    assert "states gcc@99.0.0" in problem and "reports 12.2.0" in problem


def _node(name: str, version: str, deps=(), os_: str = "", external: bool = False) -> dict:
    node = {"name": name, "version": version, "arch": {"platform_os": os_, "target": "x86_64"},
            "dependencies": [{"name": n, "hash": h, "parameters": {"virtuals": list(v)}}
                             for n, h, v in deps]}
    if external:
        node["external"] = {"path": "/usr"}
    return node


def _lock(tmp_path: Path, specs: dict) -> Lock:
    path = tmp_path / "spack.lock"
    path.write_text(json.dumps({"roots": [], "concrete_specs": specs}))
    return Lock(path)


def test_a_lock_on_the_sites_own_os_names_no_os_difference(tmp_path: Path) -> None:
    lock = _lock(tmp_path, {"a": _node("zlib", "1.3", os_="sles15")})
    site = {"os": "sles15", "mpi": {"prefix": str(tmp_path / "absent")}}
    assert not [line for line in offsite.differences(site, lock) if line.startswith("os:")]
    other = {"os": "rhel8", "mpi": {"prefix": str(tmp_path / "absent")}}
    assert [line for line in offsite.differences(other, lock) if line.startswith("os:")] == [
        "os: the lock says sles15; the site's nodes run rhel8"]


@pytest.mark.parametrize("count, tail", [(3, ")"), (4, " ...)")])
def test_absent_site_paths_are_shown_three_at_most(tmp_path: Path, count: int,
                                                   tail: str) -> None:
    """Three absent paths are all shown; from the fourth on, three and '...'."""
    site = {"externals": [{"spec": f"p{i}@1", "prefix": str(tmp_path / f"p{i}")}
                          for i in range(count)]}
    [line] = [line for line in offsite.differences(site, _lock(tmp_path, {}))
              if line.startswith("externals:")]
    shown = ", ".join(str(tmp_path / f"p{i}") for i in range(3))
    assert f"externals: {count} site path(s) absent here ({shown}{tail};" in line


def test_the_compiler_line_names_the_locks_compilers(tmp_path: Path) -> None:
    site = {"compilers": [{"spec": "gcc@12.2.0"}], "mpi": {"prefix": str(tmp_path / "x")}}
    with_one = _lock(tmp_path, {"c": _node("gcc", "11.4.0", external=True)})
    assert any("(lock compilers: gcc@11.4.0)" in line
               for line in offsite.differences(site, with_one))
    assert any("(lock compilers: none)" in line
               for line in offsite.differences(site, _lock(tmp_path, {})))


def test_a_runtime_gap_counts_only_nodes_of_the_sites_own_compiler(tmp_path: Path) -> None:
    """Nodes built by another gcc release or another compiler of the same version
    are not the site compiler's: only the site's gcc@12.2.0 nodes must have its runtime."""
    specs = {
        "g12": _node("gcc", "12.2.0", external=True),
        "g11": _node("gcc", "11.4.0", external=True),
        "g13": _node("gcc", "13.1.0", external=True),
        "l12": _node("llvm", "12.2.0", external=True),
        "rt": _node("gcc-runtime", "12.2.0"), "cw": _node("compiler-wrapper", "1"),
        "x": _node("zlib", "1.3", [("gcc", "g12", ["c"]), ("gcc-runtime", "rt", []),
                                   ("compiler-wrapper", "cw", [])]),
        "y": _node("bzip2", "1.0", [("gcc", "g11", ["c"])]),
        "z": _node("xz", "5.4", [("llvm", "l12", ["c"])]),
        "w": _node("lz4", "1.9", [("gcc", "g13", ["c"])]),
    }
    lock = _lock(tmp_path, specs)
    assert offsite._runtime_gap(lock, "gcc@12.2.0") is None
    specs["x"]["dependencies"] = specs["x"]["dependencies"][:1]
    gap = offsite._runtime_gap(_lock(tmp_path, specs), "gcc@12.2.0")
    assert gap and gap.startswith("compiler runtime: 1 node(s) compiled by gcc@12.2.0"), gap


def test_a_compiler_that_fails_or_cannot_run_has_no_version(tmp_path: Path) -> None:
    """Exit status 1 after printing a version, a file that is not executable, a path
    that does not exist: no version, and no exception."""
    failing = tmp_path / "failing"
    failing.write_text("#!/bin/sh\necho 12.2.0\nexit 1\n")
    failing.chmod(0o755)
    plain = tmp_path / "plain"
    plain.write_text("12.2.0\n")
    for exe in (failing, plain, tmp_path / "absent"):
        assert offsite.compiler_version(exe) is None, exe


def test_the_evidence_is_every_prefix_the_site_names(tmp_path: Path) -> None:
    site = {"compilers": [{"spec": "gcc@12", "languages": {"c": "/c/gcc", "cxx": "/c/g++"}},
                          {"spec": "nvhpc@24", "prefix": "/n"}],
            "mpi": {"prefix": "/m"}, "libfabric": {"prefix": "/f"},
            "gpu": {"cuda": {"prefix": "/cu"}, "cudnn": {"prefix": "/dnn"}},
            "externals": [{"spec": "x@1", "prefix": "/x"}, {"spec": "y@1"}]}
    assert [str(p) for p in offsite.evidence(site)] == [
        "/c/gcc", "/c/g++", "/n", "/m", "/cu", "/dnn", "/f", "/x"]


def test_a_lock_compiler_without_a_c_executable_is_not_run(tmp_path: Path) -> None:
    """The site's compiler is in the lock and names no C compiler: nothing to compare."""
    site = {"compilers": [{"spec": "gcc@12.2.0", "prefix": str(tmp_path / "absent")}]}
    lock = _lock(tmp_path, {"c": _node("gcc", "12.2.0", external=True)})
    lines = offsite.differences(site, lock)
    assert not [line for line in lines if line.startswith("compiler:")], lines
