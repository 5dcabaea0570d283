"""Checks for notebook 07's exercises: memory of a model in half precision, and a format that does not overflow."""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import nn

from gpulab.exercises import Feedback, Question, as_number, correct, wrong
from gpulab.exercises import Option as O
from gpulab.models import Net1
from gpulab.precision import DTYPES, dtype_name, parameter_bytes_by_dtype, parameter_count, round_trip


def _article_model() -> nn.Module:
    return Net1(13, 16, 32, 1)


class _Tied(nn.Module):
    """One ``Linear`` used twice, then a head: the shared weights are stored once, listed once by ``parameters()``."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(8, 8)
        self.again = self.inner
        self.head = nn.Linear(8, 3)

    def forward(self, x):  # noqa: D102
        return self.head(self.again(torch.relu(self.inner(x))))


def unseen_models() -> dict[str, nn.Module]:
    """Models the notebooks never print a size for: the check of ``fp16_bytes(model)`` uses them."""
    return {
        "Net1(12, 16, 32, 1) (the model without B)": Net1(12, 16, 32, 1),
        "Net1(13, 64, 64, 1)": Net1(13, 64, 64, 1),
        "nn.Linear(100, 10)": nn.Linear(100, 10),
        "Linear(8, 8) used twice, then Linear(8, 3)": _Tied(),
        "Linear(4, 6) + BatchNorm1d(6)": nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6)),
    }


def _number(answer: object, what: str) -> float | Feedback:
    if answer is None or answer is Ellipsis:
        return wrong(f"set {what} to a number of bytes (compute it with code, don't guess)")
    if isinstance(answer, torch.Tensor) and answer.numel() == 1:
        answer = answer.item()
    if isinstance(answer, bool) or not isinstance(answer, (int, float)):
        return wrong(f"{what} should be a number of bytes, got {type(answer).__name__}")
    if not math.isfinite(answer):
        return wrong(f"{what} is {answer}: a number of bytes is finite")
    return answer


def _diagnose_bytes(answer: float, model: nn.Module, what: str) -> Feedback:
    """Correct when ``answer`` is the model's parameter bytes in a 2-byte format; else the likely mistake."""
    count = parameter_count(model)
    sizes = parameter_bytes_by_dtype(model)
    stored = sum(t.numel() for t in model.state_dict(keep_vars=True).values())
    if answer == sizes["float16"]:
        return correct(f"{count} parameters x 2 bytes = {sizes['float16']} bytes, half of float32's {sizes['float32']}")
    if answer == sizes["float32"]:
        return wrong(f"{what}: {answer:g} bytes is the float32 size (4 bytes each); float16 and bfloat16 use 2")
    if answer == count:
        return wrong(f"{what}: {answer:g} is the number of parameters; multiply by the bytes one value takes")
    if answer == count * 8:
        return wrong(f"{what}: {answer:g} bytes is float64 (8 bytes each); float16 and bfloat16 use 2")
    if answer == count * 16:
        return wrong(f"{what}: {answer:g} is in bits (16 per value); the answer is in bytes")
    if answer * 8 == sizes["float16"]:
        return wrong(f"{what}: {answer:g} looks like a count of bytes divided by 8 (bits vs bytes?): the answer is in bytes")
    if stored != count and answer in (stored * 2, stored):
        return wrong(f"{what}: {answer:g} counts model.state_dict(), which lists shared weights twice and holds "
                     f"buffers that are not parameters; count model.parameters()")
    return wrong(f"{what}: {answer:g} is not it: count the parameters (weights AND biases) and multiply by element_size()")


def check_half_precision_bytes(answer: object, model: nn.Module | None = None) -> Feedback:
    """Is ``answer`` the number of bytes the model's parameters take in a 2-byte format (float16/bfloat16)?

    ``model`` defaults to the article's ``Net1(13, 16, 32, 1)``.
    """
    value = _number(answer, "`answer`")
    if isinstance(value, Feedback):
        return value
    return _diagnose_bytes(value, model if model is not None else _article_model(), "`answer`")


def check_fp16_bytes(fn: Callable[[nn.Module], float]) -> Feedback:
    """Call ``fn(model)`` on models the notebooks have not shown; each must return its parameter bytes in float16."""
    if not callable(fn):
        return wrong(f"pass your function itself, e.g. check_fp16_bytes(fp16_bytes), not {type(fn).__name__}")
    for name, model in unseen_models().items():
        try:
            answer = fn(model)
        except Exception as exc:  # the learner's code may raise anything
            return wrong(f"fp16_bytes({name}) raised {type(exc).__name__}: {exc}")
        if answer is None:
            return wrong(f"fp16_bytes({name}) returned None; return the number of bytes")
        value = _number(answer, f"fp16_bytes({name})")
        if isinstance(value, Feedback):
            return value
        feedback = _diagnose_bytes(value, model, f"fp16_bytes({name})")
        if not feedback:
            return feedback
    return correct(f"right for all {len(unseen_models())} models: parameters (each counted once, no buffers) "
                   f"x 2 bytes, e.g. {parameter_count(Net1(12, 16, 32, 1))} x 2 = "
                   f"{parameter_bytes_by_dtype(Net1(12, 16, 32, 1))['float16']} bytes for Net1(12, 16, 32, 1)")


def _short(value: float) -> str:
    """``1e-08`` -> ``1e-8``, ``70000.0`` stays: numbers as a learner types them."""
    return repr(value).replace("e-0", "e-").replace("e+0", "e+")


def check_safe_half_dtype(answer: object, large: float = 70000.0, small: float = 1e-8) -> Feedback:
    """Is ``answer`` a 2-byte format that stores both ``large`` (an activation) and ``small`` (a gradient) as non-zero finite values?"""
    if not (math.isfinite(large) and math.isfinite(small) and large > 0 and small > 0):
        raise ValueError(f"large={large!r} and small={small!r} must be positive finite numbers")
    if answer is None or answer is Ellipsis:
        return wrong("set `dtype_answer` to a torch dtype such as torch.float16")
    if isinstance(answer, str):
        answer = DTYPES.get(answer.strip().lower().removeprefix("torch."), answer)
    if not isinstance(answer, torch.dtype):
        return wrong(f"`dtype_answer` should be a torch dtype like torch.float16, got {answer!r}")
    if not answer.is_floating_point:
        return wrong(f"{answer} is an integer format: it cannot hold {_short(small)} at all")
    size = torch.empty((), dtype=answer).element_size()
    if size != 2:
        return wrong(f"{answer} takes {size} bytes per value; the task asks for a 2-byte format")
    try:
        big, tiny = round_trip([large, small], answer)
    except (RuntimeError, ValueError, TypeError):
        return wrong(f"{answer} is not one of the formats compared here")
    if not math.isfinite(big):
        return wrong(f"{dtype_name(answer)} turns {_short(large)} into {big}: its largest value is {torch.finfo(answer).max:g}")
    if tiny == 0.0:
        return wrong(f"{dtype_name(answer)} turns {_short(small)} into 0 (underflow)")
    return correct(
        f"{dtype_name(answer)} keeps {_short(large)} as {big:g} and {_short(small)} as {tiny:.3g}: float32's range in 2 bytes, "
        "with less precision"
    )


def _sampler_padding(answer: object) -> Feedback:
    import torch
    from torch.utils.data import DistributedSampler, TensorDataset

    size, ranks = 21, 4
    data = TensorDataset(torch.arange(size))
    shards = [list(DistributedSampler(data, num_replicas=ranks, rank=r, shuffle=False)) for r in range(ranks)]
    padded = sum(map(len, shards)) - size
    value = as_number(answer)
    if value is None:
        return wrong(f"answer with a number of samples, got {answer!r}")
    if value == padded:
        return correct(f"every rank gets ceil({size}/{ranks}) = {len(shards[0])} samples, {ranks * len(shards[0])} "
                       f"in all: {padded} samples are repeated")
    if value == 0:
        return wrong(f"{size} is not a multiple of {ranks}: equal shards need padding")
    return wrong(f"every rank gets ceil({size}/{ranks}) samples; the padding is what that adds up to beyond {size}")


QUESTIONS_07: tuple[Question, ...] = (
    Question("Does DataParallel or DDP need an even number of GPUs to train correctly?", (
        O("No: any count gives the full-batch gradients; pick a batch size that splits well over your GPUs.",
          "odd counts only make the chunks differ by a row"),
        O("Yes: with an odd count the gradients are wrong.",
          "no: summed chunk gradients (and DDP's share-weighted average) equal the full batch for any count"),
        O("Only DDP needs it.", "no: DDP with 3 ranks trained the same weights as one process"),
    ), answer="a"),
    Question("Computing in float16, a gradient of 1e-8 becomes 0. What keeps it, still in float16?", (
        O("A loss scaler (`torch.amp.GradScaler`): scale the loss up before backward, unscale the gradients "
          "before the step.", "small gradients are scaled into float16's range, then divided back in float32"),
        O("More GPUs.", "no: 1e-8 is below float16's range on any number of GPUs"),
        O("Casting the weights to float16 too.",
          "no: that changes nothing about what float16 can hold; autocast keeps the weights in float32"),
    ), answer="a"),
    Question("`DistributedSampler` (with `drop_last=False`) shards a dataset of 21 samples over 4 ranks. How many "
             "samples does it repeat per epoch?", grade=_sampler_padding, example="5"),
)
