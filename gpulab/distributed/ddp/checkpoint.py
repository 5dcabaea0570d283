"""Epoch checkpoints: written atomically, found by name, loaded safely, checked on load.

A checkpoint is ``<dir>/epoch0003.pt`` holding the model, the optimizer, the epoch just
finished, the RNG state (the CPU's, plus the CUDA device's when the model is on one) and the
history so far. It is written to a temporary file beside it and renamed (``gpulab.atomic``),
so a crash never leaves a half-written ``epoch*.pt``.
A file that is damaged anyway (truncated, edited, not a checkpoint) raises
``CheckpointError`` naming its path; it is never loaded silently. Loading uses
``torch.load(weights_only=True)``: plain tensors and containers only, no pickled code.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

from gpulab.atomic import torch_save
from gpulab.validate import non_negative_int, positive_int

PATTERN = re.compile(r"^epoch(\d{4,})\.pt$")
KEYS = ("model", "optimizer", "epoch", "rng", "history")


class CheckpointError(ValueError):
    """A checkpoint file that cannot be trusted; the message names its path."""


def checkpoint_path(directory: str | Path, epoch: int) -> Path:
    """Where the checkpoint after ``epoch`` lives: ``<directory>/epoch0003.pt``."""
    non_negative_int(epoch, "epoch")
    return Path(directory) / f"epoch{epoch:04d}.pt"


def list_checkpoints(directory: str | Path) -> list[Path]:
    """Every ``epochNNNN.pt`` in ``directory``, oldest epoch first (temporary files are ignored)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in directory.iterdir() if (m := PATTERN.match(p.name))]
    return [p for _, p in sorted(found)]


def latest(directory: str | Path) -> Path | None:
    """The checkpoint of the highest epoch in ``directory``, or ``None`` when there is none."""
    found = list_checkpoints(directory)
    return found[-1] if found else None


def _cuda_device(model: torch.nn.Module) -> torch.device | None:
    """The CUDA device ``model`` trains on, or ``None`` (CPU, MPS ...: no CUDA state to keep)."""
    for tensor in (*model.parameters(), *model.buffers()):
        if tensor.device.type == "cuda":
            return tensor.device
    return None


def rng_state(cuda_device: torch.device | None = None) -> dict[str, Any]:
    """The torch RNG states: the CPU's and, when training runs on a CUDA device, that device's.

    CUDA is only asked when ``cuda_device`` is given: a gloo rank on the CPU of a GPU machine must
    not create a CUDA context (memory on every GPU, seconds of start-up) just to save a checkpoint.
    """
    state: dict[str, Any] = {"torch": torch.get_rng_state()}
    if cuda_device is not None:
        state["cuda"] = torch.cuda.get_rng_state(cuda_device)
    return state


def set_rng_state(state: dict[str, Any], cuda_device: torch.device | None = None) -> None:
    """Restore what ``rng_state`` returned (the CUDA state onto ``cuda_device``, when both exist)."""
    torch.set_rng_state(state["torch"])
    if "cuda" in state and cuda_device is not None:
        torch.cuda.set_rng_state(state["cuda"], cuda_device)


def save(
    directory: str | Path,
    epoch: int,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    history: dict[str, Any] | None = None,
    keep: int = 2,
) -> Path:
    """Write the checkpoint after ``epoch`` atomically; keep only the newest ``keep`` files."""
    positive_int(keep, "keep")
    module = getattr(model, "module", model)  # DDP / DataParallel: save the plain model's keys
    state = {
        "model": {k: v.detach().cpu() for k, v in module.state_dict().items()},
        "optimizer": optimizer.state_dict(),
        "epoch": int(epoch),
        "rng": rng_state(_cuda_device(module)),
        "history": dict(history or {}),
    }
    path = torch_save(checkpoint_path(directory, epoch), state)
    for old in list_checkpoints(directory)[:-keep]:
        old.unlink(missing_ok=True)
    return path


def load(path: str | Path) -> dict[str, Any]:
    """Load and check one checkpoint (``weights_only=True``); ``CheckpointError`` if it is damaged."""
    path = Path(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such checkpoint") from None
    except Exception as exc:  # truncated zip, wrong format, unsafe content ...
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(f"{path} is damaged or not a gpulab checkpoint ({reason})") from None
    if not isinstance(state, dict) or any(k not in state for k in KEYS):
        raise CheckpointError(f"{path} is not a gpulab checkpoint: expected keys {', '.join(KEYS)}")
    match = PATTERN.match(path.name)
    if match and int(match.group(1)) != state["epoch"]:
        raise CheckpointError(f"{path} holds epoch {state['epoch']}, not the epoch in its name")
    return state


def resume(
    directory: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer
) -> tuple[int, dict[str, Any]]:
    """Restore the newest checkpoint into ``model`` and ``optimizer``.

    Returns ``(start_epoch, history)``: ``(0, {})`` when ``directory`` has no checkpoint.
    """
    path = latest(directory)
    if path is None:
        return 0, {}
    state = load(path)
    getattr(model, "module", model).load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    set_rng_state(state["rng"], _cuda_device(getattr(model, "module", model)))
    return state["epoch"] + 1, state["history"]
