"""Train the article's model with DDP through torchrun: ``train_ddp(2, Recipe(epochs=20), timeout=120)``.

The driver of the pair ``ddp`` / ``ddp.worker``: ``train_ddp`` runs ``gpulab.distributed.ddp.worker``
once per rank (through ``gpulab.distributed.launch.torchrun``) and returns the trained weights, the test
metrics and the history (``DDPResult``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from gpulab.distributed.launch.collect import run_ranks
from gpulab.distributed.launch.command import backend_note, check_nproc, check_timeout
from gpulab.distributed.launch.torchrun import Torchrun, print_line

if TYPE_CHECKING:
    from gpulab.experiment import Recipe
    from gpulab.train import History

@dataclass
class DDPResult:
    """A finished DDP run: final weights (rank 0's), test metrics, history and output.

    On a node that did not hold rank 0 (several nodes), ``state_dict``, ``metrics`` and
    ``summary`` are empty: rank 0 saved them on its own node.
    """

    state_dict: dict
    metrics: dict[str, float]
    history: History
    seconds: float
    lines: list[str]
    world_size: int
    backend: str
    summary: dict


def worker_args(recipe: Recipe, *, backend: str = "auto", save: str | Path | None = None,
                json_path: str | Path | None = None, checkpoint_dir: str | Path | None = None,
                log_every: int = 1, epoch_delay: float = 0.0) -> list[str]:
    """The ``gpulab.distributed.ddp.worker`` arguments for a ``gpulab.experiment.Recipe``."""
    from gpulab.experiment import recipe_args

    args = recipe_args(recipe) + ["--backend", backend, "--log-every", str(log_every)]
    for flag, value in (("--save", save), ("--json", json_path), ("--checkpoint-dir", checkpoint_dir)):
        if value is not None:
            args += [flag, os.fspath(value)]
    if epoch_delay:
        args += ["--epoch-delay", str(epoch_delay)]
    return args


def train_ddp(
    nproc: int,
    recipe: Recipe | None = None,
    *,
    timeout: float = 300.0,
    checkpoint_dir: str | Path | None = None,
    max_restarts: int = 0,
    echo: bool = True,
    on_line: Callable[[str], None] | None = None,
    log_every: int | None = None,
    backend: str = "auto",
    nnodes: int = 1,
    node_rank: int = 0,
    master_addr: str | None = None,
    master_port: int | None = None,
    on_start: Callable[[Torchrun], None] | None = None,
    epoch_delay: float = 0.0,
) -> DDPResult:
    """Train ``recipe`` (default: the article's) with ``nproc`` DDP ranks through torchrun.

    Output lines go to ``on_line`` (default: printed when ``echo``). ``log_every`` defaults to
    a tenth of the epochs. ``on_start(run)`` is called once torchrun runs (e.g. to kill a rank
    with ``run.kill_rank``). ``epoch_delay`` (seconds slept after each epoch) only exists so
    that crash tests can land in the middle of training.
    """
    from gpulab.experiment import Recipe
    from gpulab.train import History

    recipe = Recipe() if recipe is None else recipe
    if not isinstance(recipe, Recipe):
        raise ValueError(f"recipe={recipe!r} must be a gpulab.experiment.Recipe")
    check_timeout(timeout)
    requested, backend = backend, check_nproc(nproc, backend)
    log_every = log_every or max(1, recipe.epochs // 10)
    sink = on_line if on_line is not None else (print_line if echo else None)
    note = backend_note(nproc, requested, backend)
    if note and sink is not None:
        sink(note)
    def args(folder: Path) -> list[str]:
        return worker_args(recipe, backend=backend, save=folder / "model.pt", json_path=folder / "summary.json",
                           checkpoint_dir=checkpoint_dir, log_every=log_every, epoch_delay=epoch_delay)

    with run_ranks("gpulab.distributed.ddp.worker", args, nproc=nproc, timeout=timeout, backend=backend,
                   on_line=sink, on_start=on_start, nnodes=nnodes, node_rank=node_rank, master_addr=master_addr,
                   master_port=master_port, max_restarts=max_restarts) as ranks:
        result = ranks.result
        if not ranks.has("model.pt"):  # another node's launch held rank 0 and saved there
            return DDPResult({}, {}, History(), result.seconds, result.lines, nproc * nnodes, backend, {})
        summary, state = ranks.json("summary.json"), ranks.load("model.pt")
    return DDPResult(state, summary["metrics"], History(**summary["history"]), result.seconds, result.lines,
                     summary["world_size"], summary["backend"], summary)


def step_time(nproc: int, recipe: Recipe, warmup: int, backend: str = "auto", timeout: float = 600.0) -> dict:
    """One launch: its backend, rank 0's device, the median ms per optimizer step and the launch's wall seconds.

    The step time is the median epoch time (the first ``warmup`` epochs left out) over the steps of an epoch.
    """
    import math
    import statistics

    from gpulab.experiment import setup

    result = train_ddp(nproc, recipe, timeout=timeout, echo=False, backend=backend)
    steps = math.ceil(len(setup(recipe).data.X_train) / recipe.batch_size)
    epoch_s = statistics.median(result.history.seconds[warmup:] or result.history.seconds)
    return {"ranks": nproc, "backend": result.backend, "device": result.summary.get("device", "?"),
            "ms_per_step": 1000 * epoch_s / steps, "launch_s": result.seconds}
