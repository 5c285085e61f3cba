"""All-reduce correctness and bus-bandwidth check, in the manner of nccl-tests.

Every rank fills a buffer with values that depend on its rank and on the
element's position, so a reduction that drops a rank, reorders data or
truncates the buffer gives a wrong sum.  Each rank compares the result with
the sum it can compute alone; the failure count is then reduced so that every
rank, and the exit status, knows.  Only after that is the collective timed.

Bandwidths follow nccl-tests' definitions: ``algbw = bytes / time`` and
``busbw = algbw * 2 (n - 1) / n``, the traffic one link of a ring carries,
comparable across rank counts and with the network's line rate.

This module measures; :mod:`torchmpi.allreduce_report` writes what it measured
(the nccl-tests-style table, CSV and JSON, and the ``--min-busbw`` verdict).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass

#: What a CUDA tensor over a non-CUDA-aware MPI backend raises (ProcessGroupMPI.cpp).
CUDA_REJECTED = "CUDA tensor detected and the MPI used doesn't have CUDA-aware MPI support"
CUDA_REJECTED_HINT = (
    "this PyTorch does not recognise your MPI as CUDA-aware — see docs/troubleshooting.md"
)

#: Known failure texts -> what to tell the user (first match wins).
_HINTS: tuple[tuple[str, str], ...] = (
    (CUDA_REJECTED, CUDA_REJECTED_HINT),
    ("Distributed package doesn't have MPI built in",
     ("this PyTorch has no MPI backend (built without MPI) — run `torchmpi doctor` and see "
     "docs/troubleshooting.md")),
    ("Distributed package doesn't have NCCL built in",
     "this PyTorch has no NCCL backend (CPU-only build?) — run `torchmpi doctor`"),
    ("GPU_SUPPORT_ENABLED is requested, but GTL library is not linked",
     ("MPICH_GPU_SUPPORT_ENABLED=1 but the Cray GTL library is not linked into PyTorch — "
     "see docs/troubleshooting.md")),
    ("unhandled system error",
     ("NCCL could not use a network interface — run with NCCL_DEBUG=INFO, check "
     "NCCL_SOCKET_IFNAME, and see docs/troubleshooting.md")),
)

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def explain(error: BaseException | str) -> str | None:
    """The one-line explanation for a known backend failure, else ``None``."""
    text = str(error)
    for needle, hint in _HINTS:
        if needle in text:
            return hint
    return None


def parse_size(text: str) -> int:
    """``"8"``, ``"64K"``, ``"1M"``, ``"1GiB"`` -> bytes (binary units, like nccl-tests).

    Zero and negative sizes are refused: an all-reduce of nothing measures nothing.
    """
    match = re.fullmatch(r"\s*(-?\d+)\s*([KMG]?)(?:I?B)?\s*", text.upper())
    if not match:
        raise ValueError(f"not a size: {text!r} (use e.g. 8, 64K, 1M, 1G)")
    size = int(match.group(1)) * _UNITS[match.group(2)]
    if size <= 0:
        raise ValueError(f"size {text.strip()!r} is not positive (the smallest is 1 byte)")
    return size


def size_series(min_bytes: int, max_bytes: int, factor: int = 2) -> list[int]:
    """Geometric series from ``min_bytes`` to ``max_bytes`` inclusive."""
    if min_bytes <= 0 or max_bytes < min_bytes:
        raise ValueError(f"need 0 < min-bytes <= max-bytes, got {min_bytes}..{max_bytes}")
    if factor < 2:
        raise ValueError("the step factor must be at least 2")
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= factor
    return sizes


def bus_bandwidth(algbw: float, world_size: int) -> float:
    """nccl-tests' all-reduce bus bandwidth: ``algbw * 2 (n - 1) / n``."""
    return algbw * 2 * (world_size - 1) / world_size


@dataclass
class Result:
    """One row of the report."""

    bytes: int
    count: int
    dtype: str
    time_us: float
    algbw_gbs: float
    busbw_gbs: float
    errors: int  # ranks whose result was wrong


def pattern(count: int, rank: int, torch_module, dtype, device):
    """Rank- and position-dependent values whose sum is exact in float32."""
    torch = torch_module
    position = torch.arange(count, device=device, dtype=torch.int64) % 13 + 1
    return (position * (rank + 1)).to(dtype)


def expected_sum(count: int, world_size: int, torch_module, dtype, device):
    torch = torch_module
    position = torch.arange(count, device=device, dtype=torch.int64) % 13 + 1
    return (position * (world_size * (world_size + 1) // 2)).to(dtype)


#: How one time is made from every rank's, as nccl-tests' ``-a`` (default: average).
TIME_OPS = ("avg", "max", "min", "rank0")


def combine_times(times: list[float], how: str) -> float:
    """One figure from each rank's mean iteration time, the way ``how`` says."""
    if how == "avg":
        return sum(times) / len(times)
    if how == "max":
        return max(times)
    if how == "min":
        return min(times)
    if how == "rank0":
        return times[0]
    raise ValueError(f"unknown time operation {how!r} (use {', '.join(TIME_OPS)})")


def no_wait() -> None:
    """Nothing to wait for: the backend orders itself against the caller's stream."""


def stream_wait(device: str, backend: str) -> Callable[[], None]:
    """What must run before each collective so that it reads finished data.

    ProcessGroupMPI hands a tensor's pointer to MPI on its own worker thread and
    does not wait on the caller's CUDA stream (pytorch/pytorch#38642, open): a
    collective issued right after a kernel can send what the kernel has not yet
    written.  NCCL and gloo make their streams wait on the current one.  So CUDA
    tensors over MPI need ``torch.cuda.synchronize()`` first; everything else
    needs nothing.
    """
    if device == "cuda" and backend == "mpi":
        import torch

        return torch.cuda.synchronize
    return no_wait


def clock_wait(device: str) -> Callable[[], None]:
    """What must run before the clock is read: on CUDA the collectives return before
    the GPU is done, whatever the backend, so the timer would measure only the launches."""
    import torch

    return torch.cuda.synchronize if device == "cuda" else no_wait


def _reduce_time(seconds: float, how: str, world: int, device: str,
                 ready: Callable[[], None] = no_wait) -> float:
    """Combine this rank's time with the others' (collective: every rank calls it)."""
    import torch
    import torch.distributed as dist

    value = torch.tensor([seconds], dtype=torch.float64, device=device)
    ready()
    if how == "rank0":
        dist.broadcast(value, src=0)
        return float(value.item())
    op = {"avg": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}[how]
    dist.all_reduce(value, op=op)
    return float(value.item()) / (world if how == "avg" else 1)


#: How the timed iterations run: as issued (nccl-tests' default), each waited for
#: (``-z 1``), or captured in a CUDA graph and replayed (``-G N``).
MODES = ("eager", "blocking", "graph")


def cuda_graph_capture(body: Callable[[], None]) -> Callable[[], None]:
    """Capture ``body``'s CUDA work in a graph and return its replay.

    Replaying issues every captured NCCL kernel with one launch, so the time per
    operation is the GPU's and the network's, not the host's cost of calling
    ``dist.all_reduce`` (14-21 us per call on an H200 where the graph takes ~1 us).
    Thread-local capture, as nccl-tests uses, so NCCL's and PyTorch's other threads
    (the watchdog) may keep calling CUDA while this one captures.
    """
    import torch

    graph = torch.cuda.CUDAGraph()
    try:
        context = torch.cuda.graph(graph, capture_error_mode="thread_local")
    except TypeError:  # torch < 2.1 has no capture_error_mode
        context = torch.cuda.graph(graph)
    with context:
        body()
    return graph.replay


def call_floor(device: str, calls: int = 100, time_op: str = "avg",
               ready: Callable[[], None] | None = None) -> float:
    """Host seconds of one ``dist.all_reduce`` call on one element (collective).

    The floor under every eager row: a size whose time is near it measures the
    call (Python, the dispatcher, the backend's bookkeeping), not the network.
    The device is waited for before and after the timed calls, not between them;
    a one-element reduction gives the GPU almost nothing to do.
    """
    import torch
    import torch.distributed as dist

    ready = ready or stream_wait(device, str(dist.get_backend()))
    finish, tiny = clock_wait(device), torch.zeros(1, dtype=torch.float32, device=device)
    ready()
    dist.all_reduce(tiny)  # the first call may set up the communicator
    finish()
    start = time.perf_counter()
    for _ in range(calls):
        ready()
        dist.all_reduce(tiny)
    seconds = (time.perf_counter() - start) / calls
    finish()
    return _reduce_time(seconds, time_op, dist.get_world_size(), device, ready)


def run_sizes(sizes: list[int], *, device: str, dtype_name: str = "float32",
              warmup: int = 5, iters: int = 20, time_op: str = "avg",
              on_result: Callable[[Result], None] | None = None,
              ready: Callable[[], None] | None = None, mode: str = "eager",
              replays: int = 1,
              capture: Callable[[Callable[[], None]], Callable[[], None]] | None = None,
              ) -> list[Result]:
    """Verify and time ``all_reduce`` for each size on the initialised default group.

    ``on_result`` is called as each size completes (nccl-tests prints a row at a
    time, so a hang shows which size it hit).  ``ready`` runs before every
    collective (default :func:`stream_wait` for this device and backend), the
    timed ones included: a correct MPI+CUDA training step pays that wait too.
    :func:`clock_wait` runs before the clock is read.

    ``mode`` (:data:`MODES`) is how the timed iterations run, as in nccl-tests'
    ``BenchTime``: ``blocking`` waits for the device after each (``-z 1``);
    ``graph`` captures them with ``capture`` (default :func:`cuda_graph_capture`)
    outside the clock, replays once untimed, then times ``replays`` replays
    (``-G replays``), the time per operation being elapsed / (iters * replays).
    """
    import torch
    import torch.distributed as dist

    if mode not in MODES:
        raise ValueError(f"unknown timing mode {mode!r} (use {', '.join(MODES)})")
    dtype = getattr(torch, dtype_name)
    elem = torch.tensor([], dtype=dtype).element_size()
    rank, world = dist.get_rank(), dist.get_world_size()
    if ready is None:
        ready = stream_wait(device, str(dist.get_backend()))
    finish = clock_wait(device)
    capture = capture or cuda_graph_capture
    results = []
    for size in sizes:
        count = max(1, size // elem)
        nbytes = count * elem
        buf = pattern(count, rank, torch, dtype, device)
        ready()
        dist.all_reduce(buf)
        wrong = torch.tensor(
            [0 if torch.equal(buf, expected_sum(count, world, torch, dtype, device)) else 1],
            dtype=torch.int32, device=device,
        )
        ready()
        dist.all_reduce(wrong)
        # Zeros keep the timed in-place sums finite however many iterations run.
        buf.zero_()
        for _ in range(warmup):
            ready()
            dist.all_reduce(buf)
        finish()
        seconds = _timed(buf, iters=iters, mode=mode, replays=replays, ready=ready,
                         finish=finish, capture=capture)
        seconds = _reduce_time(seconds, time_op, world, device, ready)
        algbw = nbytes / seconds / 1e9 if seconds > 0 else 0.0
        result = Result(nbytes, count, dtype_name, seconds * 1e6, algbw,
                        bus_bandwidth(algbw, world), int(wrong.item()))
        results.append(result)
        if on_result is not None:
            on_result(result)
    return results


def _timed(buf, *, iters: int, mode: str, replays: int, ready: Callable[[], None],
           finish: Callable[[], None],
           capture: Callable[[Callable[[], None]], Callable[[], None]]) -> float:
    """Seconds per timed all-reduce of ``buf`` on this rank, the way ``mode`` says."""
    import torch.distributed as dist

    def body() -> None:
        for _ in range(iters):
            ready()
            dist.all_reduce(buf)

    launches = 1
    if mode == "graph":
        replay = capture(body)
        replay()  # untimed: the first launch uploads the graph
        finish()
        body, launches = replay, replays
    ready()
    dist.barrier()
    start = time.perf_counter()
    if mode == "blocking":
        for _ in range(iters):
            ready()
            dist.all_reduce(buf)
            finish()
    else:
        for _ in range(launches):
            body()
        finish()
    return (time.perf_counter() - start) / (iters * launches)


def rank_map(launcher: str, device: str) -> list[dict]:
    """Every rank's host and device, gathered on all ranks (collective)."""
    import socket

    import torch
    import torch.distributed as dist

    mine = {"rank": dist.get_rank(), "host": socket.gethostname(),
            "device": f"cuda:{torch.cuda.current_device()}" if device == "cuda" else "cpu"}
    everyone: list = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    return everyone
