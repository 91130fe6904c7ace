"""GNN backbones built from PyG layers, and a stacked (all clients at once) form of them."""
from __future__ import annotations

from torch import nn

from privfgl.models import pyg_templates  # noqa: F401  (removes PyG's rendered templates at exit)
from privfgl.models.gat import GAT
from privfgl.models.gcn import GCN
from privfgl.models.mlp import MLP
from privfgl.models.sage import GraphSAGE
from privfgl.models.sgc import SGC

MODELS: dict[str, type[nn.Module]] = {"gcn": GCN, "sage": GraphSAGE, "gat": GAT, "sgc": SGC, "mlp": MLP}


def build_model(name: str, in_dim: int, hidden: int, out_dim: int, layers: int = 2,
                dropout: float = 0.5) -> nn.Module:
    """A fresh backbone `name` (one of MODELS) mapping [N, in_dim] features to [N, out_dim] logits."""
    key = name.lower()
    if key not in MODELS:
        raise ValueError(f"unknown model {name!r}; valid: {', '.join(MODELS)}")
    if layers < 1:
        raise ValueError(f"layers must be >= 1, got {layers}")
    if hidden < 1:
        raise ValueError(f"hidden must be >= 1, got {hidden}")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout}")
    return MODELS[key](in_dim, hidden, out_dim, layers=layers, dropout=dropout)


__all__ = ["MODELS", "build_model", "GCN", "GraphSAGE", "GAT", "SGC", "MLP"]
