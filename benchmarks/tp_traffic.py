"""Tensor parallelism's traffic per step, predicted and measured, and its equality with one process, printed.

    python benchmarks/tp_traffic.py              # what notebook 12 measures: 2 gloo ranks
    python benchmarks/tp_traffic.py --ranks 4 --steps 5

One torchrun launch (gloo, CPU) of ``gpulab.distributed.tensor_parallel.worker``: a tiny transformer block under
each tensor-parallel plan beside one process, the collectives of each phase counted by ``CommDebugMode``, then a
larger block profiled under the ``tp`` and ``sp`` plans. Bytes per step are predicted from the plan's rules and
times from the alpha + beta fit of an all-reduce sweep made in the same launch.
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
from gpulab.distributed.tensor_parallel.driver import (count_rows, equality_rows, run_tensor_parallel,  # noqa: E402
                                                traffic_rows)
from gpulab.tables import format_rows  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    count = argtypes.positive_int
    parser.add_argument("--ranks", type=count, default=2, help="gloo ranks (more than the cores works, slower)")
    parser.add_argument("--steps", type=count, default=3, help="training steps per run (and profiled steps)")
    parser.add_argument("--repeats", type=count, default=5, help="timed calls per size in the all-reduce sweep")
    args = parser.parse_args(argv)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # more ranks than cores: they share them
        result = run_tensor_parallel(args.ranks, parts=("block", "traffic"), steps=args.steps, repeats=args.repeats)
    print(f"{result.ranks} gloo ranks, one launch of {result.seconds:.1f} s")
    print("\nEach plan against one process (largest differences over every rank):")
    print(format_rows(equality_rows(result)))
    print("\nCollectives of the first step, counted by CommDebugMode and expected:")
    print(format_rows(count_rows(result)))
    print("\nTraffic per step of the larger block, counted from the trace and predicted (bytes, ms):")
    print(format_rows(traffic_rows(result)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
