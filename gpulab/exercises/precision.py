"""Checks for notebook 07's exercises: memory of a model in half precision, and a format that does not overflow."""

from __future__ import annotations

import math

import torch
from torch import nn

from gpulab.exercises import Feedback, correct, wrong
from gpulab.models import Net1
from gpulab.precision import DTYPES, dtype_name, parameter_bytes_by_dtype, parameter_count, round_trip


def _article_model() -> nn.Module:
    return Net1(13, 16, 32, 1)


def check_half_precision_bytes(answer: object, model: nn.Module | None = None) -> Feedback:
    """Is ``answer`` the number of bytes the model's parameters take in a 2-byte format (float16/bfloat16)?

    ``model`` defaults to the article's ``Net1(13, 16, 32, 1)``.
    """
    model = model if model is not None else _article_model()
    count = parameter_count(model)
    sizes = parameter_bytes_by_dtype(model)
    if answer is None or answer is Ellipsis:
        return wrong("set `answer` to a number of bytes (compute it with code, don't guess)")
    if isinstance(answer, torch.Tensor) and answer.numel() == 1:
        answer = answer.item()
    if isinstance(answer, bool) or not isinstance(answer, (int, float)):
        return wrong(f"`answer` should be a number of bytes, got {type(answer).__name__}")
    if not math.isfinite(answer):
        return wrong(f"`answer` is {answer}: a number of bytes is finite")
    if answer == sizes["float16"]:
        return correct(
            f"{count} parameters x 2 bytes = {sizes['float16']} bytes, half of float32's {sizes['float32']}"
        )
    if answer == sizes["float32"]:
        return wrong(f"{answer} bytes is the float32 size (4 bytes each); float16 and bfloat16 use 2")
    if answer == count:
        return wrong(f"{answer} is the number of parameters; multiply by the bytes one value takes")
    if answer == count * 8:
        return wrong(f"{answer} bytes is float64 (8 bytes each); float16 and bfloat16 use 2")
    if answer * 8 == sizes["float16"]:
        return wrong(f"{answer} looks like a count of bytes divided by 8 (bits vs bytes?): the answer is in bytes")
    return wrong(f"{answer} is not it: count the parameters (weights AND biases) and multiply by element_size()")


def check_safe_half_dtype(answer: object) -> Feedback:
    """Is ``answer`` a 2-byte format that stores both 70000.0 (an activation) and 1e-8 (a gradient) as non-zero finite values?"""
    if answer is None or answer is Ellipsis:
        return wrong("set `answer` to a torch dtype such as torch.float16")
    if isinstance(answer, str):
        answer = DTYPES.get(answer.strip().lower().removeprefix("torch."), answer)
    if not isinstance(answer, torch.dtype):
        return wrong(f"`answer` should be a torch dtype like torch.float16, got {answer!r}")
    if not answer.is_floating_point:
        return wrong(f"{answer} is an integer format: it cannot hold 1e-8 at all")
    size = torch.empty((), dtype=answer).element_size()
    if size != 2:
        return wrong(f"{answer} takes {size} bytes per value; the task asks for a 2-byte format")
    try:
        big, tiny = round_trip([70000.0, 1e-8], answer)
    except (RuntimeError, ValueError, TypeError):
        return wrong(f"{answer} is not one of the formats compared here")
    if not math.isfinite(big):
        return wrong(f"{dtype_name(answer)} turns 70000.0 into {big}: its largest value is {torch.finfo(answer).max:g}")
    if tiny == 0.0:
        return wrong(f"{dtype_name(answer)} turns 1e-8 into 0 (underflow)")
    return correct(
        f"{dtype_name(answer)} keeps 70000.0 as {big:g} and 1e-8 as {tiny:.3g}: float32's range in 2 bytes, with less precision"
    )
