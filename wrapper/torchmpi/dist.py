"""Initialise ``torch.distributed`` from whatever launched this process.

HPC jobs start ranks with ``mpiexec``/``mpirun`` (Open MPI, MPICH, Cray PALS),
``srun`` or ``torchrun``; each publishes rank, size and local rank under its
own variable names.  Training scripts used to copy those by hand (the seeds
read ``OMPI_COMM_WORLD_RANK`` and broadcast the master address with mpi4py).
:func:`launch_from_env` maps an environment to a :class:`Launch` without side
effects, so every launcher is unit-testable; :func:`init_distributed` then
does the rendezvous and calls ``init_process_group``.

Usage in a training script::

    from torchmpi.dist import init_distributed
    launch = init_distributed("nccl")        # sets the CUDA device too
    model = DDP(model, device_ids=[launch.local_rank])

``torch`` and ``mpi4py`` are imported lazily: this module must import on a
login node without either.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import timedelta

#: torchrun's default port; also the base for a Slurm-derived port.
DEFAULT_PORT = 29500


class LaunchError(RuntimeError):
    """The environment does not describe a usable launch."""


@dataclass(frozen=True)
class Launch:
    """Where this process sits in the job, as its launcher described it."""

    launcher: str  # torchrun | openmpi | pals | mpich | slurm | single
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int | None = None
    master_addr: str | None = None
    master_port: int | None = None

    @property
    def launched_by_mpi(self) -> bool:
        """True when an MPI runtime started us, so mpi4py can do the rendezvous."""
        return self.launcher in ("openmpi", "pals", "mpich")


def _int(env: Mapping[str, str], name: str) -> int | None:
    value = env.get(name, "").strip()
    if not value:
        return None
    try:
        return int(value)
    except ValueError as err:
        raise LaunchError(f"{name}={value!r} is not an integer") from err


def _first(env: Mapping[str, str], *names: str) -> int | None:
    for name in names:
        value = _int(env, name)
        if value is not None:
            return value
    return None


# Each launcher: (name, rank vars, size vars, local-rank vars, local-size vars),
# each list in the order tried, every name one that the launcher's source sets:
#
# * torchrun -- docs.pytorch.org elastic/run.html, "Environment Variables".
# * openmpi -- Open MPI mpirun: docs.open-mpi.org (v5.0.x) tuning-apps/environment-var.
# * pals -- HPE PALS, two launchers:
#   - ``mpiexec`` under PBS: PALS_RANKID, PALS_LOCAL_RANKID, PALS_NODEID, ... and
#     PMI_RANK, PMI_SIZE, PMI_LOCAL_RANK, PMI_LOCAL_SIZE (NCAR/mpibind gpu_bind reads
#     PMI_LOCAL_RANK/PMI_LOCAL_SIZE after PALS mpiexec; flux-framework/flux-coral2
#     src/shell/plugins/cray_pals.c lists the PALS_* and PMI_* names a PALS launch leaves,
#     PALS_LOCAL_SIZE among them);
#   - ``srun --mpi=cray_shasta`` (SchedMD/slurm src/plugins/mpi/cray_shasta/
#     mpi_cray_shasta.c): PALS_APID, PALS_APINFO, PALS_RANKID, PALS_NODEID, PALS_SPOOL_DIR
#     only, through Slurm 22.05; from 23.02 (commit 0dbdbf9399) also PALS_LOCAL_RANKID,
#     PMI_RANK, PMI_SIZE, PMI_LOCAL_RANK, PMI_LOCAL_SIZE -- never PALS_LOCAL_SIZE.  srun's
#     own SLURM_* variables are there too, so they stand in where the plugin is silent.
# * mpich -- MPICH hydra: pmodels/mpich src/pm/hydra/proxy/pmip_cb.c (PMI_RANK, PMI_SIZE,
#   MPI_LOCALRANKID, MPI_LOCALNRANKS).
# * slurm -- srun, any --mpi: SchedMD/slurm doc/man/man1/srun.1, "OUTPUT ENVIRONMENT
#   VARIABLES"; inside a step SLURM_STEP_NUM_TASKS is the step's, SLURM_NTASKS the job's.
#
# Order matters.  torchrun comes first because it is often started *by* mpirun
# or inside an sbatch script, where the outer variables describe the wrong
# level.  MPI launchers come before Slurm because ``mpirun`` inside an
# allocation inherits the batch step's SLURM_PROCID=0 on every rank.  PALS sets
# PMI_RANK as well, so it is checked before plain PMI (MPICH hydra).
_SLURM_SIZE = ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS")
_LAUNCHERS: tuple[tuple[str, tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]],
                  ...] = (
    ("torchrun", ("RANK",), ("WORLD_SIZE",), ("LOCAL_RANK",), ("LOCAL_WORLD_SIZE",)),
    ("openmpi", ("OMPI_COMM_WORLD_RANK",), ("OMPI_COMM_WORLD_SIZE",),
     ("OMPI_COMM_WORLD_LOCAL_RANK",), ("OMPI_COMM_WORLD_LOCAL_SIZE",)),
    ("pals", ("PALS_RANKID",), ("PMI_SIZE", *_SLURM_SIZE),
     ("PALS_LOCAL_RANKID", "PMI_LOCAL_RANK", "SLURM_LOCALID"),
     ("PMI_LOCAL_SIZE", "PALS_LOCAL_SIZE", "SLURM_STEP_TASKS_PER_NODE")),
    ("mpich", ("PMI_RANK",), ("PMI_SIZE",), ("MPI_LOCALRANKID",), ("MPI_LOCALNRANKS",)),
    ("slurm", ("SLURM_PROCID",), _SLURM_SIZE, ("SLURM_LOCALID",),
     ("SLURM_STEP_TASKS_PER_NODE",)),
)


def launch_from_env(env: Mapping[str, str]) -> Launch:
    """Describe the launch from an environment mapping (pure: no I/O).

    The first launcher whose rank variable is set wins.  With none set, this is
    a single process (rank 0 of 1), so tools work without any launcher.
    ``MASTER_ADDR``/``MASTER_PORT`` are taken from ``env`` when present; they
    are otherwise left ``None`` for :func:`rendezvous` to fill in.
    """
    for name, rank_vars, size_vars, local_vars, local_size_vars in _LAUNCHERS:
        rank = _first(env, *rank_vars)
        if rank is None:
            continue
        size = _first(env, *size_vars)
        if size is None:
            raise LaunchError(
                f"{rank_vars[0]} is set but none of {', '.join(size_vars)} is: "
                f"cannot tell the number of ranks for a {name} launch"
            )
        local = _first(env, *local_vars)
        local_size = _local_size(env, local_size_vars)
        if not 0 <= rank < size:
            raise LaunchError(f"{name} launch: rank {rank} is outside 0..{size - 1}")
        return Launch(
            launcher=name,
            rank=rank,
            world_size=size,
            local_rank=local if local is not None else 0,
            local_world_size=local_size,
            master_addr=env.get("MASTER_ADDR") or None,
            master_port=_int(env, "MASTER_PORT"),
        )
    return Launch(
        "single", 0, 1, 0, 1,
        master_addr=env.get("MASTER_ADDR") or None,
        master_port=_int(env, "MASTER_PORT"),
    )


def _local_size(env: Mapping[str, str], names: tuple[str, ...]) -> int | None:
    """The first of ``names`` that is set; Slurm's tasks-per-node lists parsed."""
    for name in names:
        if not env.get(name, "").strip():
            continue
        if name.endswith("TASKS_PER_NODE"):
            # "4(x2)" or "4,2" -- the first number is this node's when nodes are
            # uniform; when they are not we do not guess.
            match = re.fullmatch(r"(\d+)(\(x\d+\))?", env[name].strip())
            return int(match.group(1)) if match else None
        return _int(env, name)
    return None


def first_slurm_host(nodelist: str) -> str | None:
    """The first host of a Slurm nodelist such as ``nid[001-004,010],login1``."""
    match = re.match(r"\s*([^,\[\s]+)(?:\[([^\]]+)\])?", nodelist)
    if not match:
        return None
    prefix, ranges = match.groups()
    if not ranges:
        return prefix
    first = ranges.split(",")[0].split("-")[0]
    return prefix + first


def first_job_host(env: Mapping[str, str]) -> str | None:
    """Rank 0's host as the launcher lists it: the step's first node under srun
    (``SLURM_STEP_NODELIST``, then ``SLURM_JOB_NODELIST``), the first line of
    ``PBS_NODEFILE`` under PBS (PALS mpiexec places ranks in nodefile order)."""
    for name in ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"):
        if env.get(name):
            return first_slurm_host(env[name])
    nodefile = env.get("PBS_NODEFILE")
    if nodefile:
        try:
            with open(nodefile) as handle:
                return next((line.strip() for line in handle if line.strip()), None)
        except OSError:
            return None
    return None


def fallback_rendezvous(launch: Launch, env: Mapping[str, str]) -> tuple[str, int]:
    """Master address and port without MPI: from the environment, the job's first host,
    or loopback when every rank is on this node.

    Every rank computes the same answer without communicating.  Used when mpi4py is
    unavailable.  Raises :class:`LaunchError` with the fix when a multi-rank job gives
    no way to find rank 0.
    """
    addr = launch.master_addr
    port = launch.master_port
    if addr is None and launch.world_size in (1, launch.local_world_size):
        addr = "127.0.0.1"  # every rank is on this node
    if addr is None:
        addr = first_job_host(env)
    if addr is None:
        raise LaunchError(
            f"{launch.launcher} launch of {launch.world_size} ranks: cannot find rank 0's "
            "address. Install mpi4py (it broadcasts it) or export MASTER_ADDR and MASTER_PORT."
        )
    if port is None and launch.world_size == 1:
        # No peer to agree with: any free port, so that concurrent one-rank jobs on
        # one host (a login node, a GPU check) do not collide on the default one.
        port = _free_port()
    if port is None:
        # Same on every rank without communication; spread concurrent jobs.
        job = _int(env, "SLURM_JOB_ID")
        port = DEFAULT_PORT + (job % 20000 if job is not None else 0)
    return addr, port


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def mpi_rendezvous(launch: Launch) -> tuple[str, int]:
    """Rank 0 picks address and port and broadcasts them with mpi4py.

    When all ranks share one host the address is loopback, which works even
    where the hostname does not resolve (containers).  An address or port the
    user exported wins over the ones chosen here.
    """
    from mpi4py import MPI  # lazy: optional dependency

    comm = MPI.COMM_WORLD
    hosts = comm.allgather(socket.gethostname())
    choice = None
    if comm.rank == 0:
        single_host = len(set(hosts)) == 1
        addr = launch.master_addr or ("127.0.0.1" if single_host else hosts[0])
        port = launch.master_port or _free_port()
        choice = (addr, port)
    return comm.bcast(choice, root=0)


def rendezvous(launch: Launch, env: Mapping[str, str]) -> Launch:
    """Fill in master address and port: launcher, then mpi4py, then fallbacks."""
    if launch.master_addr and launch.master_port:
        return launch
    if launch.launched_by_mpi and launch.world_size > 1:
        try:
            addr, port = mpi_rendezvous(launch)
            return replace(launch, master_addr=addr, master_port=port)
        except ImportError:
            pass
    addr, port = fallback_rendezvous(launch, env)
    return replace(launch, master_addr=addr, master_port=port)


def export_env(launch: Launch, environ: dict[str, str] | None = None) -> None:
    """Publish the launch under torchrun's names, which many libraries read."""
    environ = os.environ if environ is None else environ
    environ.update(
        RANK=str(launch.rank),
        WORLD_SIZE=str(launch.world_size),
        LOCAL_RANK=str(launch.local_rank),
    )
    if launch.local_world_size is not None:
        environ["LOCAL_WORLD_SIZE"] = str(launch.local_world_size)
    if launch.master_addr:
        environ["MASTER_ADDR"] = launch.master_addr
    if launch.master_port:
        environ["MASTER_PORT"] = str(launch.master_port)


def device_index(launch: Launch, device_count: int) -> int:
    """The GPU this rank takes on its node: its *local* rank modulo the node's GPUs.

    Not the global rank: on a second node rank 3 of two per node is local rank 1,
    and GPU 3 (of four) is another rank's; more ranks than GPUs share them
    round-robin.
    """
    return launch.local_rank % device_count


def init_distributed(
    backend: str = "gloo",
    device: str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: timedelta = timedelta(minutes=5),
) -> Launch:
    """Initialise the default process group for ``backend`` and return the launch.

    ``device="cuda"`` (or ``None`` with the NCCL backend) selects GPU
    ``local_rank % device_count`` before the group is created, so NCCL and
    CUDA-aware MPI see the right device.  The MPI backend takes rank and size
    from MPI itself and needs no rendezvous.
    """
    import torch
    import torch.distributed as dist

    env = os.environ if env is None else env
    launch = launch_from_env(env)
    if device == "cuda" or (device is None and backend == "nccl"):
        if not torch.cuda.is_available():
            raise LaunchError("CUDA was requested but torch sees no GPU")
        torch.cuda.set_device(device_index(launch, torch.cuda.device_count()))
    if backend == "mpi":
        dist.init_process_group("mpi", timeout=timeout)
        launch = replace(launch, rank=dist.get_rank(), world_size=dist.get_world_size())
        export_env(launch)
        return launch
    launch = rendezvous(launch, env)
    export_env(launch)
    dist.init_process_group(
        backend,
        init_method=f"tcp://{_url_host(launch.master_addr)}:{launch.master_port}",
        rank=launch.rank,
        world_size=launch.world_size,
        timeout=timeout,
    )
    return launch


def _url_host(addr: str | None) -> str:
    return f"[{addr}]" if addr and ":" in addr else str(addr)
