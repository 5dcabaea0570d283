"""The one way a driver runs its rank program: a folder for what the ranks write, one launch, then reading it.

    with run_ranks("gpulab.distributed.fsdp.worker", args, nproc=2, timeout=120) as ranks:
        per_rank = ranks.per_rank()          # rank0.json, rank1.json, ... as dicts
        state = ranks.load("model.pt")       # a state dict rank 0 saved, on the CPU

The rank program gets ``--out FOLDER`` after ``args``; ``args`` may instead be a function of the folder, for a
worker that takes file paths. The folder and everything in it go when the ``with`` block ends. With
``keep_warnings=True``, warnings raised while launching (4 ranks on 2 CPU cores ...) are kept in ``ranks.notes``
instead of being shown.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from gpulab.distributed.launch.result import LaunchResult


@dataclass
class Ranks:
    """What one launch left: its folder, the launch's result (lines, seconds) and the warnings it raised."""

    folder: Path
    result: LaunchResult
    nproc: int
    notes: list[str] = field(default_factory=list)

    def has(self, name: str) -> bool:
        """Whether a rank wrote ``name`` into the folder."""
        return (self.folder / name).exists()

    def json(self, name: str) -> Any:
        """The JSON file ``name`` a rank wrote; a one-line error naming it when no rank did."""
        path = self.folder / name
        if not path.exists():
            raise FileNotFoundError(f"the ranks wrote no {name} (files: {sorted(p.name for p in self.folder.iterdir())})")
        return json.loads(path.read_text(encoding="utf-8"))

    def per_rank(self) -> list[dict]:
        """``rank0.json`` ... ``rank{nproc-1}.json``, each rank's report."""
        return [self.json(f"rank{r}.json") for r in range(self.nproc)]

    def load(self, name: str) -> dict:
        """A state dict a rank saved with ``torch.save``, loaded on the CPU."""
        import torch

        return torch.load(self.folder / name, map_location="cpu", weights_only=True)


@contextlib.contextmanager
def run_ranks(worker: str, args: Sequence[str] | Callable[[Path], Sequence[str]] = (), *, nproc: int,
              timeout: float, backend: str = "gloo", keep_warnings: bool = False, launch: Callable | None = None,
              **options: Any) -> Iterator[Ranks]:
    """Launch ``worker`` (a module) on ``nproc`` ranks once, with a fresh folder; yield what they left.

    ``options`` go to :func:`gpulab.distributed.launch.torchrun.launch` (``on_line``, ``on_start``, ``env``,
    ``max_restarts``, ``nnodes`` ...); ``launch`` replaces it (tests). It raises as the launch does.
    """
    if launch is None:
        from gpulab.distributed.launch.torchrun import launch
    with tempfile.TemporaryDirectory(prefix=f"gpulab-{worker.rsplit('.', 2)[-2]}-") as tmp:
        folder = Path(tmp)
        argv = list(args(folder)) if callable(args) else [*args, "--out", str(folder)]
        with warnings.catch_warnings(record=True) if keep_warnings else contextlib.nullcontext() as caught:
            if keep_warnings:
                warnings.simplefilter("always")
            result = launch(worker, argv, nproc=nproc, timeout=timeout, backend=backend, **options)
        notes = list(dict.fromkeys(str(w.message) for w in caught or ()))
        yield Ranks(folder, result, nproc, notes)
