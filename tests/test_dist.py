"""Launch mapping: every launcher's variables, precedence, and real mpirun/torchrun jobs."""

from __future__ import annotations

import json
import sys

import pytest
from mpi_launch import mpirun, torchrun
from torchmpi.dist import (
    DEFAULT_PORT,
    Launch,
    LaunchError,
    export_env,
    fallback_rendezvous,
    first_slurm_host,
    launch_from_env,
)

OPENMPI = {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "8",
           "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "4"}
MPICH = {"PMI_RANK": "5", "PMI_SIZE": "6", "MPI_LOCALRANKID": "2", "MPI_LOCALNRANKS": "3"}
PALS = {"PALS_RANKID": "7", "PMI_RANK": "7", "PMI_SIZE": "16", "PALS_LOCAL_RANKID": "3"}
SLURM = {"SLURM_PROCID": "9", "SLURM_NTASKS": "12", "SLURM_STEP_NUM_TASKS": "10",
         "SLURM_LOCALID": "1", "SLURM_STEP_TASKS_PER_NODE": "4(x2)"}
TORCHRUN = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
            "MASTER_ADDR": "node1", "MASTER_PORT": "29400"}


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (OPENMPI, Launch("openmpi", 3, 8, 1, 4)),
        (MPICH, Launch("mpich", 5, 6, 2, 3)),
        (PALS, Launch("pals", 7, 16, 3, None)),
        (SLURM, Launch("slurm", 9, 10, 1, 4)),  # the step's task count, not the job's
        (TORCHRUN, Launch("torchrun", 1, 2, 1, 2, "node1", 29400)),
        ({}, Launch("single", 0, 1, 0, 1)),
    ],
    ids=["openmpi", "mpich", "pals", "slurm", "torchrun", "none"],
)
def test_each_launcher_maps(env, expected):
    assert launch_from_env(env) == expected


def test_torchrun_inside_an_allocation_wins_over_slurm():
    # sbatch exports SLURM_PROCID=0 to every process torchrun starts.
    assert launch_from_env({**SLURM, **TORCHRUN}).launcher == "torchrun"


def test_mpirun_inside_an_allocation_wins_over_slurm():
    assert launch_from_env({**SLURM, **OPENMPI}).rank == 3


def test_pals_is_not_mistaken_for_plain_pmi():
    assert launch_from_env(PALS).launcher == "pals"


def test_rank_without_size_is_an_error():
    with pytest.raises(LaunchError, match="number of ranks"):
        launch_from_env({"PMI_RANK": "0"})


def test_rank_outside_world_is_an_error():
    with pytest.raises(LaunchError, match="outside"):
        launch_from_env({"OMPI_COMM_WORLD_RANK": "4", "OMPI_COMM_WORLD_SIZE": "4"})


def test_non_integer_is_an_error():
    with pytest.raises(LaunchError, match="not an integer"):
        launch_from_env({"SLURM_PROCID": "x", "SLURM_NTASKS": "2"})


@pytest.mark.parametrize(("nodelist", "host"), [
    ("nid[001-004,010]", "nid001"), ("login1,login2", "login1"), ("gpu7", "gpu7"),
])
def test_first_slurm_host(nodelist, host):
    assert first_slurm_host(nodelist) == host


def test_fallback_rendezvous_from_slurm_is_the_same_on_every_rank():
    env = {**SLURM, "SLURM_JOB_NODELIST": "nid[0040-0041]", "SLURM_JOB_ID": "123456"}
    launch = launch_from_env(env)
    assert fallback_rendezvous(launch, env) == ("nid0040", DEFAULT_PORT + 123456 % 20000)


def test_fallback_rendezvous_without_any_hint_says_what_to_do():
    env = {"PMI_RANK": "1", "PMI_SIZE": "4"}
    with pytest.raises(LaunchError, match="mpi4py.*MASTER_ADDR"):
        fallback_rendezvous(launch_from_env(env), env)


def test_exported_launch_reads_back_as_torchrun():
    environ: dict[str, str] = {}
    launch = Launch("openmpi", 2, 4, 0, 2, "10.0.0.1", 4000)
    export_env(launch, environ)
    assert launch_from_env(environ) == Launch("torchrun", 2, 4, 0, 2, "10.0.0.1", 4000)


# A real job: init_distributed, then all-gather each rank's view so that one
# rank can print what the whole job agreed on.
PROBE = """
import json, torch, torch.distributed as dist
from torchmpi.dist import init_distributed
launch = init_distributed("gloo")
views = [None] * dist.get_world_size()
dist.all_gather_object(views, [launch.launcher, launch.rank, launch.world_size,
                               launch.local_rank, dist.get_rank()])
if launch.rank == 0:
    print("VIEWS " + json.dumps(views))
dist.destroy_process_group()
"""


def _views(stdout: str) -> list:
    lines = [line for line in stdout.splitlines() if line.startswith("VIEWS ")]
    assert len(lines) == 1, stdout
    return json.loads(lines[0][len("VIEWS "):])


def test_launch_mapping_under_mpirun():
    proc = mpirun(2, sys.executable, "-c", PROBE)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _views(proc.stdout) == [["openmpi", 0, 2, 0, 0], ["openmpi", 1, 2, 1, 1]]


def test_launch_mapping_under_torchrun():
    proc = torchrun(2, "--no-python", sys.executable, "-c", PROBE)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _views(proc.stdout) == [["torchrun", 0, 2, 0, 0], ["torchrun", 1, 2, 1, 1]]
