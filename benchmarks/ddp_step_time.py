"""Per-step time of DDP with 1 vs 2 ranks (gloo on CPU): how much does talking between ranks cost?

    python benchmarks/ddp_step_time.py [--epochs 60] [--batch-size 128] [--ranks 1 2] [--backend gloo]

Each run is ``gpulab.distributed.ddp.driver.step_time`` (torchrun + gpulab.distributed.ddp.worker); the step time is the
median epoch time (first epochs skipped as warm-up) divided by the steps in an epoch.
Prints figures; passes or fails nothing.
"""

from __future__ import annotations

import argparse
import warnings

from gpulab.argtypes import non_negative_int, positive_int
from gpulab.distributed.ddp.driver import step_time
from gpulab.experiment import Recipe


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=positive_int, default=60)
    parser.add_argument("--batch-size", type=positive_int, default=128)
    parser.add_argument("--warmup", type=non_negative_int, default=5, help="epochs left out of the median")
    parser.add_argument("--ranks", type=positive_int, nargs="+", default=[1, 2])
    parser.add_argument("--backend", choices=("auto", "gloo", "nccl"), default="auto")
    args = parser.parse_args()
    recipe = Recipe(epochs=args.epochs, batch_size=args.batch_size)
    warnings.simplefilter("ignore", UserWarning)  # more ranks than cores: said below instead
    print(f"Net1(13,16,32,1), global batch {args.batch_size}, {args.epochs} epochs, backend {args.backend}")
    base = None
    for n in args.ranks:
        m = step_time(n, recipe, args.warmup, args.backend)
        base = base or m["ms_per_step"]
        print(f"{n} rank(s) {m['backend']} on {m['device']}: {m['ms_per_step']:7.3f} ms/step   "
              f"x{m['ms_per_step'] / base:5.2f} vs {args.ranks[0]} rank(s)   (launch {m['launch_s']:.1f} s wall)")


if __name__ == "__main__":
    main()
