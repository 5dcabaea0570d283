"""The tensor-parallel rank program: Megatron's split by hand, then with DTensor, counted, timed, uneven.

    torchrun --standalone --nproc-per-node 2 -m gpulab.distributed.tensor_parallel.worker --out DIR \\
        --parts megatron,block,traffic,vocab --steps 3 --vocab 11

Parts (any of them, in this order, in one launch; ``gpulab.distributed.tensor_parallel.parts`` and ``tensor_parallel.traffic`` hold them):

- ``megatron``: an MLP split by hand on plain tensors, one all-reduce, beside one process and a wrong split;
- ``block``: a tiny transformer block under each plan of ``gpulab.tp_model.PLANS`` (``parallelize_module``),
  trained ``--steps`` steps beside one process, its collectives counted per phase with ``CommDebugMode``, the
  bytes its forward pass saves for backward counted per module with ``saved_tensors_hooks``;
- ``traffic``: an all-reduce sweep, then a larger block profiled: each collective's size and time;
- ``vocab``: an output layer of ``--vocab`` rows split by rows, trained with gathered logits and with
  ``loss_parallel``, then padded to a multiple of the ranks (``loss_parallel``), each beside one process.

Each rank writes ``DIR/rank<N>.json``; ``gpulab.distributed.tensor_parallel.driver.run_tensor_parallel`` reads them.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Sequence

import torch

from gpulab import argtypes
from gpulab.atomic import write_json
from gpulab.distributed.launch.rank_io import exit_worker, run_rank

#: The parts a launch can run, in the order they run.
PARTS = ("megatron", "block", "traffic", "vocab")
SWEEP_SIZES = (8192, 32768, 131072, 524288)  # bytes: around the traffic block's activations (128 KiB)


def run(args: argparse.Namespace, rank: int, world: int) -> None:
    """This rank's parts once the process group is up; writes ``rank<N>.json``."""
    from gpulab.distributed.tensor_parallel import parts as tp_parts
    from gpulab.distributed.tensor_parallel import traffic as tp_traffic

    torch.set_num_threads(1)
    report: dict = {"rank": rank, "world_size": world}
    if "megatron" in args.parts:
        report["megatron"] = tp_parts.megatron_part(rank, world)
    if "block" in args.parts:
        report["block"] = tp_parts.block_part(rank, world, args.steps)
    if "traffic" in args.parts:
        report["traffic"] = tp_traffic.traffic_part(rank, world, args.steps, list(SWEEP_SIZES), args.repeats)
    if "vocab" in args.parts:
        report["vocab"] = tp_parts.vocab_part(rank, world, args.steps, args.vocab)
    write_json(Path(args.out) / f"rank{rank}.json", report)
    print(f"done: {', '.join(args.parts)} on {world} rank(s)", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point under torchrun."""
    p = argparse.ArgumentParser(prog="gpulab.distributed.tensor_parallel.worker", description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="folder for rank<N>.json")
    p.add_argument("--parts", type=argtypes.one_or_more_of(PARTS, "parts"), default=list(PARTS))
    p.add_argument("--steps", type=argtypes.positive_int, default=3, help="training steps per run")
    p.add_argument("--repeats", type=argtypes.positive_int, default=50, help="calls per size in the sweep")
    p.add_argument("--vocab", type=argtypes.positive_int, default=11, help="rows of the output layer")
    p.add_argument("--pg-timeout", type=argtypes.positive_float, default=60.0, help="seconds any collective may wait")
    args = p.parse_args(argv)
    return run_rank("gloo", args.pg_timeout, lambda env: run(args, env.rank, env.world))


if __name__ == "__main__":
    exit_worker(main())
