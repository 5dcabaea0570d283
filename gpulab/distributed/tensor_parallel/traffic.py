"""What a tensor-parallel training step sends, seen by ``torch.profiler`` on one rank (inside a gloo group).

``traffic_part(rank, world, steps, sizes, repeats)`` returns, JSON-ready:

- ``sweep``: ``all_reduce`` timed alone at ``sizes`` bytes (``collectives.worker.sweep``), for the alpha + beta fit;
- ``plans``: for the ``tp`` and ``sp`` plans of a larger :class:`gpulab.tp_model.TinyBlock`, each collective
  of a step with its size as nccl-tests counts it (``calls``), gloo's calls with their start and end on a
  clock every rank shares (``calls_us``), and the time of a step.
"""

from __future__ import annotations

import math

import torch

from gpulab.distributed.collectives.worker import sweep
from gpulab.distributed.tensor_parallel.parts import shard
from gpulab.step import train_step
from gpulab.timing import Stopwatch
from gpulab.torch_private import trace_start_us
from gpulab.tp_model import TinyBlock, tp_plan

BLOCK = {"hidden": 128, "heads": 8, "ffn": 512}
BATCH, SEQ = 4, 64
LR = 0.01
#: The profiler's name of each functional collective DTensor runs -> (collective, which dimension counts x world)
FUNCTIONAL = {"_c10d_functional::all_reduce": "all_reduce",
              "_c10d_functional::all_gather_into_tensor": "all_gather",
              "_c10d_functional::reduce_scatter_tensor": "reduce_scatter"}
STEP_MARK = "gpulab_tp_step"


def activation_bytes(element_size: int = 4) -> int:
    """Bytes of the block's activations for the whole batch: batch x sequence x hidden x ``element_size``."""
    return BATCH * SEQ * BLOCK["hidden"] * element_size


def collective_bytes(collective: str, input_numel: int, element_size: int, world: int) -> int:
    """A call's size as nccl-tests counts it: an all-gather's output (its input x world), else its input."""
    return input_numel * element_size * (world if collective == "all_gather" else 1)


def profile_plan(plan: str, rank: int, world: int, steps: int) -> dict:
    """``steps`` profiled SGD steps of the larger block under ``plan`` (after one warm-up step)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module
    from torch.profiler import ProfilerActivity, profile, record_function

    model = TinyBlock(**BLOCK)
    parallelize_module(model, init_device_mesh("cpu", (world,)), tp_plan(plan))
    g = torch.Generator().manual_seed(4)
    x, y = (torch.randn(BATCH, SEQ, BLOCK["hidden"], generator=g) for _ in range(2))
    share = 1.0
    if plan == "sp":
        x, y = shard(x, 1, rank, world), shard(y, 1, rank, world)
        share = x.shape[1] / SEQ
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    train_step(model, opt, x, y, weight=share)  # warm-up: first calls, allocations
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        with Stopwatch() as clock:
            for _ in range(steps):
                with record_function(STEP_MARK):
                    train_step(model, opt, x, y, weight=share)
    events = sorted(prof.events(), key=lambda e: e.time_range.start)
    calls = [[FUNCTIONAL[e.name], collective_bytes(FUNCTIONAL[e.name], math.prod(e.input_shapes[0]), 4, world)]
             for e in events if e.name in FUNCTIONAL]
    origin = trace_start_us(prof)
    gloo = [e for e in events if e.name.startswith("gloo:")]
    return {"plan": plan, "steps": steps, "calls": calls, "step_s": clock.seconds / steps,
            "rank_sees_s_per_step": sum(e.cpu_time_total for e in gloo) / 1e6 / steps,
            "calls_us": None if origin is None else
            [[origin + e.time_range.start, origin + e.time_range.end] for e in gloo]}


def traffic_part(rank: int, world: int, steps: int, sizes: list[int], repeats: int) -> dict:
    """The all-reduce sweep, then the ``tp`` and ``sp`` plans profiled."""
    return {"sweep": sweep(("all_reduce",), sizes, repeats, world, torch.device("cpu")),
            "activation_bytes": activation_bytes(), "block": dict(BLOCK), "batch": BATCH, "sequence": SEQ,
            "plans": [profile_plan(plan, rank, world, steps) for plan in ("tp", "sp")]}
