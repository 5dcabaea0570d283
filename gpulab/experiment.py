"""The article's Boston experiment as one recipe, shared by `gpulab train`, the rank programs and notebooks.

Building the model and the data in one place is what makes a DDP run comparable with a
single-device run: same seed, same split, same initial weights. :func:`setup` is THE way from a
recipe to its data, model and optimizer; ``Setup.fit`` trains with the recipe's settings.
``add_recipe_options`` / ``recipe_from`` turn the recipe into command-line options and back, and
:func:`recipe_args` writes those options for a rank program (`gpulab train`, `gpulab ddp` and the
DDP and FSDP workers share them).
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass
from typing import Any

import torch

from gpulab import argtypes
from gpulab.validate import non_negative_int, positive_int, positive_number
from gpulab.boston import Split, load_boston, split
from gpulab.models import Net1


@dataclass(frozen=True)
class Recipe:
    """The article's settings: ``Net1(13, 16, 32, 1)``, Adam lr 0.01, batch 128, 100 epochs.

    ``batch_size`` is the GLOBAL batch: with several ranks each takes a share of it.
    ``seed`` fixes the initial weights and the data order; ``split_seed`` the train/test split.
    """

    epochs: int = 100
    batch_size: int = 128
    lr: float = 0.01
    seed: int = 0
    split_seed: int = 42
    drop_b: bool = False

    def __post_init__(self) -> None:
        positive_int(self.epochs, "epochs")
        positive_int(self.batch_size, "batch_size")
        positive_number(self.lr, "lr")
        non_negative_int(self.seed, "seed")
        non_negative_int(self.split_seed, "split_seed")

    def to_dict(self) -> dict:
        """A JSON-friendly dict."""
        return asdict(self)


def boston_data(recipe: Recipe, device: str | torch.device = "cpu") -> Split:
    """The standardised train/test split the recipe asks for, as float32 tensors on ``device``."""
    return split(load_boston(drop_b=recipe.drop_b), seed=recipe.split_seed, device=device)


def article_model(recipe: Recipe, in_dim: int = 13, device: str | torch.device = "cpu") -> Net1:
    """``Net1(in_dim, 16, 32, 1)`` with initial weights fixed by ``recipe.seed``, on ``device``."""
    torch.manual_seed(recipe.seed)
    return Net1(in_dim, 16, 32, 1).to(device)


def optimizer_for(model: torch.nn.Module, recipe: Recipe) -> torch.optim.Optimizer:
    """The article's optimizer: Adam with the recipe's learning rate."""
    return torch.optim.Adam(model.parameters(), lr=recipe.lr)


@dataclass
class Setup:
    """What a recipe trains: the data split, the model (initial weights fixed by the seed) and its optimizer."""

    recipe: Recipe
    data: Split
    model: Net1
    optimizer: torch.optim.Optimizer

    def fit(self, model: torch.nn.Module | None = None, **options: Any):
        """Train on the training part with the recipe's epochs, batch, seed and optimizer (``gpulab.train.fit``).

        ``model`` defaults to ``self.model``; pass a wrapper of it (DDP, DataParallel, FSDP) to train
        through the wrapper. ``options`` go to ``fit`` (``device``, ``rank``, ``progress`` ...).
        """
        from gpulab.train import fit

        r = self.recipe
        settings = {"epochs": r.epochs, "optimizer": self.optimizer, "batch_size": r.batch_size, "seed": r.seed,
                    **options}  # it trains where the model is
        return fit(self.model if model is None else model, (self.data.X_train, self.data.y_train), **settings)


def setup(recipe: Recipe, device: str | torch.device = "cpu") -> Setup:
    """The recipe's data (on ``device``), its model (same initial weights every time) and its Adam."""
    data = boston_data(recipe, device=device)
    model = article_model(recipe, in_dim=data.X_train.shape[1], device=device)
    return Setup(recipe, data, model, optimizer_for(model, recipe))


def recipe_args(recipe: Recipe) -> list[str]:
    """The command-line options that :func:`recipe_from` reads back into the same ``recipe``."""
    args = ["--epochs", str(recipe.epochs), "--batch-size", str(recipe.batch_size), "--lr", repr(float(recipe.lr)),
            "--seed", str(recipe.seed), "--split-seed", str(recipe.split_seed)]
    return args + (["--no-b"] if recipe.drop_b else [])


def add_recipe_options(parser: argparse.ArgumentParser) -> None:
    """The recipe's options (``--epochs``, ``--batch-size``, ``--lr``, ``--seed``, ``--split-seed``, ``--no-b``)."""
    d = Recipe()
    parser.add_argument("--epochs", type=argtypes.positive_int, default=d.epochs, help=f"epochs (default {d.epochs})")
    parser.add_argument("--batch-size", type=argtypes.positive_int, default=d.batch_size,
                        help=f"GLOBAL batch size, shared by all ranks (default {d.batch_size})")
    parser.add_argument("--lr", type=argtypes.positive_float, default=d.lr, help=f"Adam learning rate (default {d.lr})")
    parser.add_argument("--seed", type=argtypes.non_negative_int, default=d.seed,
                        help=f"initial weights and data order (default {d.seed})")
    parser.add_argument("--split-seed", type=argtypes.non_negative_int, default=d.split_seed,
                        help=f"train/test split (default {d.split_seed})")
    parser.add_argument("--no-b", action="store_true", help="leave out the B column of the data")


def recipe_from(args: argparse.Namespace) -> Recipe:
    """The ``Recipe`` that options added by ``add_recipe_options`` describe."""
    return Recipe(epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, seed=args.seed,
                  split_seed=args.split_seed, drop_b=args.no_b)
