"""THE timer: every measured duration in gpulab comes from here, and waits for the device first.

GPUs run work asynchronously: a clock read without waiting times only the *launch*. Both tools here
call :func:`gpulab.devices.synchronize` before every clock read, on CUDA, MPS and XPU alike.

- :func:`time_call`: the median seconds per call of a short statement (``torch.utils.benchmark``:
  warm-up runs, then ``blocked_autorange``). Use it for anything repeatable.
- :class:`Stopwatch`: the seconds of one block that runs once (a cold compile, an epoch, a launch's
  training), ``with Stopwatch(device) as sw: ...; sw.seconds``.

The conditions of a measurement: :func:`using_threads` and :func:`float32_matmul_precision`, each
restoring the old setting afterwards. Deadlines and time limits of processes are not measurements:
they use ``time.monotonic`` where they live (:mod:`gpulab.distributed.launch.torchrun`).
"""

from __future__ import annotations

import contextlib
import time
from typing import Iterator

import torch
from torch.utils import benchmark

from gpulab import devices
from gpulab.validate import positive_int, positive_number

#: ``torch.set_float32_matmul_precision`` values: strict FP32, TF32 allowed, bfloat16 allowed.
MATMUL_PRECISIONS = ("highest", "high", "medium")


class Stopwatch:
    """Wall-clock seconds of a block, waiting for ``device``'s queued work at its start and its end.

    ``with Stopwatch("cuda") as sw: train()`` then ``sw.seconds``; ``sw.elapsed()`` reads it inside.
    Where the end is not a block (a launch's output arriving line by line), ``Stopwatch().start()``.
    """

    def __init__(self, device: str | torch.device | None = "cpu") -> None:
        self.device = torch.device("cpu" if device is None else device)
        self.seconds: float | None = None
        self._start: float | None = None

    def start(self) -> "Stopwatch":
        """Start (again) now, once the device's queued work is done."""
        devices.synchronize(self.device)
        self._start = time.perf_counter()
        return self

    def __enter__(self) -> "Stopwatch":
        return self.start()

    def elapsed(self) -> float:
        """Seconds since the block started (the device's queued work waited for)."""
        if self._start is None:
            raise RuntimeError("the stopwatch has not started: use it as `with Stopwatch(device) as sw:`")
        devices.synchronize(self.device)
        return time.perf_counter() - self._start

    def __exit__(self, *exc) -> None:
        self.seconds = self.elapsed()


@contextlib.contextmanager
def _torch_setting(get, set_, value) -> Iterator:
    """Run the block with ``set_(value)`` (None: unchanged); yields ``get()``; the old value is restored."""
    before = get()
    if value is not None:
        set_(value)
    try:
        yield get()
    finally:
        set_(before)


def using_threads(threads: int | None) -> contextlib.AbstractContextManager[int]:
    """Run the block with ``torch.set_num_threads(threads)`` (None: unchanged); the old value is restored."""
    if threads is not None:
        positive_int(threads, "threads")
    return _torch_setting(torch.get_num_threads, torch.set_num_threads, threads)


def _clock_for(device: torch.device):
    """A clock that first waits for ``device`` to finish its queued work."""

    def clock() -> float:
        devices.synchronize(device)
        return time.perf_counter()

    return clock


def time_call(stmt: str, env: dict, device: str | torch.device = "cpu", *, warmup: int = 2,
              min_run_time: float = 0.1, threads: int | None = None) -> tuple[float, int]:
    """Median seconds per run of ``stmt`` (evaluated with ``env`` as globals) and the number of blocks timed.

    Warm-up runs come first, the clock synchronizes ``device``, and ``threads`` (if given) is set for
    the measurement and restored afterwards.
    """
    device = torch.device(device)
    positive_number(min_run_time, "min_run_time")
    with using_threads(threads) as n:
        code = compile(stmt, "<timed>", "exec")
        for _ in range(warmup):
            exec(code, dict(env))
        devices.synchronize(device)
        timer = benchmark.Timer(stmt=stmt, globals=dict(env), timer=_clock_for(device), num_threads=n)
        measurement = timer.blocked_autorange(min_run_time=min_run_time)
    return float(measurement.median), len(measurement.times)


def check_matmul_precision(precision: object) -> str | None:
    """``None`` (keep torch's setting) or one of :data:`MATMUL_PRECISIONS`; a one-line ValueError otherwise."""
    if precision is None or precision in MATMUL_PRECISIONS:
        return precision
    raise ValueError(f"unknown matmul precision {precision!r}: use one of {', '.join(MATMUL_PRECISIONS)}")


def float32_matmul_precision(precision: str | None) -> contextlib.AbstractContextManager[str]:
    """Run the block with ``torch.set_float32_matmul_precision(precision)`` (None: unchanged); restored after.

    ``"highest"`` keeps float32 matmuls in strict FP32; ``"high"`` lets CUDA GPUs since Ampere use TF32
    tensor cores (10-bit mantissa inputs, float32 accumulation). Yields the setting in effect.
    """
    precision = check_matmul_precision(precision)
    return _torch_setting(torch.get_float32_matmul_precision, torch.set_float32_matmul_precision, precision)
