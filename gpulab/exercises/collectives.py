"""Checks for notebook 09 (collectives and their cost) and its self-check questions ``QUESTIONS_09``.

Every expected value is computed with ``gpulab.comm_cost``, the same functions the notebook uses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpulab import comm_cost as cost
from gpulab.validate import positive_int, positive_number
from gpulab.exercises import Feedback, as_number, correct, wrong
from gpulab.exercises import Option as O
from gpulab.exercises import Question


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
        positive_number(self.compute_per_sample, "compute_per_sample")
        positive_int(self.batch, "batch")
        positive_number(self.nbytes, "nbytes")
        positive_int(self.max_ranks, "max_ranks")
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


#: Rank counts at which the check calls the learner's ``step_seconds`` (the notebook prints none of its values)
PROBE_RANKS = (1, 2, 3, 5, 8, 13, 24, 37, 64, 100, 181, 256)


def _terms(scenario: RankScenario, n: int) -> tuple[float, float, float]:
    """(compute, ring latency, ring bandwidth) seconds of the model at ``n`` ranks."""
    compute = scenario.compute_per_sample * scenario.batch / n
    latency = 2 * (n - 1) * scenario.alpha
    return compute, latency, cost.ring_allreduce_seconds(scenario.nbytes, n, 0.0, scenario.beta)


def _diagnose(value: float, scenario: RankScenario, n: int) -> str:
    """What the learner's ``value`` at ``n`` ranks seems to get wrong, in words, without the model's value."""
    c, lat, bw = _terms(scenario, n)
    mistakes = (
        (1000 * (c + lat + bw), "it looks like milliseconds: return seconds"),
        (c + bw, "the latency term 2 (n - 1) x alpha seems missing"),
        (c + lat / 2 + bw, "the latency term needs 2 (n - 1) ring steps: n - 1 to reduce-scatter, n - 1 to all-gather"),
        (c + lat, "the bandwidth term 2 (n - 1) / n x nbytes x beta seems missing"),
        (c + lat + bw * n, "the bandwidth term is 2 (n - 1) / n x nbytes x beta: divide by n"),
        (c + lat + bw / 2, "the bandwidth term needs the factor 2: each half of the ring moves (n - 1) / n of the bytes"),
        (lat + bw, "the compute term compute_per_sample x batch / n seems missing"),
        (c * n + lat + bw, "the compute is not split: each rank computes batch / n samples"),
        (c, "the all-reduce is missing: add its latency and bandwidth terms"),
    )
    for guess, why in mistakes:
        if math.isclose(value, guess, rel_tol=1e-6):
            return why
    return "compare each term with the formula: compute_per_sample x batch / n, 2 (n - 1) x alpha, 2 (n - 1) / n x nbytes x beta"


def check_step_seconds(step_seconds: object, scenario: RankScenario) -> Feedback:
    """Does the learner's ``step_seconds(ranks)`` give the scenario's model at rank counts the notebook never shows?"""
    if not callable(step_seconds):
        return wrong(f"define step_seconds(ranks) as a function, got {step_seconds!r}")
    top = min(scenario.max_ranks, scenario.batch)
    probes = [n for n in PROBE_RANKS if n <= top] + ([top] if top not in PROBE_RANKS else [])
    for n in probes:
        try:
            raw = step_seconds(n)
        except Exception as error:  # the learner's code: report, never raise
            return wrong(f"step_seconds({n}) raised {type(error).__name__}: {error}")
        value = None if isinstance(raw, str) else as_number(raw)
        if value is None:
            return wrong(f"step_seconds({n}) must return a number of seconds, got {raw!r}")
        if not math.isclose(value, scenario.step_seconds(n), rel_tol=1e-6, abs_tol=1e-15):
            return wrong(f"step_seconds({n}) does not match the model: {_diagnose(value, scenario, n)}")
    return correct(f"step_seconds matches the model at {len(probes)} rank counts from 1 to {top}")


def check_rank_limit(answer: object, scenario: RankScenario, step_seconds: object = None) -> Feedback:
    """Are the learner's ``step_seconds`` the scenario's model and ``answer`` the count beyond which it stops falling?

    The feedback never states a step time or which side of the right count a wrong answer lies on.
    """
    model = check_step_seconds(step_seconds, scenario)
    if not model.ok:
        return model
    n = _whole(answer)
    if n is None:
        return wrong(f"step_seconds is right; now answer with a whole number of ranks, got {answer!r}")
    top = min(scenario.max_ranks, scenario.batch)
    if not 1 <= n <= top:
        return wrong(f"{n} ranks is outside the counts tried here, 1 to {top}")
    if n == scenario.answer():
        if n == top:
            return correct("the step keeps getting faster up to the largest count tried here: the compute each rank "
                           "saves still costs more than the two ring steps of latency (2 x alpha) it adds")
        fewer = "a second rank would make a step slower" if n == 1 else \
            "one rank fewer would make a step slower, and so would one more"
        return correct(f"{fewer}. From this count on, each extra rank adds two ring steps of latency (2 x alpha) and "
                       "a little bandwidth time, which cost more than the compute it saves")
    if n == top:
        return wrong(f"the step stops getting faster long before {top} ranks: each extra rank adds two ring steps "
                     "of latency (alpha) to the all-reduce, while the compute it saves keeps shrinking")
    if n == scenario.answer(beta=0.0):
        return wrong("that leaves out the bandwidth term 2(n-1)/n x bytes x beta of the all-reduce")
    return wrong(f"your step_seconds is right, but {n} is not where it stops falling: the answer is the n with "
                 "step_seconds(n) < step_seconds(n - 1) (or n = 1) and step_seconds(n + 1) >= step_seconds(n). "
                 "Start at n = 1 and add a rank while step_seconds(n + 1) < step_seconds(n)")


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
        return wrong("once it has rebuilt its buckets, DDP all-reduces bucket by bucket, not the whole gradient at once")
    if value == micro:
        return wrong("count per bucket: the last backward pass all-reduces each bucket once")
    return wrong("no_sync() skips the all-reduce; only the last micro-batch's backward pass communicates")


_DDP_GB, _FSDP_GB = cost.bytes_sent_per_step("ddp", 2.0, 8), cost.bytes_sent_per_step("fsdp", 2.0, 8)
_ONE_GB = cost.ring_bytes_sent("all_gather", 2.0, 8)

QUESTIONS_09 = (
    Question("A model has 2 GB of float32 gradients (and as many bytes of parameters), in many FSDP units. It "
             "trains on 8 ranks with FSDP2's defaults and ring collectives. How many bytes does each rank send in "
             "one training step?", (
                 O(f"{_DDP_GB:g} GB.", f"{_DDP_GB:g} GB = 2(n-1)/n x 2 GB is DDP's all-reduce, or FSDP without its second "
                   "all-gather; FSDP2 gathers every unit but the root again before backward"),
                 O(f"{_FSDP_GB:g} GB.", "an all-gather before forward, another before backward (FSDP2 frees each unit "
                   "after its forward), a reduce-scatter after it: each (n-1)/n x 2 GB, so "
                   f"3 x 7/8 x 2 GB = {_FSDP_GB:g} GB, half as much again as DDP"),
                 O("6 GB.", "that counts every byte of each of the three collectives; in a ring each rank sends only "
                   "(n-1)/n of them"),
                 O(f"{_ONE_GB:g} GB.", f"{_ONE_GB:g} GB = (n-1)/n x 2 GB is one collective; the step runs three"),
             ), answer="b"),
    Question("An all_reduce of 1 GB takes 10 ms on 8 GPUs. What bus bandwidth (busbw, nccl-tests' definition) is "
             "that, in GB/s?", grade=_busbw_question, example="123"),
    Question("You accumulate gradients over 8 micro-batches per optimizer step, the first 7 inside `no_sync()`. "
             "The gradients fill 3 DDP buckets (after the first step, once DDP has rebuilt its buckets). How many "
             "all-reduces does one later optimizer step make?",
             grade=_accumulation_question, example="5"),
)
