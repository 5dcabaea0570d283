"""THE training loop: single device, DataParallel, or one DDP rank, all through ``fit``.

Batches from tensors are taken by index from a permutation drawn from ``(seed, epoch)``.
With ``world_size`` ranks, every rank draws the same permutation, takes its slice of each
*global* batch (``tensor_split``: 128 over 3 ranks is 43/43/42) and scales its loss by
``local / global * world_size``. DDP averages gradients over ranks, so the step equals the
single-process step on the whole global batch, whatever the number of ranks.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable

import torch
from torch import nn

from gpulab.devices import model_device
from gpulab.step import train_step
from gpulab.timing import Stopwatch
from gpulab.validate import non_negative_int, positive_int


@dataclass
class History:
    """What ``fit`` measured: mean training loss, seconds and samples/s for each epoch."""

    loss: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    samples_per_s: list[float] = field(default_factory=list)
    device: str = "cpu"
    epochs: list[int] = field(default_factory=list)

    def to_dict(self) -> dict:
        """A JSON-friendly dict."""
        return asdict(self)


def epoch_permutation(n: int, seed: int, epoch: int) -> torch.Tensor:
    """The order of the ``n`` samples in ``epoch``: the same on every rank and every restart."""
    generator = torch.Generator().manual_seed(int(seed) * 1_000_003 + int(epoch))
    return torch.randperm(n, generator=generator)


def shard_batches(
    n: int, batch_size: int, seed: int, epoch: int, rank: int = 0, world_size: int = 1,
    device: str | torch.device | None = None,
) -> list[tuple[torch.Tensor, int]]:
    """This rank's share of each global batch: a list of ``(indices, global_batch_size)``.

    With ``device``, the epoch's permutation is copied there once and the indices are views of it
    (no host-to-device copy per step).
    """
    positive_int(batch_size, "batch_size")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank={rank!r} must be in 0..{world_size - 1}")
    order = epoch_permutation(n, seed, epoch)
    if device is not None:
        order = order.to(device)
    return [
        (batch.tensor_split(world_size)[rank], len(batch))
        for batch in order.split(batch_size)
    ]


def _distributed() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def _reduce_totals(model: nn.Module, loss_sum: torch.Tensor, count: int, world_size: int) -> tuple[float, int]:
    """The epoch's loss sum and sample count over all ranks (one all-reduce over the model's DDP group).

    float32 on the training device: Apple MPS has no float64, and nccl reduces device tensors only.
    """
    totals = torch.stack([loss_sum, torch.tensor(float(count), device=loss_sum.device)])
    if world_size > 1 and _distributed():
        torch.distributed.all_reduce(totals, group=getattr(model, "process_group", None))
    loss, n = totals.tolist()
    return loss, round(n)


def fit(
    model: nn.Module,
    data: tuple[torch.Tensor, torch.Tensor] | Iterable,
    *,
    epochs: int = 100,
    lr: float = 0.01,
    optimizer: torch.optim.Optimizer | None = None,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
    batch_size: int = 128,
    device: str | torch.device | None = None,
    seed: int = 0,
    autocast_dtype: torch.dtype | None = None,
    progress: bool = True,
    rank: int = 0,
    world_size: int = 1,
    start_epoch: int = 0,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    on_epoch_end: Callable[[int, History], bool | None] | None = None,
    desc: str = "training",
    accumulate: int = 1,
) -> History:
    """Train ``model`` and return its ``History``.

    Training runs where ``model`` is (or, for a DDP/DataParallel wrapper, where the model inside is):
    ``data`` is either ``(X, y)`` tensors (moved there once, batches by index), or any iterable of
    ``(x, y)`` batches such as a ``DataLoader`` (each batch moved as it comes). ``device`` is only a
    check: one that is not where the model is raises a one-line ``ValueError``.
    ``optimizer`` defaults to Adam with ``lr``; ``loss_fn`` to ``nn.MSELoss()`` (a mean).
    ``autocast_dtype`` (``torch.bfloat16``/``torch.float16``) runs the forward pass under
    ``torch.autocast``; float16 on CUDA also uses a ``GradScaler``. ``on_epoch_end(epoch, history)``
    runs after each epoch (checkpoints, early stopping: return ``True`` to stop). ``accumulate=k``
    cuts every batch into ``k`` micro-batches whose gradients add up before one optimizer step (under
    DDP only the last one all-reduces: see :func:`gpulab.step.train_step`); the weights are the same.
    Epochs are numbered from ``start_epoch`` to ``epochs - 1`` (resume = same numbers).
    """
    non_negative_int(epochs, "epochs")
    positive_int(accumulate, "accumulate")
    device = model_device(model, device, who="fit")
    optimizer = optimizer or torch.optim.Adam(model.parameters(), lr=lr)
    loss_fn = loss_fn or nn.MSELoss()
    use_scaler = autocast_dtype == torch.float16 and device.type == "cuda"
    scaler = torch.amp.GradScaler("cuda") if use_scaler else None
    tensors = isinstance(data, (tuple, list)) and len(data) == 2 and all(isinstance(t, torch.Tensor) for t in data)
    if tensors:
        X, y = (t.to(device) for t in data)
        if len(X) != len(y):
            raise ValueError(f"X has {len(X)} rows but y has {len(y)}: they must match")

    history = History(device=str(device))
    epoch_range = range(start_epoch, epochs)
    bar = None
    if progress and rank == 0:
        from tqdm.auto import tqdm

        bar = tqdm(epoch_range, desc=desc, unit="epoch")
        epoch_range = bar
    model.train()
    for epoch in epoch_range:
        with Stopwatch(device) as clock:  # waits for the device at both ends
            loss_sum = torch.zeros((), device=device)  # float32: no float64 on MPS
            count = 0
            if tensors:  # the epoch's order goes to the device once; each step indexes with a view of it
                steps = (
                    (X[idx], y[idx], len(idx) * world_size / total)
                    for idx, total in shard_batches(len(X), batch_size, seed, epoch, rank, world_size, device=device)
                )
            else:
                steps = ((xb.to(device, non_blocking=True), yb.to(device, non_blocking=True), 1.0) for xb, yb in data)
            for xb, yb, weight in steps:
                loss = train_step(model, optimizer, xb, yb, loss_fn=loss_fn, weight=weight, accumulate=accumulate,
                                  autocast_dtype=autocast_dtype, scaler=scaler)
                loss_sum += loss * len(xb)
                count += len(xb)
            if scheduler is not None:
                scheduler.step()
            total_loss, total_count = _reduce_totals(model, loss_sum, count, world_size)
        seconds = clock.seconds
        mean_loss = total_loss / total_count if total_count > 0 else math.nan
        history.epochs.append(epoch)
        history.loss.append(mean_loss)
        history.seconds.append(seconds)
        history.samples_per_s.append(total_count / seconds if seconds > 0 else math.inf)
        if bar is not None:
            bar.set_postfix(loss=f"{mean_loss:.3f}")
        if on_epoch_end is not None and on_epoch_end(epoch, history):
            break
    if bar is not None:
        bar.close()
    return history


@torch.no_grad()
def predict(model: nn.Module, X: torch.Tensor) -> torch.Tensor:
    """The model's outputs for ``X`` in eval mode (the model is put back in train mode after)."""
    was_training = model.training
    model.eval()
    try:
        return model(X)
    finally:
        model.train(was_training)


def regression_metrics(pred: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    """MSE, RMSE and R² of predictions ``pred`` against targets ``y``."""
    pred, y = pred.detach().reshape(-1).cpu().double(), y.detach().reshape(-1).cpu().double()  # float64 on the CPU only
    if len(pred) != len(y) or len(y) == 0:
        raise ValueError(f"need equal, non-empty predictions and targets, got {len(pred)} and {len(y)}")
    mse = torch.mean((pred - y) ** 2).item()
    total = torch.sum((y - y.mean()) ** 2).item()
    r2 = 1.0 - mse * len(y) / total if total > 0 else math.nan
    return {"mse": mse, "rmse": math.sqrt(mse), "r2": r2}


def max_abs_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """Largest absolute difference between two dicts of tensors with the same names (weights, gradients).

    Tensors may live on different devices; the comparison happens on the CPU.
    """
    if a.keys() != b.keys():
        raise ValueError(f"names differ: {sorted(a)} vs {sorted(b)}")
    return max((float((a[k].detach().cpu() - b[k].detach().cpu()).abs().max()) for k in a), default=0.0)


def evaluate(model: nn.Module, X: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    """Test metrics (MSE, RMSE, R²) of ``model`` on ``X``, ``y``."""
    return regression_metrics(predict(model, X), y)
