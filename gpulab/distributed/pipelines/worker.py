"""Notebook 13's rank program: pipeline schedules, a 2-D mesh and thirteen layouts, in one launch of four ranks.

    torchrun --standalone --nproc-per-node 4 -m gpulab.distributed.pipelines.worker --out DIR
    torchrun --standalone --nproc-per-node 4 -m gpulab.distributed.pipelines.worker --out DIR \
        --device cuda --parts calibrate,layouts      # the planner's calibration and validation on 4 GPUs (nccl)

Parts, in this order (``--parts`` picks some):

- ``calibrate``: what the planner needs to know about this "cluster", measured with every rank busy at once
  (``pipelines.calibrate``): each kind of call over groups of 4 and 2, a block's compute at every shape the
  layouts use, the same block on one rank while the others wait, a copy's bandwidth;
- ``schedules``: GPipe, 1F1B and the looped schedules on ranks 0 and 1 (``pipelines.schedules``) while the
  other ranks wait at a barrier;
- ``mesh``: FSDP2 over ``dp`` and tensor parallelism over ``tp`` on a ``(2, 2)`` mesh (``pipelines.mesh.two_d``);
- ``layouts``: the layouts of ``pipelines.layouts.LAYOUTS``, built once and timed in turns for a few Adam steps.

Rank 0 writes ``DIR/report.json``; every collective has the group's time limit (``--pg-timeout``). With
``--device cuda`` each rank takes the GPU of its local rank and the group runs on nccl; only the ``calibrate`` and
``layouts`` parts run there (the others teach gloo's CPU ranks).
"""

from __future__ import annotations

import argparse
import datetime
import os
from pathlib import Path
from typing import Sequence

import torch
import torch.distributed as dist

from gpulab import argtypes
from gpulab.atomic import write_json
from gpulab.distributed.launch.rank_io import exit_worker, run_rank
from gpulab.timing import Stopwatch

PARTS = ("calibrate", "schedules", "mesh", "layouts")
PIPELINE_RANKS = 2
PG_TIMEOUT_S = 60.0  # every collective and every send of the launch gives up after this long


def run(args: argparse.Namespace, rank: int, world: int) -> None:
    """The parts asked for, in order; rank 0 writes the report."""
    report: dict = {"world_size": world, "parts": list(args.parts), "seconds": {}}
    clock = Stopwatch().start()

    def done(part: str) -> None:
        report["seconds"][part] = clock.elapsed()
        print(f"{part} done", flush=True)
        clock.start()

    from gpulab.distributed.pipelines.layouts import Meshes

    device = "cpu" if args.device == "cpu" else f"cuda:{torch.cuda.current_device()}"
    meshes = Meshes(args.pg_timeout, args.device)  # every mesh's groups give up after the launch's time limit
    if "calibrate" in args.parts:
        from gpulab.distributed.pipelines.calibrate import calibrate

        pairs = meshes.get(2, 1, 2)["tp"].get_group()  # ranks [0, 1] and [2, 3]
        mine = calibrate(rank, world, pairs, device=device)
        everyone: list = [None] * world
        dist.all_gather_object(everyone, mine)
        report["calibrate"] = everyone
        done("calibrate")
    if "schedules" in args.parts:
        from gpulab.distributed.pipelines.schedules import run_schedules

        pair = dist.new_group(list(range(PIPELINE_RANKS)), timeout=datetime.timedelta(seconds=args.pg_timeout))
        # (every rank takes part in creating a group; without timeout= it would wait torch's default, 30 min)
        if rank < PIPELINE_RANKS:
            report["schedules"] = run_schedules(rank, PIPELINE_RANKS, pair, repeats=args.repeats)
        dist.barrier()  # the other ranks wait here
        done("schedules")
    if "mesh" in args.parts:
        from gpulab.distributed.pipelines.mesh import two_d

        report["mesh"] = two_d(rank, world, meshes.get(2, 1, 2))
        done("mesh")
    if "layouts" in args.parts:
        from gpulab.distributed.pipelines.layouts import time_layouts

        report["layouts"] = time_layouts(rank, world, meshes, steps=args.steps, device=device)
        done("layouts")
    if rank == 0:
        write_json(Path(args.out) / "report.json", report)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point under torchrun."""
    p = argparse.ArgumentParser(prog="gpulab.distributed.pipelines.worker", description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="folder for rank 0's report.json")
    p.add_argument("--parts", type=argtypes.one_or_more_of(PARTS, "parts"), default=list(PARTS))
    p.add_argument("--repeats", type=argtypes.positive_int, default=5, help="timed steps per schedule")
    p.add_argument("--steps", type=argtypes.positive_int, default=5, help="timed steps per layout")
    p.add_argument("--pg-timeout", type=argtypes.positive_float, default=PG_TIMEOUT_S,
                   help="seconds any collective or send may wait")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cpu (gloo, every part) or cuda (nccl, one GPU a rank: calibrate and layouts only)")
    args = p.parse_args(argv)
    if args.device == "cuda":
        if set(args.parts) - {"calibrate", "layouts"}:
            p.error("--device cuda runs only the calibrate and layouts parts: the others teach gloo's CPU ranks")
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    backend = "gloo" if args.device == "cpu" else "nccl"
    return run_rank(backend, args.pg_timeout, lambda env: run(args, env.rank, env.world))


if __name__ == "__main__":
    exit_worker(main())
