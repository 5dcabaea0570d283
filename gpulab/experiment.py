"""The article's Boston experiment as one recipe, shared by `gpulab train`, the DDP worker and notebooks.

Building the model and the data in one place is what makes a DDP run comparable with a
single-device run: same seed, same split, same initial weights. ``add_recipe_options`` and
``recipe_from`` turn the recipe into command-line options and back (`gpulab train`, `gpulab ddp`
and the DDP worker share them).
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass

import torch

from gpulab.argtypes import non_negative_int, positive_float, positive_int
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
        for name in ("epochs", "batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be a positive integer")
        if not (isinstance(self.lr, (int, float)) and 0 < self.lr < float("inf")):
            raise ValueError(f"lr={self.lr!r} must be a positive number")

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


def add_recipe_options(parser: argparse.ArgumentParser) -> None:
    """The recipe's options (``--epochs``, ``--batch-size``, ``--lr``, ``--seed``, ``--split-seed``, ``--no-b``)."""
    d = Recipe()
    parser.add_argument("--epochs", type=positive_int, default=d.epochs, help=f"epochs (default {d.epochs})")
    parser.add_argument("--batch-size", type=positive_int, default=d.batch_size,
                        help=f"GLOBAL batch size, shared by all ranks (default {d.batch_size})")
    parser.add_argument("--lr", type=positive_float, default=d.lr, help=f"Adam learning rate (default {d.lr})")
    parser.add_argument("--seed", type=non_negative_int, default=d.seed,
                        help=f"initial weights and data order (default {d.seed})")
    parser.add_argument("--split-seed", type=non_negative_int, default=d.split_seed,
                        help=f"train/test split (default {d.split_seed})")
    parser.add_argument("--no-b", action="store_true", help="leave out the B column of the data")


def recipe_from(args: argparse.Namespace) -> Recipe:
    """The ``Recipe`` that options added by ``add_recipe_options`` describe."""
    return Recipe(epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, seed=args.seed,
                  split_seed=args.split_seed, drop_b=args.no_b)
