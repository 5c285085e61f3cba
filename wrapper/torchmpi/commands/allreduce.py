"""``torchmpi allreduce``: verify and time all-reduce under any launcher."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from torchmpi.errors import UserError

DEFAULT_MAX = "128M"


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "allreduce",
        help="check all-reduce results on every rank and print bus bandwidth",
        description=(
            "Run under mpiexec/mpirun, srun or torchrun.  Verifies the all-reduce result "
            "on every rank, then times it and prints algbw/busbw per size as nccl-tests "
            "does (busbw = algbw * 2(n-1)/n).  Exit status 1 if any result is wrong."
        ),
    )
    parser.add_argument("--backend", choices=("mpi", "nccl", "gloo"), default="gloo")
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None,
                        help="tensor device (default: cuda for nccl, else cpu)")
    parser.add_argument("--min-bytes", "-b", default="8", help="smallest size (default 8)")
    parser.add_argument("--max-bytes", "-e", default=DEFAULT_MAX,
                        help=f"largest size, up to e.g. 1G (default {DEFAULT_MAX})")
    parser.add_argument("--factor", "-f", type=int, default=2,
                        help="multiply the size by this between steps (default 2)")
    parser.add_argument("--sizes", help="explicit comma-separated sizes, e.g. 8,1K,1M "
                                        "(overrides --min/--max-bytes)")
    parser.add_argument("--dtype", choices=("float32", "float64", "int32"), default="float32")
    parser.add_argument("--warmup", "-w", type=int, default=5, help="untimed iterations")
    parser.add_argument("--iters", "-n", type=int, default=20, help="timed iterations")
    parser.add_argument("--csv", type=Path, help="also write the results as CSV (rank 0)")
    parser.add_argument("--json", type=Path, help="also write the results as JSON (rank 0)")
    parser.set_defaults(func=run)


def sizes_from_args(args: argparse.Namespace) -> list[int]:
    from torchmpi.allreduce import parse_size, size_series

    try:
        if args.sizes:
            return [parse_size(s) for s in args.sizes.split(",") if s.strip()]
        return size_series(parse_size(args.min_bytes), parse_size(args.max_bytes), args.factor)
    except ValueError as err:
        raise UserError(str(err)) from err


def run(args: argparse.Namespace) -> int:
    from torchmpi import allreduce as ar
    from torchmpi.dist import LaunchError, init_distributed

    sizes = sizes_from_args(args)
    if args.iters < 1 or args.warmup < 0:
        raise UserError("--iters must be >= 1 and --warmup >= 0")
    device = args.device or ("cuda" if args.backend == "nccl" else "cpu")
    import torch.distributed as dist

    try:
        try:
            launch = init_distributed(args.backend, device=device)
        except LaunchError as err:
            raise UserError(str(err)) from err
        results = ar.run_sizes(sizes, device=device, dtype_name=args.dtype,
                               warmup=args.warmup, iters=args.iters)
    except (RuntimeError, ValueError) as err:
        hint = ar.explain(err)
        if hint is None:
            raise
        print(f"torchmpi allreduce: error: {hint}", file=sys.stderr)
        return 1
    world = dist.get_world_size()
    if launch.rank == 0:
        print(ar.format_table(results, world, args.backend, device, launch.launcher), flush=True)
        meta = {"backend": args.backend, "device": device, "ranks": world,
                "launcher": launch.launcher}
        if args.csv:
            ar.write_csv(args.csv, results, meta)
        if args.json:
            ar.write_json(args.json, results, meta)
    dist.destroy_process_group()
    return 1 if any(r.errors for r in results) else 0
