"""Simplifying graph convolution (Wu et al. 2019) from PyG's SGConv."""
from __future__ import annotations

import torch
from torch import nn
from torch_geometric.nn import SGConv


class SGC(nn.Module):
    """One linear layer on Â^hops x (Â: GCN-normalised adjacency with self-loops).

    forward(x [N, in_dim], edge_index [2, E]) -> logits [N, out_dim]. `hidden` and `dropout` are
    accepted for a uniform constructor and unused: SGC has no hidden layer.
    """

    def __init__(self, in_dim: int, hidden: int, out_dim: int, layers: int = 2, dropout: float = 0.0):
        super().__init__()
        self.conv = SGConv(in_dim, out_dim, K=layers)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        return self.conv(x, edge_index)
