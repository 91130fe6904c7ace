"""Graph attention network (Veličković et al. 2018) from PyG's GATConv."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import GATConv


class GAT(nn.Module):
    """`layers` GATConv layers; hidden layers use `heads` concatenated heads of size hidden // heads,
    the output layer one head. ELU and dropout between layers.

    forward(x [N, in_dim], edge_index [2, E]) -> logits [N, out_dim].
    """

    def __init__(self, in_dim: int, hidden: int, out_dim: int, layers: int = 2, dropout: float = 0.5,
                 heads: int = 8):
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden={hidden} must be divisible by heads={heads} for GAT")
        self.convs = nn.ModuleList()
        dim = in_dim
        for _ in range(layers - 1):
            self.convs.append(GATConv(dim, hidden // heads, heads=heads, dropout=dropout))
            dim = hidden
        self.convs.append(GATConv(dim, out_dim, heads=1, dropout=dropout))
        self.dropout = dropout

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        for conv in self.convs[:-1]:
            x = F.dropout(F.elu(conv(x, edge_index)), self.dropout, self.training)
        return self.convs[-1](x, edge_index)
