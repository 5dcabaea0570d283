"""`gpulab estimate` against two measurements, for three small models (one Adam step, one CPU process).

    python benchmarks/estimate_vs_measured.py

``state``: parameters + gradients + optimizer state, estimated vs the exact bytes after a real step.
``step``: that plus the bytes saved for backward (measured) vs the profiler's peak over the step.
See :func:`gpulab.sharding.estimate.compare` for why the peak differs (temporaries, tensors already freed).
Prints figures; passes or fails nothing.
"""

from __future__ import annotations

import torch
from torch import nn

from gpulab.sharding.estimate import compare
from gpulab.models import mlp
from gpulab.tables import format_rows


def models() -> dict:
    """Name -> (model, inputs, targets): the MLP of the memory notes, a deep narrow MLP, a small CNN."""
    torch.manual_seed(0)
    return {
        "MLP 512-2048-2048-1, batch 256": (
            mlp([512, 2048, 2048, 1]), torch.randn(256, 512), torch.randn(256, 1)),
        "MLP 64-256x4-1, batch 1024": (mlp([64, 256, 256, 256, 256, 1]), torch.randn(1024, 64), torch.randn(1024, 1)),
        "CNN conv8 + linear, batch 32": (
            nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 16 * 16, 10)),
            torch.randn(32, 3, 16, 16), torch.randn(32, 10)),
    }


def main() -> None:
    """Print the table (bytes) and the ratio peak / accounted per model."""
    rows = []
    for name, (model, x, y) in models().items():
        r = compare(name, model, x, y)
        rows.append({**r, "state difference": r["state estimated"] - r["state measured"],
                     "peak / accounted": round(r["profiler peak"] / r["step accounted"], 3)})
    print(format_rows(rows))


if __name__ == "__main__":
    main()
