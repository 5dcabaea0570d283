"""This machine's ranks as the planner needs them, measured the way the layouts' steps run: every rank at once.

Run inside a process group by ``gpulab.distributed.pipelines.worker`` (part ``calibrate``). Every figure is
timed on all ranks at the same moment (a barrier before each call), because that is how a step runs: ranks that
outnumber the cores share them, and two groups of two run their collectives side by side.

- :func:`compute`: one block's forward and backward (``Linear(h, 4h / tp) -> ReLU -> Linear(4h / tp, h)``) at
  every ``(rows, tp)`` shape the layouts use, so the planner reads a measured rate for each shape, not a peak;
- :func:`collectives`: all_reduce, all_gather and reduce_scatter over the whole world and over pairs (both
  pairs at once), the sizes taking turns, as ``collectives.worker.sweep`` does for one group;
- :func:`alone`: the same block on one rank at a time while the others wait, as in a pipeline's bubble;
- :func:`sends`: a pipeline message one way inside each pair, both pairs at once;
- the copy bandwidth of ``gpulab.bench`` (the optimizer step reads and writes its state once).

Each returns this rank's seconds; ``gpulab.planner.calibration.from_measurements`` (through the driver,
``gpulab.distributed.pipelines.plan``) takes a call's slowest rank in every repeat and the median of the repeats,
and for compute, which no rank waits for inside it, the typical rank's median.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
from torch import nn

from gpulab.distributed.collectives.worker import all_gather_single, buffers, reduce_scatter_single
from gpulab.distributed.pipelines.layouts import LAYOUTS
from gpulab.distributed.pipelines.probe import SHAPE
from gpulab.timing import Stopwatch

KINDS = ("all_reduce", "all_gather", "reduce_scatter")
COLLECTIVE_BYTES = (32768, 262144, 2097152, 8388608)  # activations of a micro-batch up to DDP's big bucket
SEND_BYTES = (16384, 65536, 262144)  # one micro-batch's activations, 16 to 256 rows of 256 float32
REPEATS = 5  # of every measurement: the median of 5 calls
ALONE_SHAPE = (64, 1)  # a pipeline stage's micro-batch in the lesson's layouts


def shapes(layouts: dict = LAYOUTS, rows: int = SHAPE["samples"] * SHAPE["sequence"]) -> list[tuple[int, int]]:
    """Every ``(rows of one micro-batch on one rank, tp)`` the layouts compute a block at, sorted."""
    return sorted({(rows // dp // m, tp) for dp, tp, _, _, m, _ in layouts.values()})


def _block(rows: int, tp: int, device) -> tuple[nn.Module, torch.Tensor]:
    """One block's tensor-parallel share (``4h / tp`` columns) and an input of ``rows`` rows that needs a gradient."""
    h = SHAPE["hidden"]
    torch.manual_seed(0)
    block = nn.Sequential(nn.Linear(h, 4 * h // tp), nn.ReLU(), nn.Linear(4 * h // tp, h)).to(device)
    return block, torch.randn(rows, h, device=device, requires_grad=True)


def compute(shape_list, repeats: int, device: torch.device | str = "cpu") -> list[dict]:
    """Seconds of one block's forward and backward at each shape, the shapes taking turns, all ranks at once."""
    cases = [_block(rows, tp, device) for rows, tp in shape_list]

    def once(block, x) -> None:
        block(x).sum().backward()
        block.zero_grad(set_to_none=False)

    for block, x in cases:
        once(block, x)  # warm-up
    seconds: list[list[float]] = [[] for _ in cases]
    for _ in range(repeats):
        for times, (block, x) in zip(seconds, cases):
            dist.barrier()
            with Stopwatch(device) as clock:
                once(block, x)
            times.append(clock.seconds)
    return [{"rows": rows, "tp": tp, "parameters": sum(p.numel() for p in block.parameters()), "seconds": t}
            for (rows, tp), (block, _), t in zip(shape_list, cases, seconds)]


def alone(rank: int, world: int, shape: tuple[int, int], repeats: int, device: torch.device | str = "cpu") -> dict:
    """The same block at ``shape`` on one rank at a time while the others wait, as ranks wait in a pipeline's bubble.

    Returns this rank's seconds computing alone; with the all-busy time of the same shape it says how much faster a
    rank computes when the others leave it their share of the processors.
    """
    block, x = _block(*shape, device)
    block(x).sum().backward()  # warm-up
    times = []
    for turn in range(world):
        dist.barrier()
        if turn == rank:
            for _ in range(repeats):
                with Stopwatch(device) as clock:
                    block(x).sum().backward()
                times.append(clock.seconds)
        dist.barrier()  # the others wait here, blocked like a rank waiting for a message
    return {"rows": shape[0], "tp": shape[1], "seconds": times}


def _call(kind: str, inp: torch.Tensor, out: torch.Tensor, group) -> None:
    if kind == "all_reduce":
        dist.all_reduce(inp, group=group)
    elif kind == "all_gather":
        all_gather_single(out, inp, group=group)
    else:
        reduce_scatter_single(out, inp, group=group)


def collectives(groups: dict[int, object], repeats: int, device: torch.device | str = "cpu",
                kinds=KINDS, sizes=COLLECTIVE_BYTES) -> list[dict]:
    """Seconds of each kind, group size and byte count; ``groups``: size -> this rank's group of that size."""
    rows = []
    for kind in kinds:
        for size, group in groups.items():
            cases = [buffers(kind, nbytes, size, torch.device(device)) for nbytes in sizes]
            for inp, out in cases:
                _call(kind, inp, out, group)  # warm-up: connections, allocations
            seconds: list[list[float]] = [[] for _ in sizes]
            for _ in range(repeats):
                for times, (inp, out) in zip(seconds, cases):
                    dist.barrier()
                    with Stopwatch(device) as clock:
                        _call(kind, inp, out, group)
                    times.append(clock.seconds)
            rows += [{"collective": kind, "ranks": size, "bytes": n, "seconds": t} for n, t in zip(sizes, seconds)]
    return rows


def sends(rank: int, repeats: int, device: torch.device | str = "cpu", sizes=SEND_BYTES) -> list[dict]:
    """Seconds of one message from the even rank of each pair to the odd one, every pair at once."""
    peer = rank + 1 if rank % 2 == 0 else rank - 1
    cases = [torch.ones(n // 4, device=device) for n in sizes]

    def once(t: torch.Tensor) -> None:
        op = dist.P2POp(dist.isend if rank % 2 == 0 else dist.irecv, t, peer)
        for work in dist.batch_isend_irecv([op]):
            work.wait()

    for t in cases:
        once(t)  # warm-up: the pair's connection
    seconds: list[list[float]] = [[] for _ in sizes]
    for _ in range(repeats):
        for times, t in zip(seconds, cases):
            dist.barrier()
            with Stopwatch(device) as clock:
                once(t)
            times.append(clock.seconds)
    return [{"collective": "send", "ranks": 2, "bytes": n, "seconds": t} for n, t in zip(sizes, seconds)]


def calibrate(rank: int, world: int, pairs, repeats: int = REPEATS, device: torch.device | str = "cpu") -> dict:
    """This rank's measurements (see the module docstring); ``pairs``: this rank's group of two."""
    from gpulab import bench

    copy = bench.copy_probe(str(device), 16, "device", threads=1, min_run_time=0.05)
    return {"cores": os.cpu_count(),
            "compute": compute(shapes(), repeats, device),
            "alone": alone(rank, world, ALONE_SHAPE, repeats, device),
            "collectives": collectives({world: dist.group.WORLD, 2: pairs}, repeats, device) + sends(rank, repeats, device),
            "copy_gbs": copy.rate}
