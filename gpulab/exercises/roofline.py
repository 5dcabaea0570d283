"""Checks for notebook 11: is an operation compute- or memory-bound on a machine? Plus its self-check questions.

The check calls the learner's ``bound(flops, nbytes, ridge)`` on operations the notebook has not
placed (and on those it has), with this machine's ridge point and an H200's, and compares with
``gpulab.profiling.roofline.classify(arithmetic_intensity(flops, nbytes), ridge)``.
"""

from __future__ import annotations

from typing import Callable

from gpulab.profiling import op_count as opcount
from gpulab.profiling import roofline
from gpulab.exercises import Feedback, as_number, correct, wrong
from gpulab.exercises import Option as O
from gpulab.exercises import Question
from gpulab.validate import positive_number


def cases() -> list[tuple[str, int, int]]:
    """``(name, flops, bytes)`` of the operations the check tries, all float32."""
    ops = [opcount.matmul_cost(64, 64, 64), opcount.matmul_cost(1024, 1024, 1024), opcount.matmul_cost(256, 4, 256),
           opcount.gelu_cost(4096)]
    n = 1_000_000
    ops.append(opcount.OpCost("x + y, 1M elements", n, 12 * n))
    ops.append(opcount.OpCost("Linear 512->512, batch 256", 2 * 256 * 512 * 512, 4 * (2 * 256 * 512 + 512 * 512 + 512)))
    return [(c.name, c.flops, c.bytes) for c in ops]


def _label(answer: object) -> str | None:
    """'compute-bound' / 'memory-bound' from what a learner may write ("compute", "Memory bound"), else None."""
    if not isinstance(answer, str):
        return None
    text = answer.strip().lower().replace("_", "-").replace(" ", "-")
    for bound in roofline.BOUNDS:
        if text in (bound, bound.split("-")[0]):
            return bound
    return None


def _expected(flops: float, nbytes: float, ridge: float) -> str:
    return roofline.classify(roofline.arithmetic_intensity(flops, nbytes), ridge)


def _mistake(got: dict, tried: list[tuple[str, int, int, float]]) -> str:
    """What the wrong answers have in common, as advice."""
    def same_as(value: Callable[[int, int], float]) -> bool:
        return all(got[(n, r)] == roofline.classify(value(f, b), r) for n, f, b, r in tried)

    if same_as(lambda f, b: f):
        return ("your answers compare a count (FLOPs, or bytes) with the ridge point; the ridge point is in FLOP "
                "per byte, so compare the arithmetic intensity flops / nbytes")
    if same_as(lambda f, b: b / f):
        return "your answers use nbytes / flops; the arithmetic intensity is flops / nbytes (FLOP per byte)"
    if all(got[(n, r)] != _expected(f, b, r) for n, f, b, r in tried):
        return "every answer is the opposite: below the ridge point an operation is memory-bound, above it compute-bound"
    return "compute the intensity flops / nbytes and compare it with ridge: below it memory-bound, above compute-bound"


def check_bound(fn: Callable[[float, float, float], str], ridge: float) -> Feedback:
    """Does ``fn(flops, nbytes, ridge)`` say ``'compute-bound'`` or ``'memory-bound'`` rightly?

    Tried with ``ridge`` (this machine's) and an H200's spec ridge point, on six operations.
    """
    ridge = positive_number(ridge, "ridge")
    if not callable(fn):
        return wrong(f"pass your function itself, e.g. check_bound(bound, ridge), not {type(fn).__name__}")
    tried, got = [], {}
    for r in (ridge, roofline.H200_SPEC.ridge):
        for name, flops, nbytes in cases():
            try:
                answer = fn(flops, nbytes, r)
            except Exception as exc:  # the learner's code may raise anything
                return wrong(f"bound({flops}, {nbytes}, {r:.3g}) for {name} raised {type(exc).__name__}: {exc}")
            label = _label(answer)
            if label is None:
                return wrong(f"bound(...) for {name} returned {answer!r}; return 'compute-bound' or 'memory-bound'")
            if abs(flops / nbytes / r - 1) < 0.02:
                continue  # too close to this ridge to grade: either answer is fair
            tried.append((name, flops, nbytes, r))
            got[(name, r)] = label
    bad = [(n, f, b, r) for n, f, b, r in tried if got[(n, r)] != _expected(f, b, r)]
    if bad:
        n, f, b, r = bad[0]
        return wrong(f"{len(bad)} of {len(tried)} wrong, e.g. {n} at ridge {r:.3g} FLOP/byte (intensity {f / b:.3g}): "
                     + _mistake(got, tried))
    return correct("right for every operation tried, at both ridge points: intensity = flops / nbytes, memory-bound below the ridge point "
                   "and compute-bound above it")



def _add_bytes(answer: object) -> Feedback:
    n, size = 1_000_000, 4
    value = as_number(answer)
    if value is None:
        return wrong(f"answer with a number of bytes, got {answer!r}")
    if value == 3 * n * size:
        return correct(f"two float32 inputs read and one output written: 3 x {n:,} x {size} bytes")
    if value == 2 * n * size:
        return wrong("that counts the two inputs; the result is written to memory too")
    if value in (n * size, 3 * n):
        return wrong(f"count each of the three tensors, {size} bytes per float32 element")
    if value == 3 * n * 8:
        return wrong("8 bytes is float64; float32 takes 4")
    return wrong("count the bytes of every tensor read and written: elements x bytes per element")


QUESTIONS_11 = (
    Question("On a machine whose ridge point is 10 FLOP/byte, an operation does 1e9 FLOPs and moves 1e9 bytes. "
             "What limits its speed?", (
                 O("Memory bandwidth: its intensity is 1 FLOP/byte, below the ridge point.",
                   "1e9 / 1e9 = 1 FLOP per byte: it waits for data, so it is memory-bound"),
                 O("Arithmetic: 1e9 FLOPs is a lot of work.",
                   "no: the FLOP count alone says nothing; divide it by the bytes and compare with the ridge point"),
                 O("Neither: the ridge point only applies to matrix multiplies.",
                   "no: the roofline places any operation by its FLOPs and its bytes"),
             ), answer="a"),
    Question("`x + y` on two float32 vectors of 1,000,000 elements, written to a third: how many bytes does it move "
             "at least?", grade=_add_bytes, example="1000"),
    Question("`torch.compile` made the tiny Boston MLP's training step barely faster, or slower. Why?", (
        O("torch.compile only works on GPUs.",
          "no: it compiled in this notebook, with a C++ compiler on a CPU or Triton on a GPU"),
        O("The first call compiles, so every call is slow.",
          "no: the first call compiles once; later calls reuse the compiled code"),
        O("A tiny step is mostly fixed costs per call (Python, the optimizer, one launch per kernel), and compiling "
          "removes only part of them.",
          "with little arithmetic to fuse there is little to gain; CUDA graphs attack the launch cost on GPUs"),
    ), answer="c"),
)
