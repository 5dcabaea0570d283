"""Checks for notebook 13: how many micro-batches' activations a pipeline stage holds at once. Plus its questions.

The check calls the learner's ``in_flight(schedule, stages, micro_batches, stage)`` on pipelines the notebook has
not run (3, 4, 6 and 8 stages, every stage) and compares with torch's schedules: ``ScheduleGPipe`` keeps every
micro-batch until the backwards start (no activation checkpointing); ``Schedule1F1B`` runs ``min(m, p - stage)``
forwards before its first backward (``warmup_chunks`` in ``torch/distributed/pipelining/schedules.py``) and then
one forward per backward.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Callable

from gpulab.exercises import Feedback, as_number, correct, wrong
from gpulab.exercises import Option as O
from gpulab.exercises import Question

SCHEDULES = ("GPipe", "1F1B")
#: (stages, micro-batches) never run by the notebook (it runs 2 stages); 1F1B needs micro-batches >= stages.
UNSEEN = ((3, 3), (3, 7), (4, 4), (4, 8), (4, 13), (6, 12), (8, 8), (8, 16))


def _expected(schedule: str, stages: int, micro_batches: int, stage: int) -> int:
    return micro_batches if schedule == "GPipe" else min(micro_batches, stages - stage)


def _cases() -> list[tuple[str, int, int, int]]:
    return [(s, p, m, st) for s in SCHEDULES for p, m in UNSEEN for st in range(p)] + [("GPipe", 4, 2, 0)]


def _advice(schedule: str, got: dict, cases: list) -> str:
    """What this schedule's wrong answers have in common, without giving the rule away."""
    mine = [(p, m, st) for s, p, m, st in cases if s == schedule]

    def all_are(rule: Callable[[int, int, int], int]) -> bool:
        return all(got[(schedule, p, m, st)] == rule(p, m, st) for p, m, st in mine)

    if schedule == "GPipe":
        return ("GPipe runs every forward before the first backward: count the micro-batches whose activations "
                "are still waiting when the last forward ends")
    if all_are(lambda p, m, st: m):
        return ("your 1F1B answers are GPipe's: 1F1B starts backwards early, so fewer micro-batches wait; "
                "count the forwards a stage runs before its first backward")
    if all_are(lambda p, m, st: p):
        return ("your 1F1B answers are the same on every stage: a later stage gets its first gradient sooner, "
                "so it holds fewer micro-batches")
    if all_are(lambda p, m, st: st + 1):
        return "your 1F1B answers grow along the pipeline; the first stage waits longest for its first backward"
    return ("draw the 1F1B timeline of a few stages: on each stage, count the forwards that have not had "
            "their backward yet, at its busiest moment")


def check_in_flight(fn: Callable[[str, int, int, int], int]) -> Feedback:
    """Does ``fn(schedule, stages, micro_batches, stage)`` give the peak micro-batches in flight on that stage?"""
    if not callable(fn):
        return wrong(f"pass your function itself, e.g. check_in_flight(in_flight), not {type(fn).__name__}")
    cases, got = _cases(), {}
    for case in cases:
        try:
            answer = fn(*case)
        except Exception as exc:  # the learner's code may raise anything
            return wrong(f"in_flight{case} raised {type(exc).__name__}: {exc}")
        value = as_number(answer)
        if value is None or not math.isfinite(value) or value != int(value):
            return wrong(f"in_flight{case} returned {answer!r}: return a whole number of micro-batches")
        got[case] = int(value)
    bad = [c for c in cases if got[c] != _expected(*c)]
    if bad:
        schedule = bad[0][0]
        wrong_here = sum(c[0] == schedule for c in bad)
        total = sum(c[0] == schedule for c in cases)
        return wrong(f"{wrong_here} of {total} {schedule} cases wrong, e.g. in_flight{bad[0]} returned "
                     f"{got[bad[0]]}: {_advice(schedule, got, cases)}")
    return correct(f"right on all {len(cases)} cases tried ({_tried(cases)}): GPipe holds every micro-batch, "
                   "1F1B at most its warm-up forwards, the most on the first stage")


def _tried(cases: list[tuple[str, int, int, int]]) -> str:
    """What ``cases`` cover, in words: the schedules, the stage counts, every stage, the micro-batch counts."""
    def listed(items: list) -> str:
        words = [str(i) for i in sorted(set(items), key=items.index)]
        return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]

    stages, micro = sorted({c[1] for c in cases}), [c[2] for c in cases]
    return (f"{listed([c[0] for c in cases])} on {listed(stages)} stages, every stage, "
            f"{min(micro)} to {max(micro)} micro-batches")


def _bubble_share(answer: object) -> Feedback:
    """Question 1: 4 stages, 12 micro-batches."""
    p, m = 4, 12
    value = as_number(answer)
    if value is None and isinstance(answer, str):
        try:
            value = float(Fraction(answer.strip().rstrip("%"))) / (100 if answer.strip().endswith("%") else 1)
        except (ValueError, ZeroDivisionError):
            value = None
    if value is None or not math.isfinite(value):
        return wrong(f"answer with a number (a share of the step, like 0.5 or 1/2), got {answer!r}")
    if value > 1:
        value /= 100  # written as a percentage
    if not 0 <= value <= 1:
        return wrong(f"a share of the step lies between 0 and 1 (or 0% and 100%), got {answer!r}")
    right = (p - 1) / (m + p - 1)
    if abs(value - right) < 1e-3:
        return correct(f"(p - 1) / (m + p - 1) = {p - 1} / {m + p - 1}: the fill and the drain take p - 1 "
                       "micro-batch slots of the step's m + p - 1")
    if abs(value - (p - 1) / m) < 1e-3:
        return wrong("that is the waiting time over the compute time; the question asks for a share of the whole step")
    if abs(value - p / (m + p)) < 1e-3 or abs(value - (p - 1) / (m + p)) < 1e-3:
        return wrong("count the step's slots again: m micro-batches plus the p - 1 slots of filling and draining")
    return wrong("use the formula of section 3 with p = 4 stages and m = 12 micro-batches")


QUESTIONS_13 = (
    Question("A pipeline has 4 stages and runs 12 micro-batches per step, every stage equally fast. What share of the "
             "step does each rank wait (the bubble)?", grade=_bubble_share, example="0.5"),
    Question("A (dp=2, tp=2) mesh trains with FSDP over dp and tensor parallelism over tp. Which collective carries "
             "activations, and over which dimension?", (
                 O("An all-reduce over tp: the ranks of a row sum their parts of each block's output.",
                   "the row-split Linear gives each rank of a tp group a partial sum, and the all-reduce adds them"),
                 O("An all-gather over dp.", "no: FSDP's all-gather carries weights, gathered before each unit computes"),
                 O("A reduce-scatter over tp.",
                   "no: FSDP's reduce-scatter carries gradients, and it runs over dp, where the weights are sharded"),
             ), answer="a"),
    Question("With p equal stages and the same number m of micro-batches, GPipe and 1F1B have the same ideal "
             "bubble. Why use 1F1B?", (
        O("It sends less data between stages.",
          "no: both send each micro-batch's activations forward and its gradients back once"),
        O("It needs less activation memory when m > p: its first stage holds at most p micro-batches' activations "
          "at once.",
          "GPipe keeps all m micro-batches' activations until the backwards start; 1F1B starts them early"),
        O("It works with fewer micro-batches than stages.",
          "no: torch's Schedule1F1B refuses fewer micro-batches than stages; GPipe accepts them"),
    ), answer="b"),
)
