"""`gpulab bench matmul|copy`: measure GFLOP/s or GB/s on a device, print a table, optionally write JSON.

Examples::

    gpulab bench matmul --device cpu --sizes 256,512 --threads 1
    gpulab bench matmul --device cuda --matmul-precision high      # float32 on TF32 tensor cores
    gpulab bench copy --device cuda --kind h2d --pinned --non-blocking --sizes 64,256 --json h2d.json
    gpulab bench copy --device cuda --kind add                     # x + y: read 2 tensors, write 1
"""

from __future__ import annotations

import argparse

from gpulab import bench, bench_results, timing
from gpulab.argtypes import positive_float, positive_int
from gpulab.devices import pick_device
from gpulab.precision import DTYPES


def _sizes(text: str) -> list[int]:
    try:
        return bench.parse_sizes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register `bench`."""
    parser = subparsers.add_parser(
        "bench", help="measure matmul GFLOP/s or copy GB/s",
        description="Measure matrix-multiply throughput (GFLOP/s) or memory-copy bandwidth (GB/s).")
    parser.add_argument("probe", choices=bench.PROBES, help="matmul: n x n @ n x n; copy: a copy of N MiB")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N, mps or xpu (default: auto)")
    parser.add_argument("--sizes", type=_sizes, default=None,
                        help="comma-separated: matrix sides for matmul, MiB for copy (default depends on device)")
    parser.add_argument("--dtype", choices=list(DTYPES), default="float32")
    parser.add_argument("--threads", type=positive_int, default=None, help="torch CPU threads for the measurement")
    parser.add_argument("--matmul-precision", choices=timing.MATMUL_PRECISIONS, default=None,
                        help="matmul only: torch.set_float32_matmul_precision for the run (high: TF32 on CUDA; "
                             "default: leave torch's setting, normally highest)")
    parser.add_argument("--kind", choices=bench.COPY_KINDS, default="device",
                        help="copy only: within the device, host-to-device (h2d), device-to-host (d2h), "
                             "or add (x + y within the device)")
    parser.add_argument("--pinned", action="store_true", help="copy only: pinned host memory (CUDA)")
    parser.add_argument("--non-blocking", action="store_true", help="copy only: non_blocking=True")
    parser.add_argument("--min-run-time", type=positive_float, default=0.2, help="seconds of timing per size")
    parser.add_argument("--json", metavar="PATH", default=None, help="also write the results to this JSON file")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Validate everything first, then measure, print the table and write JSON if asked."""
    device = pick_device(args.device)
    if args.probe == "matmul" and (args.kind != "device" or args.pinned or args.non_blocking):
        raise ValueError("--kind, --pinned and --non-blocking apply to the copy probe only")
    if args.probe == "copy" and args.matmul_precision is not None:
        raise ValueError("--matmul-precision applies to the matmul probe only")
    sizes = args.sizes or bench.default_sizes(args.probe, device)
    if args.probe == "matmul":
        results = bench.matmul_sweep(device, sizes, args.dtype, threads=args.threads, min_run_time=args.min_run_time,
                                     matmul_precision=args.matmul_precision)
    else:
        results = bench.copy_sweep(device, sizes, args.kind, pinned=args.pinned, non_blocking=args.non_blocking,
                                   dtype=args.dtype, threads=args.threads, min_run_time=args.min_run_time)
    print(f"{results[0].description} ({results[0].device}), torch {results[0].torch_version}")
    print(bench_results.format_table(results))
    if args.json:
        path = bench_results.save_results(args.json, results)
        print(f"wrote {len(results)} result(s) to {path.name}")
    return 0
