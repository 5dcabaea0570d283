"""What FSDP2 (``fully_shard``) holds on one rank during a training step: units, padded shards, the peak.

FSDP2 splits each parameter along dim 0 like ``torch.chunk`` and pads every rank's shard to the first
chunk's size (``FSDPParam._init_sharded_param`` in ``torch/distributed/fsdp/_fully_shard/_fsdp_param.py``:
``padded_sharded_size = chunks[0].size()``), so every rank stores as many bytes as rank 0. The parameters
of one ``fully_shard`` call form a **unit**: gathered together (all-gather) before the unit computes and
freed after it (``reshard_after_forward=True``, the default for every unit but the root, which stays
gathered). Backward runs the units in reverse. While unit i computes its backward, a rank holds, on top of
its parameter and optimizer shards:

- the gathered weights of unit i and of the next unit of backward, gathered early (prefetched:
  ``FSDPParamGroup._backward_prefetch``), in the compute dtype (``MixedPrecisionPolicy.param_dtype``), padded;
- unit i's unsharded gradients (compute dtype) until its reduce-scatter, and the reduce-scatter buffer of
  the unit before (reduce dtype, padded: ``reduce_scatter_max_input_buffers`` is 1);
- the gradient shards of the units already reduced;
- the activations (given; all counted, an upper bound: backward frees them as it goes).

With ``reshard_after_forward=False`` every unit stays gathered from its forward to its backward: its backward
needs no second all-gather. :func:`fsdp_peak` walks forward, backward and the optimizer step and keeps the
largest. Checked against the profiler's allocations on gloo ranks in ``tests/test_fsdp.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from torch import nn

from gpulab.validate import positive_int


@dataclass(frozen=True)
class Unit:
    """The parameter shapes of one FSDP unit; the root unit stays gathered for the whole step."""

    name: str
    shapes: tuple[tuple[int, ...], ...]
    root: bool = False


def shard_numels(shape: Sequence[int], ranks: int) -> list[int]:
    """Numbers each rank holds of a parameter of ``shape`` split along dim 0 like ``torch.chunk``.

    ``torch.chunk`` cuts ``ceil(rows / ranks)`` rows per piece, so some last ranks may get nothing
    (5 rows over 4 ranks: 2/2/1/0). A 0-dim parameter counts as one row.
    """
    rows = shape[0] if shape else 1
    per_row = math.prod(shape[1:]) if shape else 1
    step = math.ceil(rows / ranks)
    return [max(0, min(step, rows - r * step)) * per_row for r in range(ranks)]


def padded_numel(shape: Sequence[int], ranks: int) -> int:
    """Numbers in every rank's padded shard of a parameter of ``shape``: ``ceil(rows / ranks)`` rows."""
    rows = shape[0] if shape else 1
    return math.ceil(rows / ranks) * (math.prod(shape[1:]) if shape else 1)


def _innermost(modules: Sequence[nn.Module]) -> dict[int, int]:
    """Parameter id -> index of the innermost listed module that holds it (FSDP2's assignment)."""
    owner: dict[int, int] = {}
    order = sorted(range(len(modules)), key=lambda i: sum(1 for _ in modules[i].parameters()))
    for i in order:
        for p in modules[i].parameters():
            owner.setdefault(id(p), i)
    return owner


def _name(module: nn.Module, name: str) -> str:
    """A unit's name as FSDP's events print it (``layer1``); an index in a Sequential gets its type (``Linear 2``)."""
    return f"{type(module).__name__.removeprefix('FSDP')} {name}" if name.isdigit() else name  # fully_shard renames


def units_of(model: nn.Module | int, units: int | Sequence[nn.Module] | None) -> list[Unit]:
    """The units in forward order: ``units`` equal flat units of a count, listed modules, or ``fully_shard``'s.

    ``None``: the modules ``fully_shard`` was applied to when there are any, else one unit (the whole model).
    Parameters in no listed module form the root unit, first in forward order.
    """
    if isinstance(model, nn.Module):
        if isinstance(units, int) and not isinstance(units, bool):
            raise ValueError(f"units={units} as a number needs a parameter count; for a model pass a list of its modules")
        if units is None:
            from torch.distributed.fsdp import FSDPModule

            units = [m for m in model.modules() if isinstance(m, FSDPModule) and m is not model]
        modules = list(units)
        if not all(isinstance(m, nn.Module) for m in modules):
            raise ValueError(f"units must be a number or a list of nn.Module, got {units!r}")
        params = list(model.parameters())
        mine = {id(p) for m in modules for p in m.parameters()}
        if not mine <= {id(p) for p in params}:
            raise ValueError("units must be modules of the model")
        owner = _innermost(modules)
        rest = tuple(tuple(p.shape) for p in params if id(p) not in mine)
        names = {id(m): name for name, m in model.named_modules()}
        found = [Unit(_name(m, names[id(m)]), tuple(tuple(p.shape) for p in m.parameters() if owner[id(p)] == i))
                 for i, m in enumerate(modules)]
        found = [u for u in found if u.shapes]
        return ([Unit("root", rest, root=True)] if rest else []) + found
    if units is None:
        units = 1
    positive_int(units, "units (for a parameter count)")
    if units > model:
        raise ValueError(f"units={units} is more than the {model:,} parameters")
    base, extra = divmod(model, units)
    return [Unit(f"unit {i}", ((base + (i < extra),),)) for i in range(units)]


@dataclass(frozen=True)
class Peak:
    """The largest bytes one rank holds during a step, where it happens and its parts."""

    at: str
    parts: dict[str, int]
    largest_buffer: int  # the biggest reduce-scatter buffer (gloo's reduce-scatter copies one more)
    largest_gradients: int  # the biggest unit's gradients, padded, compute dtype (the CPU's copy-in copies them)

    @property
    def total(self) -> int:
        """Bytes at the peak."""
        return sum(self.parts.values())


def fsdp_peak(units: Sequence[Unit], ranks: int, grad_bytes: int, compute_bytes: int, reduce_bytes: int,
              state: dict[str, int], activations: int = 0, reshard_after_forward: bool = True,
              on_cpu: bool = False) -> Peak:
    """Walk one step's phases (see the module docstring) and return the largest.

    ``grad_bytes``/``compute_bytes``/``reduce_bytes``: bytes per number of the stored gradient shards, of the
    gathered weights and unsharded gradients, of the reduce-scatter. ``state``: the bytes
    held all step long (parameter shards, optimizer state). ``on_cpu``: the copy into the reduce-scatter buffer
    first makes a padded copy of the unit's gradients, two when the buffer has another dtype (CPU kernels do:
    ``aten::new_zeros`` and ``aten::cat`` under ``aten::_chunk_cat`` in the profiler's trace).
    """
    padded = [sum(padded_numel(s, ranks) for s in u.shapes) for u in units]
    gathered = [n * ranks * compute_bytes for n in padded]
    grads = [sum(math.prod(s) for s in u.shapes) * compute_bytes for u in units]
    buffers = [n * ranks * reduce_bytes for n in padded]
    shards = [n * grad_bytes for n in padded]
    kept = [u.root or not reshard_after_forward for u in units]
    copies = (1 + (compute_bytes != reduce_bytes)) if on_cpu else 0
    phases: list[tuple[str, dict[str, int]]] = []
    for i, u in enumerate(units):  # forward: the gathered copy-out buffer next to the unit's weights
        phases.append((f"forward of {u.name}", {"gathered weights": sum(gathered[j] for j in range(i) if kept[j])
                                                + 2 * gathered[i], "activations": activations}))
    for i in reversed(range(len(units))):
        done = sum(shards[i + 1:])
        held = sum(gathered[j] for j in range(i) if kept[j]) + gathered[i]
        if i > 0 and not kept[i - 1]:
            held += gathered[i - 1]  # prefetched for the next backward
        previous = buffers[i + 1] if i + 1 < len(units) else 0
        phases.append((f"backward of {units[i].name}", {
            "gradient shards": done, "gathered weights": held, "unsharded gradients": grads[i],
            "reduce-scatter buffer": previous, "activations": activations}))
        phases.append((f"reduce-scatter of {units[i].name}", {  # the copy into the buffer, before the shard
            "gradient shards": done, "gathered weights": held - gathered[i],
            "unsharded gradients": grads[i], "reduce-scatter buffer": buffers[i], "activations": activations,
            "copies into the buffer (CPU)": copies * gathered[i]}))
    phases.append(("optimizer step", {"gradient shards": sum(shards)}))
    at, parts = max(phases, key=lambda phase: sum(phase[1].values()))
    return Peak(at, {k: v for k, v in {**state, **parts}.items() if v}, max(buffers), max(gathered))
