"""Launch mapping: every launcher's variables, precedence, and real mpirun/torchrun jobs."""

from __future__ import annotations

import json
import shlex
import sys

import pytest
from support.mpi_launch import launch_views, mpirun
from torchmpi.dist import (
    DEFAULT_PORT,
    Launch,
    LaunchError,
    device_index,
    export_env,
    fallback_rendezvous,
    first_slurm_host,
    init_distributed,
    launch_from_env,
)

# Each launcher's variables, exactly as its source sets them (values for rank 9 of
# 12, 4 ranks per node, on the third node).
#
# Open MPI mpirun: docs.open-mpi.org v5.0.x tuning-apps/environment-var ("Environment
# variables set for MPI applications").
OPENMPI = {"OMPI_COMM_WORLD_RANK": "9", "OMPI_COMM_WORLD_SIZE": "12",
           "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
           "OMPI_UNIVERSE_SIZE": "12", "OMPI_COMM_WORLD_NODE_RANK": "1"}
# MPICH hydra: pmodels/mpich src/pm/hydra/proxy/pmip_cb.c (MPI_LOCALNRANKS,
# MPI_LOCALRANKID; PMI_FD, PMI_RANK, PMI_SIZE unless -pmi-port).
MPICH = {"PMI_RANK": "9", "PMI_SIZE": "12", "PMI_FD": "7", "MPI_LOCALRANKID": "1",
         "MPI_LOCALNRANKS": "4"}
# srun itself, whatever --mpi: SchedMD/slurm doc/man/man1/srun.1, "OUTPUT ENVIRONMENT
# VARIABLES" (SLURM_NTASKS is the job's; SLURM_STEP_NUM_TASKS the step's).
SRUN = {"SLURM_JOB_ID": "123456", "SLURM_PROCID": "9", "SLURM_LOCALID": "1",
        "SLURM_NODEID": "2", "SLURM_NTASKS": "16", "SLURM_STEP_NUM_TASKS": "12",
        "SLURM_STEP_NUM_NODES": "3", "SLURM_STEP_TASKS_PER_NODE": "4(x3)",
        "SLURM_STEP_NODELIST": "nid[001002-001004]",
        "SLURM_JOB_NODELIST": "nid[001001-001004]"}
# srun --mpi=cray_shasta, Slurm 22.05: SchedMD/slurm src/plugins/mpi/cray_shasta/
# mpi_cray_shasta.c at slurm-22-05-0-1 adds only these to srun's own.
SRUN_CRAY_SHASTA_2205 = {**SRUN, "PALS_APID": "123456.0", "PALS_APINFO": "/var/spool/apinfo",
                         "PALS_RANKID": "9", "PALS_NODEID": "2",
                         "PALS_SPOOL_DIR": "/var/spool/123456.0", "PMI_CONTROL_PORT": "11000"}
# ... from Slurm 23.02 (commit 0dbdbf9399 "PE-42785: Add new PALS/PMI environment
# variables"): also PALS_LOCAL_RANKID and PMI_*; no PALS_LOCAL_SIZE.
SRUN_CRAY_SHASTA = {**SRUN_CRAY_SHASTA_2205, "PALS_LOCAL_RANKID": "1", "PMI_JOBID": "123456",
                    "PMI_LOCAL_RANK": "1", "PMI_LOCAL_SIZE": "4", "PMI_RANK": "9",
                    "PMI_SIZE": "12", "PMI_UNIVERSE_SIZE": "12", "PMI_SHARED_SECRET": "42"}
# HPE PALS mpiexec under PBS: the PALS_*/PMI_* names a PALS launch leaves in a task
# (flux-framework/flux-coral2 src/shell/plugins/cray_pals.c, unset_pals_env) and the
# PMI_RANK/PMI_LOCAL_RANK/PMI_LOCAL_SIZE NCAR's Derecho binding script reads after
# `mpiexec -n N -ppn M` (NCAR/mpibind gpu_bind); PMI_SIZE as Slurm's PALS emulation sets it.
PALS_MPIEXEC = {"PBS_JOBID": "4242.desched1", "PALS_APID": "c0ffee", "PALS_APINFO": "/a",
                "PALS_DEPTH": "16", "PALS_NODEID": "2", "PALS_RANKID": "9",
                "PALS_LOCAL_RANKID": "1", "PALS_SPOOL_DIR": "/var/run/palsd/c0ffee",
                "PMI_CONTROL_PORT": "11000", "PMI_JOBID": "c0ffee", "PMI_RANK": "9",
                "PMI_SIZE": "12", "PMI_LOCAL_RANK": "1", "PMI_LOCAL_SIZE": "4",
                "PMI_SHARED_SECRET": "42"}
# torchrun: docs.pytorch.org elastic/run.html "Environment Variables".
TORCHRUN = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
            "GROUP_RANK": "0", "ROLE_RANK": "1", "MASTER_ADDR": "node1", "MASTER_PORT": "29400",
            "TORCHELASTIC_RUN_ID": "none"}
SLURM = SRUN


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (OPENMPI, Launch("openmpi", 9, 12, 1, 4)),
        (MPICH, Launch("mpich", 9, 12, 1, 4)),
        (SRUN, Launch("slurm", 9, 12, 1, 4)),  # the step's task count, not the job's
        (SRUN_CRAY_SHASTA_2205, Launch("pals", 9, 12, 1, 4)),
        (SRUN_CRAY_SHASTA, Launch("pals", 9, 12, 1, 4)),
        (PALS_MPIEXEC, Launch("pals", 9, 12, 1, 4)),
        (TORCHRUN, Launch("torchrun", 1, 2, 1, 2, "node1", 29400)),
        ({}, Launch("single", 0, 1, 0, 1)),
    ],
    ids=["openmpi", "mpich", "srun", "srun-cray_shasta-22.05", "srun-cray_shasta",
         "pals-mpiexec", "torchrun", "none"],
)
def test_each_launcher_maps(env, expected):
    assert launch_from_env(env) == expected


def test_pals_without_a_local_size_leaves_it_unknown():
    """A PALS launch that gives no local size: the mapping does not invent one."""
    env = {k: v for k, v in PALS_MPIEXEC.items() if k != "PMI_LOCAL_SIZE"}
    assert launch_from_env(env) == Launch("pals", 9, 12, 1, None)


def test_torchrun_inside_an_allocation_wins_over_slurm():
    # sbatch exports SLURM_PROCID=0 to every process torchrun starts.
    assert launch_from_env({**SLURM, **TORCHRUN}).launcher == "torchrun"


def test_mpirun_inside_an_allocation_wins_over_slurm():
    # the batch step's SLURM_PROCID=0 reaches every rank mpirun starts
    got = launch_from_env({**SLURM, "SLURM_PROCID": "0", **OPENMPI})
    assert (got.launcher, got.rank) == ("openmpi", 9)


def test_pals_is_not_mistaken_for_plain_pmi():
    assert launch_from_env(PALS_MPIEXEC).launcher == "pals"
    assert launch_from_env(SRUN_CRAY_SHASTA).launcher == "pals"


def test_rank_without_size_is_an_error():
    with pytest.raises(LaunchError, match="number of ranks"):
        launch_from_env({"PMI_RANK": "0"})


def test_rank_outside_world_is_an_error():
    with pytest.raises(LaunchError, match=r"openmpi launch: rank 4 is outside 0\.\.3$"):
        launch_from_env({"OMPI_COMM_WORLD_RANK": "4", "OMPI_COMM_WORLD_SIZE": "4"})
    with pytest.raises(LaunchError, match=r"rank -1 is outside 0\.\.5$"):
        launch_from_env({"RANK": "-1", "WORLD_SIZE": "6"})


def test_the_default_port_is_torchruns():
    """docs.pytorch.org/docs/stable/elastic/run.html: ``--master-port`` defaults to 29500;
    a job started without one meets torchrun's ranks there."""
    assert DEFAULT_PORT == 29500


def test_non_integer_is_an_error():
    with pytest.raises(LaunchError, match="not an integer"):
        launch_from_env({"SLURM_PROCID": "x", "SLURM_NTASKS": "2"})


@pytest.mark.parametrize(("nodelist", "host"), [
    ("nid[001-004,010]", "nid001"), ("login1,login2", "login1"), ("gpu7", "gpu7"),
    ("nid[003,005-007]", "nid003"),  # a single node before a range: Slurm's compressed form
])
def test_first_slurm_host(nodelist, host):
    assert first_slurm_host(nodelist) == host


def test_fallback_rendezvous_from_slurm_is_the_same_on_every_rank():
    """The step's first host (rank 0's), not the allocation's, and one port for all."""
    port = DEFAULT_PORT + 123456 % 20000
    for env in (SRUN, SRUN_CRAY_SHASTA_2205, SRUN_CRAY_SHASTA):
        assert fallback_rendezvous(launch_from_env(env), env) == ("nid001002", port)


def test_fallback_rendezvous_from_pbs_is_the_first_host_of_the_nodefile(tmp_path):
    nodefile = tmp_path / "nodefile"
    nodefile.write_text("dec0101.hsn.de.hpc.ucar.edu\n" * 4 + "dec0102.hsn.de.hpc.ucar.edu\n" * 4)
    env = {**PALS_MPIEXEC, "PBS_NODEFILE": str(nodefile)}
    addr, port = fallback_rendezvous(launch_from_env(env), env)
    assert addr == "dec0101.hsn.de.hpc.ucar.edu" and port == DEFAULT_PORT


def test_fallback_rendezvous_is_loopback_only_when_every_rank_is_here():
    one_node = {**SRUN, "SLURM_STEP_NUM_TASKS": "4", "SLURM_PROCID": "1",
                "SLURM_STEP_TASKS_PER_NODE": "4", "SLURM_STEP_NODELIST": "nid001002"}
    assert fallback_rendezvous(launch_from_env(one_node), one_node)[0] == "127.0.0.1"
    assert fallback_rendezvous(launch_from_env(SRUN), SRUN)[0] != "127.0.0.1"


def test_fallback_rendezvous_one_rank_per_node_is_the_first_host_on_every_node():
    """One rank per node (local size 1): no rank is alone in the job, so no loopback."""
    answers = set()
    for rank in range(3):
        env = {**SRUN, "SLURM_PROCID": str(rank), "SLURM_LOCALID": "0", "SLURM_NODEID": str(rank),
               "SLURM_STEP_NUM_TASKS": "3", "SLURM_STEP_TASKS_PER_NODE": "1(x3)"}
        launch = launch_from_env(env)
        assert (launch.world_size, launch.local_world_size) == (3, 1)
        answers.add(fallback_rendezvous(launch, env))
    assert answers == {("nid001002", DEFAULT_PORT + 123456 % 20000)}


def test_fallback_rendezvous_without_any_hint_says_what_to_do():
    env = {"PMI_RANK": "1", "PMI_SIZE": "4"}
    with pytest.raises(LaunchError, match="mpi4py.*MASTER_ADDR"):
        fallback_rendezvous(launch_from_env(env), env)


def test_exported_launch_reads_back_as_torchrun():
    environ: dict[str, str] = {}
    launch = Launch("openmpi", 2, 4, 0, 2, "10.0.0.1", 4000)
    export_env(launch, environ)
    assert launch_from_env(environ) == Launch("torchrun", 2, 4, 0, 2, "10.0.0.1", 4000)


# Real jobs: the allreduce verb of each launcher's shared job (conftest's viewed_mpirun
# and viewed_torchrun) calls init_distributed, then every rank's view is all-gathered so that
# rank 0 prints what the whole job agreed on -- one job per launcher for this module and
# tests/test_allreduce.py, whose claims it carries too.


def test_launch_mapping_under_mpirun(viewed_mpirun):
    proc = viewed_mpirun
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert launch_views(proc.stderr) == [["openmpi", 0, 2, 0, 0], ["openmpi", 1, 2, 1, 1]]


def test_launch_mapping_under_torchrun(viewed_torchrun):
    proc = viewed_torchrun
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert launch_views(proc.stderr) == [["torchrun", 0, 2, 0, 0], ["torchrun", 1, 2, 1, 1]]


# mpi4py's rendezvous under a real mpirun.  This machine is one node, so each rank's
# hostname is a stand-in (rank // per_node names its node) set before the gather: the
# choice of address is what is checked, the allgather and the broadcast are real.
RENDEZVOUS = """
import json, os, socket, sys
from mpi4py import MPI
per_node = int(sys.argv[1])
socket.gethostname = lambda: "node%d" % (MPI.COMM_WORLD.rank // per_node)
from torchmpi.dist import launch_from_env, mpi_rendezvous
answers = MPI.COMM_WORLD.gather(mpi_rendezvous(launch_from_env(os.environ)), root=0)
if MPI.COMM_WORLD.rank == 0:  # one line: ranks' lines may interleave in mpirun's output
    print("RDV " + json.dumps(answers), flush=True)
"""


@pytest.mark.parametrize(("per_node", "addr"), [(4, "127.0.0.1"), (2, "node0"), (1, "node0")])
def test_mpi_rendezvous_is_loopback_only_when_every_rank_shares_the_host(per_node, addr):
    """4 ranks on one node: loopback; on 2 or 4 nodes: rank 0's host, the same on every rank."""
    proc = mpirun(4, sys.executable, "-c", RENDEZVOUS, str(per_node))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [line[4:] for line in proc.stdout.splitlines() if line.startswith("RDV ")]
    assert len(lines) == 1, proc.stdout
    answers = json.loads(lines[0])
    assert len(answers) == 4 and all(a == answers[0] for a in answers), answers
    assert answers[0][0] == addr


# One rank has no peer to agree on a port with: it must not need the fixed default one,
# which another one-rank job on the same host (a login node, a GPU check, a concurrent
# test) may hold.
def test_a_single_rank_does_not_need_the_default_port():
    """In the worker (support.cli_run's job_process): a real gloo group of one, no launcher."""
    import socket

    import torch.distributed as dist
    from support.cli_run import job_process

    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        try:
            holder.bind(("127.0.0.1", DEFAULT_PORT))
            holder.listen(1)
        except OSError:
            pass  # already held by someone else: the case this test is about
        with job_process():
            launch = init_distributed("gloo")
            world = dist.get_world_size()
            dist.destroy_process_group()
    finally:
        holder.close()
    assert launch.master_port != DEFAULT_PORT and world == 1, launch


# --- which GPU a rank takes, when nodes differ ----------------------------------------


@pytest.mark.parametrize("env, gpus, index", [
    # Open MPI, 2 ranks per node, node 2: global rank 3 is local rank 1
    ({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4",
      "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}, 4, 1),
    # PALS mpiexec --ppn 4 on the second node, 4 GPUs: rank 6 is local 2
    ({"PALS_RANKID": "6", "PMI_SIZE": "8", "PALS_LOCAL_RANKID": "2",
      "PMI_LOCAL_SIZE": "4"}, 4, 2),
    # srun, 8 tasks on a 4-GPU node: local ranks 4..7 share GPUs 0..3 round-robin
    ({"SLURM_PROCID": "13", "SLURM_NTASKS": "16", "SLURM_LOCALID": "5",
      "SLURM_STEP_TASKS_PER_NODE": "8(x2)"}, 4, 1),
    # one GPU per node: every rank on it takes device 0
    ({"RANK": "5", "WORLD_SIZE": "6", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "3"}, 1, 0),
])
def test_a_rank_takes_its_local_rank_modulo_the_nodes_gpus(env, gpus, index):
    """The device index comes from the rank *on its node*, never the global rank
    (rank 3 on a 4-GPU node would take GPU 3, which belongs to another rank there)."""
    assert device_index(launch_from_env(env), gpus) == index


def _launch_env_restored(monkeypatch) -> None:
    """Unset the launch variables for this test and have them unset after it: export_env
    writes them into os.environ.  (``delenv(raising=False)`` of an unset name records
    nothing to undo, so a later write would outlive the test: set first, then delete.)"""
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                "MASTER_PORT"):
        monkeypatch.setenv(var, "")
        monkeypatch.delenv(var)


def test_nccl_without_a_device_asks_torch_for_a_gpu_first(monkeypatch):
    """``--backend nccl`` alone means the GPU: on a host where torch sees none it is a
    LaunchError before any group is made.  The backend as a command line hands it over
    (``torchmpi allreduce --backend nccl``: a string of its own, never the interned
    literal ``"nccl"``)."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: the request is granted")
    from torchmpi.cli import build_parser
    from torchmpi.dist import init_distributed

    backend = build_parser().parse_args(shlex.split("allreduce --backend nccl")).backend
    _launch_env_restored(monkeypatch)
    env = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": "1"}
    with pytest.raises(LaunchError, match="CUDA was requested but torch sees no GPU"):
        init_distributed(backend, env=env)


def test_gloo_without_a_device_makes_a_cpu_group_from_the_given_env(monkeypatch):
    """``init_distributed("gloo")`` asks for no GPU, reads the launch from the ``env`` it is
    given (not the process's), and makes a real one-rank group there."""
    import socket

    import torch.distributed as dist
    from torchmpi.dist import init_distributed

    _launch_env_restored(monkeypatch)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(port)}
    launch = init_distributed("gloo", env=env)
    try:
        assert (launch.launcher, launch.rank, launch.world_size) == ("torchrun", 0, 1)
        assert dist.get_backend() == "gloo" and dist.get_world_size() == 1
    finally:
        dist.destroy_process_group()
