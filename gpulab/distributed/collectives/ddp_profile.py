"""DDP's all-reduces seen by ``torch.profiler`` on one rank: per step, per bucket size, with accumulation.

Run inside a process group (``gpulab.distributed.collectives.worker --parts ddp``). ``ddp_report``
returns, as JSON-ready dicts:

- ``predict``: Net1 and a larger MLP under DDP's default buckets: gradient bytes, bucket sizes, the
  all-reduce calls of the first step and, after DDP rebuilt its buckets, the calls and seconds per step
  from the profiler: calls are its ``c10d::allreduce_`` events, recorded where DDP starts each all-reduce;
  seconds come from the ``gloo:all_reduce`` (``nccl:all_reduce``) events of the thread doing the work,
  which torch 2.11's profiler sometimes loses (a mean over those it kept, times the calls; each call's start
  and end, ``calls_us``, only when none was lost, else None); and the
  seconds to all-reduce the same buckets alone, after a barrier, outside any training step;
- ``buckets``: a deep MLP with several ``bucket_cap_mb`` values: all-reduce calls per step;
- ``accumulate``: ``ACCUMULATE`` micro-batches per optimizer step, with ``no_sync()`` on all but the
  last, without it, and one big batch instead: calls per step and the largest weight difference to
  one process training on every rank's rows at once (rank 0 computes it).
"""

from __future__ import annotations

import re
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from gpulab.atomic import torch_save
from gpulab.comm_cost import ddp_buckets, gradient_bytes
from gpulab.models import Net1, mlp
from gpulab.step import train_step
from gpulab.timing import Stopwatch
from gpulab.torch_private import ddp_rebuilt_bucket_sizes, trace_start_us

MODELS = {"net1": (13, 16, 32, 1), "mlp": (512, 2048, 2048, 1), "deep": (512,) * 9 + (1,)}
ROWS = {"net1": 64, "mlp": 32, "deep": 32}  # rows per rank per step
BUCKET_CAPS = (None, 1, 2, 25)  # MiB; None: DDP's default (25 MiB, first bucket 1 MiB)
ACCUMULATE = 4
LR = 0.01
ALL_REDUCE = re.compile(r"^(gloo|nccl):all_reduce$")  # the work itself, on the backend's own thread
STARTED = "c10d::allreduce_"  # the op that starts one all-reduce, on the thread that asks for it
STEP_MARK = "gpulab_train_step"
FIRST_MARK = "gpulab_first_step"
DIVIDE = "torch::distributed::reducer::mul_out"  # the reducer's gradient x (1 / world size) into its bucket


def build(name: str, seed: int = 0) -> nn.Module:
    """``net1``: the article's ``Net1(13, 16, 32, 1)``; ``mlp``/``deep``: ReLU MLPs of ``MODELS[name]`` widths."""
    if name not in MODELS:
        raise ValueError(f"model {name!r} is not one of {', '.join(MODELS)}")
    torch.manual_seed(seed)
    return Net1(*MODELS[name]) if name == "net1" else mlp(MODELS[name])


def rows(name: str, rank: int, n: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank ``rank``'s fixed training rows for model ``name`` (inputs, targets)."""
    g = torch.Generator().manual_seed(1000 + rank)
    n = ROWS[name] if n is None else n
    return torch.randn(n, MODELS[name][0], generator=g), torch.randn(n, 1, generator=g)


def profile_ddp_steps(model: nn.Module, opt, X, y, steps: int, warmup: int = 1, **step_args) -> dict:
    """Profile ``warmup`` steps, then ``steps`` more: all-reduce calls of the first step, calls and seconds per
    later step, and how many times per later step DDP's reducer scaled a gradient (``DIVIDE``)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(warmup):  # DDP rebuilds its buckets after its first step: time the steps after it
            with record_function(FIRST_MARK):
                train_step(model, opt, X, y, **step_args)
        with Stopwatch() as clock:
            for _ in range(steps):
                with record_function(STEP_MARK):
                    train_step(model, opt, X, y, **step_args)
        wall = clock.seconds
    events = list(prof.events())
    first_end = max((e.time_range.end for e in events if e.name == FIRST_MARK), default=float("-inf"))
    started = [e for e in events if e.name == STARTED]
    later = sum(e.time_range.start > first_end for e in started)
    every = sorted((e for e in events if ALL_REDUCE.match(e.name)), key=lambda e: e.time_range.start)
    calls = [e for e in every if e.time_range.start > first_end]
    divides = sum(e.name == DIVIDE and e.time_range.start > first_end for e in events)
    origin = trace_start_us(prof)
    per_call_s = sum(e.cpu_time_total for e in calls) / 1e6 / len(calls) if calls else 0.0
    return {"first_step_calls": (len(started) - later) / warmup if warmup else None,
            "calls_per_step": later / steps, "divides_per_step": divides / steps,
            "allreduce_s_per_step": per_call_s * later / steps, "work_events_kept": f"{len(calls)} of {later}",
            "step_s": wall / steps, "calls_us": None if origin is None or len(calls) != later else
            [[origin + e.time_range.start, origin + e.time_range.end] for e in calls],
            "timeline": first_step_timeline(events, calls)}


def first_step_timeline(events: list, calls: list) -> dict | None:
    """The first profiled step, in ms from its start: its length, its backward pass, its all-reduces."""
    marks = sorted((e.time_range.start, e.time_range.end) for e in events if e.name == STEP_MARK)
    if not marks:
        return None
    start, end = marks[0]
    inside = lambda e: start <= e.time_range.start <= end  # noqa: E731
    backward = [e for e in events if e.name.startswith("autograd::engine") and inside(e)]
    ms = lambda t: (t - start) / 1e3  # noqa: E731
    return {"step_ms": ms(end), "backward_ms": [ms(min(e.time_range.start for e in backward)),
                                                 ms(max(e.time_range.end for e in backward))] if backward else None,
            "all_reduce_ms": [[ms(e.time_range.start), ms(e.time_range.end)] for e in calls if inside(e)]}


def _ddp(model: nn.Module, cap: float | None) -> nn.parallel.DistributedDataParallel:
    return nn.parallel.DistributedDataParallel(model, **({} if cap is None else {"bucket_cap_mb": cap}))


def alone_seconds(bucket_bytes: list[int], repeats: int) -> list[float]:
    """Seconds to all-reduce tensors of ``bucket_bytes`` one after another with nothing else to do, per repeat."""
    tensors = [torch.ones(b // 4) for b in bucket_bytes]
    for t in tensors:  # warm-up
        dist.all_reduce(t)
    seconds = []
    for _ in range(repeats):
        dist.barrier()  # start together, as in the sweep
        with Stopwatch() as clock:
            for t in tensors:
                dist.all_reduce(t)
        seconds.append(clock.seconds)
    return seconds


def predict_part(rank: int, steps: int) -> list[dict]:
    """Net1 and the larger MLP under DDP's default buckets; their buckets all-reduced alone too."""
    out = []
    for name, n_steps in (("net1", 5 * steps), ("mlp", steps)):
        model = build(name)
        ddp = _ddp(model, None)
        X, y = rows(name, rank)
        report = profile_ddp_steps(ddp, torch.optim.SGD(ddp.parameters(), lr=LR), X, y, n_steps)
        sizes = ddp_rebuilt_bucket_sizes(ddp)
        out.append({"model": name, "widths": list(MODELS[name]), "rows_per_rank": len(X),
                    "parameters": sum(p.numel() for p in model.parameters()),
                    "gradient_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
                    "bucket_sizes": sizes, **report, "alone_s": alone_seconds(sizes or ddp_buckets(gradient_bytes(model)[::-1]), 5)})
    return out


def buckets_part(rank: int, steps: int) -> list[dict]:
    """The deep MLP with each of ``BUCKET_CAPS``."""
    out = []
    X, y = rows("deep", rank)
    for cap in BUCKET_CAPS:
        ddp = _ddp(build("deep"), cap)
        report = profile_ddp_steps(ddp, torch.optim.SGD(ddp.parameters(), lr=LR), X, y, steps)
        out.append({"bucket_cap_mb": cap, "bucket_sizes": ddp_rebuilt_bucket_sizes(ddp), **report})
    return out


def accumulate_part(rank: int, world: int, steps: int, out: Path | None) -> list[dict]:
    """Gradient accumulation three ways on the deep MLP, compared with one process on all rows."""
    X, y = rows("deep", rank)
    variants = (("one batch", 1, True), ("no_sync", ACCUMULATE, True), ("all-reduce every micro-batch", ACCUMULATE, False))
    reference = None
    if rank == 0:  # one process, every rank's rows in one batch, the same number of steps
        plain = build("deep")
        opt = torch.optim.SGD(plain.parameters(), lr=LR)
        parts = [rows("deep", r) for r in range(world)]
        Xa, ya = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
        for _ in range(1 + steps):  # the warm-up step and the profiled ones
            train_step(plain, opt, Xa, ya)
        reference = plain.state_dict()
    results = []
    for label, micro, no_sync in variants:
        model = build("deep")
        ddp = _ddp(model, None)
        report = profile_ddp_steps(ddp, torch.optim.SGD(ddp.parameters(), lr=LR), X, y, steps, accumulate=micro, no_sync=no_sync)
        row = {"variant": label, "micro_batches": micro, "no_sync": no_sync and micro > 1, **report}
        if reference is not None:
            state = model.state_dict()
            row["max_weight_difference"] = max((state[k] - v).abs().max().item() for k, v in reference.items())
            row["changed_from_start"] = max((state[k] - v).abs().max().item() for k, v in build("deep").state_dict().items())
            if out is not None and label == "no_sync":
                torch_save(out / "accumulate_no_sync.pt", {k: v.detach().clone() for k, v in state.items()})
        results.append(row)
    return results


DDP_PARTS = ("predict", "buckets", "accumulate")


def ddp_report(rank: int, world: int, steps: int = 3, out: Path | None = None,
               parts: tuple[str, ...] = DDP_PARTS) -> dict:
    """The ``parts`` asked for, on this rank (the process group must be up, gloo)."""
    if not dist.is_initialized():
        raise RuntimeError("ddp_report needs a process group: run it under torchrun")
    run = {"predict": lambda: predict_part(rank, steps), "buckets": lambda: buckets_part(rank, steps),
           "accumulate": lambda: accumulate_part(rank, world, steps, out)}
    return {part: run[part]() for part in parts}
