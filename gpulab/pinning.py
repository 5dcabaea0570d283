"""Pinned vs pageable host memory in a ``DataLoader``: who pins, and what it costs, without Python overhead.

Who pins depends on ``num_workers`` (:func:`who_pins` prints torch's own lines): with the default 0,
the main process pins each batch inside ``next()``, so the loop waits for it; with worker processes,
one extra thread of the main process pins the batches the workers made, while the loop runs.

What workers cost (:func:`worker_costs`, read in torch's ``dataloader.py`` and ``multiprocessing/reductions.py``):
with ``persistent_workers=False`` (the default) every ``for batch in loader`` starts ``num_workers`` new
processes, and a worker hands each batch to the main process through a queue. To send a tensor, torch moves
its whole *storage* into shared memory (``storage._share_fd_cpu_()``), and a slice is a view of the full
tensor: so each new worker started by ``fork`` (Linux) first copies the whole dataset tensor, then the main
process maps that memory; one started by ``spawn`` (macOS, Windows) is a fresh Python that imports torch first.

A plain ``DataLoader(dataset, batch_size=4096)`` fetches 4096 single samples and collates them in
Python: for 65,536 rows that per-sample work takes longer than the copies it is meant to compare.
Here every batch is ONE slice of the stored tensors (:class:`SliceSampler`, ``batch_size=None``),
so a pass over the data costs little more than the copies themselves::

    from gpulab import pinning
    pinning.loader_probe("cuda", size_mb=256, pin_memory=True, non_blocking=True)

The result is a :class:`gpulab.bench_results.BenchResult` with ``probe="copy"`` and ``kind="loader"``.
"""

from __future__ import annotations

import inspect
import os
import re
import statistics
import warnings
from typing import Sequence

import torch
from torch.utils.data import DataLoader, Sampler, TensorDataset

from gpulab import bench, bench_results, devices, timing
from gpulab.validate import non_negative_int, positive_int

#: The warning a DataLoader gives for ``pin_memory=True`` without an accelerator (older torch: "CUDA").
NO_ACCELERATOR_PIN = re.compile(r"'pin_memory' argument is set as true but (no accelerator is found|CUDA is not available)")


def is_no_accelerator_pin_warning(warning: warnings.WarningMessage | Warning | str) -> bool:
    """True for exactly the "pin_memory=True but no accelerator" warning, not any text naming pin_memory.

    (torch >= 2.8 may also warn that passing a device to ``Tensor.pin_memory()`` is deprecated: not this one.)
    """
    message = getattr(warning, "message", warning)
    return bool(NO_ACCELERATOR_PIN.search(str(message)))


class SliceSampler(Sampler):
    """Yields ``slice(start, stop)`` objects, one per batch, in order: ``dataset[slice]`` is one view."""

    def __init__(self, rows: int, batch_size: int) -> None:
        self.rows = positive_int(rows, "rows")
        self.batch_size = positive_int(batch_size, "batch_size")

    def __iter__(self):
        for start in range(0, self.rows, self.batch_size):
            yield slice(start, min(start + self.batch_size, self.rows))

    def __len__(self) -> int:
        return -(-self.rows // self.batch_size)


def slice_loader(X: torch.Tensor, y: torch.Tensor, batch_size: int, *, pin_memory: bool = False,
                 num_workers: int = 0, persistent_workers: bool = False) -> DataLoader:
    """A ``DataLoader`` over ``(X, y)`` whose batches are slices (no per-sample collation)."""
    if len(X) != len(y):
        raise ValueError(f"X has {len(X)} rows but y has {len(y)}: they must match")
    non_negative_int(num_workers, "num_workers")
    if persistent_workers and not num_workers:
        raise ValueError("persistent_workers=True needs num_workers >= 1: there are no workers to keep")
    return DataLoader(TensorDataset(X, y), sampler=SliceSampler(len(X), batch_size), batch_size=None,
                      pin_memory=pin_memory, num_workers=num_workers, persistent_workers=persistent_workers)


#: Where torch's DataLoader pins a batch: (num_workers, the iterator class, its method that pins, a word in
#: the line that does it).
_PINNING_SITES = ((0, "_SingleProcessDataLoaderIter", "_next_data", "pin_memory("),
                  (1, "_MultiProcessingDataLoaderIter", "__init__", "_pin_memory_loop"))


def who_pins() -> list[dict]:
    """The line of the installed torch's DataLoader that pins a batch, with and without worker processes.

    One dict per case: ``num_workers`` ("0" or ">= 1"), ``iterator`` (the class ``DataLoader`` uses),
    ``method`` and ``line`` (torch's source, stripped). ValueError if torch no longer has that code.
    """
    import torch.utils.data.dataloader as dl

    rows = []
    for workers, cls_name, method, needle in _PINNING_SITES:
        cls = getattr(dl, cls_name, None)
        fn = getattr(cls, method, None)
        try:
            source = inspect.getsource(fn) if fn is not None else ""
        except (OSError, TypeError):
            source = ""
        line = next((ln.strip() for ln in source.splitlines() if needle in ln), None)
        if line is None:
            raise ValueError(f"torch {torch.__version__}: no {needle!r} in DataLoader's {cls_name}.{method}; "
                             "the pinning code has moved")
        rows.append({"num_workers": "0" if workers == 0 else ">= 1", "iterator": cls_name, "method": method,
                     "line": line})
    return rows


def loader_probe(device: str | torch.device, size_mb: int = 256, *, batch_rows: int = 4096,
                 features: int = 1024, pin_memory: bool = False, non_blocking: bool = False,
                 num_workers: int = 0, min_run_time: float = 0.2) -> bench_results.BenchResult:
    """Seconds of one pass over ``size_mb`` MiB of float32 rows, each batch moved to ``device``; GB/s.

    ``pin_memory=True`` (CUDA only) makes the loader copy each batch into pinned memory first, so
    that ``.to(device, non_blocking=...)`` is a direct DMA transfer. With ``num_workers=0`` the main
    process pins each batch itself before the copy; with workers, a pin thread pins the next batches
    while the loop copies this one. On the CPU the pass only measures the loader itself (a dry run).
    The figure is the median of whole passes after one warm-up pass (``timing.time_call``). With
    ``num_workers >= 1`` every pass starts its own workers (``persistent_workers=False``, as a default
    DataLoader does every epoch): start-up and each worker's copy of the data into shared memory are in it.
    """
    size_mb = positive_int(size_mb, "size_mb")
    positive_int(batch_rows, "batch_rows")
    positive_int(features, "features")
    dev = devices.pick_device(device)
    if pin_memory and dev.type != "cuda":
        raise ValueError(f"pin_memory=True needs a CUDA device to copy to, not {dev}")
    rows = max(1, size_mb * 2**20 // (4 * (features + 1)))
    loader = slice_loader(torch.randn(rows, features), torch.randn(rows, 1), batch_rows, pin_memory=pin_memory,
                          num_workers=num_workers)
    stmt = "for xb, yb in loader:\n    xb.to(dev, non_blocking=nb); yb.to(dev, non_blocking=nb)"
    seconds, repeats = timing.time_call(stmt, {"loader": loader, "dev": dev, "nb": non_blocking}, dev,
                                       warmup=1, min_run_time=min_run_time)
    moved = rows * (features + 1) * 4
    return bench.make_result("copy", dev, threads=torch.get_num_threads(), dtype="float32", size=size_mb,
                         seconds=seconds, rate=moved / seconds / 1e9, unit="GB/s", kind="loader",
                         pinned=bool(pin_memory), non_blocking=bool(non_blocking), bytes_moved=moved,
                         repeats=repeats, workers=num_workers)


def pass_speeds(passes: Sequence[bench_results.BenchResult]) -> list[dict]:
    """Loader passes (:func:`loader_probe` results, measured or recorded) as table rows: settings, ms per pass, and
    ``x_pageable``, how many times as fast as the pageable pass without workers on the same device and size."""
    def key(r):
        return r.device, r.description, r.size

    base = {key(r): r.seconds for r in passes if r.kind == "loader" and not (r.pinned or r.non_blocking or r.workers)}
    return [{"device": r.description, "MiB": r.size, "pinned": bool(r.pinned), "non_blocking": bool(r.non_blocking),
             "workers": r.workers or 0, "ms": r.seconds * 1e3,
             "x_pageable": base[key(r)] / r.seconds if key(r) in base else None}
            for r in passes if r.kind == "loader"]


def worker_costs(device: str | torch.device, size_mb: int = 256, num_workers: int = 2, *, batch_rows: int = 4096,
                 features: int = 1024, repeats: int = 3, min_run_time: float = 0.2) -> list[dict]:
    """Milliseconds of one pass over ``size_mb`` MiB of slices moved to ``device`` (pageable), four ways.

    Rows ``{"workers", "persistent_workers", "pass", "ms"}``: no workers (median after a warm-up,
    ``time_call``); ``num_workers`` new workers each pass (the default; median of ``repeats`` whole passes,
    each timed with a ``Stopwatch``, start-up included); the same workers kept alive, their first pass (once:
    start-up and each worker's copy of the data into shared memory) and later passes (median, ``time_call``).
    """
    positive_int(num_workers, "num_workers")
    positive_int(repeats, "repeats")
    dev = devices.pick_device(device)
    rows = max(1, positive_int(size_mb, "size_mb") * 2**20 // (4 * (positive_int(features, "features") + 1)))
    X, y = torch.ones(rows, features), torch.ones(rows, 1)  # written, so every page is real; faster than randn
    stmt = "for xb, yb in loader:\n    xb.to(dev); yb.to(dev)"

    def run(loader):
        exec(stmt, {"loader": loader, "dev": dev})

    def row(workers, persistent, what, seconds):
        return {"workers": workers, "persistent_workers": persistent, "pass": what, "ms": seconds * 1e3}

    plain = slice_loader(X, y, batch_rows)
    out = [row(0, False, "every pass", timing.time_call(stmt, {"loader": plain, "dev": dev}, dev, warmup=1,
                                                         min_run_time=min_run_time)[0])]
    fresh = slice_loader(X, y, batch_rows, num_workers=num_workers)
    times = []
    for _ in range(repeats):
        with timing.Stopwatch(dev) as clock:
            run(fresh)
        times.append(clock.seconds)
    out.append(row(num_workers, False, "every pass", statistics.median(times)))
    kept = slice_loader(X, y, batch_rows, num_workers=num_workers, persistent_workers=True)
    with timing.Stopwatch(dev) as clock:
        run(kept)
    out.append(row(num_workers, True, "first pass", clock.seconds))
    later = timing.time_call(stmt, {"loader": kept, "dev": dev}, dev, warmup=0, min_run_time=min_run_time)[0]
    out.append(row(num_workers, True, "later passes", later))
    del kept  # ends the kept workers
    return out


def _pinned_x(rows: list[dict]) -> float | None:
    return next((r["x_pageable"] for r in rows if r["pinned"] and r["non_blocking"] and not r["workers"]), None)


def worker_lines(costs: list[dict], recorded: Sequence[bench_results.BenchResult] = ()) -> list[str]:
    """What workers added to a pass here (:func:`worker_costs` rows) and, where recorded, to a pageable GPU pass."""
    by_kind = {(r["persistent_workers"], r["pass"]): r["ms"] for r in costs if r["workers"]}
    plain, n = costs[0]["ms"], max(r["workers"] for r in costs)
    new, later, plural = by_kind[(False, "every pass")], by_kind[(True, "later passes")], "s" * (n != 1)
    lines = [f"this machine: {n} new worker{plural} added {new - plain:.0f} ms to a pass; "
             f"{n} kept worker{plural} added {later - plain:.0f} ms to a later pass"]
    pageable = {r["workers"]: r for r in pass_speeds(recorded) if not r["pinned"] and not r["non_blocking"]}
    if 0 in pageable and len(pageable) > 1:
        w = max(pageable)
        lines.append(f"recorded on {pageable[w]['device']}: {w} new workers added "
                     f"{pageable[w]['ms'] - pageable[0]['ms']:.0f} ms to a pageable pass")
    return lines


def pinning_verdict(mine: Sequence[bench_results.BenchResult],
                    recorded: Sequence[bench_results.BenchResult] = ()) -> list[str]:
    """Whether pinning paid: the recorded pinned pass against its pageable pass, then this machine's (``mine``,
    empty without CUDA). A pinned pass slower than the pageable one is explained: the CPU makes the pinning copy."""
    lines, theirs = [], pass_speeds(recorded)
    if _pinned_x(theirs) is not None:
        lines.append(f"recorded on {theirs[0]['device']}: the pinned pass was {_pinned_x(theirs):.2f}x as fast as the "
                     "pageable pass")
    x = _pinned_x(pass_speeds(mine))
    if x is None:
        lines.append("this machine: no CUDA GPU, nothing to pin for (pin_memory=torch.cuda.is_available() is False)")
    elif x >= 1:
        lines.append(f"this machine: the pinned pass was {x:.2f}x as fast as the pageable pass: pinning paid")
    else:
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        lines += [f"this machine: the pinned pass was only {x:.2f}x as fast as the pageable pass: pinning did not pay.",
                  "  The CPU makes the pinning copy inside next(), and busy cores slow it"
                  + (f" (load average {load:.1f} on {os.cpu_count()} cores)" if load is not None else "")
                  + ". Re-run the measurement."]
    return lines
