"""Notebook 10's exercise: diagnose logs. Right answers pass; every kind of wrong answer fails with a clue, not the answer."""

from __future__ import annotations

import re

import pytest

from gpulab.distributed.failures import driver as failures
from gpulab.exercises.failures import (CLUES, DIAGNOSIS, FIRST_LOOK, LOGS, RANK_CLUES, TIMEOUT_HINT, WORLD,
                                       check_diagnosis)


def test_the_right_answers_pass():
    said = check_diagnosis(dict(DIAGNOSIS), dict(FIRST_LOOK))
    assert said.ok, said
    assert check_diagnosis(dict(DIAGNOSIS), {k: str(v) for k, v in FIRST_LOOK.items()}).ok  # "2" is a rank too


def test_the_answers_are_causes_and_ranks_that_exist():
    assert set(DIAGNOSIS) == set(LOGS) and set(DIAGNOSIS.values()) <= set(failures.BY_NAME)
    assert set(FIRST_LOOK) <= set(LOGS) and set(FIRST_LOOK) == set(WORLD) == set(RANK_CLUES)
    assert set(CLUES) == set(LOGS)
    assert len(set(DIAGNOSIS.values())) < len(DIAGNOSIS)  # a cause can come twice: no elimination by order


@pytest.mark.parametrize("letter", sorted(DIAGNOSIS))
def test_each_wrong_cause_gets_the_clue_of_its_log_never_the_answer(letter):
    right = DIAGNOSIS[letter]
    for cause in failures.BY_NAME:
        if cause == right:
            continue
        said = check_diagnosis({**DIAGNOSIS, letter: cause}, dict(FIRST_LOOK))
        assert not said.ok
        assert f"{len(LOGS) - 1} of {len(LOGS)} causes right" in said.message and f"log {letter}:" in said.message
        assert (TIMEOUT_HINT if cause == "timeout" else CLUES[letter]) in said.message
        assert not re.search(rf"\b{right}\b", said.message), said.message


def test_matching_the_notebooks_tell_tale_words_does_not_solve_it():
    """The naive strategy: the first case whose tell-tale words appear in the log (else a guess)."""
    naive = {letter: next((c.name for c in failures.CASES if c.tell in log), "timeout") for letter, log in LOGS.items()}
    said = check_diagnosis(naive, dict(FIRST_LOOK))
    assert not said.ok
    right = sum(naive[letter] == DIAGNOSIS[letter] for letter in LOGS)
    assert right <= len(LOGS) // 2, naive


def test_the_rank_that_raised_is_not_the_answer():
    raised = {"A": 1, "C": 0, "E": 0}  # the first rank that printed an error in each log
    for letter, rank in raised.items():
        said = check_diagnosis(dict(DIAGNOSIS), {**FIRST_LOOK, letter: rank})
        assert not said.ok and f"Log {letter}: rank {rank} is not" in said.message
        assert RANK_CLUES[letter] in said.message and str(FIRST_LOOK[letter]) not in re.sub(r"rank \d", "", said.message)


@pytest.mark.parametrize("bad", [None, True, -1, 4, 1.5, "two", "?"])
def test_a_rank_that_cannot_be(bad):
    said = check_diagnosis(dict(DIAGNOSIS), {**FIRST_LOOK, "C": bad})
    assert not said.ok and "log C: give a rank from 0 to 3" in said.message


@pytest.mark.parametrize("causes, first_look, hint", [
    ("missing", None, "dict from log letter to cause"),
    ({"A": "mismatch"}, None, "not answered yet"),
    ({**DIAGNOSIS, "Z": "port"}, None, "no log 'Z'"),
    ({**DIAGNOSIS, "C": "firewall"}, None, "is not a cause"),
    (dict(DIAGNOSIS), None, "Now give the rank to look at first"),
    (dict(DIAGNOSIS), [0, 2, 3], "Now give the rank to look at first"),
    (dict(DIAGNOSIS), {**FIRST_LOOK, "B": 1}, "no rank question for log 'B'"),
])
def test_malformed_answers_say_what_to_give(causes, first_look, hint):
    said = check_diagnosis(causes, first_look)
    assert not said.ok and hint in said.message


def test_the_logs_are_not_the_notebooks_printed_forms():
    printed = ["monitoredBarrier in 2000 ms", "Timed out waiting 2000ms", "spare_head", "3vs 4"]
    assert not any(p in log for p in printed for log in LOGS.values())
    assert any("Watchdog caught collective operation timeout" in log for log in LOGS.values())
    assert any("ChildFailedError" in log for log in LOGS.values())
