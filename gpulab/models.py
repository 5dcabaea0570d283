"""Models: the article's Net1, kept exactly as written there."""

from __future__ import annotations

from torch import nn


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
