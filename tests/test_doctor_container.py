"""The doctor inside a container: which runtime, and whose MPI / libfabric / plugin is mapped."""

from __future__ import annotations

import os
from pathlib import Path

from support import cray_ex
from support.podman_kit import image_library
from torchmpi.doctor import container as dc

IMAGE_FABRIC = "/opt/software/linux-x86_64_v3/libfabric-1.22.0-abcd/lib/libfabric.so.1"


def test_markers_of_each_runtime() -> None:
    never = lambda path: False  # noqa: E731
    assert dc.which_container({}, never) is None
    assert dc.which_container({"APPTAINER_CONTAINER": "/x.sif"}, never).startswith("apptainer")
    assert dc.which_container({"SINGULARITY_CONTAINER": "x"}, never).startswith("singularity")
    assert dc.which_container({"TORCHMPI_CONTAINER": "ce"}, never).startswith("ce")
    assert dc.which_container({}, lambda p: p == "/run/.containerenv").startswith("podman")
    assert dc.which_container({}, lambda p: p == "/.dockerenv").startswith("docker")


def test_mapped_library_is_what_the_loader_picks(tmp_path: Path) -> None:
    """A real child process: LD_LIBRARY_PATH decides, as it does for NCCL's dlopen.

    The host's plugin is the Cray EX stand-in's (tests/support/cray_ex.py: it NEEDs
    libfabric.so.1, which NEEDs libcxi and libxpmem), found with the node's search path;
    the image's is a plain library (the image's own plugin, its libfabric inside the
    image, is not what is stood in for).  A host plugin whose closure is broken (the
    node's libfabric found, its libcxi.so.1 gone) does not load at all: the loader opens
    the first libnccl-net.so it finds and does not fall back to the next, so nothing is
    mapped (a dependency-free stand-in was mapped all the same).  Not "libfabric gone":
    a test machine may have its own in ld.so.cache, which the loader would take."""
    node = cray_ex.build(tmp_path / "node", "login")
    first = node.path("libnccl-net").parent
    second = tmp_path / "image"
    second.mkdir()
    image_library(second / "libnccl-net.so", ("ncclNetPlugin_v6",), tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    env["LD_LIBRARY_PATH"] = f"{first}:{second}:{node.library_path()}"
    got = dc.mapped_libraries(["libnccl-net.so", "libfabric.so.1", "libdoes-not-exist.so.9"],
                              env)
    assert got == {"libnccl-net.so": str(first / "libnccl-net.so"),
                   "libfabric.so.1": str(node.path("libfabric")),
                   "libdoes-not-exist.so.9": None}
    env["LD_LIBRARY_PATH"] = f"{second}:{first}:{node.library_path()}"
    assert dc.mapped_libraries(["libnccl-net.so"], env)["libnccl-net.so"] == str(
        second / "libnccl-net.so")
    env["LD_LIBRARY_PATH"] = f"{first}:{second}:{node.library_path()}"
    node.path("libcxi").unlink()
    assert dc.mapped_libraries(["libnccl-net.so"], env) == {"libnccl-net.so": None}


def test_image_libfabric_on_slingshot_fails_with_the_fix() -> None:
    inside = {"TORCHMPI_CONTAINER": "apptainer"}
    found = {"libmpi.so.12": "/opt/cray/pe/mpich/8.1.27/ofi/gnu/9.1/lib-abi-mpich/libmpi.so.12",
             "libfabric.so.1": IMAGE_FABRIC, "libnccl-net.so": "/opt/host/plugin/libnccl-net.so"}
    mounts = ["/", "/proc", "/opt/cray/pe/mpich/8.1.27/ofi/gnu/9.1/lib-abi-mpich",
              "/opt/host/plugin"]
    checks = {c.name: c for c in dc.container_checks(inside, True, True,
                                                     resolve=lambda names: found,
                                                     mounts=mounts)}
    assert checks["container"].status == "PASS"
    assert checks["container.mpi"].status == "PASS" and "host" in checks["container.mpi"].detail
    assert checks["container.plugin"].status == "PASS"
    fabric = checks["container.libfabric"]
    assert fabric.status == "FAIL" and "image" in fabric.detail
    assert "torchmpi container SITE" in fabric.fix
    # Off Slingshot the image's libfabric is what the image is for.
    checks = {c.name: c for c in dc.container_checks(inside, False, False,
                                                     resolve=lambda names: found,
                                                     mounts=mounts)}
    assert checks["container.libfabric"].status == "PASS"


def test_image_mpi_on_a_cray_site_warns() -> None:
    found = {"libmpi.so.12": "/opt/views/view/lib/libmpi.so.12"}
    checks = {c.name: c for c in dc.container_checks({"TORCHMPI_CONTAINER": "podman"}, True,
                                                     True, resolve=lambda names: found,
                                                     mounts=["/"])}
    assert checks["container.mpi"].status == "WARN"
    assert checks["container.libfabric"].status == "SKIP"


def test_outside_a_container_nothing_is_probed() -> None:
    def resolve(names):
        raise AssertionError("probed outside a container")

    checks = dc.container_checks({}, True, True, exists=lambda p: False, resolve=resolve)
    assert [(c.name, c.status) for c in checks] == [("container", "SKIP")]


def test_an_image_library_in_usr_lib_is_the_images() -> None:
    """An NGC-style image keeps its own libfabric in /usr/lib: on the root file system,
    so the image's (a rule on paths called it the host's: a false PASS on Slingshot)."""
    found = {"libfabric.so.1": "/usr/lib/x86_64-linux-gnu/libfabric.so.1.20.0"}
    checks = {c.name: c for c in dc.container_checks(
        {"TORCHMPI_CONTAINER": "podman"}, True, False, resolve=lambda names: found,
        mounts=["/", "/proc", "/dev", "/sys", "/etc/hosts"])}
    assert checks["container.libfabric"].status == "FAIL"


def test_mount_points_of_a_real_mountinfo() -> None:
    text = Path("/proc/self/mountinfo").read_text()
    points = dc.mount_points(text)
    assert "/" in points and "/proc" in points
    assert dc.mount_points("36 35 98:0 /a /mnt/with\\040space rw - ext3 /dev/x rw\n") == [
        "/mnt/with space"]


def test_the_innermost_mount_decides_whatever_the_order_of_mountinfo() -> None:
    """mountinfo's line order is not a nesting order: a new mount is appended to the
    namespace's list, a moved one (``mount --move``) keeps its place (torvalds/linux
    fs/namespace.c: attach_recursive_mnt re-attaches a moved tree, only commit_tree
    appends).  The host's bind mount holding the file decides, listed before or after
    the root it sits in."""
    found = {"libfabric.so.1": "/opt/cray/libfabric/1.22.0/lib64/libfabric.so.1"}
    for mounts in (["/", "/proc", "/opt/cray"], ["/opt/cray", "/proc", "/"]):
        checks = {c.name: c for c in dc.container_checks(
            {"TORCHMPI_CONTAINER": "podman"}, True, False, resolve=lambda names: found,
            mounts=mounts)}
        assert checks["container.libfabric"].status == "PASS", mounts
        assert "from the host" in checks["container.libfabric"].detail


def test_a_host_mount_whose_name_starts_like_a_kernel_one_is_the_hosts() -> None:
    """Only /proc, /sys, /dev and what lies below them are kernel file systems: a
    host directory bound at /system-libs or /devtools is the host's, not the image's
    (a prefix test on the string took it for /sys and /dev)."""
    for point in ("/system-libs", "/devtools", "/processing"):
        path = f"{point}/lib64/libfabric.so.1"
        assert dc.origin(path, ["/", "/proc", "/sys", "/dev", point]) == "host", point
    assert dc.origin("/dev/shm/libx.so", ["/", "/dev", "/dev/shm"]) == "image"
