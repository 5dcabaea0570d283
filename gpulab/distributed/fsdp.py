"""Train the recipe with FSDP2 (``fully_shard``) on CPU ranks: ``train_fsdp(3, Recipe(epochs=5))``.

Runs ``gpulab.distributed.fsdp_worker`` through torchrun and returns the full weights and, for
each rank, its local shard shapes and the bytes it holds (``FSDPResult``).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from gpulab.distributed.torchrun import launch


@dataclass
class FSDPResult:
    """A finished FSDP2 run: full weights, one shard report per rank, output lines, seconds."""

    state_dict: dict
    ranks: list[dict]
    lines: list[str]
    seconds: float


def recipe_args(recipe) -> list[str]:
    """The recipe's options for ``gpulab.distributed.fsdp_worker``."""
    args = ["--epochs", recipe.epochs, "--batch-size", recipe.batch_size, "--lr", repr(float(recipe.lr)),
            "--seed", recipe.seed, "--split-seed", recipe.split_seed] + (["--no-b"] if recipe.drop_b else [])
    return [str(a) for a in args]


def train_fsdp(nproc: int, recipe=None, *, timeout: float = 300.0,
               on_line: Callable[[str], None] | None = None, save_dcp: str | Path | None = None,
               resume: str | Path | None = None) -> FSDPResult:
    """Train ``recipe`` (default: the article's) with ``nproc`` FSDP2 ranks (gloo, CPU mesh).

    ``save_dcp``: a folder for a distributed checkpoint after ``recipe.epochs``; ``resume``: such a folder,
    saved at any rank count, to continue from (up to ``recipe.epochs``).
    """
    import torch

    from gpulab.experiment import Recipe

    recipe = Recipe() if recipe is None else recipe
    if not isinstance(recipe, Recipe):
        raise ValueError(f"recipe={recipe!r} must be a gpulab.experiment.Recipe")
    with tempfile.TemporaryDirectory(prefix="gpulab-fsdp-") as tmp:
        args = recipe_args(recipe) + ["--out", tmp]
        args += ["--dcp", str(save_dcp)] if save_dcp is not None else []
        args += ["--resume", str(resume)] if resume is not None else []
        result = launch("gpulab.distributed.fsdp_worker", args, nproc=nproc, timeout=timeout, backend="gloo",
                        on_line=on_line)
        ranks = [json.loads((Path(tmp) / f"rank{r}.json").read_text(encoding="utf-8")) for r in range(nproc)]
        state = torch.load(Path(tmp) / "model.pt", map_location="cpu", weights_only=True)
    return FSDPResult(state, ranks, result.lines, result.seconds)
