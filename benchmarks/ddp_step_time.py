"""Per-step time of DDP with 1 vs 2 ranks (gloo on CPU): how much does talking between ranks cost?

    python benchmarks/ddp_step_time.py [--epochs 60] [--batch-size 128] [--ranks 1 2] [--backend gloo]

Each run is ``gpulab.distributed.ddp.train_ddp`` (torchrun + gpulab.distributed.ddp_worker); the step time is the
median epoch time (first epochs skipped as warm-up) divided by the steps in an epoch.
Prints figures; passes or fails nothing. ``scripts/gpu_measure.py`` calls :func:`measure`.
"""

from __future__ import annotations

import argparse
import math
import statistics
import warnings

from gpulab.experiment import Recipe
from gpulab.distributed.ddp import train_ddp

TRAIN_ROWS = 404  # 80 % of the 506 Boston rows


def measure(nproc: int, recipe: Recipe, warmup: int, backend: str = "auto", timeout: float = 600) -> dict:
    """One launch: its backend, the device rank 0 trained on, median ms per optimizer step and wall seconds."""
    result = train_ddp(nproc, recipe, timeout=timeout, echo=False, backend=backend)
    steps = math.ceil(TRAIN_ROWS / recipe.batch_size)
    epoch_s = statistics.median(result.history.seconds[warmup:] or result.history.seconds)
    return {"ranks": nproc, "backend": result.backend, "device": result.summary.get("device", "?"),
            "ms_per_step": 1000 * epoch_s / steps, "launch_s": result.seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--warmup", type=int, default=5, help="epochs left out of the median")
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--backend", choices=("auto", "gloo", "nccl"), default="auto")
    args = parser.parse_args()
    recipe = Recipe(epochs=args.epochs, batch_size=args.batch_size)
    warnings.simplefilter("ignore", UserWarning)  # more ranks than cores: said below instead
    print(f"Net1(13,16,32,1), global batch {args.batch_size}, {args.epochs} epochs, backend {args.backend}")
    base = None
    for n in args.ranks:
        m = measure(n, recipe, args.warmup, args.backend)
        base = base or m["ms_per_step"]
        print(f"{n} rank(s) {m['backend']} on {m['device']}: {m['ms_per_step']:7.3f} ms/step   "
              f"x{m['ms_per_step'] / base:5.2f} vs {args.ranks[0]} rank(s)   (launch {m['launch_s']:.1f} s wall)")


if __name__ == "__main__":
    main()
