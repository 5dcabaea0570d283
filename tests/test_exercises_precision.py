"""Checks of notebook 07's exercises, with right and wrong answers."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gpulab.exercises import precision as ex
from gpulab.models import Net1


def _count(model):
    return sum(p.numel() for p in model.parameters())


def test_half_precision_bytes_right_answer_computed_from_the_model():
    model = Net1(13, 16, 32, 1)
    answer = sum(p.numel() * p.half().element_size() for p in model.parameters())
    feedback = ex.check_half_precision_bytes(answer)
    assert feedback.ok, feedback
    assert str(feedback).startswith("Correct:")
    assert ex.check_half_precision_bytes(torch.tensor(answer)).ok


def test_half_precision_bytes_other_model():
    model = nn.Linear(100, 10)
    assert ex.check_half_precision_bytes(1010 * 2, model).ok
    assert not ex.check_half_precision_bytes(1010 * 2, Net1(13, 16, 32, 1)).ok


@pytest.mark.parametrize(
    "factor, hint",
    [(4, "float32"), (1, "number of parameters"), (8, "float64"), (0.25, "bits vs bytes"), (3, "count the parameters")],
)
def test_half_precision_bytes_wrong_answers_say_what_is_wrong(factor, hint):
    n = _count(Net1(13, 16, 32, 1))
    feedback = ex.check_half_precision_bytes(n * factor)
    assert not feedback.ok
    assert str(feedback).startswith("Not yet:")
    assert hint in feedback.message


@pytest.mark.parametrize("bad", [None, ..., "1234", True, float("inf"), [1, 2]])
def test_half_precision_bytes_unusable_answers(bad):
    feedback = ex.check_half_precision_bytes(bad)
    assert not feedback.ok and feedback.message


@pytest.mark.parametrize("answer", [torch.bfloat16, "bfloat16", "torch.bfloat16"])
def test_safe_half_dtype_right(answer):
    feedback = ex.check_safe_half_dtype(answer)
    assert feedback.ok, feedback
    assert "70000" in feedback.message


@pytest.mark.parametrize(
    "answer, hint",
    [
        (torch.float16, "70000.0 into inf"),
        (torch.float32, "4 bytes"),
        (torch.float64, "8 bytes"),
        (torch.int16, "integer"),
        (None, "set `dtype_answer`"),
        ("float17", "torch dtype"),
        (42, "torch dtype"),
    ],
)
def test_safe_half_dtype_wrong(answer, hint):
    feedback = ex.check_safe_half_dtype(answer)
    assert not feedback.ok
    assert hint in feedback.message


def _fp16_bytes(model):
    return sum(p.numel() for p in model.parameters()) * torch.empty((), dtype=torch.float16).element_size()


def test_fp16_bytes_right_functions():
    feedback = ex.check_fp16_bytes(_fp16_bytes)
    assert feedback.ok and str(feedback).startswith("Correct:"), feedback
    from gpulab.precision import parameter_bytes_by_dtype

    assert ex.check_fp16_bytes(lambda m: parameter_bytes_by_dtype(m)["float16"]).ok


def test_fp16_bytes_models_are_not_the_ones_the_notebooks_print():
    counts = {sum(p.numel() for p in m.parameters()) for m in ex.unseen_models().values()}
    assert sum(p.numel() for p in Net1(13, 16, 32, 1).parameters()) not in counts
    # the shared weight and the BatchNorm buffers make state_dict() differ from parameters()
    tied, bn = list(ex.unseen_models().values())[-2:]
    for m in (tied, bn):
        assert sum(t.numel() for t in m.state_dict(keep_vars=True).values()) != sum(p.numel() for p in m.parameters())


@pytest.mark.parametrize(
    "fn, hint",
    [
        (lambda m: _fp16_bytes(m) * 2, "float32"),
        (lambda m: _fp16_bytes(m) // 2, "number of parameters"),
        (lambda m: _fp16_bytes(m) * 4, "float64"),
        (lambda m: _fp16_bytes(m) * 8, "in bits"),
        (lambda m: sum(t.numel() for t in m.state_dict().values()) * 2, "state_dict"),
        (lambda m: 1602, "not it"),  # the article model's size, printed in notebook 07, copied
        (lambda m: None, "returned None"),
        (lambda m: "1602", "number of bytes"),
        (lambda m: 1 / 0, "ZeroDivisionError"),
        (1602, "pass your function"),
    ],
)
def test_fp16_bytes_wrong_functions(fn, hint):
    feedback = ex.check_fp16_bytes(fn)
    assert not feedback.ok and str(feedback).startswith("Not yet:")
    assert hint in feedback.message, feedback.message


def test_safe_half_dtype_other_values():
    feedback = ex.check_safe_half_dtype(torch.float16, large=100000.0, small=3e-9)
    assert not feedback.ok and "100000.0 into inf" in feedback.message
    assert "3e-9 into 0" in ex.check_safe_half_dtype(torch.float16, large=1000.0, small=3e-9).message
    ok = ex.check_safe_half_dtype(torch.bfloat16, large=100000.0, small=3e-9)
    assert ok.ok and "100000.0" in ok.message
    with pytest.raises(ValueError, match="large"):
        ex.check_safe_half_dtype(torch.bfloat16, large=float("inf"))
