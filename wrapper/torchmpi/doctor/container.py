"""Inside a container: is the MPI, libfabric and NCCL plugin the host's or the image's?

A container built by ``torchmpi container`` carries its own MPICH, libfabric
and plugin; the site's descriptor bind-mounts the host's and puts them first on
the library path.  A library is the host's when the file a process maps sits
on a bind mount (``/proc/self/mountinfo``), the image's when it sits on the
container's root file system.  If the
injection did not happen, everything still *runs* -- on the image's libfabric,
whose providers cannot drive the Slingshot NIC (CSCS measured 19.8 -> 1.6 GB/s
all-reduce busbw without the hook).  So the question is answered the way the
loader answers it: a child process ``dlopen``\\s each library by name, exactly
as libtorch and NCCL do, and reads ``/proc/self/maps`` for the file mapped.

Container detection: ``/run/.containerenv`` (podman, podman-hpc), ``/.dockerenv``
(docker), ``APPTAINER_CONTAINER`` / ``SINGULARITY_CONTAINER`` (apptainer,
singularity) and ``TORCHMPI_CONTAINER``, which every torchmpi descriptor sets
(the CE EDF's ``[env]`` included: no CE-specific marker is documented).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Mapping

from torchmpi.doctor.core import FAIL, PASS, SKIP, WARN, Check

#: Kernel file systems mounted into every container: never where a library comes from.
_VIRTUAL = ("/proc", "/sys", "/dev")

#: (check name, soname dlopened, what it is).
LIBRARIES = (
    ("container.mpi", "libmpi.so.12", "MPI (MPICH ABI)"),
    ("container.libfabric", "libfabric.so.1", "libfabric"),
    ("container.plugin", "libnccl-net.so", "NCCL net plugin"),
)

FIX = ("start the job through the site's descriptor from `torchmpi container SITE` (EDF,"
       " run.sh) with injection on (TORCHMPI_CONTAINER_INJECT unset), so the host's"
       " library comes first on the library path")

_CHILD = r"""
import ctypes, json, os, sys
out = {}
for name in sys.argv[1:]:
    try:
        ctypes.CDLL(name)
    except OSError:
        out[name] = None
        continue
    stem = name.split(".so")[0] + ".so"
    with open("/proc/self/maps") as maps:
        paths = [line.split(None, 5)[-1].strip() for line in maps if "/" in line]
    out[name] = next((p for p in paths if os.path.basename(p).startswith(stem)), None)
print(json.dumps(out))
"""


def which_container(env: Mapping[str, str], exists: Callable[[str], bool] = os.path.exists
                    ) -> str | None:
    """The container runtime this process runs in, with the marker that says so; None outside."""
    if env.get("TORCHMPI_CONTAINER"):
        return f"{env['TORCHMPI_CONTAINER']} (TORCHMPI_CONTAINER)"
    for var, what in (("APPTAINER_CONTAINER", "apptainer"),
                      ("SINGULARITY_CONTAINER", "singularity")):
        if env.get(var):
            return f"{what} ({var})"
    for path, what in (("/run/.containerenv", "podman"), ("/.dockerenv", "docker")):
        if exists(path):
            return f"{what} ({path})"
    return None


def mapped_libraries(names: list[str], env: Mapping[str, str] | None = None
                     ) -> dict[str, str | None]:
    """soname -> the file a fresh process maps for it (None: not found), from a child."""
    try:
        proc = subprocess.run([sys.executable, "-c", _CHILD, *names], capture_output=True,
                              text=True, timeout=60, check=False,
                              env=None if env is None else dict(env))
        return json.loads(proc.stdout)
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return dict.fromkeys(names)


def mount_points(mountinfo: str) -> list[str]:
    """Mount points of ``/proc/self/mountinfo`` (field 5, octal escapes undone)."""
    out = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) > 4:
            out.append(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4]))
    return out


def read_mount_points() -> list[str]:
    try:
        with open("/proc/self/mountinfo") as fh:
            return mount_points(fh.read())
    except OSError:
        return []


def origin(path: str, mounts: list[str]) -> str:
    """"host" for a file on a bind mount (injected into the container), "image" for one
    on the container's root file system.

    The rule holds for every way torchmpi's descriptors inject (bind mounts of
    directories, CE's hook mounting a host file over the image's), unlike a rule
    on paths: an NGC image's own libfabric lives in /usr/lib like a host's would.
    """
    best = "/"
    for point in mounts:
        if _under(path, point) and len(point) > len(best):
            best = point
    virtual = any(_under(best, top) for top in _VIRTUAL)
    return "image" if best == "/" or virtual else "host"


def _under(path: str, top: str) -> bool:
    """``path`` is ``top`` or lies below it, by whole components (/sys is not /system-libs)."""
    return path == top or path.startswith(top.rstrip("/") + "/")


def container_checks(env: Mapping[str, str], slingshot: bool, cray_site: bool,
                     exists: Callable[[str], bool] = os.path.exists,
                     resolve: Callable[[list[str]], dict[str, str | None]] | None = None,
                     mounts: list[str] | None = None) -> list[Check]:
    """``container.*`` checks; all SKIP outside a container (nothing is probed there)."""
    where = which_container(env, exists)
    if where is None:
        return [Check("container", SKIP, "not in a container")]
    found = (resolve or mapped_libraries)([soname for _, soname, _ in LIBRARIES])
    mounts = read_mount_points() if mounts is None else mounts
    checks = [Check("container", PASS, f"in a container: {where}")]
    for name, soname, what in LIBRARIES:
        path = found.get(soname)
        if path is None:
            checks.append(Check(name, SKIP, f"{soname} not found ({what})"))
            continue
        side = origin(path, mounts)
        detail = f"{what} from the {side}: {path}"
        if side == "host":
            checks.append(Check(name, PASS, detail))
        elif name == "container.libfabric" and slingshot:
            checks.append(Check(name, FAIL, detail + " -- the image's libfabric has no"
                                " working Slingshot (cxi) provider for this node", FIX))
        elif name == "container.mpi" and cray_site:
            checks.append(Check(name, WARN, detail + " -- not the site's Cray MPICH"
                                " (expected only where the site runs the image's MPICH,"
                                " as CSCS's CE does)", FIX))
        else:
            checks.append(Check(name, PASS, detail))
    return checks
