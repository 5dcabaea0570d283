"""Checks for the hardware notebooks: 01 (count a matmul's work) and 02 (a device picker with fallback).

Both checks run on any machine: the picker exercise passes availability flags as arguments, so every
combination of CUDA / MPS / XPU can be tried on a CPU-only laptop.
"""

from __future__ import annotations

import itertools
from typing import Callable

import torch

from gpulab import bench
from gpulab.exercises import Feedback, Question, as_number, correct, wrong
from gpulab.exercises import Option as O

PREFERENCES = ("auto", "cpu", "cuda", "mps", "xpu")
AUTO_ORDER = ("cuda", "mps", "xpu")


def expected_pick(prefer: str, cuda: bool, mps: bool, xpu: bool) -> torch.device:
    """The rule the exercise asks for.

    ``"auto"``: the first available of CUDA, MPS, XPU, else the CPU. A named device (``"cuda"``,
    ``"mps"``, ``"xpu"``): that device if available, else fall back to the CPU. ``"cpu"``: the CPU.
    """
    if prefer not in PREFERENCES:
        raise ValueError(f"unknown preference {prefer!r}: use one of {', '.join(PREFERENCES)}")
    flags = {"cuda": cuda, "mps": mps, "xpu": xpu}
    if prefer == "auto":
        for kind in AUTO_ORDER:
            if flags[kind]:
                return torch.device(kind)
        return torch.device("cpu")
    if prefer == "cpu" or not flags[prefer]:
        return torch.device("cpu")
    return torch.device(prefer)


def _scenario(prefer: str, cuda: bool, mps: bool, xpu: bool) -> str:
    have = [k for k, v in (("cuda", cuda), ("mps", mps), ("xpu", xpu)) if v] or ["only the cpu"]
    return f"prefer={prefer!r} on a machine with {' + '.join(have)}"


def check_device_picker(fn: Callable[[str, bool, bool, bool], torch.device]) -> Feedback:
    """Call ``fn(prefer, cuda, mps, xpu)`` for every preference and every availability combination.

    Correct when each answer is a ``torch.device`` of the expected type (the index does not matter).
    """
    if not callable(fn):
        return wrong(f"pass your function itself (e.g. check_device_picker(my_pick)), not {type(fn).__name__}")
    cases = [(p, *flags) for p in PREFERENCES for flags in itertools.product((False, True), repeat=3)]
    for prefer, cuda, mps, xpu in cases:
        want = expected_pick(prefer, cuda, mps, xpu)
        try:
            got = fn(prefer, cuda, mps, xpu)
        except Exception as exc:  # the learner's code may raise anything
            return wrong(f"{_scenario(prefer, cuda, mps, xpu)}: your function raised {type(exc).__name__}: {exc}")
        if got is None:
            return wrong(f"{_scenario(prefer, cuda, mps, xpu)}: your function returned None; "
                         f"return a torch.device, e.g. torch.device('cpu')")
        if not isinstance(got, torch.device):
            return wrong(f"{_scenario(prefer, cuda, mps, xpu)}: got {got!r} ({type(got).__name__}); "
                         f"return torch.device({str(got)!r}) instead")
        if got.type != want.type:
            return wrong(f"{_scenario(prefer, cuda, mps, xpu)}: expected {want.type}, got {got.type}")
    return correct(f"all {len(cases)} scenarios pick the right device (auto: CUDA > MPS > XPU > CPU; "
                   f"an absent named device falls back to the CPU)")


#: Matrix sides the notebook never prints a count for, so a learner's function cannot copy an output.
MATMUL_SIDES = (1, 2, 3, 10, 300)


def check_matmul_flops(fn: Callable[[int], int]) -> Feedback:
    """Notebook 01: ``fn(n)`` must return the floating-point operations of an ``n x n @ n x n`` matmul.

    Compared with the count torch's ``FlopCounterMode`` reports for such a matmul (a test keeps the course's
    copy of it equal); a wrong count is described, never the right one.
    """
    if not callable(fn):
        return wrong(f"pass your function itself, not {type(fn).__name__}")
    for n in MATMUL_SIDES:
        try:
            got = fn(n)
        except Exception as exc:  # the learner's code may raise anything
            return wrong(f"n={n}: your function raised {type(exc).__name__}: {exc}")
        if got is None:
            return wrong(f"n={n}: your function returned None; return a number")
        if not isinstance(got, (int, float)) or isinstance(got, bool):
            return wrong(f"n={n}: your function returned {got!r} ({type(got).__name__}); return a number")
        if got == n**3 != bench.matmul_flops(n):
            return wrong(f"n={n}: {got!r} counts the multiplications only; each of the n*n outputs also needs "
                         "n additions")
        if got != bench.matmul_flops(n):
            return wrong(f"n={n}: {got!r} is not the count; for each of the n*n outputs, count its "
                         "multiplications and its additions")
    return correct("an n x n matmul costs 2 n^3 operations: n multiply-adds for each of its n^2 outputs")


def _matmul_flops(answer: object) -> Feedback:
    m, k, n = 100, 300, 50
    value = as_number(answer)
    if value is None:
        return wrong(f"answer with a number, got {answer!r}")
    if value == 2 * m * k * n:
        return correct(f"each of the {m} x {n} outputs needs {k} multiplications and {k} additions: 2 m k n")
    if value == m * k * n:
        return wrong("that counts the multiplications only: every product is also added to a sum")
    if value in (2 * m**3, 2 * k**3, 2 * n**3):
        return wrong("2 n^3 is for two square n x n matrices; here the three sizes differ")
    return wrong("count per output: the result has m x n numbers, each a sum of k products")


QUESTIONS_01: tuple[Question, ...] = (
    Question("Adding two long vectors (`x + y`) reaches far fewer GFLOP/s than a big matrix multiply on the "
             "same processor. Why?", (
                 O("An addition is slower than a multiplication.",
                   "no: an addition costs about as much as a multiplication; what differs is the data each needs"),
                 O("Each number is used once, so memory bandwidth, not arithmetic, sets the speed.",
                   "an addition needs fresh bytes for every operation, while a matmul reuses each number n times"),
                 O("PyTorch adds vectors on one thread only.",
                   "no: element-wise operations use many threads too, and still wait for memory"),
             ), answer="b"),
    Question("How many floating-point operations does multiplying a 100 x 300 matrix by a 300 x 50 matrix "
             "take? Compute it in code if you like.", grade=_matmul_flops, example="123456"),
    Question("What must change in a PyTorch program to run the same model on a GPU instead of the CPU?", (
        O("Rewrite the layers as CUDA kernels.",
          "no: PyTorch already calls cuBLAS and cuDNN on a GPU (oneDNN on a CPU) for you"),
        O("Move the model and its data with `.to(device)`.",
          "the same code runs anywhere: only where the tensors live changes"),
        O("Nothing: PyTorch uses a GPU by itself whenever there is one.",
          "no: tensors are created on the CPU and stay there until you move them with `.to(device)`"),
    ), answer="b"),
)



QUESTIONS_02: tuple[Question, ...] = (
    Question("On a laptop with no NVIDIA GPU, what does `torch.cuda.is_available()` do?", (
        O("It raises an error because CUDA is missing.", "no: it never raises; it answers False"),
        O("It returns False, and `torch.cuda.device_count()` returns 0.",
          "no GPU is not an error: your code asks, and falls back to the CPU"),
        O("It returns True when the torch build includes CUDA.",
          "no: a CUDA build still answers False when there is no usable NVIDIA GPU and driver"),
    ), answer="b"),
    Question("`nvidia-smi` is not found on a MacBook. What does that mean?", (
        O("PyTorch was installed wrongly.", "no: nvidia-smi comes with NVIDIA's driver, not with PyTorch"),
        O("Nothing is wrong: this machine has no NVIDIA driver.",
          "nvidia-smi exists only where NVIDIA's driver is installed; a Mac uses MPS instead"),
        O("CUDA must be installed before the course.",
          "no: every notebook runs without CUDA, on the CPU or on Apple's MPS"),
    ), answer="b"),
    Question("A notebook has already used CUDA. A cell then sets `os.environ['CUDA_VISIBLE_DEVICES'] = '1'`. "
             "Which GPUs does this notebook see afterwards?", (
        O("Only GPU 1, now called `cuda:0`.",
          "not in this process: a NEW process started with the variable set would see only GPU 1, as cuda:0"),
        O("The same GPUs as before.",
          "CUDA reads the variable when the process starts using it: set it before, or in a fresh process"),
        O("No GPU at all.", "no: the variable is read when CUDA starts, and here CUDA has already started"),
    ), answer="b"),
)
