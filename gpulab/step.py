"""THE training step: zero the gradients, forward and backward (over micro-batches if asked), one optimizer step.

:func:`gpulab.train.fit` runs it for every batch, and everything that times or profiles one step calls it
too, so a measured step is the step the course trains with. With ``accumulate=k`` the batch is cut into
``k`` micro-batches (``tensor_split``); their gradients add up in ``.grad`` and the optimizer steps once.
Each micro-batch's mean loss is weighted by its share of the batch, so the gradient equals the whole
batch's. Under DDP every micro-batch but the last runs inside ``model.no_sync()`` (gradients stay local
and the last backward all-reduces their sum once); an FSDP2 module gets the same through
``set_requires_gradient_sync``. ``phases`` (optional) wraps the forward pass (with the loss), the backward
pass and the optimizer step each in a context of its own: :mod:`gpulab.profiling.steps` labels them there.
"""

from __future__ import annotations

import contextlib
from typing import Callable, ContextManager

import torch
from torch import nn

from gpulab.validate import positive_int

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
Phases = Callable[[str], ContextManager]


def _no_phases(_name: str) -> ContextManager:
    return contextlib.nullcontext()


def _sync_unless(model: nn.Module, last: bool):
    """A context in which ``model`` all-reduces or reduce-scatters its gradients only on the ``last`` micro-batch."""
    if last:
        return contextlib.nullcontext()
    if hasattr(model, "no_sync"):  # DistributedDataParallel
        return model.no_sync()
    if hasattr(model, "set_requires_gradient_sync"):  # an FSDP2 module (fully_shard)

        @contextlib.contextmanager
        def local_only():
            model.set_requires_gradient_sync(False)
            try:
                yield
            finally:
                model.set_requires_gradient_sync(True)

        return local_only()
    return contextlib.nullcontext()


def _loss_input(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``out`` in float32, or in ``y``'s wider floating dtype: the loss computes in that dtype either way, and
    before torch 2.12 ``mse_loss``'s backward fails on inputs of two dtypes (pytorch/pytorch#94086, #175743)."""
    out = out.float()
    return out.to(y.dtype) if y.is_floating_point() and y.dtype.itemsize > out.dtype.itemsize else out


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, xb: torch.Tensor, yb: torch.Tensor, *,
               loss_fn: LossFn | None = None, weight: float = 1.0, accumulate: int = 1, no_sync: bool = True,
               autocast_dtype: torch.dtype | None = None, scaler: torch.amp.GradScaler | None = None,
               phases: Phases | None = None) -> torch.Tensor:
    """One optimizer step on the batch ``(xb, yb)``; returns the batch's mean loss (detached, float32).

    ``loss_fn`` defaults to ``nn.MSELoss()`` (a mean); the loss that backward sees is multiplied by
    ``weight`` (a DDP rank's share of a global batch, see :mod:`gpulab.train`). ``autocast_dtype`` runs the
    forward pass under ``torch.autocast`` on the batch's device; ``scaler`` (a ``GradScaler``) scales the
    loss and steps through it. An empty batch (a rank's share of a tiny last batch) still takes part.
    ``no_sync=False`` lets every micro-batch all-reduce (only to show what ``no_sync()`` saves).
    """
    positive_int(accumulate, "accumulate")
    loss_fn = loss_fn or nn.functional.mse_loss
    phase = phases or _no_phases
    device_type = xb.device.type
    optimizer.zero_grad(set_to_none=True)
    pieces = list(zip(xb.tensor_split(accumulate), yb.tensor_split(accumulate)))
    losses = []
    for i, (x, y) in enumerate(pieces):
        with _sync_unless(model, last=not no_sync or i == len(pieces) - 1):
            with phase("forward"), torch.autocast(device_type, dtype=autocast_dtype or torch.bfloat16,
                                                  enabled=autocast_dtype is not None):
                out = model(x)
                loss = loss_fn(_loss_input(out, y), y) if len(x) else out.sum() * 0.0
            share = len(x) / len(xb) if len(xb) else 1.0 / len(pieces)
            factor = weight if len(pieces) == 1 else weight * share
            scaled = loss if factor == 1.0 else loss * factor
            with phase("backward"):
                (scaler.scale(scaled) if scaler is not None else scaled).backward()
        losses.append(loss.detach().float())
    with phase("optimizer"):
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
    if len(losses) == 1:
        return losses[0]
    return sum(l * len(x) for l, (x, _) in zip(losses, pieces)) / max(len(xb), 1)
