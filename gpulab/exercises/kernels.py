"""Checks for notebook 14: a learner's Triton kernels, launched on shapes the notebook never used. Plus its questions.

Each check launches the learner's kernel itself, on tensors where the notebook's kernels run (``device``: the
CPU for Triton's interpreter, a CUDA GPU when compiled). Every input and output is followed by a **guard**:
more elements of the same allocation, filled with a marker. A kernel that reads or writes past the end
touches the guard, not memory the process does not own, so a missing mask is reported, never a crash.
This module imports no Triton: a kernel is anything ``kernel[grid](...)`` launches (``@triton.jit``).
"""

from __future__ import annotations

import warnings

import torch

from gpulab.exercises import Feedback, as_number, correct, wrong
from gpulab.exercises import Option as O
from gpulab.exercises import Question

MARK = -7.0
EPS = 1e-6
ADD_CASES = ((1, 1024), (1000, 1024), (1024, 1024), (1025, 1024), (4099, 1024), (1000, 256))
ROWS_CASES = ((1, 1), (3, 5), (4, 100), (2, 1024), (5, 33), (6, 1000))


def blocks(n: int, block: int) -> int:
    """Program instances for ``n`` elements, ``block`` at a time: ``ceil(n / block)``."""
    return -(-n // block)


def next_power_of_2(n: int) -> int:
    """The smallest power of 2 that is at least ``n`` (``tl.arange`` wants a power of 2)."""
    return 1 << max(0, n - 1).bit_length()


def guarded(shape: tuple[int, ...], guard: int, device: torch.device, values: torch.Tensor | None = None):
    """``(tensor of shape, the guard after it)``: views of one float32 buffer, guard filled with :data:`MARK`."""
    n = 1
    for side in shape:
        n *= side
    buf = torch.full((n + guard,), MARK, device=device)
    if values is not None:
        buf[:n] = values.reshape(-1).to(device)
    return buf[:n].view(shape), buf[n:]


def _is_kernel(kernel: object) -> bool:
    return hasattr(kernel, "fn") and hasattr(type(kernel), "__getitem__")


def _not_a_kernel(kernel: object, name: str) -> Feedback | None:
    if _is_kernel(kernel):
        return None
    if callable(kernel):
        return wrong(f"{name} is a plain Python function: put @triton.jit on the line above its def")
    return wrong(f"pass your kernel itself, e.g. check(…, {name}, …), not {type(kernel).__name__}")


def _launch(kernel, grid, *args, **kwargs) -> str | None:
    """Launch; None when it ran, else what it raised, in one line."""
    try:
        with warnings.catch_warnings():  # the interpreter's NumPy warns of 0 / 0; the check reports the NaN itself
            warnings.simplefilter("ignore", RuntimeWarning)
            kernel[grid](*args, **kwargs)
    except Exception as exc:  # the learner's kernel may raise anything (InterpreterError, CompilationError...)
        first = (str(exc).strip().splitlines() or [""])[-1][:300]
        return f"{type(exc).__name__}: {first}"
    return None


def check_add(kernel, device: str | torch.device) -> Feedback:
    """Does ``kernel(x_ptr, y_ptr, out_ptr, n, BLOCK)`` compute ``x + y``, on sizes that are not multiples of BLOCK,
    without writing past the end of ``out``?"""
    if (bad := _not_a_kernel(kernel, "add_kernel")) is not None:
        return bad
    device = torch.device(device)
    gen = torch.Generator().manual_seed(14)
    for n, block in ADD_CASES:
        guard = 2 * block
        x, _ = guarded((n,), guard, device, torch.randn(n, generator=gen))
        y, _ = guarded((n,), guard, device, torch.randn(n, generator=gen))
        out, after = guarded((n,), guard, device)
        grid = (blocks(n, block),)
        if (err := _launch(kernel, grid, x, y, out, n, BLOCK=block)) is not None:
            return wrong(f"n={n}, BLOCK={block}: the launch raised {err}")
        if bool((after != MARK).any()):
            return wrong(f"n={n}, BLOCK={block}: your kernel wrote {int((after != MARK).sum())} values past the end of "
                         "out. Give tl.store the mask: tl.store(out_ptr + offsets, x + y, mask=mask)")
        expected = x + y
        if torch.equal(out, expected):
            continue
        if bool((out == MARK).all()):
            return wrong(f"n={n}: out was never written: end with tl.store(out_ptr + offsets, x + y, mask=mask)")
        if torch.equal(out, x - y) or torch.equal(out, x * y):
            return wrong(f"n={n}: out holds {'x - y' if torch.equal(out, x - y) else 'x * y'}; store x + y")
        first = int((out != expected).nonzero()[0])
        if n > block and first >= block:
            return wrong(f"n={n}, BLOCK={block}: right in the first block, wrong from element {first}: each program "
                         "instance starts at its own block, offsets = pid * BLOCK + tl.arange(0, BLOCK), with "
                         "pid = tl.program_id(0)")
        return wrong(f"n={n}, BLOCK={block}: element {first} is {out[first].item():g}, expected "
                     f"{expected[first].item():g}")
    return correct(f"x + y on {len(ADD_CASES)} sizes, most not a multiple of BLOCK, and nothing written past the end")


def rms_norm_reference(x: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """Each row divided by its root mean square: ``x / sqrt(mean(x**2) + eps)``."""
    return x / torch.sqrt((x * x).mean(dim=1, keepdim=True) + eps)


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return bool(torch.allclose(a, b, rtol=1e-4, atol=1e-5, equal_nan=False))


def _rows_cases(gen: torch.Generator) -> list[torch.Tensor]:
    cases = [torch.randn(rows, cols, generator=gen) * 3 for rows, cols in ROWS_CASES]
    cases[3][1] = 0.0  # a row of zeros: its mean square is 0, so eps is what keeps it finite
    return cases


def check_rms_norm(kernel, device: str | torch.device) -> Feedback:
    """Does ``kernel(x_ptr, out_ptr, n_cols, eps, BLOCK)``, launched with one program instance per row and
    BLOCK = the next power of 2 of n_cols, write each row of x divided by its root mean square?"""
    if (bad := _not_a_kernel(kernel, "rms_norm_kernel")) is not None:
        return bad
    device = torch.device(device)
    cases = _rows_cases(torch.Generator().manual_seed(14))
    results = []
    for values in cases:
        rows, cols = values.shape
        block = next_power_of_2(cols)
        x, _ = guarded((rows, cols), 2 * block, device, values)
        out, after = guarded((rows, cols), 2 * block, device)
        if (err := _launch(kernel, (rows,), x, out, cols, EPS, BLOCK=block)) is not None:
            return wrong(f"shape {rows} x {cols}: the launch raised {err}")
        if bool((after != MARK).any()):
            return wrong(f"shape {rows} x {cols}: your kernel wrote past the end of out. Mask the store: "
                         "tl.store(..., mask=cols < n_cols)")
        results.append((values, out.cpu(), block))
    wrong_shapes = [f"{v.shape[0]} x {v.shape[1]}" for v, got, _ in results if not _close(got, rms_norm_reference(v))]
    if wrong_shapes and all(bool((got == MARK).all()) for _, got, _ in results):
        return wrong("out was never written: end with tl.store(out_ptr + row * n_cols + cols, ..., mask=cols < n_cols)")
    if not wrong_shapes:
        return correct(f"every row of {len(results)} shapes the notebook never used, a row of zeros included, "
                       "equals x / sqrt(mean(x**2) + eps)")
    if any(bool(torch.isnan(got).any()) for _, got, _ in results):
        return wrong("a row of zeros gave NaN (0 / 0): add eps inside the square root, sqrt(mean + eps)")
    if all(_close(got, v / torch.sqrt((v * v).sum(1, keepdim=True) / b + EPS)) for v, got, b in results):
        return wrong("the mean divides by BLOCK; divide the sum by n_cols, the real number of columns")
    if all(_close(got, v / torch.sqrt((v * v).sum(1, keepdim=True) + EPS)) for v, got, _ in results):
        return wrong("that divides by sqrt(sum + eps): take the mean, the sum divided by n_cols")
    if all(_close(got, v / ((v * v).mean(1, keepdim=True) + EPS)) for v, got, _ in results):
        return wrong("take the square root of the mean square: x / tl.sqrt(mean + eps)")
    powers = [f"{v.shape[0]} x {v.shape[1]}" for v, _, b in results if b == v.shape[1]]
    if not set(wrong_shapes) & set(powers):
        return wrong(f"right only where n_cols is a power of 2, wrong for {', '.join(wrong_shapes)}: mask the load "
                     "(mask=cols < n_cols, other=0.0) so the lanes past the row add nothing")
    return wrong(f"wrong for the shapes {', '.join(wrong_shapes)}: compare your formula with "
                 "x / sqrt(mean(x**2) + eps), with x = one row")


def _instances(answer: object) -> Feedback:
    n, block = 1000, 256
    value = as_number(answer)
    if value is None:
        return wrong(f"answer with a number of program instances, got {answer!r}")
    need = blocks(n, block)
    if value == need:
        return correct(f"ceil({n} / {block}) = {need}: the last instance gets {n - (need - 1) * block} elements, and "
                       "its mask switches off the rest")
    if value == n // block:
        return wrong(f"{n // block} instances cover only {n // block * block} elements: round up, so the last "
                     f"{n - n // block * block} get an instance too")
    if value == n / block:
        return wrong("program instances are whole: round n / BLOCK up")
    if value == n:
        return wrong("one instance handles a whole block of BLOCK elements, not one element")
    return wrong("divide the number of elements by the block size, and round up")


QUESTIONS_14 = (
    Question("A kernel handles BLOCK = 256 elements in each program instance. How many program instances does a "
             "vector of 1,000 elements need?", grade=_instances, example="10"),
    Question("On a GPU, the fused softmax kernel is faster than the same softmax written as separate torch "
             "operations. Why?", (
                 O("It does fewer floating-point operations.",
                   "no: both compute the same maximum, exponentials, sum and division"),
                 O("It reads each row from memory once and writes it once; the separate operations write their "
                   "intermediate tensors to memory and read them back.",
                   "a softmax is memory-bound, so the bytes moved set its time, and fusion cuts them"),
                 O("Triton runs the exponentials on the Tensor Cores.",
                   "no: Tensor Cores multiply matrices; a softmax has no matrix product"),
             ), answer="b"),
    Question("A Triton matrix multiply on float32 inputs is faster than `torch.matmul` on an NVIDIA GPU, but "
             "further from the exact result. Why?", (
                 O("Triton adds the products in a different order.",
                   "the order changes the last digits only; the gap here is larger"),
                 O("`tl.dot` cuts float32 inputs down to TF32 by default (`input_precision=\"tf32\"`), while torch "
                   "keeps float32 unless TF32 is allowed.",
                   "TF32 keeps fewer digits and runs on the Tensor Cores; pass input_precision=\"ieee\" for true float32"),
                 O("The GPU's float32 numbers are less precise than the CPU's.",
                   "no: float32 is the same format everywhere; the inputs were cut down to TF32"),
             ), answer="b"),
)
