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
        (None, "set `answer`"),
        ("float17", "torch dtype"),
        (42, "torch dtype"),
    ],
)
def test_safe_half_dtype_wrong(answer, hint):
    feedback = ex.check_safe_half_dtype(answer)
    assert not feedback.ok
    assert hint in feedback.message
