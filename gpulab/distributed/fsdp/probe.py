"""What FSDP2 holds on this rank during one step, measured: padded shards, the step's peak, its all-gathers.

Runs inside the FSDP worker (``--probe``) after training, on a model of its own (:func:`probe_model`:
``PROBE_LAYERS`` Linear layers of width ``PROBE_WIDTH``, each its own unit), so the trained weights stay
untouched. For each of :data:`PROBE_SETTINGS` it shards a fresh probe, takes one warm-up step and one step
under ``torch.profiler.profile(profile_memory=True, record_shapes=True)`` (twice), and reports:

- ``storage``: bytes of the parameter shards as stored (``p.to_local().untyped_storage().nbytes()``: padded
  to the first chunk's size), of the gradient shards (distinct storages) and of the optimizer state;
  ``views``: the unpadded shard bytes (``p.to_local().nbytes``);
- ``activations``: bytes saved for backward (``saved_tensors_hooks``) that are not parameters;
- ``peak``: what was alive before the step (parameter storages, optimizer state, the batch) plus the largest
  sum of the step's own allocations, replayed in time order from the profiler's allocation events. The
  profiler sees only frees made on the profiled thread; a buffer that gloo's thread frees is counted until
  the end of the outermost ``FSDP::`` event that allocated it (the collective has finished by then), or
  until its address is handed out again if that comes first. Of two
  steps the smaller peak is kept: when gloo's threads free a buffer varies a little from step to step;
- ``all-gathers``, ``reduce-scatters`` and ``all-gather bytes`` (output sizes) of one step.
"""

from __future__ import annotations

import math
from contextlib import nullcontext

import torch
from torch import nn

from gpulab.memory import storage_bytes
from gpulab.step import train_step
from gpulab.torch_private import allocation_tag, event_tree

PROBE_WIDTH, PROBE_LAYERS, PROBE_ROWS = 257, 4, 8  # 257 rows split unevenly over 2 or 3 ranks: padding shows
#: Name -> (MixedPrecisionPolicy dtypes or None, reshard_after_forward).
PROBE_SETTINGS: dict[str, tuple[tuple[torch.dtype, torch.dtype] | None, bool]] = {
    "fp32": (None, True),
    "bf16-mixed": ((torch.bfloat16, torch.float32), True),
    "fp32, kept after forward": (None, False),
}


def probe_model(device: str | torch.device = "cpu") -> nn.Sequential:
    """The probe: ``PROBE_LAYERS`` ``Linear(PROBE_WIDTH, PROBE_WIDTH)`` (on ``meta`` for :func:`gpulab.sharding.estimate`)."""
    torch.manual_seed(0)
    with torch.device(device):
        return nn.Sequential(*[nn.Linear(PROBE_WIDTH, PROBE_WIDTH) for _ in range(PROBE_LAYERS)])


def _outermost_fsdp(node):
    found, parent = None, node.parent
    while parent is not None:
        found = parent if parent.name.startswith("FSDP::") else found
        parent = parent.parent
    return found


def step_allocations(prof, kept: set[int]) -> int:
    """The largest sum of bytes the profiled step allocated and still held at one moment.

    ``kept``: data pointers of storages that outlive the step (the new gradient shards).
    """
    def unseen_free(node, by: float) -> None:  # freed where the profiler could not see it, at the latest ``by``
        outer = _outermost_fsdp(node)
        changes.append((min(by, outer.end_time_ns) if outer is not None else by, -node.extra_fields.alloc_size))

    events = sorted((n for n in event_tree(prof) if n.tag == allocation_tag()), key=lambda n: n.start_time_ns)
    live, changes = {}, []
    for node in events:
        fields = node.extra_fields
        if fields.alloc_size > 0:
            if fields.ptr in live:  # the address is reused: the old block was freed before
                unseen_free(live[fields.ptr], node.start_time_ns)
            live[fields.ptr] = node
            changes.append((node.start_time_ns, fields.alloc_size))
        elif live.pop(fields.ptr, None) is not None:
            changes.append((node.start_time_ns, fields.alloc_size))
    for ptr, node in live.items():
        if ptr not in kept and _outermost_fsdp(node) is not None:
            unseen_free(node, math.inf)
    total = peak = 0
    for _, change in sorted(changes):
        total += change
        peak = max(peak, total)
    return peak


def _collectives(prof) -> dict[str, int]:
    counts = {"all-gathers": 0, "reduce-scatters": 0, "all-gather bytes": 0}
    for node in event_tree(prof):
        if node.name == "c10d::_allgather_base_":
            out = node.extra_fields.inputs[0]
            counts["all-gathers"] += 1
            counts["all-gather bytes"] += int(torch.Size(out.sizes).numel()) * out.dtype.itemsize
        elif node.name == "c10d::_reduce_scatter_base_":
            counts["reduce-scatters"] += 1
    return counts


def measure(mesh, name: str) -> dict:
    """Shard a fresh probe per ``PROBE_SETTINGS[name]``, run two steps, report the second (module docstring)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy, reshard = PROBE_SETTINGS[name]
    model = probe_model()
    options = {"mesh": mesh, "reshard_after_forward": reshard}
    if policy is not None:
        options["mp_policy"] = MixedPrecisionPolicy(param_dtype=policy[0], reduce_dtype=policy[1])
    for layer in model:
        fully_shard(layer, **options)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.Adam(model.parameters())
    x, y = torch.randn(PROBE_ROWS, PROBE_WIDTH), torch.randn(PROBE_ROWS, PROBE_WIDTH)
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        weights = {(p.to_local() if hasattr(p, "to_local") else p).untyped_storage().data_ptr() for p in model.parameters()}
        if storage.data_ptr() not in weights:  # the gathered weights are counted apart
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    def counted(phase: str):
        """The forward pass (with the loss) runs with the hooks that count what autograd saves."""
        return torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t) if phase == "forward" else nullcontext()

    def step() -> None:
        train_step(model, optimizer, x, y, phases=counted)

    step()
    shards = [p.to_local() for p in model.parameters()]
    state = [v.to_local() if hasattr(v, "to_local") else v for s in optimizer.state.values() for v in s.values()]
    before = storage_bytes(shards) + sum(t.nbytes for t in state) + x.nbytes + y.nbytes
    peaks, activations = [], []
    for _ in range(2):  # gloo's threads shift a few frees: the smaller of two steps' peaks
        saved.clear()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True,
                                    record_shapes=True) as prof:
            step()
        grads = [p.grad.to_local() for p in model.parameters()]
        peaks.append(before + step_allocations(prof, {g.untyped_storage().data_ptr() for g in grads}))
        activations.append(sum(saved.values()))
    return {"setting": name, "storage": {"parameters": storage_bytes(shards), "gradients": storage_bytes(grads),
                                         "optimizer state": sum(t.nbytes for t in state)},
            "views": {"parameters": sum(t.nbytes for t in shards), "gradients": sum(g.nbytes for g in grads)},
            "activations": max(activations), "peak": min(peaks), **_collectives(prof)}
