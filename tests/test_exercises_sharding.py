"""The notebook 08 exercise (least sharding that fits) and questions: right answers pass, typical mistakes say why."""

from __future__ import annotations

import pytest

from gpulab.sharding.estimate import estimate
from gpulab.exercises.quiz import check
from gpulab.exercises.sharding import (MIXED_CASE, ORDER, UNSEEN_CASES, check_least_sharding, least_sharding,
                                       needed_gib)


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
    (lambda p, r, g: None, "you returned None (no strategy fits), but at least one strategy fits"),
    (lambda p, r, g: "ZeRO-3", "answer with one of 'none', 'zero1', 'zero2', 'zero3' or None"),
    (lambda p, r, g: next((s for s in ORDER if needed_gib(p, r, s) <= g), "zero3"), "the answer is None"),
    (lambda p, r, g: 1 / 0, "raised ZeroDivisionError"),
    (lambda p, r: "none", "raised TypeError"),
    (None, "pass your function itself"),
])
def test_wrong_functions_say_why(fn, hint):
    verdict = check_least_sharding(fn)
    assert not verdict.ok and hint in str(verdict)


def test_no_message_reads_none_as_nothing():
    """The strategy called "none" is always quoted, so "none fits" never reads as "nothing fits"."""
    for case in UNSEEN_CASES:
        for answer in (*ORDER, None):
            text = str(check_least_sharding(lambda p, r, g, a=answer: a if (p, r, g) == case else least_sharding(p, r, g)))
            assert "none fits" not in text and " none " not in text.replace("'none'", "")


def _gb(strategy, precision="fp16-master"):
    p, r, _ = MIXED_CASE
    return round(estimate(p, precision, "adam", strategy, r).total / 1e9, 1)


def test_mixed_precision_question_is_computed_for_a_case_the_notebook_never_prints():
    p, r, strategy = MIXED_CASE
    assert (p, r, strategy) != (7_500_000_000, 64, "zero2") and strategy == "zero2"
    right = _gb("zero2")
    assert right == round((2 * p + (2 + 4 + 8) * p / r) / 1e9, 1)  # by hand: weights whole, the rest sharded
    assert check("08", 1, right).ok and check("08", 1, str(right)).ok and check("08", 1, right + 0.04).ok


@pytest.mark.parametrize("answer,hint", [
    (lambda: _gb("none"), "that is DDP"), (lambda: _gb("zero1"), "that is zero1"),
    (lambda: _gb("zero3"), "that is zero3"),
    (lambda: round(_gb("zero2") - MIXED_CASE[0] * 4 / MIXED_CASE[1] / 1e9, 1), "master weights (4 bytes a parameter) are missing"),
    (lambda: _gb("zero2") + 1, "count bytes a parameter"), (lambda: "lots", "answer with a number of GB"),
    (lambda: True, "answer with a number of GB")])
def test_mixed_precision_question_wrong_answers_say_why(answer, hint):
    verdict = check("08", 1, answer())
    assert not verdict.ok and hint in str(verdict)
    assert str(_gb("zero2")) not in str(verdict)  # the feedback never gives the answer away


def test_checkpoint_question_says_what_the_notebook_did():
    assert "resumed it at 3 ranks" in str(check("08", 3, "a")) and "and at 1" not in str(check("08", 3, "a"))
