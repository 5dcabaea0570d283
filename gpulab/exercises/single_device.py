"""Checks for notebook 03 (one device)."""

from __future__ import annotations

from typing import Callable

import torch

from gpulab.exercises import Feedback, Question, correct, wrong
from gpulab.exercises import Option as O


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



QUESTIONS_03: tuple[Question, ...] = (
    Question("`x.to(device)` stands on a line of its own; its result is not assigned. What happens?", (
        O("x moves to the device.", "no: Tensor.to returns a new tensor and leaves x where it was"),
        O("A copy is made on the device and thrown away; x stays where it was.",
          "so always write `x = x.to(device)`"),
        O("An error is raised.", "no: it runs without a word, which is why the mistake is so common"),
    ), answer="b"),
    Question("And `model.to(device)` on a line of its own?", (
        O("It moves the model's parameters in place and returns the same model.",
          "nn.Module.to changes the module itself, so the line is enough"),
        O("It returns a moved copy; the model stays where it was.",
          "no: that is what a tensor does; a module moves its own parameters"),
        O("It moves the first layer only.", "no: it moves every parameter and buffer of every submodule"),
    ), answer="a"),
    Question("On a GPU, `start = time.perf_counter(); c = a @ a; t = time.perf_counter() - start` measures:", (
        O("the time of the multiplication.",
          "no: GPU work is asynchronous; the line returns once the work is queued"),
        O("only the time to queue the work: synchronize before reading the clock.",
          "wait for the device (`torch.cuda.synchronize()`), warm up, repeat: torch.utils.benchmark does it all"),
        O("the time to copy `a` to the GPU.", "no: `a` is already on the GPU, nothing is copied"),
    ), answer="b"),
)
