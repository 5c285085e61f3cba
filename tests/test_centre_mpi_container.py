"""Apptainer with a centre's own Open MPI bound in (JSC JUPITER, NCSA Delta).

The plan binds the centre's trees at their own paths and puts the centre's Open
MPI, the site's libfabric (Slingshot) and the job's LD_LIBRARY_PATH (what the
centre's modules set) before the image's libraries; the image carries an Open MPI
of the centre's release.  The wrapper runs for real in bash with a stand-in
``apptainer`` on PATH that records its arguments (Apptainer has no Debian 12
package and no PyPI wheel, so the suite's hosts lack it), so the shell's quoting
and the expansion of the job's LD_LIBRARY_PATH are what is checked, not the text
alone.
"""

from __future__ import annotations

import importlib
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from torchmpi import container
from torchmpi import site as sitemod

#: The module (``torchmpi.container.plan`` is also the re-exported function).
planmod = importlib.import_module("torchmpi.container.plan")

SITES = {
    "jupiter": {"prefix": "/p/software/default/stages/2025/software/OpenMPI/5.0.5-GCC-13.3.0",
                "mounts": ["/p/software"], "release": "openmpi@5.0.5", "launch": "srun"},
    "delta": {"prefix": "/sw/spack/deltas11-2023-03/apps/linux-rhel8-zen3/gcc-11.4.0/"
                        "openmpi-4.1.6-lranp74",
              "mounts": ["/sw/spack/deltas11-2023-03"], "release": "openmpi@4.1.6",
              "launch": "srun"},
}


@pytest.mark.parametrize("name", sorted(SITES))
def test_the_centres_trees_are_bound_at_their_own_paths(name: str) -> None:
    want = SITES[name]
    p = container.plan(sitemod.load(name))
    assert p.runtime == "apptainer"
    for mount in want["mounts"]:
        assert (mount, mount) in p.binds
    # mpi.prefix lies in a mount: bound once, through it.
    assert (want["prefix"], want["prefix"]) not in p.binds
    assert ("/usr/lib64", planmod.HOST_LIB64) in p.binds
    assert not p.preload, "no Cray GTL for an Open MPI"


@pytest.mark.parametrize("name", sorted(SITES))
def test_the_centres_open_mpi_comes_first_and_the_jobs_path_before_the_host_lib64(
        name: str) -> None:
    p = container.plan(sitemod.load(name))
    libs = p.lib_path
    mpi_lib = f"{SITES[name]['prefix']}/lib"
    assert mpi_lib in libs
    assert libs.index(mpi_lib) < libs.index(planmod.HOST_LD_PATH) < libs.index(
        planmod.HOST_LIB64)
    assert libs[-1] == planmod.HOST_LIB64


def test_slingshot_binds_the_sites_libfabric_and_the_plugin_dir() -> None:
    p = container.plan(sitemod.load("delta"))
    assert ("/opt/cray/libfabric/1.15.2.0", "/opt/cray/libfabric/1.15.2.0") in p.binds
    assert p.lib_path[0] == planmod.PLUGIN_DIR
    assert "/opt/cray/libfabric/1.15.2.0/lib64" in p.lib_path
    assert p.nccl == {"version": "2.21.5-1", "plugin": "1.6.0"}


def test_infiniband_binds_the_hosts_verbs_providers_and_no_plugin_dir() -> None:
    p = container.plan(sitemod.load("jupiter"))
    for d in planmod.IB_VERBS_DIRS:
        assert (d, d) in p.binds
    assert planmod.PLUGIN_DIR not in p.lib_path
    text = container.render(sitemod.load("jupiter"))["run.sh"]
    assert "TORCHMPI_PLUGIN_LIB" not in text


@pytest.mark.parametrize("name", sorted(SITES))
def test_the_image_carries_the_centres_release(name: str) -> None:
    text = container.render(sitemod.load(name))["spack.yaml"]
    env = yaml.safe_load(text)["spack"]
    assert env["packages"]["mpi"]["require"] == [SITES[name]["release"]]
    assert "replaces it at run time" in text
    assert "nothing injected" not in text


def _run_wrapper(tmp_path: Path, name: str, job_ld: str) -> list[str]:
    """run.sh under bash with a stand-in apptainer that prints its arguments."""
    out = tmp_path / name
    files = container.render(sitemod.load(name))
    out.mkdir()
    (out / "run.sh").write_text(files["run.sh"])
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    stand_in = bindir / "apptainer"
    stand_in.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
    stand_in.chmod(0o755)
    env = {"PATH": f"{bindir}:{os.environ['PATH']}", "LD_LIBRARY_PATH": job_ld,
           "HOME": str(tmp_path)}
    proc = subprocess.run(["bash", str(out / "run.sh"), "python", "train.py"], env=env,
                          capture_output=True, text=True, check=True)
    return proc.stdout.splitlines()


@pytest.mark.parametrize("name", sorted(SITES))
def test_the_wrapper_expands_the_jobs_library_path_at_launch(tmp_path: Path,
                                                               name: str) -> None:
    job = "/centre/UCX/lib:/centre/PMIx/lib"
    args = _run_wrapper(tmp_path, name, job)
    assert args[:2] == ["exec", "--nv"]
    (ld,) = [a for a in args if a.startswith("LD_LIBRARY_PATH=")]
    dirs = ld.split("=", 1)[1].split(":")
    assert dirs[-3:] == ["/centre/UCX/lib", "/centre/PMIx/lib", planmod.HOST_LIB64]
    assert f"{SITES[name]['prefix']}/lib" in dirs
    for mount in SITES[name]["mounts"]:
        assert f"{mount}:{mount}:ro" in args
    assert args[-3:] == [f"{name}.sif", "python", "train.py"]


def test_the_wrapper_names_the_centres_launch_and_module() -> None:
    text = container.render(sitemod.load("jupiter"))["run.sh"]
    assert "Launch: srun -n N ./run.sh python train.py" in text
    assert "OpenMPI/5.0.5" in text
    assert "Cray MPICH" not in text
