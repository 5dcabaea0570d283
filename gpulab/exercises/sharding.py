"""Checks for notebook 08 (memory and sharding): which strategy fits a model in a rank's memory.

Every verdict is computed with :func:`gpulab.estimate.estimate` (float32, Adam), never typed in.
"""

from __future__ import annotations

from typing import Callable

from gpulab.estimate import STRATEGIES, estimate
from gpulab.exercises import Feedback, as_number, correct, wrong
from gpulab.exercises.quiz import Option as O
from gpulab.exercises.quiz import Question

#: Strategies from the least sharded (least communication) to the most.
ORDER = tuple(STRATEGIES)
#: (parameters, ranks, GiB per rank) the notebook never prints, one for each answer and one that nothing fits.
UNSEEN_CASES: tuple[tuple[int, int, float], ...] = (
    (500_000_000, 8, 24.0), (2_000_000_000, 8, 24.0), (3_000_000_000, 8, 24.0), (7_000_000_000, 8, 24.0),
    (70_000_000_000, 8, 24.0), (3_000_000_000, 4, 40.0), (13_000_000_000, 16, 80.0))


def needed_gib(parameters: int, ranks: int, strategy: str) -> float:
    """GiB rank 0 holds for parameters + gradients + Adam state (float32) under ``strategy`` over ``ranks``."""
    return estimate(parameters, "fp32", "adam", strategy, ranks).total / 2**30


def least_sharding(parameters: int, ranks: int, gib_per_rank: float) -> str | None:
    """The least-sharded strategy whose rank 0 fits in ``gib_per_rank`` GiB, or None when none fits."""
    return next((s for s in ORDER if needed_gib(parameters, ranks, s) <= gib_per_rank), None)


def _diagnose(answer: object, parameters: int, ranks: int, gib: float) -> Feedback:
    expected = least_sharding(parameters, ranks, gib)
    where = f"{parameters:,} parameters, {ranks} ranks, {gib:g} GiB each"
    need = ", ".join(f"{s} {needed_gib(parameters, ranks, s):.1f}" for s in ORDER)
    if answer == expected:
        return correct(f"{where} -> {expected} (GiB needed: {need})")
    if answer is not None and answer not in ORDER:
        return wrong(f"{where}: answer with one of {', '.join(ORDER)} or None, got {answer!r}")
    if expected is None:
        return wrong(f"{where}: nothing fits, not even {ORDER[-1]} (GiB needed: {need}); return None")
    if answer is None:
        return wrong(f"{where}: {expected} fits (GiB needed: {need})")
    if ORDER.index(answer) > ORDER.index(expected):
        return wrong(f"{where}: {answer} fits, but {expected} fits too and shards less (less communication)")
    return wrong(f"{where}: {answer} does not fit: it needs {needed_gib(parameters, ranks, answer):.1f} GiB "
                 f"(GiB needed: {need})")


def check_least_sharding(fn: Callable[[int, int, float], str | None]) -> Feedback:
    """Call ``fn(parameters, ranks, gib_per_rank)`` on cases the notebook has not shown."""
    if not callable(fn):
        return wrong(f"pass your function itself, got {fn!r}")
    for case in UNSEEN_CASES:
        try:
            answer = fn(*case)
        except Exception as exc:  # a learner's bug: report it, don't raise
            return wrong(f"your function raised {type(exc).__name__}: {exc} for {case}")
        verdict = _diagnose(answer, *case)
        if not verdict.ok:
            return verdict
    return correct(f"all {len(UNSEEN_CASES)} cases: the least-sharded strategy that fits, or None")


def _bytes_per_parameter(answer: object) -> Feedback:
    value = as_number(answer)
    per = estimate(1_000_000, "fp32", "adam").total / 1_000_000  # the tiny step counter aside
    if value is None:
        return wrong(f"answer with a number of bytes, got {answer!r}")
    if value == round(per):
        return correct("4 for the weight, 4 for its gradient and 8 for Adam's two moments")
    if value == 4:
        return wrong("that is the weight alone: training also keeps its gradient and the optimizer's state")
    if value == 8:
        return wrong("weight and gradient: Adam adds two more float32 numbers per parameter")
    if value == 12:
        return wrong("Adam keeps two moments per parameter (the mean and the mean of squares), not one")
    return wrong("count float32 numbers per parameter: the weight, its gradient, and Adam's state")


QUESTIONS_08: tuple[Question, ...] = (
    Question("Training in float32 with Adam, how many bytes per parameter do the parameters, gradients and optimizer "
             "state take together?", grade=_bytes_per_parameter, example="20"),
    Question("With FSDP's full sharding (zero3) over N ranks, what does each rank keep between two steps?", (
        O("1/N of the parameters, of the gradients and of the optimizer state.",
          "the whole weights of a layer exist only while it computes: gathered, used, freed"),
        O("The whole model, and 1/N of the optimizer state.", "no: that is zero1; zero3 shards the parameters too"),
        O("The whole model, its gradients and the optimizer state.", "no: that is DDP, every rank a full copy"),
    ), answer="a"),
    Question("A distributed checkpoint (torch.distributed.checkpoint) was saved by 2 ranks. Can training resume on 3?", (
        O("No: it must be resumed with the same number of ranks.",
          "no: the notebook resumed it at 3 ranks and at 1, to the same weights"),
        O("Yes: its metadata says which rows each file holds, and each new rank reads the pieces its shards need.",
          "that is resharding on load"),
        O("Only after rank 0 gathers it into one file.", "no: no rank ever needs the whole model at once"),
    ), answer="b"),
)
