"""Train the recipe with FSDP2 (``fully_shard``) on CPU ranks: ``train_fsdp(3, Recipe(epochs=5))``.

Runs ``gpulab.distributed.fsdp.worker`` through torchrun and returns the full weights and, for
each rank, its local shard shapes and the bytes it holds (``FSDPResult``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from gpulab.distributed.launch.collect import run_ranks
from gpulab.experiment import recipe_args


@dataclass
class FSDPResult:
    """A finished FSDP2 run: full weights, one shard report per rank, output lines, seconds."""

    state_dict: dict
    ranks: list[dict]
    lines: list[str]
    seconds: float


def train_fsdp(nproc: int, recipe=None, *, timeout: float = 300.0,
               on_line: Callable[[str], None] | None = None, save_dcp: str | Path | None = None,
               resume: str | Path | None = None, per_layer: bool = False, profile: bool = False,
               probe: bool = False) -> FSDPResult:
    """Train ``recipe`` (default: the article's) with ``nproc`` FSDP2 ranks (gloo, CPU mesh).

    ``save_dcp``: a folder for a distributed checkpoint after ``recipe.epochs``; ``resume``: such a folder,
    saved at any rank count, to continue from (up to ``recipe.epochs``). ``per_layer``: each layer is its
    own FSDP unit. ``profile``: each rank's report gains ``"profile"`` (read it with :func:`schedule`).
    ``probe``: it gains ``"probe"``, one step of ``gpulab.distributed.fsdp.probe``'s model per setting, measured.
    """
    from gpulab.experiment import Recipe

    recipe = Recipe() if recipe is None else recipe
    if not isinstance(recipe, Recipe):
        raise ValueError(f"recipe={recipe!r} must be a gpulab.experiment.Recipe")
    args = recipe_args(recipe)
    args += ["--dcp", str(save_dcp)] if save_dcp is not None else []
    args += ["--resume", str(resume)] if resume is not None else []
    args += ["--per-layer"] * per_layer + ["--profile"] * profile + ["--probe"] * probe
    with run_ranks("gpulab.distributed.fsdp.worker", args, nproc=nproc, timeout=timeout, on_line=on_line) as ranks:
        per_rank, state = ranks.per_rank(), ranks.load("model.pt")
    return FSDPResult(state, per_rank, ranks.result.lines, ranks.result.seconds)


#: FSDP2's event names (``torch.distributed.fsdp``'s record_function labels) -> the collective behind them.
COLLECTIVE_EVENTS = {"FSDP::all_gather": "all-gather", "FSDP::post_backward_reduce": "reduce-scatter"}


def schedule(event_names: list[str]) -> list[dict]:
    """The collectives of one step, in order, from FSDP's event names (as ``--profile`` records them).

    Each entry: ``op`` (all-gather or reduce-scatter), ``unit`` (the module it serves, ``"(root)"`` for the
    outermost) and ``phase`` (forward until the first ``FSDP::pre_backward``, then backward).
    """
    rows, phase = [], "forward"
    for name in event_names:
        base, _, unit = name.partition(" (")
        if base == "FSDP::pre_backward":
            phase = "backward"
        if base in COLLECTIVE_EVENTS:
            rows.append({"op": COLLECTIVE_EVENTS[base], "unit": unit.rstrip(")") or "(root)", "phase": phase})
    return rows
