"""The doctor names the plugin and libfabric a job really maps, not what a path scan finds.

Real shared libraries are built here with gcc: a stand-in ``libfabric.so.1`` and a
``libnccl-net.so`` that NEEDs it, in tmp dirs laid out the way an install and a Spack
view lay them out.  The doctor loads them in a child process (``dlopen`` as NCCL does)
and reads that child's ``/proc/self/maps``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from torchmpi.doctor import nccl
from torchmpi.doctor.core import FAIL, PASS, run_command

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")


def build(tmp: Path) -> dict[str, Path]:
    """libfabric.so.1 in fabric/lib64; the plugin in a versioned prefix; a view of symlinks."""
    fabric = tmp / "libfabric-1.22.0" / "lib64"
    plugin = tmp / "aws-ofi-nccl-1.19.0-abcdef" / "lib"
    lonely = tmp / "lonely" / "lib"  # the plugin without a way to its libfabric
    view = tmp / "view" / "lib"
    for d in (fabric, plugin, lonely, view):
        d.mkdir(parents=True)
    src = tmp / "fabric.c"
    # A data symbol: the loader binds it at dlopen even with RTLD_LAZY, so the plugin
    # loads with this libfabric only (not with a host's own libfabric.so.1, if any).
    src.write_text("int fi_version(void) { return 0x10016; }\nint standin_fabric = 1;\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libfabric.so.1", "-o",
                    str(fabric / "libfabric.so.1"), str(src)], check=True)
    (fabric / "libfabric.so").symlink_to("libfabric.so.1")
    src = tmp / "plugin.c"
    src.write_text("int fi_version(void);\nextern int standin_fabric;\n"
                   "int plugin_probe(void) { return fi_version() + standin_fabric; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(plugin / "libnccl-net.so"), str(src),
                    f"-L{fabric}", "-lfabric", f"-Wl,-rpath,{fabric}"], check=True)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lonely / "libnccl-net.so"), str(src),
                    f"-L{fabric}", "-lfabric"], check=True)
    (view / "libnccl-net.so").symlink_to(plugin / "libnccl-net.so")
    return {"fabric": fabric, "plugin": plugin, "lonely": lonely, "view": view}


@pytest.fixture(scope="module")
def libs(tmp_path_factory) -> dict[str, Path]:
    return build(tmp_path_factory.mktemp("plugin-maps"))


def resolve(lib_path: str, **extra: str) -> nccl.PluginInfo:
    env = {**os.environ, "LD_LIBRARY_PATH": lib_path, **extra}
    return nccl.plugin_from_maps(nccl.resolve_plugin(env, run_command))


def test_the_mapped_plugin_and_its_libfabric_are_reported(libs):
    """libfabric is reached by the plugin's RUNPATH, not LD_LIBRARY_PATH: a scan misses it."""
    plugin = resolve(str(libs["plugin"]))
    assert plugin.libraries == {"libnccl-net.so": str(libs["plugin"] / "libnccl-net.so")}
    assert plugin.libfabric == str(libs["fabric"] / "libfabric.so.1")
    check = nccl.check_nccl_plugin({"NCCL_NET": "AWS Libfabric"}, plugin, True, 2)
    assert check.status == PASS and str(libs["fabric"] / "libfabric.so.1") in check.detail


def test_a_view_symlink_resolves_to_the_real_prefix_and_its_version(libs):
    """Through a Spack view the file NCCL maps is the install's: its path tells the version."""
    plugin = resolve(str(libs["view"]))
    assert plugin.libraries["libnccl-net.so"] == str(libs["plugin"] / "libnccl-net.so")
    assert plugin.version == (1, 19, 0)


def test_a_plugin_whose_libfabric_does_not_load_fails(libs):
    """The file is on LD_LIBRARY_PATH, but dlopen fails: NCCL falls back to sockets.

    Without a RUNPATH the plugin's libfabric.so.1 is either nowhere or some other
    libfabric (a host's own), which lacks what the plugin needs: dlopen fails either way.
    """
    plugin = resolve(str(libs["lonely"]))
    assert plugin.libraries == {}
    error = plugin.errors["libnccl-net.so"]
    assert "libfabric.so.1" in error or "standin_fabric" in error, error
    check = nccl.check_nccl_plugin({}, plugin, True, 2)
    assert check.status == FAIL and error in check.detail, check
    check = nccl.check_nccl_plugin({"NCCL_NET": "AWS Libfabric"}, plugin, True, 2)
    assert check.status == FAIL and error in check.detail, check


def test_the_plugin_is_named_even_when_its_libfabric_sorts_first(tmp_path):
    """As on Alps: libfabric in /opt/cray, the plugin under /user-environment.  The child
    lists every file the load mapped, sorted; the plugin is the libnccl-net file among
    them, not the first, and its path gives the version."""
    built = build(tmp_path)
    moved = tmp_path / "zz" / "aws-ofi-nccl-1.19.0-abcdef"
    moved.parent.mkdir()
    built["plugin"].parent.rename(moved)  # after libfabric-1.22.0 in sorted order
    plugin = resolve(str(moved / "lib"))
    assert plugin.libraries == {"libnccl-net.so": str(moved / "lib" / "libnccl-net.so")}
    assert plugin.version == (1, 19, 0)
    assert plugin.libfabric == str(built["fabric"] / "libfabric.so.1")


def test_the_first_loadable_directory_wins(libs):
    """Two candidates on the path: the one the loader takes is the one reported."""
    plugin = resolve(f"{libs['plugin']}:{libs['view']}")
    assert plugin.libraries["libnccl-net.so"] == str(libs["plugin"] / "libnccl-net.so")


def test_no_plugin_anywhere(tmp_path):
    plugin = resolve(str(tmp_path))
    assert plugin.libraries == {} and plugin.libfabric == ""
    assert nccl.check_nccl_plugin({}, plugin, True, 2).status == FAIL


def test_a_lone_ofi_library_is_not_the_plugin_nccl_opens(libs, tmp_path):
    """aws-ofi-nccl configured --disable-nccl-net-library installs libnccl-net-ofi.so
    alone (src/Makefile.am and configure.ac at v1.19.2); with NCCL_NET_PLUGIN unset NCCL
    opens libnccl-net.so only (NVIDIA/nccl src/plugin/net.cc at v2.29.2-1,
    defaultNetPlugin), finds none and stops on NCCL_NET.  The doctor says so, and that
    NCCL_NET_PLUGIN=ofi is the way to it; set, the same file is the plugin and passes."""
    lib = tmp_path / "aws-ofi-nccl-1.19.2-nolink" / "lib"
    lib.mkdir(parents=True)
    shutil.copy(libs["plugin"] / "libnccl-net.so", lib / "libnccl-net-ofi.so")
    env = {"NCCL_NET": "AWS Libfabric"}
    plugin = resolve(str(lib))
    assert plugin.libraries == {}
    assert plugin.unused == {"libnccl-net-ofi.so": str(lib / "libnccl-net-ofi.so")}
    check = nccl.check_nccl_plugin(env, plugin, True, 4)
    assert check.status == FAIL, check
    assert "libnccl-net-ofi.so" in check.detail and "NCCL_NET_PLUGIN=ofi" in check.fix, check
    check = nccl.check_nccl_plugin({}, plugin, True, 4)  # NCCL_NET unset: sockets
    assert check.status == FAIL and "NCCL_NET_PLUGIN=ofi" in check.fix, check
    env["NCCL_NET_PLUGIN"] = "ofi"
    plugin = resolve(str(lib), NCCL_NET_PLUGIN="ofi")
    assert plugin.libraries == {"libnccl-net-ofi.so": str(lib / "libnccl-net-ofi.so")}
    assert plugin.version == (1, 19, 2)
    assert nccl.check_nccl_plugin(env, plugin, True, 4).status == PASS


def test_a_plugin_with_an_unresolved_function_fails_as_it_fails_in_nccl(libs, tmp_path):
    """NCCL dlopen()s its plugin RTLD_NOW | RTLD_LOCAL (src/plugin/plugin_open.cc at
    v2.27.7-1, src/net.cc at v2.21.5-1) and hands it its functions only as pointers
    (init's logger argument), so a function the plugin leaves undefined fails NCCL's
    load.  A lazy load would pass it: the doctor must load as NCCL does."""
    import ctypes

    lib = tmp_path / "aws-ofi-nccl-1.19.0-undef" / "lib"
    lib.mkdir(parents=True)
    src = tmp_path / "undef.c"
    src.write_text("int fi_version(void);\nint nowhere_defined(int);\n"
                   "int plugin_probe(void) { return fi_version() + nowhere_defined(1); }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib / "libnccl-net.so"), str(src),
                    f"-L{libs['fabric']}", "-lfabric", f"-Wl,-rpath,{libs['fabric']}"],
                   check=True)
    with pytest.raises(OSError, match="undefined symbol: nowhere_defined"):
        ctypes.CDLL(str(lib / "libnccl-net.so"), mode=os.RTLD_NOW | os.RTLD_LOCAL)
    # NOW first: once an object is loaded lazily, a later NOW dlopen of it did not fail
    ctypes.CDLL(str(lib / "libnccl-net.so"), mode=os.RTLD_LAZY | os.RTLD_LOCAL)  # passes
    plugin = resolve(str(lib))
    assert plugin.libraries == {}
    assert "undefined symbol: nowhere_defined" in plugin.errors["libnccl-net.so"], plugin
    check = nccl.check_nccl_plugin({"NCCL_NET": "AWS Libfabric"}, plugin, True, 2)
    assert check.status == FAIL and "nowhere_defined" in check.detail, check
