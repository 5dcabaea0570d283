"""The DDP worker: the program `torchrun` starts once per rank.

    torchrun --standalone --nproc-per-node 2 -m gpulab.distributed.ddp.worker --epochs 20 --save model.pt

Every rank builds the same model, data and optimizer from ``gpulab.experiment``, wraps the
model in ``DistributedDataParallel`` and runs the ordinary ``gpulab.train.fit`` loop with
its ``rank`` and ``world_size``: fit gives each rank its slice of every global batch, the
same way on every rank and every restart. Only rank 0 logs, checkpoints and saves. Each
output line is written whole and prefixed ``[rank N]`` so a launcher can tell ranks apart.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import traceback
from typing import Sequence

import torch
import torch.distributed as dist

from gpulab import argtypes
from gpulab.atomic import torch_save, write_json
from gpulab.distributed.ddp import checkpoint
from gpulab.distributed.launch.rank_io import exit_worker, prefix_output, rank_env, run_in_group
from gpulab.experiment import add_recipe_options, recipe_from, setup
from gpulab.timing import Stopwatch
from gpulab.train import History


def choose_backend(requested: str, local_world_size: int) -> str:
    """``nccl`` when every local rank has its own CUDA device, else ``gloo`` (``requested`` wins)."""
    if requested not in ("auto", "gloo", "nccl"):
        raise ValueError(f"backend={requested!r}: use auto, gloo or nccl")
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if requested == "nccl" and local_world_size > gpus:
        raise ValueError(f"backend nccl needs one CUDA device per rank: {local_world_size} ranks, {gpus} GPU(s)")
    if requested == "auto":
        return "nccl" if 0 < local_world_size <= gpus else "gloo"
    return requested


@torch.no_grad()
def distributed_metrics(model: torch.nn.Module, X: torch.Tensor, y: torch.Tensor, rank: int, world: int) -> dict:
    """Test MSE, RMSE and R²: each rank scores its slice of ``X``; the sums are gathered from every rank.

    The sums are Python floats (float64 on the CPU), never a float64 tensor on the device.
    """
    was_training = model.training
    model.eval()
    xs, ys = X.tensor_split(world)[rank], y.tensor_split(world)[rank]
    pred = model(xs).reshape(-1).cpu().double() if len(xs) else torch.zeros(0, dtype=torch.float64)
    yd = ys.reshape(-1).cpu().double()
    model.train(was_training)
    mine = [((pred - yd) ** 2).sum().item(), yd.sum().item(), (yd**2).sum().item(), float(len(yd))]
    everyone = [mine]
    if dist.is_initialized() and world > 1:
        everyone = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, mine)
    sse, sy, syy, n = (math.fsum(part[i] for part in everyone) for i in range(4))
    total = syy - sy * sy / n
    mse = sse / n
    return {"mse": mse, "rmse": math.sqrt(mse), "r2": 1.0 - sse / total if total > 0 else math.nan}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The worker's options (``--batch-size`` is the GLOBAL batch, shared by all ranks)."""
    p = argparse.ArgumentParser(prog="gpulab.distributed.ddp.worker", description=__doc__.splitlines()[0])
    add_recipe_options(p)
    p.add_argument("--backend", default="auto", choices=("auto", "gloo", "nccl"))
    p.add_argument("--save", help="rank 0 saves the final state_dict here")
    p.add_argument("--json", help="rank 0 writes metrics and history here")
    p.add_argument("--checkpoint-dir", help="checkpoint every epoch here and resume from the newest")
    p.add_argument("--log-every", type=argtypes.positive_int, default=1, help="rank 0 logs every N epochs")
    p.add_argument("--pg-timeout", type=float, default=120.0, help="seconds any collective may wait")
    p.add_argument("--epoch-delay", type=float, default=0.0, help=argparse.SUPPRESS)  # slows epochs for the crash test
    return p.parse_args(argv)


def train(args: argparse.Namespace, rank: int, world: int, local_rank: int) -> dict:
    """One rank's whole job once the process group is up; returns rank 0's summary."""
    recipe = recipe_from(args)
    device = torch.device("cuda", local_rank) if dist.get_backend() == "nccl" else torch.device("cpu")
    run = setup(recipe, device)
    data, model, optimizer = run.data, run.model, run.optimizer
    start_epoch, old = 0, {}
    if args.checkpoint_dir:
        start_epoch, old = checkpoint.resume(args.checkpoint_dir, model, optimizer)
        if start_epoch and rank == 0:
            print(f"resuming from {checkpoint.checkpoint_path('', start_epoch - 1)} (epoch {start_epoch})", flush=True)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank] if device.type == "cuda" else None)
    history = History(**old) if old else History(device=str(device))

    def on_epoch_end(epoch: int, h: History) -> None:
        for key in ("epochs", "loss", "seconds", "samples_per_s"):
            getattr(history, key).append(getattr(h, key)[-1])
        if rank == 0:
            if args.checkpoint_dir:
                checkpoint.save(args.checkpoint_dir, epoch, ddp, optimizer, history.to_dict())
            if (epoch + 1) % args.log_every == 0 or epoch + 1 == recipe.epochs:
                print(f"epoch {epoch + 1:>3}/{recipe.epochs}  loss {h.loss[-1]:.4f}", flush=True)
        if args.epoch_delay:
            time.sleep(args.epoch_delay)

    with Stopwatch(device) as clock:
        run.fit(ddp, device=device, progress=False, rank=rank, world_size=world, start_epoch=start_epoch,
                on_epoch_end=on_epoch_end)
    seconds = clock.seconds
    metrics = distributed_metrics(ddp, data.X_test, data.y_test, rank, world)
    summary = {"recipe": recipe.to_dict(), "world_size": world, "backend": dist.get_backend(), "device": str(device),
               "resumed_from_epoch": start_epoch, "train_seconds": seconds, "metrics": metrics,
               "history": history.to_dict()}
    if rank == 0:
        if args.save:
            torch_save(args.save, {k: v.detach().cpu() for k, v in ddp.module.state_dict().items()})
        if args.json:
            write_json(args.json, summary)
        print(f"done: test RMSE {metrics['rmse']:.3f}, R2 {metrics['r2']:.3f}", flush=True)
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point under torchrun: read its environment, set up, train, always tear down."""
    args = parse_args(argv)
    env = rank_env()
    if env is None:
        return 2
    rank, world, local_rank, local_world = env.rank, env.world, env.local_rank, env.local_world
    prefix_output(rank)  # every line '[rank N] ...', written whole
    try:
        backend = choose_backend(args.backend, local_world)
        if backend == "nccl":
            torch.cuda.set_device(local_rank)  # before init_process_group: one GPU per rank
    except Exception:
        sys.stderr.write(traceback.format_exc())
        return 1
    return run_in_group(backend, args.pg_timeout, lambda: train(args, rank, world, local_rank))


if __name__ == "__main__":
    exit_worker(main())  # the process group is already destroyed (main's finally)
