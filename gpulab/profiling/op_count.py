"""FLOPs and bytes of one operation, to place it on a roofline (:mod:`gpulab.profiling.roofline`).

FLOPs come from ``torch.utils.flop_counter.FlopCounterMode``, which has formulas for matrix
products and convolutions (a ``m x k @ k x n`` matmul: ``2 m k n``) and counts element-wise ops as 0.
Here element-wise ops get a formula too (:data:`ELEMENTWISE_FLOPS`, FLOP per output element):
ReLU 1 (a comparison), GELU 8 (an estimate: its erf-based formula is a handful of multiplies and
adds per element; any count from 1 to 20 leaves it at the same place relative to a CPU's ridge).

Bytes are **counted**, not measured: the sizes of the tensors the operation reads (its inputs and,
for a layer, its parameters) plus the tensor it writes. That is the least traffic the operation
needs, with every byte moved once; caches can only make the real figure smaller for reuse within
the op, never for the first read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from gpulab.memory import tensor_bytes
from gpulab.validate import positive_int

ELEMENTWISE_FLOPS = {"relu": 1, "gelu": 8}


def _elementwise_formula(per_element: int):
    def formula(*args, out_shape=None, **kwargs) -> int:
        count = 1
        for d in out_shape:
            count *= int(d)
        return per_element * count

    return formula


def _custom_mapping() -> dict:
    aten = torch.ops.aten
    return {getattr(aten, name): _elementwise_formula(k) for name, k in ELEMENTWISE_FLOPS.items()}


def _counted(fn: Callable, *args):
    """``(flops, output)`` of one call ``fn(*args)`` under FlopCounterMode (no autograd)."""
    if not callable(fn):
        raise ValueError(f"fn={fn!r} must be callable, e.g. torch.matmul or an nn.Module")
    with torch.no_grad(), FlopCounterMode(display=False, custom_mapping=_custom_mapping()) as counter:
        out = fn(*args)
    return int(counter.get_total_flops()), out


def count_flops(fn: Callable, *args) -> int:
    """FLOPs of ``fn(*args)`` as FlopCounterMode counts them (plus the element-wise formulas above)."""
    return _counted(fn, *args)[0]


@dataclass(frozen=True)
class OpCost:
    """One operation's name, FLOPs and bytes moved (read + written)."""

    name: str
    flops: int
    bytes: int

    @property
    def intensity(self) -> float:
        """Arithmetic intensity in FLOP per byte."""
        return self.flops / self.bytes if self.bytes else 0.0


def op_cost(name: str, fn: Callable, *inputs: torch.Tensor, params: Iterable[torch.Tensor] = ()) -> OpCost:
    """Run ``fn(*inputs)`` once: FLOPs counted by FlopCounterMode, bytes = inputs + ``params`` + output.

    Inputs on the ``meta`` device (shapes without data) cost no time and no memory.
    """
    params = list(params)
    tensor_bytes(inputs)  # validates the inputs
    flops, out = _counted(fn, *inputs)
    return OpCost(name, flops, tensor_bytes([*inputs, *params, out]))


def _dims(what: str, *values: object) -> None:
    for v in values:
        positive_int(v, what)


def matmul_cost(m: int, k: int, n: int, dtype: torch.dtype = torch.float32) -> OpCost:
    """An ``m x k @ k x n`` matrix multiply: ``2 m k n`` FLOPs, reads both matrices, writes ``m x n``."""
    _dims("matrix size", m, k, n)
    a, b = torch.empty(m, k, dtype=dtype, device="meta"), torch.empty(k, n, dtype=dtype, device="meta")
    return op_cost(f"matmul {m}x{k}x{n}", torch.matmul, a, b)


def gelu_cost(numel: int, dtype: torch.dtype = torch.float32) -> OpCost:
    """GELU on ``numel`` elements: reads and writes each once (8 bytes per float32 element)."""
    _dims("numel", numel)
    return op_cost(f"GELU {numel:,}", nn.functional.gelu, torch.empty(numel, dtype=dtype, device="meta"))


def linear_costs(model: nn.Module, batch: int, prefix: str = "") -> list[OpCost]:
    """One ``OpCost`` per ``nn.Linear`` in ``model`` for a batch of ``batch`` rows (input, weight, bias, output)."""
    _dims("batch", batch)
    costs = []
    for name, layer in model.named_modules():
        if isinstance(layer, nn.Linear):
            x = torch.ones(batch, layer.in_features, dtype=layer.weight.dtype)
            label = f"{prefix}{name.split('.')[0] or 'linear'} {layer.in_features}->{layer.out_features}"
            costs.append(op_cost(label, layer, x, params=layer.parameters()))
    if not costs:
        raise ValueError(f"{type(model).__name__} has no nn.Linear layer to count")
    return costs
