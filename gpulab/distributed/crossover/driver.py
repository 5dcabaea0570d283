"""Where more DDP ranks stop helping: time per epoch for 1..N ranks, small data vs large.

    python benchmarks/crossover.py                      # full: 1..4 ranks, 100 Boston epochs
    python benchmarks/crossover.py --light --json x.json  # what notebook 07 measures (2 and 3 ranks)

The driver of the pair ``crossover`` / ``crossover.worker``: ``measure`` (used by notebook 07) starts
ONE torchrun launch of ``max(ranks)`` ranks that measures every rank count, and ``main``
(``benchmarks/crossover.py``) prints its table (and JSON). The speed-up is the plain process's median
epoch time over the DDP run's; the Boston weights of each DDP run are compared with the plain run's:
DDP with any number of ranks should train the same model.
"""

from __future__ import annotations

import argparse
import os
from typing import Callable, Sequence

import torch

from gpulab import argtypes
from gpulab.atomic import write_json
from gpulab.distributed.crossover.worker import SYNTHETIC
from gpulab.timing import Stopwatch
from gpulab.validate import non_negative_int, positive_int

FORMAT = "gpulab-crossover/1"


def measure(ranks: list[int], boston_epochs: int, synthetic_epochs: int, timeout: float = 240.0,
            log: Callable[[str], None] = print) -> dict:
    """ONE torchrun launch of ``max(ranks)`` ranks measures every rank count in ``ranks``.

    ``synthetic_epochs=0`` measures the Boston problem only.
    """
    from gpulab.distributed.launch.collect import run_ranks

    ranks = sorted(set(ranks))
    if not ranks:
        raise ValueError("ranks=[] must hold at least one rank count, e.g. [2, 3]")
    for n in ranks:
        positive_int(n, "ranks")
    positive_int(boston_epochs, "boston_epochs")
    non_negative_int(synthetic_epochs, "synthetic_epochs")
    args = ["--worlds", ",".join(map(str, ranks)), "--boston-epochs", str(boston_epochs),
            "--synthetic-epochs", str(synthetic_epochs), "--pg-timeout", str(timeout)]
    log(f"launching torchrun once with {ranks[-1]} rank(s) for {', '.join(map(str, ranks))} rank(s) ...")
    with run_ranks("gpulab.distributed.crossover.worker", lambda folder: [*args, "--out", str(folder / "crossover.json")],
                   nproc=ranks[-1], timeout=timeout, keep_warnings=True, on_line=None) as launched:
        found, result, notes = launched.json("crossover.json"), launched.result, launched.notes
    log(f"  {result.seconds:.1f} s including torchrun start-up")
    rows = found["rows"]
    for base in found["baseline"]:  # the 1-process point of the curve: speed-up 1 by definition
        rows.append({**base, "baseline_epoch_s": base["median_epoch_s"], "speedup": 1.0})
    return {"format": FORMAT, "cpu_count": os.cpu_count(), "torch": torch.__version__,
            "boston_epochs": boston_epochs, "synthetic_epochs": synthetic_epochs, "synthetic": SYNTHETIC,
            "rows": rows, "boston_weight_difference": found["boston_weight_difference"], "notes": notes,
            "launch_seconds": result.seconds}


def format_table(report: dict) -> str:
    """A plain-text table: problem, ranks, how, median ms per epoch, speed-up."""
    lines = [f"{'problem':<10} {'ranks':>5} {'how':<6} {'ms/epoch':>9} {'1 process':>9} {'speed-up':>8}"]
    for r in sorted(report["rows"], key=lambda r: (r["problem"], r["ranks"], r["how"] != "plain")):
        lines.append(f"{r['problem']:<10} {r['ranks']:>5} {r['how']:<6} {r['median_epoch_s'] * 1e3:>9.1f} "
                     f"{r['baseline_epoch_s'] * 1e3:>9.1f} {r['speedup']:>7.2f}x")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``benchmarks/crossover.py``: measure, print the table, optionally write JSON."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=argtypes.int_list, default=None, help="rank counts (default 1,2,3,4; light: 2,3)")
    p.add_argument("--boston-epochs", type=argtypes.positive_int, default=None)
    p.add_argument("--synthetic-epochs", type=argtypes.positive_int, default=None)
    p.add_argument("--light", action="store_true", help="2 and 3 ranks, few epochs (for notebook 07)")
    p.add_argument("--json", help="write the report here")
    p.add_argument("--timeout", type=argtypes.positive_float, default=240.0, help="seconds the torchrun launch may take")
    args = p.parse_args(argv)
    ranks = args.ranks or ([2, 3] if args.light else [1, 2, 3, 4])
    boston_epochs = args.boston_epochs or (20 if args.light else 100)
    synthetic_epochs = args.synthetic_epochs or (4 if args.light else 6)
    for name, value in (("boston-epochs", boston_epochs), ("synthetic-epochs", synthetic_epochs)):
        if value < 2:
            p.error(f"--{name} {value} must be at least 2 (the first epoch is warm-up)")
    with Stopwatch() as clock:
        report = measure(ranks, boston_epochs, synthetic_epochs, args.timeout)
    report["seconds"] = clock.seconds
    print(format_table(report))
    for n, d in report["boston_weight_difference"].items():
        print(f"Boston weights, {n} rank(s) vs one process: max difference {d:.1e}")
    for note in report["notes"]:
        print(f"note: {note}")
    if args.json:
        write_json(args.json, report)
    return 0
