"""Repeated evaluation on the Boston data: every model on the same K seeded splits, mean ± std.

One 80/20 split of 506 rows is noisy (test RMSE moves by a whole unit from one seed to the
next), so models are compared over ``repeats`` splits (seeds ``0..repeats-1``), every model
on identical rows. Models:

- ``article MLP``: ``Net1(13, 16, 32, 1)`` with the article's recipe (Adam lr 0.01, batch 128,
  100 epochs), on standardised inputs (the article fed raw ones);
- ``improved MLP``: what the article's recipe lacks, see ``fit_improved``;
- scikit-learn's ``LinearRegression``, ``RandomForestRegressor`` and ``GradientBoostingRegressor``
  (seeded), on the same standardised numbers, always on the CPU.

Each ``Score`` keeps its per-split RMSEs and seeds, so ``gpulab.paired_comparison`` can compare two models
split by split instead of mean against mean.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Callable, Sequence

import torch

from gpulab.boston import Split, carve_validation, load_boston, split
from gpulab.devices import pick_device
from gpulab.experiment import Recipe, Setup, article_model, optimizer_for
from gpulab.models import EnsembleMLP
from gpulab.timing import Stopwatch, using_threads
from gpulab.train import fit, predict, regression_metrics
from gpulab.validate import positive_int

MODELS = ("article MLP", "improved MLP", "LinearRegression", "RandomForest", "GradientBoosting")


@dataclass(frozen=True)
class ImprovedConfig:
    """Settings of the improved MLP (defaults: the ones measured in ``gpulab evaluate``).

    An ensemble of ``members`` MLPs (2 x ``hidden`` units, dropout), AdamW with weight decay,
    a cosine learning-rate schedule, standardised target, and early stopping on a validation
    part carved from the training rows (``val_fraction``), keeping the best weights.
    """

    members: int = 12
    hidden: int = 128
    layers: int = 2
    dropout: float = 0.1
    lr: float = 0.01
    weight_decay: float = 0.01
    epochs: int = 200
    patience: int = 40
    batch_size: int = 32
    val_fraction: float = 0.15

    def __post_init__(self) -> None:
        for name in ("members", "hidden", "layers", "epochs", "patience", "batch_size"):
            value = getattr(self, name)
            positive_int(value, name)
        for name in ("lr", "weight_decay"):
            value = getattr(self, name)
            if not 0 <= value < math.inf or (name == "lr" and value == 0):
                raise ValueError(f"{name}={value!r} must be a finite number > 0 (weight_decay may be 0)")


@dataclass
class ImprovedMLP:
    """A trained improved MLP: the ensemble, the target's scale, and what training saw."""

    model: EnsembleMLP
    y_mean: float
    y_std: float
    best_epoch: int
    val_rmse: list[float] = field(default_factory=list)
    train_loss: list[float] = field(default_factory=list)

    def predict(self, X: torch.Tensor) -> torch.Tensor:
        """Predicted MEDV ($1000s), shape ``(n, 1)``: the mean of the members, unscaled."""
        return predict(self.model, X).mean(0) * self.y_std + self.y_mean


def fit_improved(
    data: Split, config: ImprovedConfig = ImprovedConfig(), seed: int = 0, device: str | torch.device = "cpu",
    progress: bool = False,
) -> ImprovedMLP:
    """Train the improved MLP on ``data``'s training part with ``gpulab.train.fit``.

    ``config.val_fraction`` of the training rows are set aside; after each epoch the ensemble's
    validation RMSE is measured, the best weights kept, and training stops after
    ``config.patience`` epochs without improvement. The test part is never looked at.
    """
    return _fit_improved(data, config, seed, pick_device(device), progress)


def _fit_improved(data: Split, config: ImprovedConfig, seed: int, device: torch.device, progress: bool) -> ImprovedMLP:
    """:func:`fit_improved` on a device already picked (a repeated evaluation picks it once)."""
    X_fit, y_fit, X_val, y_val = carve_validation(
        data.X_train.to(device), data.y_train.to(device), config.val_fraction, seed
    )
    y_mean, y_std = y_fit.mean().item(), y_fit.std().item()
    torch.manual_seed(seed)
    model = EnsembleMLP(X_fit.shape[1], 1, config.hidden, config.members, config.layers, config.dropout).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=config.epochs)
    result = ImprovedMLP(model, y_mean, y_std, best_epoch=-1)
    best = {"rmse": math.inf, "state": None}

    def early_stop(epoch: int, history) -> bool:
        rmse = regression_metrics(result.predict(X_val), y_val)["rmse"]
        result.val_rmse.append(rmse)
        if rmse < best["rmse"]:
            best["rmse"], result.best_epoch = rmse, epoch
            best["state"] = {k: v.detach().clone() for k, v in model.state_dict().items()}
        return epoch - result.best_epoch >= config.patience

    history = fit(
        model, (X_fit, (y_fit - y_mean) / y_std), epochs=config.epochs, optimizer=optimizer, scheduler=scheduler,
        loss_fn=lambda out, y: ((out - y) ** 2).mean(),  # every member's MSE, averaged over members
        batch_size=config.batch_size, device=device, seed=seed, progress=progress, on_epoch_end=early_stop,
        desc="improved MLP",
    )
    result.train_loss = history.loss
    if best["state"] is not None:
        model.load_state_dict(best["state"])
    return result


@dataclass(frozen=True)
class Score:
    """One model over the repeats: mean ± std test RMSE, mean R², mean training seconds, device.

    ``rmse`` holds one test RMSE per split seed in ``seeds``; ``test_train_ratio`` is test rows /
    training rows (for ``gpulab.paired_comparison.compare``, which pairs scores split by split).
    """

    model: str
    features: str
    rmse_mean: float
    rmse_std: float
    r2_mean: float
    seconds_mean: float
    device: str
    rmse: tuple[float, ...]
    seeds: tuple[int, ...] = ()
    test_train_ratio: float | None = None

    def to_dict(self) -> dict:
        """A JSON-friendly dict."""
        d = asdict(self)
        d["rmse"], d["seeds"] = list(self.rmse), list(self.seeds)
        return d


def _sklearn(name: str, seed: int):
    from sklearn.ensemble import GradientBoostingRegressor, RandomForestRegressor
    from sklearn.linear_model import LinearRegression

    return {
        "LinearRegression": lambda: LinearRegression(),
        "RandomForest": lambda: RandomForestRegressor(random_state=seed),
        "GradientBoosting": lambda: GradientBoostingRegressor(random_state=seed),
    }[name]()


def fit_and_predict(
    name: str, data: Split, seed: int, device: torch.device, improved: ImprovedConfig = ImprovedConfig(),
    article_epochs: int = 100,
) -> tuple[torch.Tensor, float, str]:
    """Train model ``name`` on ``data``'s training part; return (test predictions, seconds, device)."""
    if name not in MODELS:
        raise ValueError(f"model={name!r} is not one of {', '.join(MODELS)}")
    on_cpu = name not in ("article MLP", "improved MLP")  # scikit-learn runs on the CPU only
    device = torch.device("cpu") if on_cpu else device
    with Stopwatch(device) as clock:
        if name == "article MLP":
            recipe = Recipe(seed=seed, split_seed=seed, epochs=article_epochs)
            model = article_model(recipe, in_dim=data.X_train.shape[1], device=device)
            Setup(recipe, data, model, optimizer_for(model, recipe)).fit(progress=False)  # where the model is
            pred = predict(model, data.X_test.to(device))
        elif name == "improved MLP":
            pred = _fit_improved(data, improved, seed, device, progress=False).predict(data.X_test.to(device))
        else:
            estimator = _sklearn(name, seed)
            estimator.fit(data.X_train.cpu().numpy(), data.y_train.cpu().numpy().ravel())
            pred = torch.from_numpy(estimator.predict(data.X_test.cpu().numpy()))
    return pred.cpu(), clock.seconds, str(device)


def repeated_evaluation(
    repeats: int = 5,
    drop_b: bool = False,
    device: str | torch.device = "cpu",
    models: Sequence[str] = MODELS,
    improved: ImprovedConfig = ImprovedConfig(),
    article_epochs: int = 100,
    threads: int | None = 1,
    on_result: Callable[[str, int, float], None] | None = None,
) -> list[Score]:
    """Every model in ``models`` on the splits with seeds ``0..repeats-1``; one ``Score`` per model.

    Repeat ``i`` uses seed ``i`` for the split, the initial weights, the data order and the forests.
    ``threads`` torch CPU threads are used meanwhile (``None``: leave as is).
    ``on_result(model, seed, rmse)`` is called after each fit (progress reports).
    """
    positive_int(repeats, "repeats")
    unknown = [m for m in models if m not in MODELS]
    if unknown or not models:
        raise ValueError(f"models={list(models)!r}: choose one or more of {', '.join(MODELS)}")
    device = pick_device(device)
    data = load_boston(drop_b=drop_b)
    runs: dict[str, list[tuple[float, float, float, str]]] = {m: [] for m in models}
    with using_threads(threads):  # tiny models train fastest on one thread
        for seed in range(repeats):
            part = split(data, seed=seed, device=device)
            test_train_ratio = len(part.X_test) / len(part.X_train)
            for name in models:
                pred, seconds, where = fit_and_predict(name, part, seed, device, improved, article_epochs)
                metrics = regression_metrics(pred, part.y_test)
                runs[name].append((metrics["rmse"], metrics["r2"], seconds, where))
                if on_result is not None:
                    on_result(name, seed, metrics["rmse"])
    features = f"{'without' if drop_b else 'with'} B"
    return [
        Score(
            model=name, features=features,
            rmse_mean=statistics.fmean(r[0] for r in rs),
            rmse_std=statistics.stdev([r[0] for r in rs]) if len(rs) > 1 else 0.0,
            r2_mean=statistics.fmean(r[1] for r in rs),
            seconds_mean=statistics.fmean(r[2] for r in rs),
            device=rs[0][3],
            rmse=tuple(r[0] for r in rs),
            seeds=tuple(range(repeats)),
            test_train_ratio=test_train_ratio,
        )
        for name, rs in runs.items()
    ]


def ratio(scores: Sequence[Score], model: str = "improved MLP", reference: str = "GradientBoosting") -> float:
    """``model``'s mean test RMSE divided by ``reference``'s (below 1: ``model`` is better)."""
    by_name = {s.model: s for s in scores}
    for name in (model, reference):
        if name not in by_name:
            raise ValueError(f"no score for {name!r}; have {', '.join(by_name) or 'none'}")
    return by_name[model].rmse_mean / by_name[reference].rmse_mean


def format_table(scores: Sequence[Score], timing: bool = True) -> str:
    """A plain-text table: model, features, test RMSE mean ± std, mean R², (seconds, device)."""
    head = f"{'model':<18}{'features':<11}{'test RMSE':>16}{'R²':>7}"
    if timing:
        head += f"{'train s':>9}  device"
    lines = [head]
    for s in scores:
        line = f"{s.model:<18}{s.features:<11}{s.rmse_mean:>9.2f} ± {s.rmse_std:<4.2f}{s.r2_mean:>7.3f}"
        if timing:
            line += f"{s.seconds_mean:>9.2f}  {s.device}"
        lines.append(line)
    return "\n".join(lines)

