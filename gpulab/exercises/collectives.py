"""Checks for notebook 09 (collectives and their cost) and its self-check questions ``QUESTIONS_09``.

Every expected value is computed with ``gpulab.distributed.cost``, the same functions the notebook uses.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpulab.distributed import cost
from gpulab.exercises import Feedback, as_number, correct, wrong
from gpulab.exercises.quiz import Option as O
from gpulab.exercises.quiz import Question


@dataclass(frozen=True)
class RankScenario:
    """Data-parallel training on a fixed global ``batch``: when do more ranks stop helping?

    ``compute_per_sample``: seconds of forward + backward per sample on one rank; ``nbytes``: gradient
    bytes all-reduced per step; ``alpha``, ``beta``: the ring's seconds per step and per byte per link
    (``cost.ring_from_fit``); ranks are tried from 1 to ``max_ranks``.
    """

    compute_per_sample: float
    batch: int
    nbytes: int
    alpha: float
    beta: float
    max_ranks: int = 256

    def __post_init__(self) -> None:
        cost.check_positive(self.compute_per_sample, "compute_per_sample")
        cost.check_ranks(self.batch, "batch")
        cost.check_positive(self.nbytes, "nbytes")
        cost.check_ranks(self.max_ranks, "max_ranks")
        if self.alpha < 0 or self.beta < 0:
            raise ValueError(f"alpha={self.alpha!r} and beta={self.beta!r} must be >= 0")

    def step_seconds(self, ranks: int) -> float:
        """The model's step time with ``ranks`` ranks."""
        return cost.step_seconds(ranks, self.compute_per_sample, self.batch, self.nbytes, self.alpha, self.beta)

    def answer(self, alpha: float | None = None, beta: float | None = None) -> int:
        """The rank count beyond which the step stops getting faster (optionally with another alpha/beta)."""
        return cost.best_rank_count(self.compute_per_sample, self.batch, self.nbytes,
                                    self.alpha if alpha is None else alpha, self.beta if beta is None else beta,
                                    self.max_ranks)


def _whole(answer: object) -> int | None:
    if hasattr(answer, "item") and getattr(answer, "numel", lambda: 0)() == 1:
        answer = answer.item()
    if isinstance(answer, float) and answer.is_integer():
        answer = int(answer)
    return answer if isinstance(answer, int) and not isinstance(answer, bool) else None


def check_rank_limit(answer: object, scenario: RankScenario) -> Feedback:
    """Is ``answer`` the rank count beyond which ``scenario``'s step time stops falling?"""
    n = _whole(answer)
    if n is None:
        return wrong(f"answer with a whole number of ranks, got {answer!r}")
    top = min(scenario.max_ranks, scenario.batch)
    if not 1 <= n <= top:
        return wrong(f"{n} ranks is outside the counts tried here, 1 to {top}")
    right = scenario.answer()
    ms = lambda ranks: f"{scenario.step_seconds(ranks) * 1e3:.4g} ms"  # noqa: E731
    if n == right:
        after = f"; with {n + 1} it would take {ms(n + 1)}" if n < top else " (the largest count tried)"
        return correct(f"{n} ranks: a step takes {ms(n)}{after}. Beyond that, each rank saves less compute "
                       "than the ring's extra latency (2 x alpha per rank) costs")
    if n == top:
        return wrong(f"the step stops getting faster long before {top} ranks: each extra rank adds two ring "
                     "steps of latency (alpha) to the all-reduce, while the compute it saves keeps shrinking")
    if n == scenario.answer(beta=0.0) and n != right:
        return wrong("that leaves out the bandwidth term 2(n-1)/n x bytes x beta of the all-reduce")
    if n == right + 1:
        return wrong(f"with {n} ranks a step ({ms(n)}) is already slower than with {n - 1} ({ms(n - 1)}): "
                     "give the last count that still helps")
    if n < right:
        return wrong(f"one more rank still helps: {n} rank(s) take {ms(n)}, {n + 1} take {ms(n + 1)}")
    return wrong(f"{n} ranks take {ms(n)}, slower than {n - 1} ranks ({ms(n - 1)}): compute step_seconds(n) for "
                 "n = 1, 2, 3, ... and stop where it no longer falls")



def _busbw_question(answer: object) -> Feedback:
    nbytes, seconds, ranks = 1e9, 0.010, 8
    alg = cost.algbw(nbytes, seconds) / 1e9
    bus = cost.busbw("all_reduce", nbytes, seconds, ranks) / 1e9
    value = as_number(answer)
    if value is None:
        return wrong(f"answer with a number of GB/s, got {answer!r}")
    if abs(value - bus) < 0.01 * bus:
        return correct(f"algbw = 1 GB / 10 ms = {alg:g} GB/s; busbw = algbw x 2(n-1)/n = {alg:g} x 14/8 = {bus:g} GB/s")
    if abs(value - alg) < 0.01 * alg:
        return wrong(f"{alg:g} GB/s is the algorithm bandwidth; the bus bandwidth multiplies it by 2(n-1)/n")
    if abs(value - 2 * alg) < 0.01 * alg:
        return wrong("the factor is 2(n-1)/n, not 2: each rank sends and receives (n-1)/n of the data twice")
    if abs(value - alg * (ranks - 1) / ranks) < 0.01 * alg:
        return wrong("(n-1)/n is the factor of all_gather and reduce_scatter; all_reduce does both: 2(n-1)/n")
    return wrong("first algbw = bytes / seconds, then busbw = algbw x 2(n-1)/n with n = 8")


def _accumulation_question(answer: object) -> Feedback:
    micro, buckets = 8, 3
    value = as_number(answer)
    if value is None:
        return wrong(f"answer with a number of all-reduces, got {answer!r}")
    if value == buckets:
        return correct(f"under no_sync() the first {micro - 1} backward passes only add up gradients locally; "
                       f"the last one all-reduces every bucket once: {buckets}")
    if value == micro * buckets:
        return wrong(f"{micro * buckets} = {micro} x {buckets} is what it costs without no_sync()")
    if value == 1:
        return wrong("DDP all-reduces bucket by bucket, not the whole gradient at once")
    if value == micro:
        return wrong("count per bucket: the last backward pass all-reduces each bucket once")
    return wrong("no_sync() skips the all-reduce; only the last micro-batch's backward pass communicates")


QUESTIONS_09 = (
    Question("FSDP keeps only a shard of the parameters on each rank. Which collectives replace DDP's all-reduce "
             "of the gradients?", (
                 O("An all_gather of the parameters before they are used, and a reduce_scatter of the gradients "
                   "after backward.", "every rank briefly gets whole layers, then keeps the summed gradient of its "
                   "shard only: together the cost of one all-reduce"),
                 O("A broadcast of the parameters from rank 0 in every step.",
                   "no: a broadcast sends one rank's tensor; FSDP's ranks each hold a different shard"),
                 O("Two all-reduces, one for the parameters and one for the gradients.",
                   "no: an all-reduce gives every rank the full sum; FSDP wants each rank to keep only its shard"),
             ), answer="a"),
    Question("An all_reduce of 1 GB takes 10 ms on 8 GPUs. What bus bandwidth (busbw, nccl-tests' definition) is "
             "that, in GB/s?", grade=_busbw_question, example="123"),
    Question("You accumulate gradients over 8 micro-batches per optimizer step, the first 7 inside `no_sync()`. "
             "The gradients fill 3 DDP buckets. How many all-reduces does one optimizer step make?",
             grade=_accumulation_question, example="5"),
)
