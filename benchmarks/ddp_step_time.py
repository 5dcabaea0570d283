"""Per-step time of DDP with 1 vs 2 ranks (gloo on CPU): how much does talking between ranks cost?

    python benchmarks/ddp_step_time.py [--epochs 60] [--batch-size 128] [--ranks 1 2]

Each run is ``gpulab.launch.train_ddp`` (torchrun + gpulab.ddp_worker); the step time is the
median epoch time (first epochs skipped as warm-up) divided by the steps in an epoch.
Prints figures; passes or fails nothing.
"""

from __future__ import annotations

import argparse
import math
import statistics
import warnings

from gpulab.experiment import Recipe
from gpulab.launch import train_ddp

TRAIN_ROWS = 404  # 80 % of the 506 Boston rows


def step_ms(nproc: int, recipe: Recipe, warmup: int) -> tuple[float, float]:
    """Median milliseconds per optimizer step and the whole launch's wall seconds."""
    result = train_ddp(nproc, recipe, timeout=600, echo=False)
    steps = math.ceil(TRAIN_ROWS / recipe.batch_size)
    epoch_s = statistics.median(result.history.seconds[warmup:])
    return 1000 * epoch_s / steps, result.seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--warmup", type=int, default=5, help="epochs left out of the median")
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    recipe = Recipe(epochs=args.epochs, batch_size=args.batch_size)
    warnings.simplefilter("ignore", UserWarning)  # more ranks than cores: said below instead
    print(f"Net1(13,16,32,1), global batch {args.batch_size}, {args.epochs} epochs, gloo on CPU")
    base = None
    for n in args.ranks:
        ms, wall = step_ms(n, recipe, args.warmup)
        base = base or ms
        print(f"{n} rank(s): {ms:7.3f} ms/step   x{ms / base:5.2f} vs {args.ranks[0]} rank(s)   (launch {wall:.1f} s wall)")


if __name__ == "__main__":
    main()
