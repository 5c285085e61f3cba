"""The all-reduce check's report: the nccl-tests-style table, CSV, JSON and the verdict.

What :mod:`torchmpi.allreduce` measured (a :class:`~torchmpi.allreduce.Result` per
size), written the way nccl-tests prints it -- a header naming the run, one row
per size with nccl-tests' time precision, the average bus bandwidth and the
``--min-busbw`` verdict (nccl-tests' ``NCCL_TESTS_MIN_BW`` with its 10 % slack)
-- and as CSV and JSON for scripts.  Imports no torch: a report can be written
and tested from results alone.
"""

from __future__ import annotations

import csv
import json
import os
import stat
from dataclasses import asdict
from pathlib import Path

from torchmpi.allreduce import Result

#: What each timing mode's header line says.
_MODE_TEXT = {
    "eager": "eager (each dist.all_reduce issued as the loop reaches it)",
    "blocking": "blocking (the host waits for each collective to finish, as nccl-tests -z 1)",
    "graph": ("graph (timed iterations captured in a CUDA graph, replayed {replays} times, "
              "as nccl-tests -G {replays})"),
}


def format_header(world_size: int, backend: str, device: str, launcher: str, *,
                  warmup: int, iters: int, time_op: str, ranks: list[dict],
                  mode: str = "eager", replays: int = 1, floor_us: float | None = None) -> str:
    """nccl-tests' preamble: the run's parameters, then one line per rank, then the columns.

    The per-call floor is printed because an eager time near it measures the
    ``dist.all_reduce`` call, not the network: that is what ``--graph`` removes.
    """
    launched = f" launcher={launcher}" if launcher else ""
    lines = [
        f"# torchmpi allreduce: backend={backend} device={device} ranks={world_size}{launched}",
        f"# warmup iters: {warmup}, timed iters: {iters}, time: {time_op} over ranks",
        f"# timing: {_MODE_TEXT[mode].format(replays=replays)}",
    ]
    if floor_us is not None:
        hint = ""
        if mode != "graph" and backend == "nccl" and device == "cuda":
            hint = "; --graph removes it"
        lines.append(f"# per-call floor: {floor_us:.2f} us (host time of one dist.all_reduce "
                     f"call on one element: eager times near it measure the call, not the "
                     f"network{hint})")
    lines += [f"#  Rank {r['rank']:>3} on {r['host']} device {r['device']}" for r in ranks]
    if world_size == 1:
        lines.append("# WARNING: one rank: nothing crosses a link, busbw is 0 and algbw is "
                     "bytes/time as nccl-tests prints it (run with 2 or more ranks to "
                     "measure the network)")
        if mode == "graph" and backend == "nccl":
            # Seen on an H200 (torch 2.11, NCCL 2.28.9): torch warns "The CUDA Graph is
            # empty" and a replay takes 0.2-0.7 us; nccl-tests reports ~0.01 us there.
            lines.append("# WARNING: one rank, in place: NCCL launches no kernel, the "
                         "captured graph is empty and --graph times the replay of nothing")
    lines.append(
        f"#{'size':>12} {'count':>12} {'type':>8} {'redop':>6} {'time(us)':>10} "
        f"{'algbw(GB/s)':>12} {'busbw(GB/s)':>12} {'check':>6}")
    return "\n".join(lines)


def format_time(time_us: float) -> str:
    """nccl-tests' precision: none from 10 ms, one decimal from 100 us, else two."""
    if time_us >= 10000.0:
        return f"{time_us:.0f}"
    if time_us >= 100.0:
        return f"{time_us:.1f}"
    return f"{time_us:.2f}"


def format_row(r: Result) -> str:
    return (f" {r.bytes:>12} {r.count:>12} {r.dtype:>8} {'sum':>6} {format_time(r.time_us):>10} "
            f"{r.algbw_gbs:>12.3f} {r.busbw_gbs:>12.3f} {'OK' if r.errors == 0 else 'FAIL':>6}")


def average_busbw(results: list[Result]) -> float:
    """nccl-tests' closing figure: the mean bus bandwidth over all sizes."""
    return sum(r.busbw_gbs for r in results) / len(results) if results else 0.0


#: nccl-tests fails a run whose average bus bandwidth is below this share of
#: ``NCCL_TESTS_MIN_BW`` (``bw[0] < check_avg_bw*(0.9)`` in NVIDIA/nccl-tests
#: src/common.cu); ``--min-busbw`` keeps the same slack so a threshold means the same.
MIN_BW_SLACK = 0.9


def below_min_busbw(avg_busbw: float, min_busbw: float | None) -> bool:
    """Whether a run fails its bandwidth threshold (never when there is none)."""
    return min_busbw is not None and avg_busbw < min_busbw * MIN_BW_SLACK


def format_footer(results: list[Result], min_busbw: float | None = None) -> str:
    """The closing lines; the average carries OK/FAILED only with a threshold, as in nccl-tests."""
    bad = sum(1 for r in results if r.errors)
    lines = []
    if results:
        peak = max(results, key=lambda r: r.busbw_gbs)
        lines.append(f"# peak busbw {peak.busbw_gbs:.3f} GB/s at {peak.bytes} bytes")
    lines.append(f"# correctness: {'FAILED for ' + str(bad) + ' size(s)' if bad else 'OK'}")
    avg = average_busbw(results)
    verdict = ""
    if min_busbw is not None:
        verdict = " FAILED" if below_min_busbw(avg, min_busbw) else " OK"
    lines.append(f"# Avg bus bandwidth    : {avg:.3f}{verdict}")
    return "\n".join(lines)


def format_table(results: list[Result], world_size: int, backend: str, device: str,
                 launcher: str = "", *, warmup: int = 0, iters: int = 0, time_op: str = "avg",
                 ranks: list[dict] | None = None) -> str:
    """The whole report at once (header, rows, footer), as :func:`run_sizes` streams it."""
    header = format_header(world_size, backend, device, launcher, warmup=warmup, iters=iters,
                           time_op=time_op, ranks=ranks or [])
    return "\n".join([header, *map(format_row, results), format_footer(results)])


def check_writable(path: Path) -> None:
    """Raise ValueError unless ``path`` can be written -- checked before the run, not after.

    Every question is asked of ``os.stat`` once: ``Path.is_dir`` and ``Path.exists``
    raise PermissionError (a traceback) for a path in a folder one may not search
    (Python 3.11), which the verb's caller must see as a refusal instead.
    """
    parent = path.parent
    try:
        mode: int | None = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):  # the folder decides, below
        mode = None
    except PermissionError:
        # The folder to name is the first on the way whose search bit is off for this
        # user, which need not be the file's own.
        blocked = next((a for a in reversed(path.absolute().parents)
                        if not os.access(a, os.X_OK)), parent)
        raise ValueError(f"{path}: cannot search folder {blocked} (permission denied:"
                         " its x bit is off for this user)") from None
    except OSError as err:  # a symlink loop, a name too long
        raise ValueError(f"{path}: {err.strerror}") from None
    if mode is not None and stat.S_ISDIR(mode):
        raise ValueError(f"{path}: is a directory")
    if not parent.is_dir():
        raise ValueError(f"{path}: directory {parent} does not exist")
    if mode is not None and not os.access(path, os.W_OK):
        raise ValueError(f"{path}: not writable")
    if mode is None and not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"{path}: cannot create a file in {parent}")


def write_csv(path: Path, results: list[Result], meta: dict) -> None:
    with open(path, "w", newline="") as handle:
        fields = list(meta) + list(asdict(results[0]) if results else {})
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        for r in results:
            writer.writerow({**meta, **asdict(r)})


def to_json(results: list[Result], meta: dict, min_busbw: float | None = None) -> str:
    """The machine-readable report (``--json`` prints it on stdout)."""
    bad = sum(1 for r in results if r.errors)
    avg = average_busbw(results)
    peak = max((r.busbw_gbs for r in results), default=0.0)
    return json.dumps({**meta, "results": [asdict(r) for r in results],
                       "avg_busbw_gbs": avg, "peak_busbw_gbs": peak, "ok": bad == 0,
                       "min_busbw_gbs": min_busbw,
                       "busbw_ok": not below_min_busbw(avg, min_busbw)}, indent=2)
