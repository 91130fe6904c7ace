"""The server's GNN trunk of FedGPL (spec B.2): a 2-layer PyG TransformerConv, d0 -> hidden -> hidden,
LeakyReLU and dropout between the layers, mean-pooled per graph. It lives on the server only; the
clients never receive its parameters."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import TransformerConv, global_mean_pool


class Trunk(nn.Module):
    """x [n, d0] float32, edge_index [2, e] (both directions), batch [n] (graph id per row, 0..B-1)
    -> H [B, hidden] (the mean of each graph's node embeddings)."""

    def __init__(self, in_dim: int = 100, hidden: int = 100, dropout: float = 0.5):
        super().__init__()
        self.conv1 = TransformerConv(in_dim, hidden)
        self.conv2 = TransformerConv(hidden, hidden)
        self.dropout = dropout

    def node_embeddings(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        h = F.leaky_relu(self.conv1(x, edge_index))
        h = F.dropout(h, p=self.dropout, training=self.training)
        return self.conv2(h, edge_index)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, batch: torch.Tensor,
                num_graphs: int | None = None) -> torch.Tensor:
        return global_mean_pool(self.node_embeddings(x, edge_index), batch, size=num_graphs)
