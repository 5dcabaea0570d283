"""The article's own training loop, kept as written there, to compare with ``gpulab.train.fit``.

The article keeps the data on the host in a ``DataLoader`` and, for every batch, converts it
with ``.type(torch.FloatTensor)`` (a *CPU* float32 tensor) and then copies it with
``.to(device)``. ``fit`` instead moves the whole (small) dataset to the device once and takes
batches by index. Same model, same optimizer, same loss: only the data path differs.

The article reads no loss value inside its batch loop, so neither does ``train_article`` by
default: the loss is summed on the device and read once per epoch (for the ``History``), when
the epoch's timing waits for the device anyway. ``loss_item_per_batch=True`` adds the common
``total += loss.item()`` per batch, which on a GPU makes the host wait for the device at every
step; :func:`compare_loops` (``benchmarks/loop_vs_article.py``) measures what that costs.
"""

from __future__ import annotations

import statistics
import warnings
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from gpulab.devices import model_device, pick_device
from gpulab.timing import Stopwatch
from gpulab.train import History
from gpulab.validate import non_negative_int, positive_int

#: The loops :func:`compare_loops` times.
LOOPS = ("article", "article + loss.item()", "gpulab fit")


def article_loader(
    X: torch.Tensor,
    y: torch.Tensor,
    batch_size: int = 128,
    *,
    shuffle: bool = True,
    pin_memory: bool = False,
    seed: int = 0,
) -> DataLoader:
    """The article's ``DataLoader(TensorDataset(X, y), batch_size=128, shuffle=True)``, data on the host."""
    positive_int(batch_size, "batch_size")
    if len(X) != len(y):
        raise ValueError(f"X has {len(X)} rows but y has {len(y)}: they must match")
    generator = torch.Generator().manual_seed(int(seed))
    return DataLoader(
        TensorDataset(X.cpu(), y.cpu()),
        batch_size=batch_size,
        shuffle=shuffle,
        pin_memory=pin_memory,
        generator=generator,
    )


def train_article(
    model: nn.Module,
    loader: DataLoader,
    *,
    epochs: int = 100,
    lr: float = 0.01,
    device: str | torch.device | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    loss_item_per_batch: bool = False,
) -> History:
    """Train as the article does: per batch ``.type(torch.FloatTensor).to(device)``; returns a ``History``.

    ``device`` is where ``model`` is (given, it must agree: a one-line ``ValueError`` otherwise). Loss is ``nn.MSELoss()``, optimizer Adam with ``lr``.
    ``loss_item_per_batch`` reads ``loss.item()`` after every step (a device sync per batch on a
    GPU), which the article does not do; the epoch's mean loss is the same either way.
    """
    non_negative_int(epochs, "epochs")
    if not isinstance(loss_item_per_batch, bool):
        raise ValueError(f"loss_item_per_batch={loss_item_per_batch!r} must be True or False")
    device = model_device(model, device, who="train_article")
    optimizer = optimizer or torch.optim.Adam(model.parameters(), lr=lr)
    criterion = nn.MSELoss()
    history = History(device=str(device))
    model.train()
    for epoch in range(epochs):
        with Stopwatch(device) as clock:  # waits for the device at both ends
            total = torch.zeros((), device=device)  # float32: Apple's MPS has no float64
            host_total, count = 0.0, 0
            for data, target in loader:
                data = data.type(torch.FloatTensor).to(device)
                target = target.type(torch.FloatTensor).to(device)
                optimizer.zero_grad()
                output = model(data)
                loss = criterion(output, target)
                loss.backward()
                optimizer.step()
                if loss_item_per_batch:
                    host_total += loss.item() * len(data)  # the host waits here for the device
                else:
                    total += loss.detach() * len(data)  # stays on the device: no wait
                count += len(data)
        seconds = clock.seconds
        loss_sum = host_total if loss_item_per_batch else total.item()  # once per epoch, after the clock
        history.epochs.append(epoch)
        history.loss.append(loss_sum / count if count else float("nan"))
        history.seconds.append(seconds)
        history.samples_per_s.append(count / seconds if seconds > 0 else float("inf"))
    return history


def compare_loops(device: str | torch.device, epochs: int, repeats: int, batch_size: int = 128) -> dict:
    """Median seconds of ``epochs`` epochs for each of :data:`LOOPS`, over ``repeats`` interleaved runs.

    The article's loop (DataLoader, a copy per batch), the same with ``loss.item()`` per batch, and
    ``gpulab.train.fit`` (data moved once): same model, optimizer, batch size and data. One warm-up
    epoch each first; interleaved, so a busy machine slows every loop alike. ``models`` holds each
    loop's last trained model.
    """
    from gpulab.experiment import Recipe, setup

    positive_int(repeats, "repeats")
    dev = pick_device(device)
    recipe = Recipe(epochs=epochs, batch_size=batch_size)
    data = setup(recipe).data
    loader = article_loader(data.X_train, data.y_train, batch_size=batch_size)

    def article(n: int, per_batch: bool = False) -> nn.Module:
        run = setup(recipe, dev)
        train_article(run.model, loader, epochs=n, device=dev, optimizer=run.optimizer, loss_item_per_batch=per_batch)
        return run.model

    def gpulab_loop(n: int) -> nn.Module:
        run = setup(recipe, dev)
        run.fit(epochs=n, progress=False)
        return run.model

    loops = dict(zip(LOOPS, (article, lambda n: article(n, per_batch=True), gpulab_loop)))
    for train in loops.values():
        train(1)  # warm-up: first calls allocate and load kernels
    runs: dict[str, list[float]] = {name: [] for name in loops}
    models: dict[str, nn.Module] = {}
    for _ in range(repeats):
        for name, train in loops.items():
            with Stopwatch(dev) as clock:
                models[name] = train(epochs)
            runs[name].append(clock.seconds)
    return {"device": str(dev), "epochs": epochs, "repeats": repeats, "batches_per_epoch": len(loader),
            "seconds": {name: statistics.median(r) for name, r in runs.items()},
            "spread": {name: (min(r), max(r)) for name, r in runs.items()}, "models": models}


def loop_rates(rows: list[dict]) -> dict[str, dict[str, float]]:
    """Recorded ``boston_loop`` rows (``device``, ``loop``, ``epochs_per_s``) as ``{device: {loop: epochs/s}}``."""
    rates: dict[str, dict[str, float]] = {}
    for row in rows:
        rates.setdefault(str(row["device"]), {})[row["loop"]] = float(row["epochs_per_s"])
    return rates


def speed_words(ratio: float) -> str:
    """An accelerator's rate over the CPU's, in words: slower, no faster, only a little faster, or faster."""
    if ratio < 0.9:
        return "slower"
    return "no faster" if ratio < 1.1 else "only a little faster" if ratio < 2 else "faster"


def rates_table(rates: dict[str, dict[str, float]]) -> str:
    """Epochs per second of each loop (rows) on each device (columns), and what they say.

    Where a CPU column stands beside an accelerator's, each row adds the accelerator's rate over the CPU's
    in words (:func:`speed_words`). The last line says how much slower ``loss.item()`` after every step made
    the article loop on each device (on a CPU it has nothing to wait for: any difference is noise).
    """
    if not rates or not all(set(LOOPS) <= set(r) for r in rates.values()):
        raise ValueError(f"give epochs per second of every loop ({', '.join(LOOPS)}) for each device")
    others = [d for d in rates if d != "cpu"] if "cpu" in rates else []
    head = f"{'loop':<22}" + "".join(f"{d + ' epochs/s':>18}" for d in rates)
    head += "".join(f"  {d} / cpu" for d in others)
    lines = [head, "-" * len(head)]
    for loop in LOOPS:
        line = f"{loop:<22}" + "".join(f"{r[loop]:>18.1f}" for r in rates.values())
        for d in others:
            ratio = rates[d][loop] / rates["cpu"][loop]
            line += f"  {ratio:.2f}x: {speed_words(ratio)}"
        lines.append(line)
    costs = [(d, 1 - r["article + loss.item()"] / r["article"]) for d, r in rates.items()]
    lines.append("with loss.item() after every step, the article loop ran "
                 + ", ".join(f"{abs(c):.1%} {'slower' if c >= 0 else 'faster'} on {d}" for d, c in costs))
    return "\n".join(lines)


@dataclass(frozen=True)
class LossShapes:
    """``nn.MSELoss`` of an output against a target as given, and against the target shaped like the output."""

    output_shape: tuple[int, ...]
    target_shape: tuple[int, ...]
    compared_shape: tuple[int, ...]
    warning: str | None
    loss_as_given: float
    loss_matched: float


def mse_as_given(output: torch.Tensor, target: torch.Tensor) -> LossShapes:
    """The article's label bug, measured: ``MSELoss`` of ``(n, 1)`` outputs against ``(n,)`` labels.

    The two shapes broadcast to ``(n, n)``: every output is compared with EVERY label, PyTorch warns
    (the warning is caught and returned), and the loss is the mean over all n² pairs. A model trained
    on that loss learns to predict the mean label. ``loss_matched`` reshapes the target to the
    output's shape first, as intended.
    """
    if output.numel() != target.numel():
        raise ValueError(f"output {tuple(output.shape)} and target {tuple(target.shape)} must hold as many values")
    criterion = nn.MSELoss()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        as_given = criterion(output, target).item()
    said = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    return LossShapes(
        output_shape=tuple(output.shape),
        target_shape=tuple(target.shape),
        compared_shape=tuple(torch.broadcast_shapes(output.shape, target.shape)),
        warning=said[0] if said else None,
        loss_as_given=as_given,
        loss_matched=criterion(output, target.reshape(output.shape)).item(),
    )
