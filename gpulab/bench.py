"""Correct timing on any device, and two probes: matrix multiply (GFLOP/s) and memory copy (GB/s).

Timing goes through ``torch.utils.benchmark.Timer``: the operation runs a few times first (warm-up:
memory allocation, kernel selection, caches), then ``blocked_autorange`` repeats it in blocks until
``min_run_time`` seconds are spent and reports the median time per call. GPUs run work
asynchronously, so a clock read without waiting would time only the *launch*; the timer used here
calls :func:`gpulab.devices.synchronize` before every clock read, on CUDA, MPS and XPU alike
(recent torch does this for any accelerator; older versions only for CUDA).

Examples::

    from gpulab import bench
    r = bench.matmul_probe("cpu", size=512, dtype="float32", threads=1)
    r.rate, r.unit                              # e.g. (95.1, 'GFLOP/s')
    bench.copy_probe("cuda", size_mb=256, kind="h2d", pinned=True)   # pinned host -> GPU
    bench.save_results("bench.json", [r]); bench.load_results("bench.json")

Every result is a :class:`BenchResult` carrying the device, torch version, thread count, dtype, size,
seconds, rate and an ISO UTC date, and turns into JSON and back.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import platform
import time
from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import torch
from torch.utils import benchmark

from gpulab import devices
from gpulab.atomic import write_json

DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
PROBES = ("matmul", "copy")
COPY_KINDS = ("device", "h2d", "d2h")
FORMAT = "gpulab-bench/1"


@dataclass(frozen=True)
class BenchResult:
    """One measurement.

    ``size`` is the matrix side ``n`` for ``matmul`` (``n x n @ n x n``) and MiB copied for ``copy``.
    ``rate`` is GFLOP/s (``2 n^3 / seconds / 1e9``) for matmul and GB/s (``bytes_moved / seconds / 1e9``)
    for copy. A copy within one device reads and writes every byte, so ``bytes_moved`` counts both
    (as CUDA's ``bandwidthTest`` does, and as memory-bandwidth spec sheets do); host<->device copies
    count the bytes once.
    """

    probe: str
    device: str
    description: str
    torch_version: str
    backend: str | None
    threads: int
    dtype: str
    size: int
    seconds: float
    rate: float
    unit: str
    date: str
    kind: str | None = None
    pinned: bool | None = None
    non_blocking: bool | None = None
    bytes_moved: int | None = None
    repeats: int = 0

    def to_dict(self) -> dict:
        """A JSON-friendly dict."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "BenchResult":
        """Rebuild a result from :meth:`to_dict` output; ValueError if a field is missing or unknown."""
        if not isinstance(data, dict):
            raise ValueError(f"a bench result must be a JSON object, got {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown bench result field(s) {', '.join(unknown)}; expected {', '.join(sorted(known))}")
        missing = [f.name for f in fields(cls) if f.name not in data and f.default is MISSING]
        if missing:
            raise ValueError(f"bench result is missing field(s) {', '.join(missing)}")
        return cls(**data)

    @property
    def label(self) -> str:
        """A short legend label, e.g. ``'cpu float32, 1 thread'`` or ``'NVIDIA H200 h2d pinned'``."""
        who = self.description if self.device != "cpu" else "cpu"
        if self.probe == "matmul":
            text = f"{who} {self.dtype}"
        else:
            text = f"{who} {self.kind}" + (" pinned" if self.pinned else "")
        if self.device == "cpu":
            text += f", {self.threads} thread" + ("s" if self.threads != 1 else "")
        return text


# ----------------------------------------------------------------------------- validation


def check_size(size: object, what: str = "size") -> int:
    """``size`` as a positive int, or a one-line ValueError."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"{what} {size!r} must be a positive integer")
    return size


def check_dtype(dtype: str | torch.dtype) -> str:
    """The dtype's name (``'float32'``...), or a one-line ValueError listing the valid ones."""
    if isinstance(dtype, torch.dtype):
        for name, value in DTYPES.items():
            if value == dtype:
                return name
    elif isinstance(dtype, str) and dtype in DTYPES:
        return dtype
    raise ValueError(f"unknown dtype {dtype!r}: use one of {', '.join(DTYPES)}")


def check_threads(threads: object) -> int | None:
    """``None`` (keep torch's current setting) or a positive int."""
    if threads is None:
        return None
    return check_size(threads, "threads")


def parse_sizes(text: str) -> list[int]:
    """``"256,512"`` -> ``[256, 512]``; ValueError for empty, non-numeric or non-positive entries."""
    parts = [p.strip() for p in str(text).split(",")]
    if not parts or any(p == "" for p in parts):
        raise ValueError(f"sizes {text!r} must be a comma-separated list of positive integers, e.g. 256,512")
    sizes = []
    for p in parts:
        try:
            value = int(p)
        except ValueError:
            raise ValueError(f"size {p!r} is not an integer (sizes look like 256,512)") from None
        sizes.append(check_size(value))
    return sizes


# ----------------------------------------------------------------------------- timing


@contextlib.contextmanager
def using_threads(threads: int | None) -> Iterator[int]:
    """Run the block with ``torch.set_num_threads(threads)`` (None: unchanged); the old value is restored."""
    threads = check_threads(threads)
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


def _timer_for(device: torch.device):
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
    if not (isinstance(min_run_time, (int, float)) and min_run_time > 0):
        raise ValueError(f"min_run_time {min_run_time!r} must be a positive number of seconds")
    with using_threads(threads) as n:
        code = compile(stmt, "<bench>", "exec")
        for _ in range(warmup):
            exec(code, dict(env))
        devices.synchronize(device)
        timer = benchmark.Timer(stmt=stmt, globals=dict(env), timer=_timer_for(device), num_threads=n)
        measurement = timer.blocked_autorange(min_run_time=min_run_time)
    return float(measurement.median), len(measurement.times)


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def _result(probe: str, device: torch.device, **values) -> BenchResult:
    info = devices.describe(device)
    return BenchResult(probe=probe, device=info.name, description=info.description,
                       torch_version=torch.__version__, backend=info.backend, date=_now(), **values)


# ----------------------------------------------------------------------------- probes


def matmul_probe(device: str | torch.device = "auto", size: int = 512, dtype: str | torch.dtype = "float32", *,
                 threads: int | None = None, min_run_time: float = 0.1) -> BenchResult:
    """Time ``a @ b`` for two ``size x size`` matrices; rate in GFLOP/s (``2 size^3`` operations).

    ``threads`` sets ``torch.set_num_threads`` for this measurement only (CPU parallelism).
    A dtype this device cannot multiply raises a one-line ValueError.
    """
    size = check_size(size)
    name = check_dtype(dtype)
    dev = devices.pick_device(device)
    with using_threads(threads) as n:
        try:
            a = torch.randn(size, size, device=dev).to(DTYPES[name])
            b = torch.randn(size, size, device=dev).to(DTYPES[name])
            seconds, repeats = time_call("a @ b", {"a": a, "b": b}, dev, min_run_time=min_run_time)
        except (RuntimeError, TypeError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ValueError(f"{name} matmul is not supported on {dev} by this torch build ({first})") from None
    flops = 2 * size**3
    return _result("matmul", dev, threads=n, dtype=name, size=size, seconds=seconds,
                   rate=flops / seconds / 1e9, unit="GFLOP/s", repeats=repeats)


def copy_probe(device: str | torch.device = "auto", size_mb: int = 64, kind: str = "device", *,
               pinned: bool = False, non_blocking: bool = False, dtype: str | torch.dtype = "float32",
               threads: int | None = None, min_run_time: float = 0.1) -> BenchResult:
    """Time copying ``size_mb`` MiB; rate in GB/s (1 GB = 1e9 bytes).

    ``kind``: ``"device"`` copies within ``device`` (for the CPU: RAM to RAM), ``"h2d"`` copies from
    host memory to an accelerator, ``"d2h"`` back. ``pinned=True`` puts the host tensor in page-locked
    (pinned) memory, which needs CUDA; ``non_blocking=True`` lets the copy run asynchronously (the
    timer still waits for it to finish).
    """
    size_mb = check_size(size_mb, "size_mb")
    name = check_dtype(dtype)
    if kind not in COPY_KINDS:
        raise ValueError(f"unknown copy kind {kind!r}: use one of {', '.join(COPY_KINDS)}")
    dev = devices.pick_device(device)
    if kind != "device" and dev.type == "cpu":
        raise ValueError(f"a {kind} copy needs an accelerator, but the device is cpu; use kind='device'")
    if pinned and (kind == "device" or dev.type != "cuda"):
        raise ValueError(f"pinned=True applies to h2d/d2h copies on a CUDA device, not kind={kind!r} on {dev}")
    nbytes = size_mb * 2**20
    elements = nbytes // DTYPES[name].itemsize
    with using_threads(threads) as n:
        src_device = "cpu" if kind == "h2d" else dev
        dst_device = "cpu" if kind == "d2h" else dev
        src = torch.empty(elements, dtype=DTYPES[name], device=src_device, pin_memory=pinned and kind == "h2d")
        dst = torch.empty(elements, dtype=DTYPES[name], device=dst_device, pin_memory=pinned and kind == "d2h")
        src.fill_(1)
        seconds, repeats = time_call("dst.copy_(src, non_blocking=nb)", {"dst": dst, "src": src, "nb": non_blocking},
                                     dev, min_run_time=min_run_time)
    moved = elements * DTYPES[name].itemsize * (2 if kind == "device" else 1)
    return _result("copy", dev, threads=n, dtype=name, size=size_mb, seconds=seconds, rate=moved / seconds / 1e9,
                   unit="GB/s", kind=kind, pinned=bool(pinned), non_blocking=bool(non_blocking),
                   bytes_moved=moved, repeats=repeats)


def matmul_sweep(device: str | torch.device = "auto", sizes: Iterable[int] = (256, 512),
                 dtype: str | torch.dtype = "float32", *, threads: int | None = None,
                 min_run_time: float = 0.1) -> list[BenchResult]:
    """:func:`matmul_probe` for each size (all sizes are validated before anything runs)."""
    sizes = [check_size(s) for s in sizes]
    check_dtype(dtype)
    check_threads(threads)
    return [matmul_probe(device, s, dtype, threads=threads, min_run_time=min_run_time) for s in sizes]


def copy_sweep(device: str | torch.device = "auto", sizes_mb: Iterable[int] = (16, 64), kind: str = "device", *,
               pinned: bool = False, non_blocking: bool = False, dtype: str | torch.dtype = "float32",
               threads: int | None = None, min_run_time: float = 0.1) -> list[BenchResult]:
    """:func:`copy_probe` for each size in MiB (all sizes are validated before anything runs)."""
    sizes_mb = [check_size(s, "size_mb") for s in sizes_mb]
    check_dtype(dtype)
    check_threads(threads)
    return [copy_probe(device, s, kind, pinned=pinned, non_blocking=non_blocking, dtype=dtype, threads=threads,
                       min_run_time=min_run_time) for s in sizes_mb]


def default_sizes(probe: str, device: str | torch.device = "cpu") -> list[int]:
    """Sizes the CLI uses when none are given: small on a CPU, large enough to fill a GPU."""
    if probe not in PROBES:
        raise ValueError(f"unknown probe {probe!r}: use one of {', '.join(PROBES)}")
    gpu = devices.is_accelerator(devices.pick_device(device))
    if probe == "matmul":
        return [1024, 2048, 4096, 8192] if gpu else [256, 512, 1024]
    return [64, 256, 1024] if gpu else [16, 64]


# ----------------------------------------------------------------------------- files and tables


def environment() -> dict:
    """Versions recorded next to results in a JSON file."""
    return {"python": platform.python_version(), "torch": torch.__version__,
            "build": devices.cuda_backend() or "CPU-only", "platform": platform.platform(terse=True)}


def save_results(path: str | Path, results: Sequence[BenchResult]) -> Path:
    """Write results (and this machine's versions) as JSON, atomically; returns the path."""
    if not results:
        raise ValueError("no results to save")
    payload = {"format": FORMAT, "created": _now(), "environment": environment(),
               "results": [r.to_dict() for r in results]}
    return write_json(path, payload)


def results_from_json(data: object, source: str = "JSON") -> list[BenchResult]:
    """The results inside a parsed bench file; ValueError naming ``source`` if it is not one."""
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("results"), list):
        raise ValueError(f"{source} is not a gpulab bench file (expected format {FORMAT!r} with a results list)")
    try:
        return [BenchResult.from_dict(r) for r in data["results"]]
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{source}: {exc}") from None


def load_results(path: str | Path) -> list[BenchResult]:
    """Read a file written by :func:`save_results` (or ``gpulab bench --json``)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path.name} is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    return results_from_json(data, path.name)


def format_table(results: Sequence[BenchResult]) -> str:
    """A plain-text table of results, one line each."""
    if not results:
        return "(no results)"
    head = f"{'probe':<7} {'device':<8} {'kind':<6} {'dtype':<9} {'size':>6} {'threads':>7} {'time':>12} {'rate':>16}"
    lines = [head, "-" * len(head)]
    for r in results:
        size = f"{r.size}" if r.probe == "matmul" else f"{r.size}MiB"
        kind = (r.kind or "-") + ("+pin" if r.pinned else "")
        lines.append(f"{r.probe:<7} {r.device:<8} {kind:<6} {r.dtype:<9} {size:>6} {r.threads:>7} "
                     f"{r.seconds * 1e3:>9.3f} ms {r.rate:>9.1f} {r.unit}")
    return "\n".join(lines)


def matmul_flops(n: int) -> int:
    """Floating-point operations of an ``n x n @ n x n`` matrix multiply: ``2 n^3``.

    Each of the ``n * n`` outputs is a sum of ``n`` products: ``n`` multiplications and ``n`` additions.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"matrix side n={n!r} must be a positive integer")
    return 2 * n**3
