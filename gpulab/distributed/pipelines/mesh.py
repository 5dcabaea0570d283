"""A 2-D mesh on four CPU ranks: FSDP2 over ``dp``, tensor parallelism over ``tp``, checked against one process.

Run inside a process group by ``gpulab.distributed.pipelines.worker`` (part ``mesh``); its helpers
(:func:`tensor_parallel`, :func:`shard`, :func:`my_rows`) also build the layouts of ``pipelines.layouts``.

- :func:`two_d`: on ``init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))``, each block's first Linear
  split by columns and its second by rows over ``tp`` (``parallelize_module``), then each block and the root
  sharded over ``dp`` (``fully_shard``). One profiled forward and backward: the gradients against one process
  (and a control on half the batch, which must differ), the collectives the profiler saw with their input
  shapes, and the ranks of each mesh dimension's group.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from torch.profiler import ProfilerActivity, profile

from gpulab.distributed.pipelines.probe import batch, blocks, mse

#: The collectives' names in the profiler: FSDP2's (c10d ops) and DTensor's (functional collectives).
COLLECTIVES = ("c10d::_allgather_base_", "c10d::_reduce_scatter_base_", "_c10d_functional::all_reduce",
               "c10d::allreduce_", "c10d::broadcast_")


def tensor_parallel(model: torch.nn.Module, mesh: DeviceMesh) -> torch.nn.Module:
    """Each block's first Linear split by columns and its second by rows over ``mesh`` (Megatron's MLP split)."""
    for block in model:
        parallelize_module(block, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    return model


def shard(model: torch.nn.Module, mesh: DeviceMesh, reshard_after_forward: bool = True) -> torch.nn.Module:
    """FSDP2 over ``mesh``: each block its own unit, then the root (in a pipeline, keep blocks gathered)."""
    for block in model:
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard_after_forward)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward)
    return model


def my_rows(t: torch.Tensor, part: int, parts: int) -> torch.Tensor:
    """This data-parallel rank's slice of the batch (``tensor_split`` along samples)."""
    return t.tensor_split(parts)[part]


def two_d(rank: int, world: int, mesh: DeviceMesh) -> dict:
    """One step of FSDP over ``dp`` and TP over ``tp`` against one process (see the module docstring).

    ``mesh``: ``(2, 2)`` with dimensions ``("dp", "tp")`` whose groups time out like the launch's default group
    (``pipelines.layouts.Meshes`` makes it).
    """
    if world != 4 or tuple(mesh.mesh_dim_names or ()) != ("dp", "tp"):
        raise ValueError(f"the 2-D mesh needs 4 ranks on dimensions ('dp', 'tp'), this launch has {world} ranks "
                         f"and dimensions {mesh.mesh_dim_names}")
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
    return report
