"""Where more DDP ranks stop helping: time per epoch for 1..N ranks, small data vs large.

    python benchmarks/crossover.py                      # full: 1..4 ranks, 100 Boston epochs
    python benchmarks/crossover.py --light --json x.json  # what notebook 07 measures (2 and 3 ranks)

Two problems, trained with the one training loop (``gpulab.train.fit``) under DDP (gloo, CPU):
  boston     the article's recipe (Net1, 404 training rows, global batch 128): tiny compute per step
  synthetic  a wider MLP on 8192 random rows (global batch 2048): compute dominates the gradient exchange
Each rank gets ONE CPU thread (torchrun's OMP_NUM_THREADS=1), the CPU analogue of one GPU per rank.
ONE torchrun launch measures every rank count: it starts as many ranks as the largest count, and each
count N trains in a process group of ranks 0..N-1 (``new_group``) while the others wait at a barrier
(blocked, not computing). Rank 0 first trains both problems alone, without DDP (the baseline, measured
in the same launch, moments before the DDP runs). The figure is the median seconds per epoch (first
epoch left out as warm-up); speed-up = baseline / DDP. The Boston weights of each DDP run are compared
with the baseline's: DDP with any number of ranks should train the same model.

Run by torchrun (``-m gpulab.crossover --worker``) this module is the worker; ``measure`` (used by
notebook 07) and ``main`` (``benchmarks/crossover.py``) are the driver, which launches torchrun once
through ``gpulab.distributed.torchrun`` and prints a table (and JSON).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import torch
from torch import nn

from gpulab.atomic import write_json
from gpulab.experiment import Recipe, article_model, boston_data, optimizer_for
from gpulab.train import fit, max_abs_difference

FORMAT = "gpulab-crossover/1"
SYNTHETIC = {"rows": 8192, "features": 128, "hidden": 512, "batch_size": 2048, "lr": 1e-3}


def synthetic_data(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A regression problem big enough that each step's compute outweighs the gradient exchange."""
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(SYNTHETIC["rows"], SYNTHETIC["features"], generator=g)
    w = torch.randn(SYNTHETIC["features"], 1, generator=g)
    return X, X @ w / SYNTHETIC["features"] ** 0.5 + 0.1 * torch.randn(SYNTHETIC["rows"], 1, generator=g)


def synthetic_model(seed: int = 0) -> nn.Module:
    """A wider MLP (about 330k parameters) with fixed initial weights."""
    torch.manual_seed(seed)
    f, h = SYNTHETIC["features"], SYNTHETIC["hidden"]
    return nn.Sequential(nn.Linear(f, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, 1))


def train_problem(problem: str, epochs: int, rank: int = 0, world: int = 1, group=None) -> tuple[list[float], dict]:
    """Train one problem on this rank; epoch seconds and weights.

    Wrapped in DDP over ``group`` (default: every rank) when a process group is up.
    """
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    if problem == "boston":
        recipe = Recipe(epochs=epochs)
        data = boston_data(recipe)
        model = article_model(recipe, in_dim=data.X_train.shape[1])
        optimizer, X, y, batch = optimizer_for(model, recipe), data.X_train, data.y_train, recipe.batch_size
    elif problem == "synthetic":
        X, y = synthetic_data()
        model = synthetic_model()
        optimizer, batch = torch.optim.Adam(model.parameters(), lr=SYNTHETIC["lr"]), SYNTHETIC["batch_size"]
    else:
        raise ValueError(f"unknown problem {problem!r}: use boston or synthetic")
    wrapped = nn.parallel.DistributedDataParallel(model, process_group=group) if distributed else model
    history = fit(wrapped, (X, y), epochs=epochs, optimizer=optimizer, batch_size=batch, device="cpu",
                  seed=0, progress=False, rank=rank, world_size=world)
    return history.seconds, {k: v.detach().clone() for k, v in model.state_dict().items()}


def summarize(problem: str, ranks: int, seconds: list[float], how: str) -> dict:
    """One row: median epoch seconds, first (warm-up) epoch left out when there are several."""
    timed = seconds[1:] if len(seconds) > 1 else seconds
    return {"problem": problem, "ranks": ranks, "how": how, "epoch_seconds": seconds,
            "median_epoch_s": statistics.median(timed)}


# ---------------------------------------------------------------------------- worker (under torchrun)


def worker(args: argparse.Namespace) -> int:
    """One rank. Rank 0 first trains both problems alone (the baseline) while the others wait to join;
    then, for each rank count N, ranks 0..N-1 train both problems with DDP in a group of their own while
    the rest wait at a barrier. Rank 0 writes the rows (JSON) with the speed-up against its baseline and
    the Boston weight difference for each N.
    """
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    worlds = parse_ranks(args.worlds) if args.worlds else [world]
    if worlds[-1] > world:
        raise ValueError(f"--worlds {args.worlds} asks for {worlds[-1]} ranks, this launch has {world}")
    torch.set_num_threads(1)
    problems = [(p, e) for p, e in (("boston", args.boston_epochs), ("synthetic", args.synthetic_epochs)) if e > 0]
    plain = {problem: train_problem(problem, epochs) for problem, epochs in problems} if rank == 0 else {}
    torch.distributed.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.pg_timeout))
    try:
        rows, differences = [], {}
        for n in worlds:
            group = torch.distributed.new_group(list(range(n)))  # every rank takes part in creating it
            for problem, epochs in problems:
                torch.distributed.barrier()
                if rank >= n:
                    continue
                seconds, state = train_problem(problem, epochs, rank, n, group)
                if rank == 0:
                    base = summarize(problem, 1, plain[problem][0], "plain")
                    row = summarize(problem, n, seconds, "ddp")
                    row["baseline_epoch_s"] = base["median_epoch_s"]
                    row["speedup"] = base["median_epoch_s"] / row["median_epoch_s"]
                    rows.append(row)
                    if problem == "boston":
                        differences[str(n)] = max_abs_difference(state, plain[problem][1])
            torch.distributed.barrier()
        if rank == 0:
            base_rows = [summarize(problem, 1, plain[problem][0], "plain") for problem, _ in problems]
            write_json(args.out, {"rows": rows, "baseline": base_rows, "boston_weight_difference": differences})
    finally:
        torch.distributed.destroy_process_group()
    return 0


# ---------------------------------------------------------------------------- driver


def measure(ranks: list[int], boston_epochs: int, synthetic_epochs: int, timeout: float = 240.0, log=print) -> dict:
    """ONE torchrun launch of ``max(ranks)`` ranks measures every rank count in ``ranks``.

    ``synthetic_epochs=0`` measures the Boston problem only.
    """
    from gpulab.distributed.torchrun import launch

    ranks = sorted(set(ranks))
    if not ranks or ranks[0] < 1:
        raise ValueError(f"ranks={ranks!r} must be positive rank counts, e.g. [2, 3]")
    if boston_epochs < 1 or synthetic_epochs < 0:
        raise ValueError(f"boston_epochs={boston_epochs!r} must be >= 1 and synthetic_epochs={synthetic_epochs!r} >= 0")
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="gpulab-crossover-") as tmp:
        out = str(Path(tmp) / "crossover.json")
        args = ["--worker", "--out", out, "--worlds", ",".join(map(str, ranks)), "--boston-epochs",
                str(boston_epochs), "--synthetic-epochs", str(synthetic_epochs), "--pg-timeout", str(timeout)]
        log(f"launching torchrun once with {ranks[-1]} rank(s) for {', '.join(map(str, ranks))} rank(s) ...")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = launch("gpulab.crossover", args, nproc=ranks[-1], timeout=timeout, module=True,
                            backend="gloo", on_line=None)
        notes += [str(w.message) for w in caught if str(w.message) not in notes]
        found = json.loads(Path(out).read_text(encoding="utf-8"))
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


def parse_ranks(text: str) -> list[int]:
    """``"1,2,3"`` -> ``[1, 2, 3]``; each a positive integer."""
    try:
        ranks = sorted({int(p) for p in text.split(",")})
    except ValueError:
        raise argparse.ArgumentTypeError(f"ranks {text!r} must look like 1,2,3") from None
    if not ranks or ranks[0] < 1:
        raise argparse.ArgumentTypeError(f"ranks {text!r} must be positive integers")
    return ranks


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=parse_ranks, default=None, help="rank counts (default 1,2,3,4; light: 2,3)")
    p.add_argument("--boston-epochs", type=int, default=None)
    p.add_argument("--synthetic-epochs", type=int, default=None)
    p.add_argument("--light", action="store_true", help="2 and 3 ranks, few epochs (for notebook 07)")
    p.add_argument("--json", help="write the report here")
    p.add_argument("--timeout", type=float, default=240.0, help="seconds the torchrun launch may take")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    p.add_argument("--worlds", help=argparse.SUPPRESS)  # worker: the rank counts to measure
    p.add_argument("--pg-timeout", type=float, default=240.0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        if args.boston_epochs is None or args.synthetic_epochs is None or not args.out:
            p.error("--worker needs --out, --boston-epochs and --synthetic-epochs (measure() passes them)")
        return worker(args)
    ranks = args.ranks or ([2, 3] if args.light else [1, 2, 3, 4])
    boston_epochs = args.boston_epochs or (20 if args.light else 100)
    synthetic_epochs = args.synthetic_epochs or (4 if args.light else 6)
    for name, value in (("boston-epochs", boston_epochs), ("synthetic-epochs", synthetic_epochs)):
        if value < 2:
            p.error(f"--{name} {value} must be at least 2 (the first epoch is warm-up)")
    start = time.perf_counter()
    report = measure(ranks, boston_epochs, synthetic_epochs, args.timeout)
    report["seconds"] = time.perf_counter() - start
    print(format_table(report))
    for n, d in report["boston_weight_difference"].items():
        print(f"Boston weights, {n} rank(s) vs one process: max difference {d:.1e}")
    for note in report["notes"]:
        print(f"note: {note}")
    if args.json:
        write_json(args.json, report)
    return 0


if __name__ == "__main__":
    from gpulab.distributed.rank_io import exit_worker

    exit_worker(main())  # under torchrun the process group is already destroyed (worker's finally)
