"""Training memory per rank, by arithmetic: parameters, gradients, optimizer state (and activations if known).

The model is a parameter count (``7e9``) or any ``nn.Module``; one built on the ``meta`` device
(``gpulab.models.mlp(widths, device="meta")``) has shapes but allocates nothing, so billions of parameters cost no memory.
Sharding over ``ranks`` follows FSDP2: each parameter is split along dim 0 with ``torch.chunk``, so
an uneven split gives the first ranks one row more (32 rows over 3 ranks: 11/11/10) and rank 0 holds
the largest share of every parameter. The figures are rank 0's: the rank that must fit.

Strategies (what each rank keeps a 1/N shard of; everything else is replicated):
``none`` (DDP: nothing), ``zero1`` (optimizer state, with any master weights), ``zero2`` (+ gradients),
``zero3`` (+ parameters; FSDP's full shard). Under ``zero3`` the estimate also walks one step of FSDP2
(:mod:`gpulab.sharding.fsdp_memory`): padded shards, the gathered units, unsharded gradients, the peak.
Precisions (:data:`PRECISIONS`) and optimizers (:data:`OPTIMIZER_STATES`) below.
Checked against :func:`gpulab.memory.training_memory` (exact bytes) and :func:`gpulab.memory.profiled_peak`
by :func:`compare`, and against FSDP2 ranks in ``tests/test_fsdp.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch
from torch import nn

from gpulab.sharding.fsdp_memory import Peak, fsdp_peak, shard_numels, units_of
from gpulab.tables import format_rows
from gpulab.validate import non_negative_int, one_of, positive_int

F32, BF16, F16 = torch.float32, torch.bfloat16, torch.float16


@dataclass(frozen=True)
class Precision:
    """Dtypes of what training keeps: stored weights, gradients, optimizer moments, weights as gathered to compute.

    ``copies``: a 2-byte copy of the whole model counted with the state (autocast caches one per forward;
    FSDP2's policy gathers one whole outside ``zero3``). ``master``: a float32 copy of the weights that the
    optimizer updates, kept (and sharded) with the optimizer state.
    """

    params: torch.dtype
    grads: torch.dtype
    state: torch.dtype
    gather: torch.dtype
    copies: str = ""  # "always", "outside zero3" or "" (none)
    master: bool = False


#: ``fp32``: everything float32. ``bf16-autocast``: float32 weights, gradients and state, and autocast's
#: 2-byte copies of the weights (the whole model: an upper bound, as each layer's copy lives from its forward
#: to its backward when saved). ``bf16``: weights, gradients and state all bfloat16. ``bf16-mixed``: FSDP2's
#: ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)``: float32 (sharded) weights, gradients and
#: state; the weights gathered in bfloat16 (per unit under zero3, whole otherwise). ``fp16-master``: the
#: classic mixed precision of the ZeRO paper: 16-bit weights and gradients, float32 master weights and Adam
#: moments (2 + 2 + 4 + 8 = 16 bytes a parameter; bfloat16 takes the same bytes as float16).
PRECISIONS: dict[str, Precision] = {
    "fp32": Precision(F32, F32, F32, F32),
    "bf16-autocast": Precision(F32, F32, F32, F32, copies="always"),
    "bf16": Precision(BF16, BF16, BF16, BF16),
    "bf16-mixed": Precision(F32, F32, F32, BF16, copies="outside zero3"),
    "fp16-master": Precision(F16, F16, F32, F16, master=True),
}
#: Optimizer -> tensors of state per parameter, each the parameter's shape (Adam: two moments).
OPTIMIZER_STATES = {"adam": 2, "adamw": 2, "sgd-momentum": 1, "sgd": 0}
#: Adam and AdamW also keep a float32 step count per parameter tensor (on every rank).
STEP_COUNT_BYTES = 4
#: Strategy -> the components each rank holds only a shard of (master weights go with the optimizer state).
STRATEGIES: dict[str, frozenset[str]] = {
    "none": frozenset(),
    "zero1": frozenset({"optimizer state", "master weights"}),
    "zero2": frozenset({"optimizer state", "master weights", "gradients"}),
    "zero3": frozenset({"optimizer state", "master weights", "gradients", "parameters"}),
}


def parameter_shapes(model: nn.Module | int) -> list[tuple[int, ...]]:
    """The shapes of the model's parameters; a bare count is one flat tensor of that many numbers."""
    if isinstance(model, nn.Module):
        shapes = [tuple(p.shape) for p in model.parameters()]
        if not shapes:
            raise ValueError("the model has no parameters")
        return shapes
    if isinstance(model, bool) or not isinstance(model, int) or model < 1:
        raise ValueError(f"model={model!r} must be a parameter count (a whole number >= 1) or an nn.Module")
    return [(model,)]


@dataclass(frozen=True)
class Estimate:
    """Bytes held by the biggest rank (rank 0), by component, for one setting; under zero3 also the step's peak."""

    parameters: int  # numbers in the whole model
    tensors: int  # parameter tensors
    precision: str
    optimizer: str
    strategy: str
    ranks: int
    components: dict[str, int]
    dtypes: dict[str, str]
    peak: Peak | None = None  # zero3: the largest bytes during a step (gpulab.sharding.fsdp_memory)
    units: int = 0  # zero3: FSDP units the peak assumed
    reshard_after_forward: bool = True

    @property
    def total(self) -> int:
        """Bytes of all components on the biggest rank."""
        return sum(self.components.values())

    def rows(self) -> list[dict]:
        """One dict per component (and the total): dtype, sharded or replicated, bytes, GiB."""
        sharded = STRATEGIES[self.strategy]
        rows = [{"component": name, "dtype": self.dtypes[name],
                 "per rank": "1/N shard" if name in sharded and self.ranks > 1 else "whole",
                 "bytes": value, "GiB": value / 2**30} for name, value in self.components.items()]
        return rows + [{"component": "total", "bytes": self.total, "GiB": self.total / 2**30}]


def estimate(model: nn.Module | int, precision: str = "fp32", optimizer: str = "adam", strategy: str = "none",
             ranks: int = 1, activations: int | None = None, *, units: int | Sequence[nn.Module] | None = None,
             reshard_after_forward: bool = True, on_cpu: bool = False) -> Estimate:
    """Memory per rank for training ``model`` (see the module docstring for the choices).

    ``activations``: bytes one rank saves for backward for its own batch, measured
    (:func:`gpulab.memory.training_memory`) or estimated; not sharded, and left out when None.
    ``components`` is what stays between backward and the next step; temporaries are not in it.
    Under ``zero3`` ``peak`` adds them for FSDP2: ``units`` is a number of equal units of a parameter count,
    a list of the model's modules (one ``fully_shard`` each), or None (the model's ``fully_shard`` units if
    it has any, else one unit: the whole model). ``reshard_after_forward=False`` keeps every unit gathered
    from its forward to its backward. ``on_cpu`` adds the copies CPU kernels make (:func:`gpulab.sharding.fsdp_memory.fsdp_peak`).
    """
    one_of(precision, PRECISIONS, "precision")
    one_of(optimizer, OPTIMIZER_STATES, "optimizer")
    one_of(strategy, STRATEGIES, "strategy")
    positive_int(ranks, "ranks")
    if activations is not None:
        non_negative_int(activations, "activations (bytes)")
    if not isinstance(reshard_after_forward, bool):
        raise ValueError(f"reshard_after_forward must be True or False, got {reshard_after_forward!r}")
    if strategy != "zero3" and (units is not None or not reshard_after_forward or on_cpu):
        raise ValueError(f"units, reshard_after_forward and on_cpu describe FSDP2's zero3, not strategy {strategy!r}")
    shapes = parameter_shapes(model)
    whole = sum(math.prod(s) for s in shapes)
    biggest = sum(shard_numels(s, ranks)[0] for s in shapes)  # rank 0's share is the largest of every one
    sharded = STRATEGIES[strategy]

    def numbers(component: str) -> int:
        return biggest if component in sharded else whole

    kind = PRECISIONS[precision]
    states = OPTIMIZER_STATES[optimizer]
    steps = STEP_COUNT_BYTES * len(shapes) if optimizer.startswith("adam") else 0
    components = {
        "parameters": numbers("parameters") * kind.params.itemsize,
        "gradients": numbers("gradients") * kind.grads.itemsize,
        "optimizer state": states * numbers("optimizer state") * kind.state.itemsize + steps,
    }
    dtypes = {"parameters": str(kind.params), "gradients": str(kind.grads),
              "optimizer state": f"{states} x {kind.state}"}
    if kind.master:
        components["master weights"] = numbers("master weights") * F32.itemsize
        dtypes["master weights"] = str(F32)
    if kind.copies == "always" or (kind.copies == "outside zero3" and strategy != "zero3"):
        components["weight copies"] = whole * BF16.itemsize
        dtypes["weight copies"] = str(BF16)
    peak, found = None, []
    if strategy == "zero3":
        found = units_of(model, units)
        held = {k: v for k, v in components.items() if k != "gradients"}  # gradient shards are made in backward
        peak = fsdp_peak(found, ranks, kind.grads.itemsize, kind.gather.itemsize, kind.grads.itemsize, held,
                         activations or 0, reshard_after_forward, on_cpu)
    if activations is not None:
        components["activations"] = activations
        dtypes["activations"] = "measured"
    dtypes = {k: v.replace("torch.", "") for k, v in dtypes.items()}
    return Estimate(whole, len(shapes), precision, optimizer, strategy, ranks, components, dtypes, peak, len(found),
                    reshard_after_forward)


def format_estimate(est: Estimate) -> str:
    """A heading line and the table of :meth:`Estimate.rows`; under zero3 the step's peak and its parts."""
    head = (f"{est.parameters:,} parameters ({est.tensors} tensor{'s' * (est.tensors > 1)}), {est.precision}, {est.optimizer}, "
            f"strategy {est.strategy} over {est.ranks} rank(s): bytes on the biggest rank (rank 0)")
    text = head + "\n" + format_rows(est.rows())
    if est.peak is not None:
        kept = "reshard after forward" if est.reshard_after_forward else "kept gathered after forward"
        whole = " (one unit: the whole model is gathered at once; give units)" if est.units == 1 else ""
        text += (f"\npeak during one step with FSDP2, {est.units} unit(s), {kept}{whole}: at the {est.peak.at}\n"
                 + format_rows([{"part": k, "bytes": v, "GiB": v / 2**30} for k, v in est.peak.parts.items()]
                               + [{"part": "peak", "bytes": est.peak.total, "GiB": est.peak.total / 2**30}]))
    return text


#: Names of :data:`PRECISIONS` that :data:`gpulab.memory.VARIANTS` can measure.
MEASURABLE = {"fp32": "float32", "bf16-autocast": "autocast bfloat16", "bf16": "bfloat16 weights"}


def _largest_output(model: nn.Module, x: torch.Tensor) -> int:
    """Bytes of the largest tensor any module of ``model`` outputs for ``x`` (float32 forward, no grad)."""
    sizes = [0]
    hooks = [m.register_forward_hook(lambda _m, _i, out: sizes.append(out.nbytes if isinstance(out, torch.Tensor) else 0)) for m in model.modules()]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for hook in hooks:
            hook.remove()
    return max(sizes)


def compare(name: str, model: nn.Module, x: torch.Tensor, y: torch.Tensor, precision: str = "fp32") -> dict:
    """The estimate for one Adam step on ``(x, y)``, single rank, against two measurements.

    ``state``: parameters + gradients + optimizer state (bytes), estimated vs the exact tensor bytes after a real
    step (:func:`gpulab.memory.training_memory`). ``step``: that estimate plus the measured bytes saved
    for backward (batch included) vs the profiler's peak (:func:`gpulab.memory.profiled_peak`).
    The two differ by what is alive at once: the peak adds temporaries (Adam's step makes two scratch
    tensors the size of the parameter it updates, backward the gradients of a layer's output and input)
    and misses what is already freed (saved activations go as gradients arrive). ``largest tensor``
    (the biggest parameter or layer output, float32) sizes those: the peak stays within
    ``state measured + batch`` and ``step accounted + 2 x largest tensor``.
    """
    from gpulab import memory

    one_of(precision, MEASURABLE, "precision")
    row = memory.training_memory(model, x, y, MEASURABLE[precision])
    est = estimate(model, precision, "adam")
    state = sum(est.components[k] for k in ("parameters", "gradients", "optimizer state"))
    # Under autocast the weight copies that backward needs are among the measured saved bytes.
    accounted = state + row.saved_activations + row.saved_input
    peak = memory.profiled_peak(model, x, y, MEASURABLE[precision])
    largest = max(_largest_output(model, x), max(p.numel() for p in model.parameters()) * 4)
    return {"model": name, "parameters": est.parameters, "state estimated": state,
            "state measured": row.parameters + row.gradients + row.optimizer,
            "step accounted": accounted, "profiler peak": peak, "peak - accounted": peak - accounted,
            "largest tensor": largest}
