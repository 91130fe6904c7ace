"""GAP's two trained modules (after the authors' EncoderModule and ClassificationModule; SELU, no batch
norm: batch statistics would not average across clients).

Encoder: `layers` Linear+SELU layers f -> h, whose output with unit-norm rows is the embedding X_0
[N, h] handed to the aggregation; a one-layer head h -> C trains it on the labels.
Classifier: one Linear+SELU base layer h -> h per hop input X_0..X_K, their outputs concatenated
[N, (K+1)h], then a Linear head -> C logits.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from privfgl.methods.gap.aggregation import unit_rows


class Encoder(torch.nn.Module):
    def __init__(self, in_dim: int, hidden: int, num_classes: int, layers: int, dropout: float):
        super().__init__()
        dims = [in_dim] + [hidden] * layers
        self.layers = torch.nn.ModuleList(torch.nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.head = torch.nn.Linear(hidden, num_classes)
        self.dropout = dropout

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """x [N, f] -> unit-norm embeddings [N, h]."""
        for layer in self.layers:
            x = F.selu(layer(F.dropout(x, self.dropout, self.training)))
        return unit_rows(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [N, f] -> logits [N, C]."""
        return self.head(F.dropout(self.embed(x), self.dropout, self.training))


class Classifier(torch.nn.Module):
    def __init__(self, hidden: int, num_classes: int, hops: int, dropout: float):
        super().__init__()
        self.bases = torch.nn.ModuleList(torch.nn.Linear(hidden, hidden) for _ in range(hops + 1))
        self.head = torch.nn.Linear((hops + 1) * hidden, num_classes)
        self.dropout = dropout

    def forward(self, xs: list[torch.Tensor]) -> torch.Tensor:
        """[X_0, ..., X_K] each [N, h] -> logits [N, C]."""
        hs = [F.selu(base(F.dropout(x, self.dropout, self.training))) for base, x in zip(self.bases, xs)]
        return self.head(F.dropout(torch.cat(hs, dim=-1), self.dropout, self.training))
