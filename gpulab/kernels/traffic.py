"""What notebook 14's kernels move through memory: bytes per element, fusion's savings, a tile's intensity.

Counted from the tensors (what each operation reads and writes, each once), so they hold on any machine:

- :func:`count_torch_traffic` runs a function of torch operations and lists, for every operation it calls,
  the bytes of its tensor inputs and outputs (``torch.overrides.TorchFunctionMode``, public API). The same
  softmax written as separate torch operations reads and writes intermediate tensors that the fused kernel
  never stores;
- :func:`fused_row_bytes`: a kernel with one program instance per row reads each row once and writes it once;
- :func:`tile_intensity`: a tiled matrix multiply's FLOPs per byte loaded from memory, from the tile's sides.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch.overrides import TorchFunctionMode

from gpulab.validate import positive_int


@dataclass(frozen=True)
class OpTraffic:
    """One torch operation: its name and the bytes of the tensors it read and wrote."""

    name: str
    read: int
    written: int

    @property
    def total(self) -> int:
        return self.read + self.written


def _tensors(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def _nbytes(tensors: list[torch.Tensor]) -> int:
    seen, total = set(), 0
    for t in tensors:
        key = (t.data_ptr(), t.numel(), t.dtype)
        if key not in seen:
            seen.add(key)
            total += t.numel() * t.element_size()
    return total


class _Recorder(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[OpTraffic] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = getattr(func, "__name__", str(func))
        if name not in ("__get__", "size", "dim", "stride", "is_contiguous", "contiguous", "shape", "numel"):
            self.ops.append(OpTraffic(name, _nbytes(_tensors(args) + _tensors(kwargs)), _nbytes(_tensors(out))))
        return out


def count_torch_traffic(fn: Callable, *inputs: torch.Tensor) -> tuple[object, list[OpTraffic]]:
    """``(fn(*inputs), [OpTraffic per torch operation fn called])``: the bytes each operation read and wrote."""
    recorder = _Recorder()
    with recorder:
        out = fn(*inputs)
    return out, recorder.ops


def softmax_separate(x: torch.Tensor) -> torch.Tensor:
    """A softmax over rows written as separate torch operations, each a kernel of its own on a GPU."""
    biggest = torch.amax(x, dim=1, keepdim=True)
    shifted = x - biggest
    e = torch.exp(shifted)
    total = torch.sum(e, dim=1, keepdim=True)
    return e / total


def fused_row_bytes(rows: int, cols: int, dtype: torch.dtype = torch.float32) -> int:
    """Bytes a one-program-per-row kernel moves: each row read once and written once."""
    size = torch.empty(0, dtype=dtype).element_size()
    return 2 * positive_int(rows, "rows") * positive_int(cols, "cols") * size


def elementwise_bytes(n: int, inputs: int, dtype: torch.dtype = torch.float32) -> int:
    """Bytes an element-wise kernel over ``n`` elements moves: ``inputs`` tensors read, one written."""
    return (positive_int(inputs, "inputs") + 1) * positive_int(n, "n") * torch.empty(0, dtype=dtype).element_size()


@dataclass(frozen=True)
class TileCost:
    """A tiled multiply of (M, K) by (K, N) with BM x BN tiles: FLOPs, bytes loaded from memory, and their ratio."""

    bm: int
    bn: int
    flops: int
    bytes_loaded: int

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes_loaded


def tile_intensity(bm: int, bn: int, m: int, n: int, k: int, dtype: torch.dtype = torch.float32) -> TileCost:
    """Each of the ceil(M/BM) x ceil(N/BN) program instances loads its strip of A (BM x K) and of B (K x BN)
    and writes its BM x BN tile of C once; together they do 2 M N K FLOPs. The intensity grows with the tile:
    for square tiles of side T it is about T / (bytes per element) FLOP per byte."""
    bm, bn, m, n, k = (positive_int(v, name) for v, name in ((bm, "bm"), (bn, "bn"), (m, "m"), (n, "n"), (k, "k")))
    size = torch.empty(0, dtype=dtype).element_size()
    tiles_m, tiles_n = -(-m // bm), -(-n // bn)
    loaded = tiles_m * tiles_n * (bm + bn) * k * size + m * n * size
    return TileCost(bm, bn, 2 * m * n * k, loaded)
