"""What notebook 13's rank program measures with: its model, its data, labelled pipeline stages, live activations.

- :func:`blocks`: ``layers`` MLP blocks ``Linear(h, 4h) -> ReLU -> Linear(4h, h)``, the same weights for a seed;
  a transformer's MLP half, the part Megatron's tensor parallelism splits column-then-row.
- :func:`batch`: the fixed inputs and targets, one row per token: ``(samples * sequence) x hidden``.
- :class:`LabelledStage`: a ``PipelineStage`` whose every forward and backward of a micro-batch is a profiler
  range named ``stage 0 F3`` or ``stage 0 B3`` (stage 0, micro-batch 3), whatever the schedule.
- :class:`SavedBytes`: the bytes saved for backward that are alive at each moment, and their peak: the memory of
  the micro-batches in flight.
- :func:`spans`: a finished profile's ranges whose names start with a prefix, on one clock for every rank.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch
from torch import nn
from torch.distributed.pipelining import PipelineStage
from torch.profiler import record_function

from gpulab.timing import Stopwatch
from gpulab.torch_private import NoSelfSendWarmup, trace_start_us

LABEL = "stage "  # the profiler ranges of LabelledStage start with it
#: The model and batch every part uses (small enough for CPU ranks, large enough to time).
SHAPE = {"layers": 4, "hidden": 256, "samples": 32, "sequence": 8}


def blocks(layers: int = SHAPE["layers"], hidden: int = SHAPE["hidden"], seed: int = 0) -> nn.Sequential:
    """``layers`` blocks ``Sequential(Linear(h, 4h), ReLU(), Linear(4h, h))``, initialised from ``seed``."""
    torch.manual_seed(seed)
    return nn.Sequential(*[nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.ReLU(), nn.Linear(4 * hidden, hidden))
                           for _ in range(layers)])


def batch(samples: int = SHAPE["samples"], sequence: int = SHAPE["sequence"], hidden: int = SHAPE["hidden"],
          seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Fixed inputs and targets of shape ``(samples * sequence, hidden)``, sample after sample.

    The blocks treat every token alike, so the tokens of all samples form one matrix. (With 3-D inputs a
    Linear's output is a view, and torch 2.13's zero-bubble schedules fail on it: ``t.detach_()`` in
    ``stage_backward_input`` cannot detach a view in place.)
    """
    g = torch.Generator().manual_seed(seed)
    rows = samples * sequence
    return torch.randn(rows, hidden, generator=g), torch.randn(rows, hidden, generator=g)


def mse(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The mean squared error over every number (a module-level function: schedules pickle nothing)."""
    return ((output - target) ** 2).mean()


class LabelledStage(NoSelfSendWarmup, PipelineStage):
    """A ``PipelineStage`` that labels each micro-batch's forward and backward (``stage 0 F3``, ``stage 0 B3``).

    Each label is a profiler range; while ``clock`` (a started ``Stopwatch``) is set, each is also appended to
    ``timed`` as ``[name, start_s, end_s]`` on that clock.
    """

    clock: Stopwatch | None = None

    def _labelled(self, name: str, work):
        timed = self.__dict__.setdefault("timed", [])
        start = self.clock.elapsed() if self.clock is not None else None
        with record_function(name):
            out = work()
        if start is not None:
            timed.append([name, start, self.clock.elapsed()])
        return out

    def forward_one_chunk(self, fwd_chunk_id: int, *args, **kwargs):
        forward = super().forward_one_chunk
        return self._labelled(f"{LABEL}{self.stage_index} F{fwd_chunk_id}", lambda: forward(fwd_chunk_id, *args, **kwargs))

    def backward_one_chunk(self, bwd_chunk_id: int, *args, **kwargs):
        backward = super().backward_one_chunk
        return self._labelled(f"{LABEL}{self.stage_index} B{bwd_chunk_id}",
                              lambda: backward(bwd_chunk_id, *args, **kwargs))


def _storage_ptr(t: torch.Tensor) -> int | None:
    """Where ``t``'s storage starts, or None for a freed one (FSDP2 frees gathered weights' storage)."""
    try:
        return _local(t).untyped_storage().data_ptr()
    except RuntimeError:
        return None


def _local(t: torch.Tensor) -> torch.Tensor:
    """A DTensor's local shard, or ``t``."""
    if hasattr(t, "to_local"):
        with torch.no_grad():
            return t.to_local()
    return t


class _Held:
    """One tensor saved for backward; counts its storage while autograd keeps it."""

    def __init__(self, owner: "SavedBytes", t: torch.Tensor, key: tuple[int, int]) -> None:
        self.owner, self.t, self.key = owner, t, key
        size = key[1]
        count, _ = owner.live.get(self.key, (0, size))
        if count == 0:
            owner.now += size
            owner.peak = max(owner.peak, owner.now)
        owner.live[self.key] = (count + 1, size)

    def __del__(self) -> None:
        count, size = self.owner.live.pop(self.key, (1, 0))
        if count > 1:
            self.owner.live[self.key] = (count - 1, size)
        else:
            self.owner.now -= size


class SavedBytes:
    """Bytes saved for backward and still alive, each tensor once; ``peak`` is the largest so far.

    A tensor saved by two operations (a ReLU's output is also the next Linear's input) counts once; slices of
    one batch count their own bytes each.

    Parameters (the weights a layer saves, gathered ones included) are not counted: only activations.
    ``with tracker.watch(module): ...`` counts what ``module``'s forward passes save inside the block.
    """

    def __init__(self) -> None:
        self.live: dict[tuple[int, int], tuple[int, int]] = {}  # (where, bytes) -> (times saved, bytes)
        self.now = 0
        self.peak = 0

    def reset_peak(self) -> None:
        """Start a new peak from what is alive now."""
        self.peak = self.now

    @contextlib.contextmanager
    def watch(self, module: nn.Module) -> Iterator["SavedBytes"]:
        """Count the activations saved inside the block (parameters of ``module`` left out)."""
        def pack(t: torch.Tensor):
            where = _storage_ptr(t)
            if where is not None and where in {_storage_ptr(p) for p in module.parameters()}:
                return t
            own = _local(t)
            if where is None:  # a collective's pending result (AsyncCollectiveTensor) has no storage yet
                return _Held(self, t, (id(own), own.nbytes))
            return _Held(self, t, (where + own.storage_offset() * own.element_size(), own.nbytes))

        def unpack(saved):
            return saved.t if isinstance(saved, _Held) else saved

        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            yield self


def spans(prof, prefix: str) -> list[list]:
    """``[name, start_us, end_us]`` of the profile's ranges starting with ``prefix``, in start order.

    Times are microseconds since the epoch (the trace's start plus each event's offset), so the spans of
    different ranks share one clock.
    """
    origin = trace_start_us(prof)
    if origin is None:
        raise RuntimeError("this torch's profiler does not say when its trace started: spans cannot be aligned")
    found = [[e.name, origin + e.time_range.start, origin + e.time_range.end]
             for e in prof.events() if e.name.startswith(prefix)]
    return sorted(found, key=lambda s: s[1])
