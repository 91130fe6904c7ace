"""Graph convolutional network (Kipf & Welling 2017) from PyG's GCNConv."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import GCNConv


class GCN(nn.Module):
    """`layers` GCNConv layers; ReLU and dropout after every layer but the last.

    forward(x [N, in_dim], edge_index [2, E]) -> logits [N, out_dim]. No dropout on the input
    features (as in the OpenFGL reference models), so the first layer can be computed on
    sparse bag-of-words features.
    """

    def __init__(self, in_dim: int, hidden: int, out_dim: int, layers: int = 2, dropout: float = 0.5):
        super().__init__()
        dims = [in_dim] + [hidden] * (layers - 1) + [out_dim]
        self.convs = nn.ModuleList(GCNConv(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.dropout = dropout

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        for conv in self.convs[:-1]:
            x = F.dropout(F.relu(conv(x, edge_index)), self.dropout, self.training)
        return self.convs[-1](x, edge_index)
