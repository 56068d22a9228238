"""A small MLP with BatchNorm: the smallest model where BatchNorm matters (lesson 06).

Synchronizing its batch statistics across ranks is :mod:`course_lib.parallel.sync_batchnorm`.
"""

from __future__ import annotations

import torch
from torch import nn


class MLPBN(nn.Module):
    """``Linear -> BatchNorm1d -> ReLU -> Linear``: the smallest model where BatchNorm matters."""

    def __init__(self, in_features: int = 8, hidden: int = 16, out_features: int = 1):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden)
        self.bn = nn.BatchNorm1d(hidden)
        self.fc2 = nn.Linear(hidden, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, in) -> (B, out)."""
        return self.fc2(torch.relu(self.bn(self.fc1(x))))
