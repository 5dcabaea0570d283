"""The notebook 08 exercise (least sharding that fits) and questions: right answers pass, typical mistakes say why."""

from __future__ import annotations

import pytest

from gpulab.estimate import estimate
from gpulab.exercises.quiz import check
from gpulab.exercises.sharding import ORDER, UNSEEN_CASES, check_least_sharding, least_sharding, needed_gib


def test_the_cases_cover_every_answer():
    answers = {least_sharding(*case) for case in UNSEEN_CASES}
    assert answers == {*ORDER, None}


def test_reference_answer_is_the_first_that_fits():
    p, r, gib = 3_000_000_000, 8, 24.0
    assert needed_gib(p, r, "zero1") > gib >= needed_gib(p, r, "zero2")
    assert least_sharding(p, r, gib) == "zero2"
    assert needed_gib(p, 1, "none") == estimate(p, "fp32", "adam").total / 2**30


def test_a_correct_function_passes():
    assert check_least_sharding(least_sharding).ok


@pytest.mark.parametrize("fn,hint", [
    (lambda p, r, g: "zero3", "shards less"),
    (lambda p, r, g: "none", "does not fit"),
    (lambda p, r, g: None, "fits (GiB needed"),
    (lambda p, r, g: "ZeRO-3", "answer with one of none, zero1, zero2, zero3 or None"),
    (lambda p, r, g: next((s for s in ORDER if needed_gib(p, r, s) <= g), "zero3"), "return None"),
    (lambda p, r, g: 1 / 0, "raised ZeroDivisionError"),
    (lambda p, r: "none", "raised TypeError"),
    (None, "pass your function itself"),
])
def test_wrong_functions_say_why(fn, hint):
    verdict = check_least_sharding(fn)
    assert not verdict.ok and hint in str(verdict)


@pytest.mark.parametrize("answer,ok,hint", [(16, True, "Adam's two moments"), ("16", True, ""),
                                            (4, False, "weight alone"), (8, False, "weight and gradient"),
                                            (12, False, "not one"), (20, False, "count float32"),
                                            ("lots", False, "answer with a number")])
def test_bytes_per_parameter_question(answer, ok, hint):
    verdict = check("08", 1, answer)
    assert verdict.ok is ok and hint in str(verdict)
