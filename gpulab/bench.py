"""Two probes: matrix multiply (GFLOP/s) and memory traffic (GB/s), timed by :mod:`gpulab.timing`.

``gpulab.timing.time_call`` runs the operation a few times first (warm-up: memory allocation,
kernel selection, caches), then repeats it in blocks until ``min_run_time`` seconds are spent and
reports the median time per call, waiting for the device before every clock read.

Examples::

    from gpulab import bench, bench_results
    r = bench.matmul_probe("cpu", size=512, dtype="float32", threads=1)
    r.rate, r.unit                              # e.g. (95.1, 'GFLOP/s')
    bench.matmul_probe("cuda", 8192, matmul_precision="high")         # float32 on TF32 tensor cores
    bench.copy_probe("cuda", size_mb=256, kind="h2d", pinned=True)   # pinned host -> GPU
    bench.copy_probe("cuda", size_mb=256, kind="add")                # x + y: read 2, write 1
    bench_results.save_results("bench.json", [r]); bench_results.load_results("bench.json")

Every result is a :class:`gpulab.bench_results.BenchResult` (JSON files and tables live there) carrying
the device, torch version, thread count, dtype, float32 matmul precision, size, seconds, rate and an
ISO UTC date, and turns into JSON and back.
"""

from __future__ import annotations

from typing import Iterable

import torch

from gpulab import devices
from gpulab.bench_results import BenchResult, now
from gpulab.precision import DTYPES, dtype_from_name, dtype_name
from gpulab.timing import check_matmul_precision, float32_matmul_precision, time_call, using_threads
from gpulab.validate import positive_int

PROBES = ("matmul", "copy")
COPY_KINDS = ("device", "h2d", "d2h", "add")


# ----------------------------------------------------------------------------- validation


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
        sizes.append(positive_int(value, "size"))
    return sizes


def make_result(probe: str, device: torch.device, **values) -> BenchResult:
    """A BenchResult for ``device`` stamped with its description, torch version, date and matmul precision."""
    info = devices.describe(device)
    values.setdefault("matmul_precision", torch.get_float32_matmul_precision())
    return BenchResult(probe=probe, device=info.name, description=info.description,
                       torch_version=torch.__version__, backend=info.backend, date=now(), **values)


def out_of_memory(exc: BaseException) -> bool:
    """True when ``exc`` is an allocation failure (CUDA's ``OutOfMemoryError`` or the CPU allocator's)."""
    oom = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", ())
    text = str(exc).lower()
    return isinstance(exc, oom) or "out of memory" in text or "can't allocate memory" in text


def _oom_error(what: str, device: torch.device, nbytes: int) -> ValueError:
    return ValueError(f"{what} ran out of memory on {device} (the tensors alone take {nbytes / 2**30:.2f} GiB); "
                      "use a smaller size")


# ----------------------------------------------------------------------------- probes


def matmul_probe(device: str | torch.device, size: int = 512, dtype: str | torch.dtype = "float32", *,
                 threads: int | None = None, min_run_time: float = 0.1,
                 matmul_precision: str | None = None) -> BenchResult:
    """Time ``a @ b`` for two ``size x size`` matrices; rate in GFLOP/s (``2 size^3`` operations).

    ``threads`` sets ``torch.set_num_threads`` for this measurement only (CPU parallelism);
    ``matmul_precision`` sets ``torch.set_float32_matmul_precision`` for it (``"high"``: the TF32
    probe). A dtype this device cannot multiply raises a one-line ValueError, and so does running
    out of memory (saying so).
    """
    size = positive_int(size, "size")
    name = dtype_name(dtype_from_name(dtype))
    check_matmul_precision(matmul_precision)
    dev = devices.pick_device(device)
    with using_threads(threads) as n, float32_matmul_precision(matmul_precision) as used:
        try:
            a = torch.randn(size, size, device=dev).to(DTYPES[name])
            b = torch.randn(size, size, device=dev).to(DTYPES[name])
            seconds, repeats = time_call("a @ b", {"a": a, "b": b}, dev, min_run_time=min_run_time)
        except (RuntimeError, TypeError) as exc:
            if out_of_memory(exc):
                raise _oom_error(f"a {size} x {size} {name} matmul", dev, 3 * size * size * DTYPES[name].itemsize) from None
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ValueError(f"{name} matmul is not supported on {dev} by this torch build ({first})") from None
    flops = 2 * size**3
    return make_result("matmul", dev, threads=n, dtype=name, size=size, seconds=seconds,
                   rate=flops / seconds / 1e9, unit="GFLOP/s", repeats=repeats, matmul_precision=used)


def _copy_tensors(kind: str, dev: torch.device, elements: int, dtype: torch.dtype, pinned: bool) -> dict:
    """The tensors one copy kind reads and writes, named as its statement uses them."""
    if kind == "add":
        x, y = (torch.ones(elements, dtype=dtype, device=dev) for _ in range(2))
        return {"x": x, "y": y, "out": torch.empty(elements, dtype=dtype, device=dev)}
    src = torch.empty(elements, dtype=dtype, device="cpu" if kind == "h2d" else dev, pin_memory=pinned and kind == "h2d")
    dst = torch.empty(elements, dtype=dtype, device="cpu" if kind == "d2h" else dev, pin_memory=pinned and kind == "d2h")
    src.fill_(1)
    return {"src": src, "dst": dst}


def copy_probe(device: str | torch.device, size_mb: int = 64, kind: str = "device", *,
               pinned: bool = False, non_blocking: bool = False, dtype: str | torch.dtype = "float32",
               threads: int | None = None, min_run_time: float = 0.1) -> BenchResult:
    """Time moving ``size_mb`` MiB; rate in GB/s (1 GB = 1e9 bytes).

    ``kind``: ``"device"`` copies within ``device`` (for the CPU: RAM to RAM), ``"h2d"`` copies from
    host memory to an accelerator, ``"d2h"`` back, ``"add"`` computes ``x + y`` into a third tensor
    of ``size_mb`` MiB each (the simplest memory-bound operation). ``pinned=True`` puts the host
    tensor in page-locked (pinned) memory, which needs CUDA; ``non_blocking=True`` lets the copy run
    asynchronously (the timer still waits for it to finish).

    ``bytes_moved`` counts what memory really transfers: a copy within one device reads and writes
    every byte (twice the size, as CUDA's ``bandwidthTest`` and spec sheets count), ``add`` reads
    two tensors and writes one (three times), host<->device copies cross the bus once.
    """
    size_mb = positive_int(size_mb, "size_mb")
    name = dtype_name(dtype_from_name(dtype))
    if kind not in COPY_KINDS:
        raise ValueError(f"unknown copy kind {kind!r}: use one of {', '.join(COPY_KINDS)}")
    dev = devices.pick_device(device)
    if kind in ("h2d", "d2h") and dev.type == "cpu":
        raise ValueError(f"a {kind} copy needs an accelerator, but the device is cpu; use kind='device'")
    if pinned and (kind not in ("h2d", "d2h") or dev.type != "cuda"):
        raise ValueError(f"pinned=True applies to h2d/d2h copies on a CUDA device, not kind={kind!r} on {dev}")
    nbytes = size_mb * 2**20
    elements = nbytes // DTYPES[name].itemsize
    stmt = "torch.add(x, y, out=out)" if kind == "add" else "dst.copy_(src, non_blocking=nb)"
    with using_threads(threads) as n:
        try:
            env = {**_copy_tensors(kind, dev, elements, DTYPES[name], pinned), "nb": non_blocking, "torch": torch}
            seconds, repeats = time_call(stmt, env, dev, min_run_time=min_run_time)
        except RuntimeError as exc:
            if out_of_memory(exc):
                raise _oom_error(f"a {size_mb} MiB {kind} copy", dev, nbytes * (3 if kind == "add" else 2)) from None
            raise
    moved = elements * DTYPES[name].itemsize * {"device": 2, "add": 3}.get(kind, 1)
    return make_result("copy", dev, threads=n, dtype=name, size=size_mb, seconds=seconds, rate=moved / seconds / 1e9,
                   unit="GB/s", kind=kind, pinned=bool(pinned), non_blocking=bool(non_blocking),
                   bytes_moved=moved, repeats=repeats)


def matmul_sweep(device: str | torch.device, sizes: Iterable[int] = (256, 512),
                 dtype: str | torch.dtype = "float32", *, threads: int | None = None,
                 min_run_time: float = 0.1, matmul_precision: str | None = None) -> list[BenchResult]:
    """:func:`matmul_probe` for each size (all arguments are validated before anything runs)."""
    sizes = [positive_int(s, "size") for s in sizes]
    dtype_name(dtype_from_name(dtype))
    if threads is not None:
        positive_int(threads, "threads")
    check_matmul_precision(matmul_precision)
    return [matmul_probe(device, s, dtype, threads=threads, min_run_time=min_run_time,
                         matmul_precision=matmul_precision) for s in sizes]


def copy_sweep(device: str | torch.device, sizes_mb: Iterable[int] = (16, 64), kind: str = "device", *,
               pinned: bool = False, non_blocking: bool = False, dtype: str | torch.dtype = "float32",
               threads: int | None = None, min_run_time: float = 0.1) -> list[BenchResult]:
    """:func:`copy_probe` for each size in MiB (all sizes are validated before anything runs)."""
    sizes_mb = [positive_int(s, "size_mb") for s in sizes_mb]
    dtype_name(dtype_from_name(dtype))
    if threads is not None:
        positive_int(threads, "threads")
    return [copy_probe(device, s, kind, pinned=pinned, non_blocking=non_blocking, dtype=dtype, threads=threads,
                       min_run_time=min_run_time) for s in sizes_mb]


def default_sizes(probe: str, device: str | torch.device = "cpu") -> list[int]:
    """Sizes the CLI and notebooks use when none are given: small on a CPU, large enough to fill a GPU.

    Below n = 1024 a GPU matmul is bound by launch overhead, not by arithmetic: timing it there
    measures the launch, so GPU sizes start at 1024.
    """
    if probe not in PROBES:
        raise ValueError(f"unknown probe {probe!r}: use one of {', '.join(PROBES)}")
    gpu = devices.is_accelerator(devices.pick_device(device))
    if probe == "matmul":
        return [1024, 2048, 4096, 8192] if gpu else [256, 512, 1024]
    return [64, 256, 1024] if gpu else [16, 64]


def matmul_flops(n: int) -> int:
    """Floating-point operations of an ``n x n @ n x n`` matrix multiply: ``2 n^3``.

    Each of the ``n * n`` outputs is a sum of ``n`` products: ``n`` multiplications and ``n`` additions.
    """
    positive_int(n, "matrix side n")
    return 2 * n**3
