"""Notebook 13's layouts on four CPU ranks: each built on a mesh of its own shape, then all stepped in turns.

Run inside a process group by ``gpulab.distributed.pipelines.worker`` (part ``layouts``).

- :data:`LAYOUTS`: every layout timed, named as ``gpulab.planner.layouts.Layout.name`` names it. The
  :data:`CALIBRATION` layouts measure what the planner cannot know from sizes: in their order, each brings one
  kind of traffic (DDP, FSDP, TP, the pipeline's) over one group size not seen before, whose exposed share in a
  real step it sets (``gpulab.planner.validation.fit_exposed``). The others (:data:`VALIDATION`: a mixture, gradient
  accumulation, other micro-batch counts) never touch the calibration: they test the planner's ranking.
- :class:`Meshes`: one ``DeviceMesh`` per shape, ranks placed with tensor parallelism innermost and data
  parallelism outermost (``(dp, pp, tp)``, row-major), every group with the launch's time limit.
- :func:`build`: a layout's module, optimizer and one-step function.
- :func:`time_layouts`: a warm-up step of each layout (its live activations counted), then ``steps`` rounds in
  which every layout runs one step in turn, so a moment of load from elsewhere slows them all alike.
- :func:`profile_calls`: the collectives and sends of one step of each calibration layout, counted by the
  profiler.
"""

from __future__ import annotations

import contextlib
import datetime
from dataclasses import dataclass
from typing import Callable

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.profiler import ProfilerActivity, profile, record_function

from gpulab.distributed.fsdp.worker import shard_report
from gpulab.distributed.pipelines.mesh import my_rows, shard, tensor_parallel
from gpulab.distributed.pipelines.probe import LabelledStage, SavedBytes, batch, blocks, mse
from gpulab.distributed.pipelines.schedules import SCHEDULES, run_step
from gpulab.timing import Stopwatch

#: name -> (data-parallel degree, tensor-parallel degree, pipeline stages, FSDP?, micro-batches, schedule)
LAYOUTS = {
    "DDP 4": (4, 1, 1, False, 1, "-"),
    "FSDP 4": (4, 1, 1, True, 1, "-"),
    "TP 4": (1, 4, 1, False, 1, "-"),
    "PP 4 (1F1B, 4 micro-batches)": (1, 1, 4, False, 4, "1F1B"),
    "FSDP 2 x TP 2": (2, 2, 1, True, 1, "-"),
    "DDP 2 x PP 2 (1F1B, 4 micro-batches)": (2, 1, 2, False, 4, "1F1B"),
    "FSDP 2 x PP 2 (1F1B, 4 micro-batches)": (2, 1, 2, True, 4, "1F1B"),
    "TP 2 x PP 2 (1F1B, 4 micro-batches)": (1, 2, 2, False, 4, "1F1B"),
    "DDP 4 (4 micro-batches accumulated)": (4, 1, 1, False, 4, "-"),
    "FSDP 4 (2 micro-batches accumulated)": (4, 1, 1, True, 2, "-"),
    "TP 4 (2 micro-batches accumulated)": (1, 4, 1, False, 2, "-"),
    "PP 4 (1F1B, 8 micro-batches)": (1, 1, 4, False, 8, "1F1B"),
    "PP 4 (GPipe, 1 micro-batches)": (1, 1, 4, False, 1, "GPipe"),
}
#: In this order each brings one traffic class and group size not measured before (``planner.validation.fit_exposed``).
CALIBRATION = ("DDP 4", "FSDP 4", "TP 4", "PP 4 (1F1B, 4 micro-batches)", "TP 2 x PP 2 (1F1B, 4 micro-batches)",
               "DDP 2 x PP 2 (1F1B, 4 micro-batches)", "FSDP 2 x PP 2 (1F1B, 4 micro-batches)")
VALIDATION = tuple(name for name in LAYOUTS if name not in CALIBRATION)
#: The profiler's names of the process group's calls (DDP's, FSDP's, DTensor's and the pipeline's all reach
#: these) -> the planner's name of the call.
CALLS = {"c10d::allreduce_": "all_reduce", "c10d::_allgather_base_": "all_gather",
         "c10d::_reduce_scatter_base_": "reduce_scatter", "c10d::send": "send", "c10d::recv_": "recv"}
LR = 1e-3


class Meshes:
    """One ``DeviceMesh`` per shape ``(dp, pp, tp)``; dimensions of size 1 are left out; groups time out."""

    def __init__(self, timeout_s: float, device: str = "cpu") -> None:
        self.timeout_s, self.device, self.made = timeout_s, device, {}

    def get(self, dp: int, pp: int, tp: int) -> DeviceMesh:
        """The mesh whose named dimensions are the degrees above 1, data parallelism outermost."""
        dims = tuple((name, size) for name, size in (("dp", dp), ("pp", pp), ("tp", tp)) if size > 1)
        if dims not in self.made:
            names, shape = zip(*dims)
            backend = "gloo" if self.device == "cpu" else "nccl"
            options = (dist.ProcessGroupGloo.Options("gloo", datetime.timedelta(seconds=self.timeout_s))
                       if backend == "gloo" else None)
            override = {name: (backend, options) for name in names} if options is not None else None
            self.made[dims] = init_device_mesh(self.device, shape, mesh_dim_names=names, backend_override=override)
        return self.made[dims]


@dataclass
class Built:
    """A layout ready to step: the module whose state this rank holds, its optimizer, one forward and backward."""

    module: torch.nn.Module
    optimizer: torch.optim.Optimizer
    forward_backward: Callable[[], None]

    def step(self) -> None:
        """One training step; the gradients stay allocated, as between real steps."""
        self.forward_backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=False)


def _local_rank(mesh: DeviceMesh, name: str) -> int:
    return mesh[name].get_local_rank() if name in (mesh.mesh_dim_names or ()) else 0


def build(name: str, meshes: Meshes, device: torch.device | str = "cpu") -> Built:
    """The module, optimizer and one-step function of layout ``name`` of :data:`LAYOUTS`."""
    dp, tp, pp, fsdp, micro, schedule = LAYOUTS[name]
    mesh = meshes.get(dp, pp, tp)
    x, y = (t.to(device) for t in batch())
    part = _local_rank(mesh, "dp")
    xs, ys = my_rows(x, part, dp), my_rows(y, part, dp)
    model = blocks().to(device)
    if pp > 1:
        stage_index = _local_rank(mesh, "pp")
        per = len(model) // pp
        model = model[stage_index * per:(stage_index + 1) * per]
    if tp > 1:
        model = tensor_parallel(model, mesh["tp"])
    ddp = dp > 1 and not fsdp
    if dp > 1:
        model = (shard(model, mesh["dp"], reshard_after_forward=pp == 1) if fsdp else
                 torch.nn.parallel.DistributedDataParallel(model, process_group=mesh["dp"].get_group()))
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    if pp > 1:
        stage = LabelledStage(model, stage_index, pp, torch.device(device), group=mesh["pp"].get_group())
        runner = SCHEDULES[schedule](stage, micro, loss_fn=mse)
        return Built(model, optimizer, lambda: run_step(runner, [stage_index], pp, xs, ys))

    def accumulate() -> None:
        pieces = list(zip(xs.tensor_split(micro), ys.tensor_split(micro)))
        for i, (a, b) in enumerate(pieces):
            quiet = model.no_sync() if ddp and i < micro - 1 else contextlib.nullcontext()
            with quiet:
                (mse(model(a), b) / micro).backward()

    return Built(model, optimizer, accumulate)


def time_layouts(rank: int, world: int, meshes: Meshes, names=tuple(LAYOUTS), steps: int = 5,
                 device: torch.device | str = "cpu") -> dict:
    """Per layout: every round's step seconds (the slowest rank's), state bytes, live activations, calls.

    Every layout is built and stepped once, its live activations counted in that first step (the warm-up); then
    ``steps`` rounds each step every layout once, after a barrier; then one profiled step of each calibration
    layout counts its calls. Bytes and calls are the largest rank's.
    """
    built, saved = {}, {}
    for name in names:
        built[name] = build(name, meshes, device)
        tracker = SavedBytes()
        with tracker.watch(built[name].module):
            built[name].step()
        saved[name] = tracker.peak
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(steps):
        for name in names:
            dist.barrier()
            with Stopwatch(device) as clock:
                built[name].step()
            seconds[name].append(clock.seconds)
    calls = profile_calls({name: built[name] for name in names if name in CALIBRATION})
    mine = {name: {"seconds": seconds[name], "saved": saved[name], "calls": calls.get(name, {}),
                   "state": sum(shard_report(built[name].module, built[name].optimizer)["bytes"].values())}
            for name in names}
    everyone: list = [None] * world
    dist.all_gather_object(everyone, mine)
    return {name: {"layout": list(LAYOUTS[name]),
                   "seconds": [max(r[name]["seconds"][i] for r in everyone) for i in range(steps)],
                   "state_bytes": max(r[name]["state"] for r in everyone),
                   "saved_bytes": max(r[name]["saved"] for r in everyone),
                   "calls": ({kind: max(r[name]["calls"].get(kind, 0) for r in everyone)
                              for kind in sorted({k for r in everyone for k in r[name]["calls"]})}
                             if name in CALIBRATION else None)} for name in names}


def profile_calls(layouts: dict[str, Built]) -> dict[str, dict[str, int]]:
    """This rank's calls in one step of each layout, per kind of :data:`CALLS`: one profile, each step labelled."""
    spans = {}
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for name, one in layouts.items():
            dist.barrier()
            with record_function(f"layout {name}"):
                one.step()
    events = list(prof.events())
    for e in events:
        if e.name.startswith("layout "):
            spans[e.name[len("layout "):]] = (e.time_range.start, e.time_range.end)
    calls = [e for e in events if e.name in CALLS]
    # a tensor subclass (DTensor's AsyncCollectiveTensor) runs the same op again inside it: count the outer one
    outer = [e for e in calls if not any(o is not e and o.name == e.name and o.thread == e.thread
                                          and o.time_range.start <= e.time_range.start
                                          and e.time_range.end <= o.time_range.end for o in calls)]
    found: dict[str, dict[str, int]] = {name: {} for name in layouts}
    for e in outer:
        for name, (start, end) in spans.items():
            if start <= e.time_range.start <= end:
                found[name][CALLS[e.name]] = found[name].get(CALLS[e.name], 0) + 1
    return found
