"""Where a training step's memory goes: parameters, gradients, optimizer state, and what autograd saves.

The forward pass keeps some tensors alive until backward needs them ("saved for backward"): a
``Linear`` keeps its input (and its weight), a ``ReLU`` its output. Those are counted exactly with
``torch.autograd.graph.saved_tensors_hooks``, once per storage, and sorted into three groups:

- ``saved_activations``: new tensors the step made and keeps (layer outputs, and under autocast
  the 2-byte copies of inputs and weights): the memory that mixed precision shrinks;
- ``saved_input``: the batch itself (inputs and targets);
- ``saved_params``: the parameters (kept by reference: no extra bytes, listed for completeness).

Parameters, gradients and optimizer state are exact tensor sizes after one real step of
:func:`gpulab.train.fit`. On CUDA :func:`peak_memory` also reads the allocator's peak; :func:`profiled_peak` reads the
profiler's on any device. Any device::

    from gpulab import memory
    rows = memory.memory_table(model, x, y)            # float32 / autocast bfloat16 / bfloat16 weights
    print(memory.format_table(rows))
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import tempfile
import warnings
from dataclasses import asdict, dataclass
from typing import Iterable, Iterator, Sequence

import torch
from torch import nn

from gpulab.devices import pick_device
from gpulab.tables import format_rows
from gpulab.torch_private import memory_categories

#: Variant name -> (autocast dtype, dtype the weights and the batch are cast to).
VARIANTS: dict[str, tuple[torch.dtype | None, torch.dtype | None]] = {
    "float32": (None, None),
    "autocast bfloat16": (torch.bfloat16, None),
    "autocast float16": (torch.float16, None),
    "bfloat16 weights": (None, torch.bfloat16),
    "float16 weights": (None, torch.float16),
}
DEFAULT_VARIANTS = ("float32", "autocast bfloat16", "bfloat16 weights")


def tensor_bytes(tensors: Iterable[torch.Tensor | None]) -> int:
    """Bytes of the given tensors' own elements (``None`` entries skipped; views count their elements only)."""
    total = 0
    for t in tensors:
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"expected tensors, got {type(t).__name__}")
        total += t.numel() * t.element_size()
    return total


def storage_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind the tensors: what is really allocated (padding included)."""
    return sum(dict(_storage(t) for t in tensors).values())


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of every tensor the optimizer keeps per parameter (Adam: two moments and a step count)."""
    return tensor_bytes(v for state in optimizer.state.values() for v in state.values() if isinstance(v, torch.Tensor))


def _storage(t: torch.Tensor) -> tuple[int, int]:
    s = t.untyped_storage()
    return s.data_ptr(), s.nbytes()


@contextlib.contextmanager
def saved_tensors(model: nn.Module, *batch: torch.Tensor) -> Iterator[dict[str, int]]:
    """Count bytes saved for backward while the block runs, per group (see the module docstring).

    ``batch``: the step's inputs and targets. Yields a dict ``{"saved_activations", "saved_input",
    "saved_params"}`` filled in as tensors are saved.
    """
    params = {_storage(p)[0] for p in model.parameters()}
    inputs = {_storage(t)[0] for t in batch}
    seen: set[int] = set()
    totals = {"saved_activations": 0, "saved_input": 0, "saved_params": 0}

    def pack(t: torch.Tensor) -> torch.Tensor:
        ptr, nbytes = _storage(t)
        if ptr not in seen:
            seen.add(ptr)
            group = "saved_params" if ptr in params else "saved_input" if ptr in inputs else "saved_activations"
            totals[group] += nbytes
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        yield totals


@dataclass(frozen=True)
class MemoryRow:
    """Bytes one training step of one variant holds, by kind; ``peak`` is the allocator's (CUDA) or None."""

    variant: str
    parameters: int
    gradients: int
    optimizer: int
    saved_activations: int
    saved_input: int
    saved_params: int
    peak: int | None = None

    @property
    def total(self) -> int:
        """Parameters + gradients + optimizer state + everything saved for backward (parameters once)."""
        return self.parameters + self.gradients + self.optimizer + self.saved_activations + self.saved_input

    def to_dict(self) -> dict:
        """A JSON-friendly dict (with ``total``)."""
        return {**asdict(self), "total": self.total}


@dataclass
class Peak:
    """Peak allocated bytes during a block, above what was allocated before it (None: not measurable here)."""

    device: str
    bytes: int | None = None
    before: int | None = None


@contextlib.contextmanager
def peak_memory(device: str | torch.device) -> Iterator[Peak]:
    """Measure the allocator's peak during the block on CUDA (``reset_peak_memory_stats``/``max_memory_allocated``).

    Other devices keep no peak statistics: ``bytes`` stays None there.
    """
    dev = pick_device(device)
    peak = Peak(str(dev))
    if dev.type != "cuda":
        yield peak
        return
    torch.cuda.synchronize(dev)
    torch.cuda.reset_peak_memory_stats(dev)
    peak.before = torch.cuda.memory_allocated(dev)
    yield peak
    torch.cuda.synchronize(dev)
    peak.bytes = torch.cuda.max_memory_allocated(dev) - peak.before


def _one_step(model: nn.Module, x: torch.Tensor, y: torch.Tensor, variant: str):
    """A copy of ``model`` (cast per ``variant``), its batch, a fresh Adam and the step to run: ``step()``."""
    from gpulab.train import fit

    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}: use one of {', '.join(VARIANTS)}")
    autocast_dtype, cast = VARIANTS[variant]
    if len(x) != len(y) or len(x) == 0:
        raise ValueError(f"need a non-empty batch with as many targets as inputs, got {len(x)} and {len(y)}")
    net = copy.deepcopy(model)
    batch = x
    if cast is not None:
        net, batch = net.to(cast), x.to(cast)
    optimizer = torch.optim.Adam(net.parameters())

    def step() -> None:
        fit(net, [(batch, y)], epochs=1, optimizer=optimizer, device=x.device, autocast_dtype=autocast_dtype,
            progress=False)

    return net, batch, optimizer, step


def training_memory(model: nn.Module, x: torch.Tensor, y: torch.Tensor, variant: str = "float32") -> MemoryRow:
    """One Adam step of :func:`gpulab.train.fit` on a copy of ``model`` with batch ``(x, y)``, accounted.

    ``variant`` is a key of :data:`VARIANTS`. The model and the batch stay untouched; the step runs
    on ``x``'s device (the model must be there too).
    """
    net, batch, optimizer, step = _one_step(model, x, y, variant)
    with peak_memory(x.device) as peak, saved_tensors(net, batch, y) as saved:
        step()
    return MemoryRow(variant, tensor_bytes(net.parameters()), tensor_bytes(p.grad for p in net.parameters()),
                     optimizer_state_bytes(optimizer), peak=peak.bytes, **saved)


def profiled_timeline(model: nn.Module, x: torch.Tensor, y: torch.Tensor, variant: str = "float32") -> list[dict[str, int]]:
    """The same step as :func:`training_memory`, measured independently: bytes alive at each moment, by category.

    Read from the profiler's memory timeline (``torch.profiler.profile(profile_memory=True)`` and
    ``export_memory_timeline``), on any device. The profiler sorts every tensor into a category
    (``parameter``, ``optimizer state``, ``input``, ``temporary``, ``activation``, ``gradient``,
    ``autograd detail``, ``unknown``); each entry of the list maps those names to bytes. Slower than a plain step.
    """
    _, _, _, step = _one_step(model, x, y, variant)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if x.device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities, profile_memory=True, record_shapes=True,
                                with_stack=True) as prof:
        step()
    with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # deprecated in favour of a CUDA-only tool
        path = os.path.join(folder, "timeline.json")
        prof.export_memory_timeline(path, device=str(x.device))
        with open(path) as f:
            _, sizes = json.load(f)
    names = memory_categories()  # the export's column order lives only in a private table
    return [dict(zip(names, at_time[1:])) for at_time in sizes]  # column 0 of the export is unused


def profiled_peak(model: nn.Module, x: torch.Tensor, y: torch.Tensor, variant: str = "float32") -> int:
    """The highest total bytes alive during the step of :func:`profiled_timeline` (parameters included)."""
    return max(sum(at_time.values()) for at_time in profiled_timeline(model, x, y, variant))


def memory_table(model: nn.Module, x: torch.Tensor, y: torch.Tensor,
                 variants: Sequence[str] = DEFAULT_VARIANTS) -> list[MemoryRow]:
    """:func:`training_memory` for each variant (all names checked first)."""
    bad = [v for v in variants if v not in VARIANTS]
    if bad or not variants:
        raise ValueError(f"unknown variant(s) {', '.join(map(repr, bad)) or '(none given)'}: use {', '.join(VARIANTS)}")
    return [training_memory(model, x, y, v) for v in variants]


def format_table(rows: Sequence[MemoryRow], unit: str = "MiB") -> str:
    """The rows as a text table in ``unit`` (``"MiB"``, ``"KiB"`` or ``"bytes"``)."""
    scale = {"bytes": 1, "KiB": 2**10, "MiB": 2**20}
    if unit not in scale:
        raise ValueError(f"unknown unit {unit!r}: use one of {', '.join(scale)}")
    columns = ("parameters", "gradients", "optimizer", "saved_activations", "saved_input", "total", "peak")
    table = []
    for row in rows:
        values = row.to_dict()
        table.append({"variant": row.variant, **{
            c: (None if values[c] is None else values[c] if unit == "bytes" else round(values[c] / scale[unit], 3))
            for c in columns}})
    return f"({unit}; saved_*: kept for backward; peak: CUDA allocator, '-' elsewhere)\n" + format_rows(table)
