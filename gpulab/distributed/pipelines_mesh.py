"""A 2-D mesh (FSDP2 over ``dp``, tensor parallelism over ``tp``) and five layouts timed, on four CPU ranks.

Run inside a process group by ``gpulab.distributed.pipelines_worker`` (parts ``mesh`` and ``layouts``).

- :func:`two_d`: ``init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))``; each block's first Linear
  split by columns and its second by rows over ``tp`` (``parallelize_module``), then each block and the root
  sharded over ``dp`` (``fully_shard``). One profiled forward and backward: the gradients against one process
  (and a control on half the batch, which must differ), the collectives the profiler saw with their input
  shapes, and the ranks of each mesh dimension's group.
- :func:`layouts`: DDP, FSDP, TP, a 1F1B pipeline and FSDP x TP over all ranks, each with Adam: the seconds of
  a few steps, the bytes of parameters, gradients and optimizer state a rank holds, and its peak of live
  activations. ``gpulab.plan`` predicts the same figures.
"""

from __future__ import annotations

import datetime
import statistics

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from torch.profiler import ProfilerActivity, profile

from gpulab.distributed.fsdp_worker import shard_report
from gpulab.distributed.pipelines_probe import SavedBytes, batch, blocks, mse
from gpulab.distributed.pipelines_schedules import build, run_step
from gpulab.timing import Stopwatch

#: The collectives' names in the profiler: FSDP2's (c10d ops) and DTensor's (functional collectives).
COLLECTIVES = ("c10d::_allgather_base_", "c10d::_reduce_scatter_base_", "_c10d_functional::all_reduce",
               "c10d::allreduce_", "c10d::broadcast_")
#: name -> (data parallel degree, tensor parallel degree, pipeline stages, FSDP?, micro-batches, schedule)
LAYOUTS = {"DDP 4": (4, 1, 1, False, 1, "-"), "FSDP 4": (4, 1, 1, True, 1, "-"), "TP 4": (1, 4, 1, False, 1, "-"),
           "PP 4, 1F1B": (1, 1, 4, False, 4, "1F1B"), "FSDP 2 x TP 2": (2, 2, 1, True, 1, "-")}
LR = 1e-3


def tensor_parallel(model: torch.nn.Module, mesh: DeviceMesh) -> torch.nn.Module:
    """Each block's first Linear split by columns and its second by rows over ``mesh`` (Megatron's MLP split)."""
    for block in model:
        parallelize_module(block, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    return model


def shard(model: torch.nn.Module, mesh: DeviceMesh) -> torch.nn.Module:
    """FSDP2 over ``mesh``: each block its own unit, then the root."""
    for block in model:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def my_rows(t: torch.Tensor, part: int, parts: int) -> torch.Tensor:
    """This data-parallel rank's slice of the batch (``tensor_split`` along samples)."""
    return t.tensor_split(parts)[part]


def two_d(rank: int, world: int, timeout_s: float) -> tuple[dict, DeviceMesh]:
    """One step of FSDP over ``dp`` and TP over ``tp`` against one process (see the module docstring).

    The mesh's groups give up after ``timeout_s`` seconds, like the launch's default group.
    """
    if world != 4:
        raise ValueError(f"the 2-D mesh needs 4 ranks, this launch has {world}")
    limit = ("gloo", dist.ProcessGroupGloo.Options("gloo", datetime.timedelta(seconds=timeout_s)))
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"), backend_override={"dp": limit, "tp": limit})
    model = shard(tensor_parallel(blocks(), mesh["tp"]), mesh["dp"])
    x, y = batch()
    dp_rank = mesh["dp"].get_local_rank()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        mse(model(my_rows(x, dp_rank, 2)), my_rows(y, dp_rank, 2)).backward()
    calls = [[e.name, [s for s in (e.input_shapes or []) if s]]  # the shapes of its tensor arguments
             for e in sorted(prof.events(), key=lambda e: e.time_range.start) if e.name in COLLECTIVES]
    grads = {n: p.grad.full_tensor() for n, p in model.named_parameters()}  # collectives: every rank takes part
    groups = {dim: dist.get_process_group_ranks(mesh[dim].get_group()) for dim in ("dp", "tp")}
    everyone: list = [None] * world
    dist.all_gather_object(everyone, {"groups": groups, "calls": calls})
    report = {"per_rank": everyone, "mesh": mesh.mesh.tolist(), "dims": list(mesh.mesh_dim_names)}
    if rank == 0:
        def error(rows: slice | None) -> float:
            ref = blocks()
            xs, ys = (x, y) if rows is None else (x[rows], y[rows])
            mse(ref(xs), ys).backward()
            return max((grads[n] - p.grad).abs().max().item() for n, p in ref.named_parameters())

        report["grad_error"] = error(None)
        report["control"] = {"what": "one process on data-parallel rank 0's half of the batch only",
                             "grad_error": error(slice(0, len(x) // 2))}
    return report, mesh


def _layout_model(name: str, rank: int, world: int, mesh2d: DeviceMesh):
    """(module whose state this rank holds, one-step callable) for one layout of :data:`LAYOUTS`."""
    dp, tp, pp, fsdp, micro, schedule = LAYOUTS[name]
    x, y = batch()
    if pp > 1:
        model, runner, mine, _ = build(schedule, micro, rank, world, None)
        stage = torch.nn.ModuleList(model[s] for s in mine)
        opt = torch.optim.Adam(stage.parameters(), lr=LR)
        return stage, opt, lambda: run_step(runner, mine, world, x, y)
    flat = DeviceMesh.from_group(dist.group.WORLD, "cpu")
    model = blocks()
    if dp > 1 and tp > 1:
        model = shard(tensor_parallel(model, mesh2d["tp"]), mesh2d["dp"])
        part = mesh2d["dp"].get_local_rank()
    elif tp > 1:
        model, part = tensor_parallel(model, flat), 0
    elif fsdp:
        model, part = shard(model, flat), rank
    else:
        model, part = torch.nn.parallel.DistributedDataParallel(model), rank
    xs, ys = my_rows(x, part, dp), my_rows(y, part, dp)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    return model, opt, lambda: mse(model(xs), ys).backward()


def layouts(rank: int, world: int, mesh2d: DeviceMesh, steps: int = 3) -> dict:
    """Median step seconds (slowest rank), state bytes and peak live activations (largest rank) of each layout."""
    rows = {}
    for name in LAYOUTS:
        module, opt, forward_backward = _layout_model(name, rank, world, mesh2d)

        def step() -> None:
            forward_backward()
            opt.step()
            opt.zero_grad(set_to_none=False)  # gradients stay allocated: a rank holds them between steps

        step()  # warm-up: buffers, buckets, optimizer state
        tracker, seconds = SavedBytes(), []
        for _ in range(steps):
            dist.barrier()
            with Stopwatch() as clock, tracker.watch(module):
                step()
            seconds.append(clock.seconds)
        state = sum(shard_report(module, opt)["bytes"].values())
        everyone: list = [None] * world
        dist.all_gather_object(everyone, {"seconds": seconds, "state": state, "saved": tracker.peak})
        rows[name] = {"layout": list(LAYOUTS[name]),
                      "seconds": statistics.median(max(r["seconds"][i] for r in everyone) for i in range(steps)),
                      "state_bytes": max(r["state"] for r in everyone),
                      "saved_bytes": max(r["saved"] for r in everyone)}
    return rows
