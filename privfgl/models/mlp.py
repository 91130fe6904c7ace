"""Multi-layer perceptron: the graph-free baseline."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class MLP(nn.Module):
    """`layers` Linear layers; ReLU and dropout between layers.

    forward(x [N, in_dim], edge_index ignored) -> logits [N, out_dim].
    """

    def __init__(self, in_dim: int, hidden: int, out_dim: int, layers: int = 2, dropout: float = 0.5):
        super().__init__()
        dims = [in_dim] + [hidden] * (layers - 1) + [out_dim]
        self.lins = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.dropout = dropout

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor | None = None) -> torch.Tensor:
        for lin in self.lins[:-1]:
            x = F.dropout(F.relu(lin(x)), self.dropout, self.training)
        return self.lins[-1](x)
