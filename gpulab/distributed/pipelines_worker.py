"""Notebook 13's rank program: pipeline schedules, a 2-D mesh and five layouts, in one launch of four ranks.

    torchrun --standalone --nproc-per-node 4 -m gpulab.distributed.pipelines_worker --out DIR

Parts, in this order (``--parts`` picks some):

- ``calibrate``: what the planner needs to know about this "cluster", measured with every rank busy at once:
  a float32 matmul's rate and a copy's bandwidth on each rank (``gpulab.bench``), and all-reduce times over
  all ranks at a few sizes (``collectives_worker.sweep``);
- ``schedules``: GPipe, 1F1B and the looped schedules on ranks 0 and 1 (``pipelines_schedules``) while the
  other ranks wait at a barrier;
- ``mesh``: FSDP2 over ``dp`` and tensor parallelism over ``tp`` on a ``(2, 2)`` mesh (``pipelines_mesh.two_d``);
- ``layouts``: DDP, FSDP, TP, PP and FSDP x TP timed for a few Adam steps (``pipelines_mesh.layouts``).

Rank 0 writes ``DIR/report.json``; every collective has the group's time limit (``--pg-timeout``).
"""

from __future__ import annotations

import argparse
import datetime
import statistics
from pathlib import Path
from typing import Sequence

import torch
import torch.distributed as dist

from gpulab import argtypes
from gpulab.atomic import write_json
from gpulab.distributed.rank_io import exit_worker, run_rank
from gpulab.timing import Stopwatch

PARTS = ("calibrate", "schedules", "mesh", "layouts")
SWEEP_BYTES = (4096, 65536, 1048576, 4194304)  # all-reduce sizes of the calibration
PIPELINE_RANKS = 2
PG_TIMEOUT_S = 60.0  # every collective and every send of the launch gives up after this long


def calibrate(rank: int, world: int) -> dict:
    """Matmul GFLOP/s and copy GB/s of every rank (all at once), and the all-reduce sweep rows of every rank."""
    from gpulab import bench
    from gpulab.distributed.collectives_worker import sweep

    matmul = bench.matmul_probe("cpu", 256, threads=1, min_run_time=0.05)
    copy = bench.copy_probe("cpu", 16, "device", threads=1, min_run_time=0.05)
    rows = sweep(["all_reduce"], SWEEP_BYTES, 3, world, torch.device("cpu"))
    everyone: list = [None] * world
    dist.all_gather_object(everyone, {"matmul": matmul.rate, "copy": copy.rate, "sweep": rows})
    return {"matmul_gflops": statistics.median(r["matmul"] for r in everyone),
            "copy_gbs": statistics.median(r["copy"] for r in everyone),
            "sweep": [r["sweep"] for r in everyone], "matmul_size": 256, "threads": 1}


def run(args: argparse.Namespace, rank: int, world: int) -> None:
    """The parts asked for, in order; rank 0 writes the report."""
    report: dict = {"world_size": world, "parts": list(args.parts), "seconds": {}}
    clock = Stopwatch().start()

    def done(part: str) -> None:
        report["seconds"][part] = clock.elapsed()
        print(f"{part} done", flush=True)
        clock.start()

    if "calibrate" in args.parts:
        report["calibrate"] = calibrate(rank, world)
        done("calibrate")
    if "schedules" in args.parts:
        from gpulab.distributed.pipelines_schedules import run_schedules

        pair = dist.new_group(list(range(PIPELINE_RANKS)), timeout=datetime.timedelta(seconds=args.pg_timeout))
        # (every rank takes part in creating a group; without timeout= it would wait torch's default, 30 min)
        if rank < PIPELINE_RANKS:
            report["schedules"] = run_schedules(rank, PIPELINE_RANKS, pair, repeats=args.repeats)
        dist.barrier()  # the other ranks wait here
        done("schedules")
    mesh = None
    if "mesh" in args.parts or "layouts" in args.parts:
        from gpulab.distributed.pipelines_mesh import layouts, two_d

        report["mesh"], mesh = two_d(rank, world, args.pg_timeout)
        done("mesh")
        if "layouts" in args.parts:
            report["layouts"] = layouts(rank, world, mesh, steps=args.steps)
            done("layouts")
    if rank == 0:
        write_json(Path(args.out) / "report.json", report)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point under torchrun."""
    p = argparse.ArgumentParser(prog="gpulab.distributed.pipelines_worker", description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="folder for rank 0's report.json")
    p.add_argument("--parts", type=argtypes.one_or_more_of(PARTS, "parts"), default=list(PARTS))
    p.add_argument("--repeats", type=argtypes.positive_int, default=5, help="profiled steps per schedule")
    p.add_argument("--steps", type=argtypes.positive_int, default=3, help="timed steps per layout")
    p.add_argument("--pg-timeout", type=argtypes.positive_float, default=PG_TIMEOUT_S,
                   help="seconds any collective or send may wait")
    args = p.parse_args(argv)
    return run_rank("gloo", args.pg_timeout, lambda env: run(args, env.rank, env.world))


if __name__ == "__main__":
    exit_worker(main())
