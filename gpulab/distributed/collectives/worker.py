"""The collectives rank program: what each collective does, what it costs, and DDP's all-reduces.

    torchrun --standalone --nproc-per-node 4 -m gpulab.distributed.collectives.worker --out DIR \\
        --parts semantics,sweep --sizes 1024,65536,4194304 --repeats 5

Parts (any of them, in this order, in one launch):

- ``semantics``: every rank starts from ``arange(world) + 10 * rank`` and runs broadcast (from rank 0),
  all_reduce (sum), reduce_scatter (sum) and all_gather (of its reduce_scatter result), recording its
  tensor before and after each;
- ``sweep``: times each of ``--collectives`` at each of ``--sizes`` bytes (float32; sizes as nccl-tests
  count them), ``--repeats`` rounds after one warm-up call (the sizes of a collective take turns, one call
  each per round), with a barrier before each call;
- ``ddp``: profiled DDP training steps (``gpulab.distributed.collectives.ddp_profile``), gloo only;
- ``fsdp``: profiled FSDP2 training steps of Net1, each layer its own unit: the all-gathers and
  reduce-scatters of a step and their sizes (``fsdp_traffic``), gloo only.

``semantics`` also profiles one reduce_scatter and records the operations it ran (``reduce_scatter_ops``).

Each rank writes ``DIR/rank<N>.json``; ``gpulab.distributed.collectives.driver.run_collectives`` reads them.
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path
from typing import Sequence

import torch
import torch.distributed as dist

from gpulab import argtypes
from gpulab.atomic import write_json
from gpulab.devices import synchronize
from gpulab.comm_cost import COLLECTIVES
from gpulab.distributed.collectives.ddp_profile import DDP_PARTS
from gpulab.distributed.launch.rank_io import exit_worker, prefix_output, rank_env, run_in_group
from gpulab.timing import Stopwatch

#: The parts a launch can run (the driver, gpulab.distributed.collectives.driver, asks for them by these names).
PARTS = ("semantics", "sweep", "ddp", "fsdp")
# FSDP2's collectives in the profiler -> (collective, which recorded tensor is its nccl-tests size)
FSDP_CALLS = {"c10d::_allgather_base_": ("all_gather", 0), "c10d::_reduce_scatter_base_": ("reduce_scatter", 1)}
SHOWN_OPS = ("c10d::", "gloo:", "nccl:", "aten::copy_")
# torch 2.13 renamed reduce_scatter_tensor / all_gather_into_tensor (the old names warn); older versions lack the new
reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def start_values(rank: int, world: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """The tensor rank ``rank`` starts each demonstration with: ``[10r, 10r + 1, ..., 10r + world - 1]``."""
    return torch.arange(world, dtype=torch.float32, device=device) + 10 * rank


def _numbers(t: torch.Tensor) -> list:
    return [int(v) if float(v).is_integer() else float(v) for v in t.cpu().tolist()]


def semantics(rank: int, world: int, device: torch.device) -> dict:
    """This rank's tensor before and after each collective, as lists of numbers."""
    start = start_values(rank, world, device)
    out: dict[str, dict] = {}
    x = start.clone()
    dist.broadcast(x, src=0)
    out["broadcast"] = {"before": _numbers(start), "after": _numbers(x)}
    x = start.clone()
    dist.all_reduce(x)  # sum by default
    out["all_reduce"] = {"before": _numbers(start), "after": _numbers(x)}
    piece = torch.empty(1, device=device)
    reduce_scatter_single(piece, start.clone())
    out["reduce_scatter"] = {"before": _numbers(start), "after": _numbers(piece)}
    gathered = torch.empty(world, device=device)
    all_gather_single(gathered, piece)
    out["all_gather"] = {"before": _numbers(piece), "after": _numbers(gathered)}
    return out


def reduce_scatter_ops(world: int, device: torch.device, numel: int = 1024) -> list[list]:
    """[name, first recorded shape] of the operations one reduce_scatter runs on this rank, in order.

    The input has ``numel`` x ``world`` float32 elements. Only collectives and copies are kept.
    """
    from torch.profiler import ProfilerActivity, profile

    inp, out = torch.ones(numel * world, device=device), torch.empty(numel, device=device)
    reduce_scatter_single(out, inp)  # warm-up
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        reduce_scatter_single(out, inp)
        synchronize(device)
    events = sorted(prof.events(), key=lambda e: e.time_range.start)
    return [[e.name, list(e.input_shapes[0]) if e.input_shapes else []] for e in events if e.name.startswith(SHOWN_OPS)]


def fsdp_traffic(rank: int, world: int, steps: int) -> dict:
    """FSDP2 on Net1 with each layer its own unit: its collectives per step and their bytes (nccl-tests sizes)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.profiler import ProfilerActivity, profile

    from gpulab.distributed.collectives.ddp_profile import LR, build, rows
    from gpulab.step import train_step

    model = build("net1")
    shapes = [list(p.shape) for p in model.parameters()]
    element = next(model.parameters()).element_size()
    mesh = init_device_mesh("cpu", (world,))  # explicit: a machine with CUDA would pick the GPU
    for layer in model.children():
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    X, y = rows("net1", rank)
    train_step(model, opt, X, y)  # FSDP2 initialises itself in its first step
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(steps):
            train_step(model, opt, X, y)
    sizes: dict[str, list[int]] = {"all_gather": [], "reduce_scatter": []}
    for e in prof.events():
        if e.name in FSDP_CALLS:
            name, which = FSDP_CALLS[e.name]
            sizes[name].append(math.prod(e.input_shapes[which]) * element)
    return {"units": [name for name, _ in model.named_children()], "steps": steps, "shapes": shapes,
            "element_size": element, "gradient_bytes": sum(math.prod(s) for s in shapes) * element,
            "calls_per_step": {k: len(v) / steps for k, v in sizes.items()},
            "bytes_per_step": {k: sum(v) / steps for k, v in sizes.items()}}


def buffers(collective: str, nbytes: int, world: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(input, output) float32 tensors for one call moving ``nbytes`` as nccl-tests count it."""
    n = nbytes // 4
    if collective == "reduce_scatter":
        return torch.ones(n, device=device), torch.empty(n // world, device=device)
    if collective == "all_gather":
        return torch.ones(n // world, device=device), torch.empty(n, device=device)
    buf = torch.ones(n, device=device)
    return buf, buf


def call(collective: str, inp: torch.Tensor, out: torch.Tensor) -> None:
    """One call of ``collective`` (sum where it reduces, rank 0 the source of a broadcast)."""
    if collective == "broadcast":
        dist.broadcast(inp, src=0)
    elif collective == "all_reduce":
        dist.all_reduce(inp)
    elif collective == "reduce_scatter":
        reduce_scatter_single(out, inp)
    elif collective == "all_gather":
        all_gather_single(out, inp)
    else:
        raise ValueError(f"collective {collective!r} is not one of {', '.join(COLLECTIVES)}")


def sweep(collectives: Sequence[str], sizes: Sequence[int], repeats: int, world: int,
          device: torch.device) -> list[dict]:
    """Seconds of each call on this rank: one row per (collective, bytes) with ``repeats`` times.

    The sizes of one collective take turns, one call each per round, so a moment of load from elsewhere on the
    machine slows every size alike instead of all the calls of one size.
    """
    rows = []
    for collective in collectives:
        cases = [buffers(collective, nbytes, world, device) for nbytes in sizes]
        for inp, out in cases:
            call(collective, inp, out)  # warm-up: connections, allocations
        synchronize(device)
        seconds: list[list[float]] = [[] for _ in sizes]
        for _ in range(repeats):
            for times, (inp, out) in zip(seconds, cases):
                dist.barrier()
                with Stopwatch(device) as clock:  # waits for the GPU's queue at both ends
                    call(collective, inp, out)
                times.append(clock.seconds)
        rows += [{"collective": collective, "bytes": n, "seconds": t} for n, t in zip(sizes, seconds)]
    return rows


def run(args: argparse.Namespace, rank: int, world: int) -> None:
    """One rank's parts once the process group is up; writes ``rank<N>.json``."""
    device = torch.device("cpu")
    if args.backend == "nccl":
        device = torch.device("cuda", torch.cuda.current_device())  # main() set it from LOCAL_RANK
    report: dict = {"rank": rank, "world_size": world, "backend": args.backend, "cpu_count": os.cpu_count()}
    if "semantics" in args.parts:
        report["semantics"] = semantics(rank, world, device)
        report["reduce_scatter_ops"] = reduce_scatter_ops(world, device)
        print("semantics done", flush=True)
    if "sweep" in args.parts:
        report["sweep"] = sweep(args.collectives, args.sizes, args.repeats, world, device)
        print(f"sweep done: {len(report['sweep'])} sizes x collectives", flush=True)
    if "ddp" in args.parts:
        from gpulab.distributed.collectives.ddp_profile import ddp_report

        report["ddp"] = ddp_report(rank, world, steps=args.steps, out=Path(args.out), parts=tuple(args.ddp_parts))
        print("ddp done", flush=True)
    if "fsdp" in args.parts:
        report["fsdp"] = fsdp_traffic(rank, world, steps=args.steps)
        print("fsdp done", flush=True)
    write_json(Path(args.out) / f"rank{rank}.json", report)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point under torchrun."""
    p = argparse.ArgumentParser(prog="gpulab.distributed.collectives.worker", description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="folder for rank<N>.json")
    p.add_argument("--parts", type=argtypes.one_or_more_of(PARTS, "parts"), default=["semantics"])
    p.add_argument("--collectives", type=argtypes.one_or_more_of(COLLECTIVES, "collectives"), default=list(COLLECTIVES))
    p.add_argument("--sizes", type=argtypes.int_list, default=[1024, 65536, 1048576], help="bytes per call")
    p.add_argument("--repeats", type=argtypes.positive_int, default=5)
    p.add_argument("--steps", type=argtypes.positive_int, default=3, help="profiled DDP steps per variant")
    p.add_argument("--ddp-parts", type=argtypes.one_or_more_of(DDP_PARTS, "ddp parts"), default=list(DDP_PARTS))
    p.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    p.add_argument("--pg-timeout", type=argtypes.positive_float, default=60.0, help="seconds any collective may wait")
    args = p.parse_args(argv)
    env = rank_env()
    if env is None:
        return 2
    if args.backend == "nccl" and ("ddp" in args.parts or "fsdp" in args.parts):
        p.error("the ddp and fsdp parts train on the CPU: use --backend gloo")
    if args.backend == "nccl":
        torch.cuda.set_device(env.local_rank)
    prefix_output(env.rank)
    return run_in_group(args.backend, args.pg_timeout, lambda: run(args, env.rank, env.world))


if __name__ == "__main__":
    exit_worker(main())
