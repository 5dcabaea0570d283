"""The crossover's rank program: time per epoch under DDP for several rank counts, in ONE torchrun launch.

    torchrun --standalone --nproc-per-node 3 -m gpulab.distributed.crossover.worker --out x.json \\
        --worlds 2,3 --boston-epochs 20 --synthetic-epochs 4

Two problems, trained with the one training loop (``gpulab.train.fit``) under DDP (gloo, CPU):
``boston``, the article's recipe (Net1, 404 training rows, global batch 128: tiny compute per step), and
``synthetic``, a wider MLP on 8192 random rows (global batch 2048: compute outweighs the gradient
exchange). Each rank gets ONE CPU thread, the CPU analogue of one GPU per rank. Rank 0 first trains both
problems alone, without DDP (the baseline, moments before the DDP runs). Then each rank count N trains in
a process group of ranks 0..N-1 (``new_group``) while the others wait at a barrier. Rank 0 writes the
median seconds per epoch (first epoch left out as warm-up), the speed-up and the Boston weight
difference for each N. The driver is :mod:`gpulab.distributed.crossover.driver`.
"""

from __future__ import annotations

import argparse
import statistics
from typing import Sequence

import torch
from torch import nn

from gpulab import argtypes
from gpulab.atomic import write_json
from gpulab.distributed.launch.rank_io import exit_worker, rank_env, run_in_group
from gpulab.experiment import Recipe, setup
from gpulab.models import mlp
from gpulab.train import fit, max_abs_difference

SYNTHETIC = {"rows": 8192, "features": 128, "hidden": 512, "batch_size": 2048, "lr": 1e-3}
PROBLEMS = ("boston", "synthetic")


def synthetic_data(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A regression problem big enough that each step's compute outweighs the gradient exchange."""
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(SYNTHETIC["rows"], SYNTHETIC["features"], generator=g)
    w = torch.randn(SYNTHETIC["features"], 1, generator=g)
    return X, X @ w / SYNTHETIC["features"] ** 0.5 + 0.1 * torch.randn(SYNTHETIC["rows"], 1, generator=g)


def synthetic_model(seed: int = 0) -> nn.Module:
    """A wider MLP (about 330k parameters) with fixed initial weights."""
    torch.manual_seed(seed)
    return mlp([SYNTHETIC["features"], SYNTHETIC["hidden"], SYNTHETIC["hidden"], 1])


def train_problem(problem: str, epochs: int, rank: int = 0, world: int = 1, group=None) -> tuple[list[float], dict]:
    """Train one problem on this rank; epoch seconds and weights.

    Wrapped in DDP over ``group`` (default: every rank) when a process group is up.
    """
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    if problem == "boston":
        run = setup(Recipe(epochs=epochs))
        model, optimizer, batch = run.model, run.optimizer, run.recipe.batch_size
        X, y = run.data.X_train, run.data.y_train
    elif problem == "synthetic":
        X, y = synthetic_data()
        model = synthetic_model()
        optimizer, batch = torch.optim.Adam(model.parameters(), lr=SYNTHETIC["lr"]), SYNTHETIC["batch_size"]
    else:
        raise ValueError(f"unknown problem {problem!r}: use {' or '.join(PROBLEMS)}")
    wrapped = nn.parallel.DistributedDataParallel(model, process_group=group) if distributed else model
    history = fit(wrapped, (X, y), epochs=epochs, optimizer=optimizer, batch_size=batch, device="cpu",
                  seed=0, progress=False, rank=rank, world_size=world)
    return history.seconds, {k: v.detach().clone() for k, v in model.state_dict().items()}


def summarize(problem: str, ranks: int, seconds: list[float], how: str) -> dict:
    """One row: median epoch seconds, first (warm-up) epoch left out when there are several."""
    timed = seconds[1:] if len(seconds) > 1 else seconds
    return {"problem": problem, "ranks": ranks, "how": how, "epoch_seconds": seconds,
            "median_epoch_s": statistics.median(timed)}


def _measure(args: argparse.Namespace, rank: int, plain: dict, problems: list[tuple[str, int]]) -> None:
    """Inside the process group: every rank count in turn; rank 0 writes the rows."""
    rows, differences = [], {}
    for n in args.worlds:
        group = torch.distributed.new_group(list(range(n)))  # every rank takes part in creating it
        for problem, epochs in problems:
            torch.distributed.barrier()
            if rank >= n:
                continue
            seconds, state = train_problem(problem, epochs, rank, n, group)
            if rank == 0:
                row = summarize(problem, n, seconds, "ddp")
                row["baseline_epoch_s"] = summarize(problem, 1, plain[problem][0], "plain")["median_epoch_s"]
                row["speedup"] = row["baseline_epoch_s"] / row["median_epoch_s"]
                rows.append(row)
                if problem == "boston":
                    differences[str(n)] = max_abs_difference(state, plain[problem][1])
        torch.distributed.barrier()
    if rank == 0:
        base_rows = [summarize(problem, 1, plain[problem][0], "plain") for problem, _ in problems]
        write_json(args.out, {"rows": rows, "baseline": base_rows, "boston_weight_difference": differences})


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The worker's options (the driver passes them all)."""
    p = argparse.ArgumentParser(prog="gpulab.distributed.crossover.worker", description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="rank 0 writes the rows here (JSON)")
    p.add_argument("--worlds", type=argtypes.int_list, required=True, help="rank counts to measure, e.g. 2,3")
    p.add_argument("--boston-epochs", type=argtypes.non_negative_int, required=True)
    p.add_argument("--synthetic-epochs", type=argtypes.non_negative_int, required=True)
    p.add_argument("--pg-timeout", type=argtypes.positive_float, default=240.0, help="seconds any collective may wait")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """One rank: the baseline on rank 0, then every rank count with DDP."""
    args = parse_args(argv)
    env = rank_env()
    if env is None:
        return 2
    args.worlds = sorted(set(args.worlds))
    if args.worlds[-1] > env.world:
        raise ValueError(f"--worlds {args.worlds} asks for {args.worlds[-1]} ranks, this launch has {env.world}")
    torch.set_num_threads(1)
    problems = [(p, e) for p, e in zip(PROBLEMS, (args.boston_epochs, args.synthetic_epochs)) if e > 0]
    plain = {problem: train_problem(problem, epochs) for problem, epochs in problems} if env.rank == 0 else {}
    return run_in_group("gloo", args.pg_timeout, lambda: _measure(args, env.rank, plain, problems))


if __name__ == "__main__":
    exit_worker(main())  # the process group is already destroyed (run_in_group)
