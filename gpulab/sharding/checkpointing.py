"""Activation checkpointing: keep less for backward and compute it again (``torch.utils.checkpoint``).

A model made of blocks normally keeps every block's inputs and outputs from the forward pass until
backward needs them. With checkpointing on, each block keeps only its input; backward runs the block's
forward a second time to get the rest back. Less memory, more compute::

    from gpulab.sharding import checkpointing
    model = checkpointing.BlockMLP(width=256, blocks=4, layers_per_block=2)
    rows = checkpointing.compare(model, x, y)        # activation bytes and seconds, off and on
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from gpulab.validate import positive_int


class BlockMLP(nn.Module):
    """``blocks`` blocks of ``layers_per_block`` (Linear + ReLU) of ``width``, then a Linear head to 1.

    ``checkpointing`` (an attribute, changeable at any time) runs each block under
    ``torch.utils.checkpoint.checkpoint`` (non-reentrant): the same numbers, less kept for backward.
    """

    def __init__(self, width: int = 256, blocks: int = 4, layers_per_block: int = 2, checkpointing: bool = False):
        super().__init__()
        for name, value in (("width", width), ("blocks", blocks), ("layers_per_block", layers_per_block)):
            positive_int(value, name)
        self.blocks = nn.ModuleList(
            nn.Sequential(*[m for _ in range(layers_per_block) for m in (nn.Linear(width, width), nn.ReLU())])
            for _ in range(blocks))
        self.head = nn.Linear(width, 1)
        self.checkpointing = checkpointing

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102 - see the class docstring
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.checkpointing and torch.is_grad_enabled() else block(x)
        return self.head(x)


def kept_for_backward(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[tuple[int, ...], int]:
    """How many distinct tensors one forward + MSE loss keeps for backward, by shape (parameters left out).

    Counted with ``torch.autograd.graph.saved_tensors_hooks``, once per storage: a ``Linear`` keeps its input,
    which is the previous ``ReLU``'s output, so the two count once. Under non-reentrant checkpointing a block's
    own saved tensors are dropped; what the outer hook still sees is what the checkpoint keeps (the block's input).
    Empty tensors hold no memory and are left out (torch 2.11's checkpoint saves one per block as a placeholder).
    """
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    kept: dict[int, tuple[int, ...]] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.numel() and t.untyped_storage().data_ptr() not in weights:
            kept[t.untyped_storage().data_ptr()] = tuple(t.shape)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        nn.functional.mse_loss(model(x), y)
    shapes: dict[tuple[int, ...], int] = {}
    for shape in kept.values():
        shapes[shape] = shapes.get(shape, 0) + 1
    return shapes


def step_seconds(model: nn.Module, x: torch.Tensor, y: torch.Tensor, min_run_time: float = 0.2) -> float:
    """Median seconds of one forward + backward of ``model`` on ``(x, y)`` (MSE loss), by :func:`gpulab.timing.time_call`.

    The clock waits for ``x``'s device, so GPU work is timed, not just queued.
    """
    from gpulab.timing import time_call

    def forward_backward() -> None:
        nn.functional.mse_loss(model(x), y).backward()
        model.zero_grad(set_to_none=True)

    seconds, _ = time_call("forward_backward()", {"forward_backward": forward_backward}, x.device, warmup=1,
                           min_run_time=min_run_time)
    return seconds


def compare(model: BlockMLP, x: torch.Tensor, y: torch.Tensor, min_run_time: float = 0.2) -> list[dict]:
    """Checkpointing off and on for one training step: peak activation bytes, peak step bytes, seconds.

    The bytes come from the profiler's memory timeline (:func:`gpulab.memory.profiled_timeline`), the
    seconds from :func:`step_seconds`. ``model.checkpointing`` is restored afterwards.
    """
    from gpulab.memory import profiled_timeline

    if not isinstance(model, BlockMLP):
        raise ValueError(f"model must be a gpulab.sharding.checkpointing.BlockMLP, got {type(model).__name__}")
    before, rows = model.checkpointing, []
    try:
        for on in (False, True):
            model.checkpointing = on
            timeline = profiled_timeline(model, x, y)
            rows.append({"checkpointing": "on" if on else "off",
                         "activations peak": max(t["activation"] for t in timeline),
                         "step peak": max(sum(t.values()) for t in timeline),
                         "seconds per step": step_seconds(model, x, y, min_run_time)})
    finally:
        model.checkpointing = before
    return rows
