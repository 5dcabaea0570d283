"""Checks for notebook 08 (memory and sharding): which strategy fits a model in a rank's memory.

Every verdict is computed with :func:`gpulab.sharding.estimate.estimate` (float32, Adam), never typed in.
"""

from __future__ import annotations

from typing import Callable

from gpulab.sharding.estimate import STRATEGIES, estimate
from gpulab.exercises import Feedback, as_number, correct, wrong
from gpulab.exercises import Option as O
from gpulab.exercises import Question

#: Strategies from the least sharded (least communication) to the most.
ORDER = tuple(STRATEGIES)
#: (parameters, ranks, GiB per rank) the notebook never prints, one for each answer and one where no strategy fits.
UNSEEN_CASES: tuple[tuple[int, int, float], ...] = (
    (500_000_000, 8, 24.0), (2_000_000_000, 8, 24.0), (3_000_000_000, 8, 24.0), (7_000_000_000, 8, 24.0),
    (70_000_000_000, 8, 24.0), (3_000_000_000, 4, 40.0), (13_000_000_000, 16, 80.0))


def needed_gib(parameters: int, ranks: int, strategy: str) -> float:
    """GiB rank 0 holds for parameters + gradients + Adam state (float32) under ``strategy`` over ``ranks``."""
    return estimate(parameters, "fp32", "adam", strategy, ranks).total / 2**30


def least_sharding(parameters: int, ranks: int, gib_per_rank: float) -> str | None:
    """The least-sharded strategy whose rank 0 fits in ``gib_per_rank`` GiB, or None when no strategy fits."""
    return next((s for s in ORDER if needed_gib(parameters, ranks, s) <= gib_per_rank), None)


def _needs(parameters: int, ranks: int) -> str:
    return ", ".join(f"{s!r} {needed_gib(parameters, ranks, s):.1f}" for s in ORDER)


def _diagnose(answer: object, parameters: int, ranks: int, gib: float) -> Feedback:
    expected = least_sharding(parameters, ranks, gib)
    where = f"{parameters:,} parameters, {ranks} ranks, {gib:g} GiB each"
    need = f"GiB needed: {_needs(parameters, ranks)}"
    if answer == expected:
        return correct(f"{where} -> {expected!r} ({need})")
    if answer is not None and answer not in ORDER:
        return wrong(f"{where}: answer with one of {', '.join(map(repr, ORDER))} or None, got {answer!r}")
    if expected is None:
        return wrong(f"{where}: not even {ORDER[-1]!r} fits ({need}), so the answer is None, not {answer!r}")
    if answer is None:
        return wrong(f"{where}: you returned None (no strategy fits), but at least one strategy fits ({need})")
    if ORDER.index(answer) > ORDER.index(expected):
        return wrong(f"{where}: {answer!r} fits, but a strategy that shards less fits too (less communication)")
    return wrong(f"{where}: {answer!r} does not fit: it needs {needed_gib(parameters, ranks, answer):.1f} GiB ({need})")


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


#: Question 1's case, never printed by the notebook: the classic mixed precision under zero2.
MIXED_CASE = (2_000_000_000, 8, "zero2")


def _mixed_zero2_gb(answer: object) -> Feedback:
    value = as_number(answer)
    params, ranks, strategy = MIXED_CASE

    def gb(strategy: str, precision: str = "fp16-master") -> float:
        return round(estimate(params, precision, "adam", strategy, ranks).total / 1e9, 1)

    if value is None or isinstance(answer, bool):
        return wrong(f"answer with a number of GB, got {answer!r}")
    if abs(value - gb(strategy)) <= 0.05:
        return correct("16-bit weights whole (2 bytes a parameter), then 16-bit gradients, float32 master weights "
                       "and Adam's moments sharded: (2 + 4 + 8) / 8 bytes a parameter")
    no_master = round(gb(strategy) - params * 4 / ranks / 1e9, 1)
    known = {gb("none"): "that is DDP: nothing sharded, 16 bytes a parameter on every rank",
             gb("zero1"): "that is zero1, where the 16-bit gradients stay whole (zero2 shards them), or float32 "
                          "weights and gradients",
             gb("zero3"): "that is zero3: zero2 keeps the 16-bit weights whole on every rank",
             no_master: "the float32 master weights (4 bytes a parameter) are missing: they are sharded with "
                        "the optimizer state"}
    for figure, why in known.items():
        if abs(value - figure) <= 0.05:
            return wrong(why)
    return wrong("count bytes a parameter: 16-bit weight and gradient, float32 master weight and two Adam moments; "
                 "zero2 shards all but the weight")


QUESTIONS_08: tuple[Question, ...] = (
    Question(f"Classic mixed precision (16-bit weights and gradients, float32 master weights and Adam moments): "
             f"a model of {MIXED_CASE[0]:,} parameters over {MIXED_CASE[1]} ranks with {MIXED_CASE[2]}. How many GB "
             "(10^9 bytes, to 0.1) of parameters, gradients and optimizer state does each rank hold?",
             grade=_mixed_zero2_gb, example="12.5"),
    Question("FSDP2 shards a 12-layer model, each layer its own unit, over 4 ranks (reshard_after_forward=True, "
             "the default). While layer 7 computes its backward, whose whole (gathered) weights does a rank hold?", (
        O("Layer 7's only.", "no: layer 6, the next one of backward, is already gathered: FSDP2 prefetches it so that "
                             "its all-gather overlaps layer 7's computation"),
        O("Layer 7's and layer 6's.", "layer 7 computes; layer 6, next in backward, was gathered early (prefetch)"),
        O("All 12 layers'.", "no: that is reshard_after_forward=False, which keeps every unit gathered from its "
                             "forward to its backward"),
        O("None: each rank computes with its quarter of each weight.",
          "no: a layer needs its whole weight to compute; the shard is what a rank stores between uses"),
    ), answer="b"),
    Question("A distributed checkpoint (torch.distributed.checkpoint) was saved by 2 ranks. Can training resume on 3?", (
        O("No: it must be resumed with the same number of ranks.",
          "no: the notebook resumed it at 3 ranks, to the same weights as one process"),
        O("Yes: its metadata says which rows each file holds, and each new rank reads the pieces its shards need.",
          "that is resharding on load"),
        O("Only after rank 0 gathers it into one file.", "no: no rank ever needs the whole model at once"),
    ), answer="b"),
)
