"""Models: the article's Net1, kept exactly as written there, an MLP from its widths, and an ensemble MLP."""

from __future__ import annotations

import contextlib
import math
from typing import Sequence

import torch
from torch import nn

from gpulab.validate import positive_int


class Net1(nn.Module):
    """The article's network: three ``nn.Sequential(nn.Linear)`` layers, ReLU between.

    Used as ``Net1(13, 16, 32, 1)`` for the Boston housing data.
    """

    def __init__(self, in_dim: int, n_hidden_1: int, n_hidden_2: int, out_dim: int) -> None:
        super().__init__()
        self.layer1 = nn.Sequential(nn.Linear(in_dim, n_hidden_1))
        self.layer2 = nn.Sequential(nn.Linear(n_hidden_1, n_hidden_2))
        self.layer3 = nn.Sequential(nn.Linear(n_hidden_2, out_dim))

    def forward(self, x):  # noqa: D102 - same as the article
        x = nn.functional.relu(self.layer1(x))
        x = nn.functional.relu(self.layer2(x))
        return self.layer3(x)


def mlp(widths: Sequence[int], device: str | torch.device | None = None) -> nn.Sequential:
    """``Linear`` layers (with biases) of the given widths, ``ReLU`` between them: ``mlp([512, 2048, 1])``.

    ``device="meta"`` builds it with shapes and no storage (billions of parameters cost nothing).
    Seed torch first (``torch.manual_seed``) for reproducible weights.
    """
    widths = list(widths)
    if len(widths) < 2:
        raise ValueError(f"widths={widths!r} needs at least two widths (input and output)")
    for w in widths:
        positive_int(w, "a layer width")
    layers: list[nn.Module] = []
    with torch.device(device) if device is not None else contextlib.nullcontext():
        for n_in, n_out in zip(widths[:-1], widths[1:]):
            layers += [nn.Linear(n_in, n_out), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


class EnsembleMLP(nn.Module):
    """``members`` small MLPs (``layers`` hidden layers of ``hidden`` units, ReLU, dropout) in one module.

    The members never share weights: each layer is one batched matrix product over a
    ``(members, in, out)`` weight, so eight small nets train about as fast as one.
    ``forward(x)`` returns every member's prediction, shape ``(members, n, out_dim)``;
    the ensemble's prediction is their mean, ``model(x).mean(0)``.
    """

    def __init__(
        self, in_dim: int, out_dim: int = 1, hidden: int = 64, members: int = 8, layers: int = 2, dropout: float = 0.1
    ) -> None:
        super().__init__()
        for name, value in (("in_dim", in_dim), ("out_dim", out_dim), ("hidden", hidden), ("members", members), ("layers", layers)):
            positive_int(value, name)
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout={dropout!r} must be in [0, 1)")
        dims = [in_dim] + [hidden] * layers + [out_dim]
        self.members = members
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for fan_in, fan_out in zip(dims[:-1], dims[1:]):
            bound = 1.0 / math.sqrt(fan_in)  # nn.Linear's default initialisation, per member
            self.weights.append(nn.Parameter(torch.empty(members, fan_in, fan_out).uniform_(-bound, bound)))
            self.biases.append(nn.Parameter(torch.empty(members, 1, fan_out).uniform_(-bound, bound)))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102 - see the class docstring
        h = x.unsqueeze(0).expand(self.members, -1, -1)
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            h = torch.baddbmm(b, h, w)
            if i < last:
                h = self.dropout(torch.relu(h))
        return h
