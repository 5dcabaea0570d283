"""DataParallel's mechanics made visible on any machine: scatter, replicate, gather, reduce.

``nn.DataParallel`` splits each input batch along dim 0 with ``torch.chunk`` (one chunk per
GPU), copies the module to every GPU that got a chunk, runs the copies, concatenates their
outputs on the first GPU and, in the backward pass, sums the copies' gradients into the
original module. ``data_parallel_step`` does exactly that with ``copy.deepcopy`` on one device,
so the result can be compared with a plain full-batch step on a laptop.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import nn

from gpulab.train import max_abs_difference
from gpulab.validate import positive_int


def replica_batch_sizes(batch_size: int, n_replicas: int) -> list[int]:
    """Rows each replica gets when DataParallel scatters ``batch_size`` rows over ``n_replicas`` GPUs.

    Same rule as ``torch.chunk``: chunks of ``ceil(batch_size / n_replicas)`` rows, the last one
    smaller, so fewer replicas may be used (10 rows on 4 GPUs: ``[3, 3, 3, 1]``; 5 on 4: ``[2, 2, 1]``).
    """
    positive_int(n_replicas, "n_replicas")
    positive_int(batch_size, "batch_size")
    step = math.ceil(batch_size / n_replicas)
    return [min(step, batch_size - start) for start in range(0, batch_size, step)]


def scatter(batch: torch.Tensor, n_replicas: int) -> tuple[torch.Tensor, ...]:
    """Split ``batch`` along dim 0 the way DataParallel's scatter does (``torch.chunk``)."""
    positive_int(n_replicas, "n_replicas")
    if not isinstance(batch, torch.Tensor) or batch.dim() == 0 or len(batch) == 0:
        raise ValueError(f"batch must be a tensor with at least one row, got {type(batch).__name__}"
                         f"{'' if not isinstance(batch, torch.Tensor) else ' of shape ' + str(tuple(batch.shape))}")
    return batch.chunk(n_replicas, dim=0)


def replicate(module: nn.Module, n: int) -> list[nn.Module]:
    """``n`` independent copies of ``module`` (DataParallel broadcasts one to each GPU)."""
    positive_int(n, "n_replicas")
    return [copy.deepcopy(module) for _ in range(n)]


def gather(outputs: list[torch.Tensor] | tuple[torch.Tensor, ...]) -> torch.Tensor:
    """Concatenate the replicas' outputs along dim 0 (on the first one's device), keeping autograd."""
    if not outputs:
        raise ValueError("gather needs at least one output")
    return torch.cat([o.to(outputs[0].device) for o in outputs], dim=0)


@dataclass
class DataParallelStep:
    """One DataParallel forward/backward: who got how many rows, the gathered output, the gradients.

    ``replica_grads`` holds each replica's own gradients (by parameter name), before they are summed into ``grads``.
    """

    batch_sizes: list[int]
    output: torch.Tensor
    loss: float
    grads: dict[str, torch.Tensor] = field(repr=False)
    replica_grads: list[dict[str, torch.Tensor]] = field(default_factory=list, repr=False)

    @property
    def replicas(self) -> int:
        """How many replicas really ran (fewer than asked when the batch is small)."""
        return len(self.batch_sizes)


def data_parallel_step(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    n_replicas: int,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
) -> DataParallelStep:
    """Scatter ``x`` over ``n_replicas`` copies of ``model``, gather, take the loss, reduce gradients.

    The loss is ``loss_fn`` (default ``nn.MSELoss()``, a mean) over the WHOLE gathered output, as
    with ``nn.DataParallel``. Each replica's gradients are summed into ``model``'s ``.grad``
    (added to what is there, like any backward). Returns the reduced gradients by parameter name.
    """
    if len(x) != len(y):
        raise ValueError(f"x has {len(x)} rows but y has {len(y)}: they must match")
    loss_fn = loss_fn or nn.MSELoss()
    chunks = scatter(x, n_replicas)
    replicas = replicate(model, len(chunks))
    for replica in replicas:
        replica.zero_grad(set_to_none=True)
    output = gather([replica(chunk) for replica, chunk in zip(replicas, chunks)])
    loss = loss_fn(output, y.to(output.device))
    loss.backward()
    named = dict(model.named_parameters())
    replica_grads = [{name: p.grad.detach().clone() for name, p in replica.named_parameters() if p.grad is not None}
                     for replica in replicas]
    for replica in replicas:
        for name, p in replica.named_parameters():
            if p.grad is None:
                continue
            target = named[name]
            grad = p.grad.to(target.device)
            target.grad = grad.clone() if target.grad is None else target.grad + grad
    grads = {name: p.grad.detach().clone() for name, p in named.items() if p.grad is not None}
    return DataParallelStep(
        batch_sizes=[len(c) for c in chunks], output=output.detach(), loss=loss.item(), grads=grads,
        replica_grads=replica_grads,
    )


def full_batch_gradients(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
) -> dict[str, torch.Tensor]:
    """Gradients of the loss on the whole batch with one model, by parameter name (``model`` untouched)."""
    loss_fn = loss_fn or nn.MSELoss()
    single = copy.deepcopy(model)
    single.zero_grad(set_to_none=True)
    loss_fn(single(x), y).backward()
    return {name: p.grad.detach().clone() for name, p in single.named_parameters() if p.grad is not None}


# Largest absolute difference between two gradient dicts with the same names.
max_grad_difference = max_abs_difference
