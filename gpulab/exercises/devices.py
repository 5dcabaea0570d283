"""Checks for the hardware notebooks: 01 (count a matmul's work) and 02 (a device picker with fallback).

Both checks run on any machine: the picker exercise passes availability flags as arguments, so every
combination of CUDA / MPS / XPU can be tried on a CPU-only laptop.
"""

from __future__ import annotations

import itertools
from typing import Callable

import torch

from gpulab import bench
from gpulab.exercises import Feedback, correct, wrong

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

    Compared with ``gpulab.bench.matmul_flops``; a wrong count is described, never the right one.
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
