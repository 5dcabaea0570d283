"""Checks for notebook 03 (one device)."""

from __future__ import annotations

from typing import Callable

import torch

from gpulab.exercises import Feedback, correct, wrong


def check_move_batch(move_batch: Callable) -> Feedback:
    """Check ``move_batch((x, y), device) -> (x, y)``: both on ``device``, same values, originals untouched.

    Runs on any machine: the target is the ``meta`` device (shapes only, no memory), so a batch
    left on the CPU is caught exactly as a GPU would catch it.
    """
    if not callable(move_batch):
        return wrong(f"move_batch should be a function, got {type(move_batch).__name__}")
    x, y = torch.arange(12.0).reshape(4, 3), torch.arange(4.0).reshape(4, 1)
    target = torch.device("meta")
    try:
        result = move_batch((x, y), target)
    except Exception as exc:  # a learner's bug is feedback, not a crash
        return wrong(f"move_batch raised {type(exc).__name__}: {exc}")
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        return wrong(f"return a pair (x, y), got {type(result).__name__}")
    xb, yb = result
    for name, t, orig in (("x", xb, x), ("y", yb, y)):
        if not isinstance(t, torch.Tensor):
            return wrong(f"{name} should be a tensor, got {type(t).__name__}")
        if t.device != target:
            return wrong(f"{name} is still on {t.device}, expected {target}: call {name}.to(device) and use what it returns")
        if t.shape != orig.shape or t.dtype != orig.dtype:
            return wrong(f"{name} changed shape or dtype: {tuple(t.shape)} {t.dtype}, expected {tuple(orig.shape)} {orig.dtype}")
    if x.device.type != "cpu" or y.device.type != "cpu":
        return wrong("the original tensors changed device: tensor.to() should return a copy")
    return correct("both tensors are on the device; tensor.to(device) returned new tensors and left the originals alone")
