"""The alpha + beta fit of each collective and the prediction of a DDP step's all-reduce time, printed.

    python benchmarks/collectives_cost.py            # what notebook 09 measures: 4 ranks, then 2 ranks
    python benchmarks/collectives_cost.py --repeats 20

Two torchrun launches (gloo, CPU): 4 ranks time broadcast, all_reduce, reduce_scatter and all_gather from
1 KiB to 16 MiB; 2 ranks time all_reduce again, then train Net1(13, 16, 32, 1) and an MLP 512-2048-2048-1 with
DDP under torch.profiler. The prediction (one alpha + beta x bytes per DDP bucket, from the 2-rank fit) is
compared with the same buckets all-reduced alone and with the all-reduces inside the training step, and each
bucket with the sweep at the nearest size. The same launch trains Net1 with FSDP2: the bytes each rank sends per
step, DDP and FSDP2, counted from the run and predicted.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run from a checkout
    sys.path.insert(0, str(ROOT))

from gpulab import argtypes  # noqa: E402
from gpulab.distributed.collectives.driver import (bucket_sweep_rows, fit_sweep, prediction_rows, run_collectives,  # noqa: E402
                                            traffic_rows)
from gpulab.comm_cost import COLLECTIVES  # noqa: E402
from gpulab.tables import format_rows  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=argtypes.positive_int, default=5,
                        help="timed calls per size (median of the slowest rank)")
    args = parser.parse_args(argv)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 4 ranks on fewer cores: said in the output below
        four = run_collectives(4, parts=("sweep",), repeats=args.repeats)
    print(f"4 gloo ranks on {four.cpu_count} CPU core(s), t = alpha + beta x bytes:")
    print(format_rows([{"collective": c, "alpha_us": f.alpha * 1e6, "1/beta_MB/s": f.bandwidth / 1e6}
                       for c, f in ((c, fit_sweep(four.sweep, c)) for c in COLLECTIVES)]))
    two = run_collectives(2, parts=("sweep", "ddp", "fsdp"), collectives=("all_reduce",), repeats=args.repeats,
                          ddp_parts=("predict",))
    fit = fit_sweep(two.sweep)
    print(f"\n2 gloo ranks, all_reduce: alpha = {fit.alpha * 1e6:.1f} us, 1/beta = {fit.bandwidth / 1e6:.1f} MB/s")
    print("DDP all-reduce time per step, predicted vs measured (ms):")
    print(format_rows(prediction_rows(two, fit)))
    print("\nEach bucket next to the sweep's all_reduce at the nearest size (ms):")
    print(format_rows(bucket_sweep_rows(two, fit)))
    print("\nBytes each rank sends in one step of Net1, counted and predicted:")
    print(format_rows(traffic_rows(two)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
