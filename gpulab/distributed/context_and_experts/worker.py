"""Notebook 15's rank program: ring attention, torch's context parallelism and experts on ranks, on 4 CPU ranks.

    torchrun --standalone --nproc-per-node 4 -m gpulab.distributed.context_and_experts.worker --out DIR \\
        --parts ring,torch_cp,moe

Parts (any of them, in this order, in one launch; ``gpulab.distributed.context_and_experts.parts`` holds them):

- ``ring``: causal ring attention by hand at 2 ranks (ranks 0-1 and 2-3, two rings at once) and at 4, with the
  ``plain`` and ``zigzag`` splits, against one process, with two controls; messages counted by the profiler;
  bytes saved for backward as the sequence grows;
- ``torch_cp``: torch's ``context_parallel`` over the 4 ranks: the cases where it runs, and those it refuses;
- ``moe``: a mixture-of-experts layer with its experts on ranks, at 2 ranks (two pairs), at 4, and 2 x 2 with data
  parallelism (the same experts on ranks 0 and 2, and on 1 and 3), against one process, with controls.

The pairs ``[0, 1]``, ``[2, 3]`` and the data-parallel groups ``[0, 2]``, ``[1, 3]`` are made once; every group,
message and collective gives up after ``--pg-timeout`` seconds. Each rank writes ``DIR/rank<N>.json``;
``gpulab.distributed.context_and_experts.driver.run_lesson`` reads them.
"""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path
from typing import Sequence

import torch

from gpulab import argtypes
from gpulab.atomic import write_json
from gpulab.distributed.launch.rank_io import exit_worker, run_rank
from gpulab.timing import Stopwatch

#: The parts a launch can run, in the order they run.
PARTS = ("ring", "torch_cp", "moe")
RANKS = 4  # the lesson's grid: two pairs, and two data-parallel groups across them
PG_TIMEOUT_S = 60.0


def groups(timeout_s: float) -> tuple:
    """This rank's pair (``[0, 1]`` or ``[2, 3]``) and its group across the pairs (``[0, 2]`` or ``[1, 3]``)."""
    import torch.distributed as dist

    limit = datetime.timedelta(seconds=timeout_s)  # every rank takes part in making every group
    pairs = [dist.new_group([0, 1], timeout=limit), dist.new_group([2, 3], timeout=limit)]
    across = [dist.new_group([0, 2], timeout=limit), dist.new_group([1, 3], timeout=limit)]
    rank = dist.get_rank()
    return pairs[rank // 2], across[rank % 2]


def run(args: argparse.Namespace, rank: int, world: int) -> None:
    """This rank's parts once the process group is up; writes ``rank<N>.json``."""
    from gpulab.distributed.context_and_experts import parts

    if world != RANKS:
        raise ValueError(f"this rank program needs {RANKS} ranks (two pairs), got {world}")
    torch.set_num_threads(1)
    pair, across = groups(args.pg_timeout)
    report: dict = {"rank": rank, "world_size": world, "seconds": {}}
    clock = Stopwatch().start()
    for part in args.parts:
        if part == "ring":
            report["ring"] = parts.ring_part(rank, world, pair, args.pg_timeout)
        elif part == "torch_cp":
            report["torch_cp"] = parts.torch_cp_part(rank, world)
        else:
            report["moe"] = parts.moe_part(rank, world, pair, across, args.pg_timeout)
        report["seconds"][part] = clock.elapsed()
        clock.start()
    write_json(Path(args.out) / f"rank{rank}.json", report)
    print(f"done: {', '.join(args.parts)} on {world} ranks", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point under torchrun."""
    p = argparse.ArgumentParser(prog="gpulab.distributed.context_and_experts.worker",
                                description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="folder for rank<N>.json")
    p.add_argument("--parts", type=argtypes.one_or_more_of(PARTS, "parts"), default=list(PARTS))
    p.add_argument("--pg-timeout", type=argtypes.positive_float, default=PG_TIMEOUT_S,
                   help="seconds any message or collective may wait")
    args = p.parse_args(argv)
    return run_rank("gloo", args.pg_timeout, lambda env: run(args, env.rank, env.world))


if __name__ == "__main__":
    exit_worker(main())
