"""Pinned vs pageable host memory in a ``DataLoader``: who pins, and what it costs, without Python overhead.

Who pins depends on ``num_workers`` (:func:`who_pins` prints torch's own lines): with the default 0,
the main process pins each batch inside ``next()``, so the loop waits for it; with worker processes,
one extra thread of the main process pins the batches the workers made, while the loop runs.

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
import re
import warnings

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
                 num_workers: int = 0) -> DataLoader:
    """A ``DataLoader`` over ``(X, y)`` whose batches are slices (no per-sample collation)."""
    if len(X) != len(y):
        raise ValueError(f"X has {len(X)} rows but y has {len(y)}: they must match")
    non_negative_int(num_workers, "num_workers")
    return DataLoader(TensorDataset(X, y), sampler=SliceSampler(len(X), batch_size), batch_size=None,
                      pin_memory=pin_memory, num_workers=num_workers)


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
