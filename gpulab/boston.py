"""The Boston housing data, shipped with the package and checked on every load.

The copy in ``gpulab/data`` is the original 506-row file that scikit-learn shipped
until 1.1.3 (``load_boston`` was removed in 1.2). No network is ever used.
"""

from __future__ import annotations

import csv
import hashlib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np
import torch

SHA256 = "d98212636026544fc9b9c0f372e5f819872e6fa6fa757ab025efdda22180f2d6"
FEATURES = ("CRIM", "ZN", "INDUS", "CHAS", "NOX", "RM", "AGE", "DIS", "RAD", "TAX", "PTRATIO", "B", "LSTAT")
TARGET = "MEDV"


def csv_path() -> Path:
    """Where the packaged CSV lies."""
    return Path(str(resources.files("gpulab") / "data" / "boston_house_prices.csv"))


@dataclass(frozen=True)
class Boston:
    """The raw data: ``X`` (506 x 13, or 12 without B), target ``y`` (MEDV, $1000s), names."""

    X: np.ndarray
    y: np.ndarray
    feature_names: tuple[str, ...]


def load_boston(drop_b: bool = False, path: str | Path | None = None) -> Boston:
    """Load and verify the CSV; ``drop_b=True`` leaves out the ``B`` column.

    Raises ``ValueError`` naming the file and the expected sha256 if the file differs.
    """
    path = Path(path) if path is not None else csv_path()
    raw = path.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    if digest != SHA256:
        raise ValueError(f"{path} has sha256 {digest}, expected {SHA256}: the data file is damaged or replaced")
    rows = list(csv.reader(raw.decode("utf-8").splitlines()))
    header = tuple(rows[1])
    values = np.array(rows[2:], dtype=np.float64)
    names = header[:-1]
    X, y = values[:, :-1], values[:, -1]
    if drop_b:
        keep = [i for i, n in enumerate(names) if n != "B"]
        X, names = X[:, keep], tuple(names[i] for i in keep)
    return Boston(X=X, y=y, feature_names=tuple(names))


@dataclass
class Split:
    """Train/test tensors (float32, on one device), standardised with training statistics only."""

    X_train: torch.Tensor
    y_train: torch.Tensor
    X_test: torch.Tensor
    y_test: torch.Tensor
    feature_names: tuple[str, ...]
    mean: np.ndarray
    std: np.ndarray


def split(
    data: Boston,
    *,
    test_size: float = 0.2,
    seed: int = 42,
    scale: bool = True,
    device: str | torch.device = "cpu",
) -> Split:
    """A seeded train/test split (scikit-learn's ``train_test_split``), optionally standardised.

    The mean and std come from the training part only, so the test part stays unseen.
    Targets have shape ``(n, 1)`` to match a one-output model. Tensors are float32, which
    also suits Apple MPS (no float64 there).
    """
    from sklearn.model_selection import train_test_split

    if not 0.0 < test_size < 1.0:
        raise ValueError(f"test_size={test_size!r} must be between 0 and 1 (exclusive)")
    X_tr, X_te, y_tr, y_te = train_test_split(data.X, data.y, test_size=test_size, random_state=seed)
    if scale:
        mean, std = X_tr.mean(axis=0), X_tr.std(axis=0)
        std = np.where(std == 0, 1.0, std)
    else:
        mean, std = np.zeros(X_tr.shape[1]), np.ones(X_tr.shape[1])

    def tensor(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)).to(device)

    return Split(
        X_train=tensor((X_tr - mean) / std),
        y_train=tensor(y_tr.reshape(-1, 1)),
        X_test=tensor((X_te - mean) / std),
        y_test=tensor(y_te.reshape(-1, 1)),
        feature_names=data.feature_names,
        mean=mean,
        std=std,
    )


def carve_validation(
    X: torch.Tensor, y: torch.Tensor, fraction: float = 0.15, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Set a seeded ``fraction`` of the TRAINING rows aside for validation (early stopping, tuning).

    Returns ``(X_fit, y_fit, X_val, y_val)``. The test part is never touched, so choices made
    on the validation part cannot leak test information into the model.
    """
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"fraction={fraction!r} must be between 0 and 1 (exclusive)")
    if len(X) != len(y):
        raise ValueError(f"X has {len(X)} rows but y has {len(y)}: they must match")
    n_val = max(1, int(round(len(X) * fraction)))
    if n_val >= len(X):
        raise ValueError(f"fraction={fraction!r} leaves no rows to train on ({len(X)} rows)")
    order = torch.randperm(len(X), generator=torch.Generator().manual_seed(int(seed))).to(X.device)
    val, fit = order[:n_val], order[n_val:]
    return X[fit], y[fit], X[val], y[val]


def head(data: Boston, rows: int = 5) -> str:
    """The first ``rows`` rows as a plain-text table (features, then MEDV)."""
    names = list(data.feature_names) + [TARGET]
    values = np.column_stack([data.X, data.y])[:rows]
    lines = ["".join(f"{n:>8}" for n in names)]
    lines += ["".join(f"{v:>8g}" for v in row) for row in values]
    return "\n".join(lines)


def describe(data: Boston) -> str:
    """Count, mean, std, min, median and max of every column, one row per column."""
    names = list(data.feature_names) + [TARGET]
    values = np.column_stack([data.X, data.y])
    lines = [f"{'column':<8}{'count':>6}{'mean':>9}{'std':>9}{'min':>9}{'median':>9}{'max':>9}"]
    for name, col in zip(names, values.T):
        stats = (col.mean(), col.std(ddof=1), col.min(), np.median(col), col.max())
        lines.append(f"{name:<8}{len(col):>6}" + "".join(f"{v:>9.2f}" for v in stats))
    return "\n".join(lines)
