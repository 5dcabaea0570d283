"""Seconds for the Boston recipe: the article's loop, the same with a per-batch loss.item(), gpulab's loop.

The article's loop keeps the data in a DataLoader and copies every batch; gpulab's puts the data
on the device once. Same model (Net1(13, 16, 32, 1)), optimizer (Adam lr 0.01), batch size and data. The article's
loop reads no loss inside its batch loop; the second variant adds ``loss.item()`` after every
step (on a GPU the host then waits for the device at every batch). Prints the median seconds of
each over the repeats, measured in this one run::

    python benchmarks/loop_vs_article.py --epochs 100 --repeats 5 --device cpu --threads 1
"""

from __future__ import annotations

import argparse

import torch

from gpulab.argtypes import positive_int
from gpulab.article import LOOPS, compare_loops


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, measure on each device, print one line per loop and device."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=positive_int, default=100, help="epochs per timed run (default 100, the recipe)")
    parser.add_argument("--repeats", type=positive_int, default=5, help="timed runs per loop (default 5)")
    parser.add_argument("--device", action="append",
                        help="device(s) to measure (repeatable); default: cpu, and cuda:0 where present")
    parser.add_argument("--threads", type=positive_int, help="torch CPU threads (default: torch's choice)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    devices = args.device or (["cpu", "cuda:0"] if torch.cuda.is_available() else ["cpu"])
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU thread(s), Boston train set 404 rows, "
          f"batch 128, {args.epochs} epochs, median (min-max) of {args.repeats} runs")
    for device in devices:
        try:
            r = compare_loops(device, args.epochs, args.repeats)
        except ValueError as exc:
            parser.error(str(exc))
        base = r["seconds"]["article"]
        for name in LOOPS:
            low, high = r["spread"][name]
            print(f"{r['device']:>7} {name:<22} {r['seconds'][name]:7.3f} s ({low:.3f}-{high:.3f})  "
                  f"{base / r['seconds'][name]:5.2f}x the article loop's speed")
        extra = (r["seconds"]["article + loss.item()"] - base) / (args.epochs * r["batches_per_epoch"])
        print(f"{r['device']:>7} per-batch loss.item() costs {extra * 1e6:+.1f} µs per batch here")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
