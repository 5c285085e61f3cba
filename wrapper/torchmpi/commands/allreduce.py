"""``torchmpi allreduce``: verify and time all-reduce under any launcher."""

from __future__ import annotations

import argparse
import math
import os
import sys
import textwrap
from pathlib import Path

from torchmpi.commands import arguments
from torchmpi.errors import UserError

DEFAULT_MAX = "128M"
EXAMPLES = """\
examples:
  mpirun -n 2 torchmpi allreduce --backend gloo                 # CPU, any machine
  srun -N 2 --ntasks-per-node 4 torchmpi allreduce --backend nccl --max-bytes 1G
  mpiexec -n 8 --ppn 4 torchmpi allreduce --backend mpi --device cuda --csv ar.csv
  torchrun --nproc-per-node 4 --no-python torchmpi allreduce --backend nccl --graph 20
"""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "allreduce",
        help="check all-reduce results on every rank and print bus bandwidth",
        description=textwrap.fill(
            "Run under mpiexec/mpirun, srun or torchrun.  Verifies the all-reduce result "
            "on every rank, then times it and prints a row per size as it completes, as "
            "nccl-tests does: time averaged over ranks, algbw = bytes/time, "
            "busbw = algbw * 2(n-1)/n, and a closing 'Avg bus bandwidth' line.  The "
            "header gives the per-call floor, the host time of one dist.all_reduce call: "
            "eager times near it measure the call, not the network; --graph (NCCL) "
            "replays the timed iterations from a CUDA graph to go below it.  Exit "
            "status 1 if any result is wrong or the average busbw is below 90% of "
            "--min-busbw (nccl-tests' NCCL_TESTS_MIN_BW), 2 on bad input."
        ),
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--backend", choices=("mpi", "nccl", "gloo"), default="gloo",
                        help="torch.distributed backend (default: gloo)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None,
                        help="tensor device (default: cuda for nccl, else cpu)")
    parser.add_argument("--min-bytes", "-b", default="8", help="smallest size (default: 8)")
    parser.add_argument("--max-bytes", "-e", default=DEFAULT_MAX,
                        help=f"largest size, up to e.g. 1G (default: {DEFAULT_MAX})")
    parser.add_argument("--factor", "-f", type=int, default=2,
                        help="multiply the size by this between steps (default: 2)")
    parser.add_argument("--sizes", default=None,
                        help="explicit comma-separated sizes, e.g. 8,1K,1M; overrides "
                             "--min/--max-bytes (default: none)")
    parser.add_argument("--dtype", choices=("float32", "float64", "int32"), default="float32",
                        help="element type (default: float32)")
    parser.add_argument("--warmup", "-w", type=int, default=5,
                        help="untimed iterations per size (default: 5)")
    parser.add_argument("--iters", "-n", type=int, default=20,
                        help="timed iterations per size (default: 20)")
    parser.add_argument("--average", "-a", choices=("avg", "max", "min", "rank0"),
                        default="avg",
                        help="how ranks' times combine, as nccl-tests' -a (default: avg)")
    timing = parser.add_mutually_exclusive_group()
    timing.add_argument("--blocking", "-z", action="store_true", default=False,
                        help="wait for each timed collective to finish before the next, as "
                             "nccl-tests -z 1")
    timing.add_argument("--graph", "-G", type=int, nargs="?", const=1, default=None,
                        metavar="N",
                        help="capture the timed iterations in a CUDA graph and replay it N "
                             "times (default 1 when given), as nccl-tests -G N; needs "
                             "--backend nccl and CUDA tensors (default: eager, no graph)")
    parser.add_argument("--csv", type=Path, metavar="FILE", default=None,
                        help="also write the results as CSV, from rank 0 (default: none)")
    parser.add_argument("--min-busbw", "-m", metavar="GB/S", default=None,
                        help="fail (exit 1) when the average bus bandwidth is below 90%% of "
                             "this, as nccl-tests does with NCCL_TESTS_MIN_BW, which is read "
                             "when the flag is not given (default: no threshold)")
    arguments.json(parser, "one JSON object instead of the table (default: table)")
    parser.set_defaults(func=run)


def sizes_from_args(args: argparse.Namespace) -> list[int]:
    from torchmpi.allreduce import parse_size, size_series

    try:
        if args.sizes is not None:
            sizes = [parse_size(s) for s in args.sizes.split(",") if s.strip()]
            if not sizes:
                raise ValueError(f"--sizes {args.sizes!r} names no size")
            return sizes
        return size_series(parse_size(args.min_bytes), parse_size(args.max_bytes), args.factor)
    except ValueError as err:
        raise UserError(str(err)) from err


def min_busbw_from_args(args: argparse.Namespace) -> float | None:
    """The threshold in GB/s: the flag, else nccl-tests' variable, else none."""
    text, where = args.min_busbw, "--min-busbw"
    if text is None:
        text, where = os.environ.get("NCCL_TESTS_MIN_BW"), "NCCL_TESTS_MIN_BW"
    if text is None or (where == "NCCL_TESTS_MIN_BW" and not text.strip()):
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise UserError(f"{where} {text!r}: not a bandwidth (a number of GB/s, 0 or more; "
                        "e.g. --min-busbw 20)")
    return value


def check_args(args: argparse.Namespace) -> list[int]:
    """Every input problem, before any rank joins the job (so none waits for a dead peer)."""
    from torchmpi.allreduce_report import check_writable

    sizes = sizes_from_args(args)
    args.min_busbw_gbs = min_busbw_from_args(args)
    if args.iters < 1:
        raise UserError(f"--iters {args.iters}: must be at least 1")
    if args.warmup < 0:
        raise UserError(f"--warmup {args.warmup}: must be 0 or more")
    if args.graph is not None and args.graph < 1:
        raise UserError(f"--graph {args.graph}: must be at least 1 (the number of replays)")
    device = args.device or ("cuda" if args.backend == "nccl" else "cpu")
    if args.graph is not None and (args.backend != "nccl" or device != "cuda"):
        raise UserError(f"--graph needs --backend nccl with CUDA tensors (got --backend "
                        f"{args.backend} --device {device}): only NCCL's collectives are "
                        "CUDA kernels a graph can capture; gloo and MPI run on the host")
    if args.csv is not None:
        try:
            check_writable(args.csv)
        except ValueError as err:
            raise UserError(f"--csv {err}") from None
    return sizes


def run(args: argparse.Namespace) -> int:
    from torchmpi import allreduce as ar
    from torchmpi import allreduce_report as report
    from torchmpi.dist import LaunchError, init_distributed

    sizes = check_args(args)
    device = args.device or ("cuda" if args.backend == "nccl" else "cpu")
    import torch.distributed as dist

    try:
        try:
            launch = init_distributed(args.backend, device=device)
        except LaunchError as err:
            raise UserError(str(err)) from err
        world = dist.get_world_size()
        ranks = ar.rank_map(launch.launcher, device)
        lead = launch.rank == 0
        mode = "graph" if args.graph else "blocking" if args.blocking else "eager"
        replays = args.graph or 1
        floor_us = ar.call_floor(device, time_op=args.average) * 1e6
        if lead and not args.json:
            print(report.format_header(world, args.backend, device, launch.launcher,
                                   warmup=args.warmup, iters=args.iters,
                                   time_op=args.average, ranks=ranks, mode=mode,
                                   replays=replays, floor_us=floor_us), flush=True)

        def show(result: ar.Result) -> None:
            if lead and not args.json:
                print(report.format_row(result), flush=True)

        results = ar.run_sizes(sizes, device=device, dtype_name=args.dtype,
                               warmup=args.warmup, iters=args.iters, time_op=args.average,
                               on_result=show, mode=mode, replays=replays)
    except (RuntimeError, ValueError) as err:
        hint = ar.explain(err)
        if hint is None:
            raise
        print(f"torchmpi allreduce: error: {hint}", file=sys.stderr)
        return 1
    if lead:
        meta = {"backend": args.backend, "device": device, "ranks": world,
                "launcher": launch.launcher, "warmup": args.warmup, "iters": args.iters,
                "average": args.average, "mode": mode, "replays": replays,
                "floor_us": floor_us}
        if args.json:
            print(report.to_json(results, {**meta, "rank_map": ranks}, args.min_busbw_gbs),
                  flush=True)
        else:
            print(report.format_footer(results, args.min_busbw_gbs), flush=True)
        if args.csv:
            try:
                report.write_csv(args.csv, results, meta)
            except OSError as err:  # checked before the run; the disk may still fill up
                raise UserError(f"--csv {args.csv}: cannot write: {err.strerror}") from None
    dist.destroy_process_group()
    failed = any(r.errors for r in results)
    if failed and lead:
        bad = ", ".join(str(r.bytes) for r in results if r.errors)
        print(f"torchmpi allreduce: FAIL: wrong all-reduce result at size(s) {bad} bytes",
              file=sys.stderr)
    avg = report.average_busbw(results)
    slow = report.below_min_busbw(avg, args.min_busbw_gbs)
    if slow and lead:
        given = "--min-busbw" if args.min_busbw is not None else "NCCL_TESTS_MIN_BW"
        print(f"torchmpi allreduce: FAIL: average bus bandwidth {avg:.3f} GB/s is below 90% of "
              f"{given} {args.min_busbw_gbs:g} GB/s", file=sys.stderr)
    return 1 if failed or slow else 0
