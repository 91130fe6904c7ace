"""A functional, dense GCN the attacker differentiates through (same maths as privfgl's GCN).

Parameters use the PyG names of privfgl.models.GCN: `convs.{l}.lin.weight` [out, in] and
`convs.{l}.bias` [out]. Adjacencies are dense [n, n] (attacked graphs are small), so a relaxed,
learnable adjacency can stand in for unknown edges.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

Params = dict[str, torch.Tensor]


def dense_adjacency(edge_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """A [n, n] with A[i, j] = 1 for every edge j -> i (float32)."""
    a = torch.zeros(num_nodes, num_nodes)
    a[edge_index[1], edge_index[0]] = 1.0
    return a


def gcn_normalize(a: torch.Tensor) -> torch.Tensor:
    """Â = D̃^-1/2 (A + I) D̃^-1/2 for a (possibly weighted, relaxed) adjacency a [n, n] without
    self-loops; degrees counted on the receiving node as PyG's gcn_norm does."""
    a = a + torch.eye(a.shape[0], dtype=a.dtype, device=a.device)
    inv = a.sum(dim=1).rsqrt()
    return inv[:, None] * a * inv[None, :]


def gcn_forward(params: Params, x: torch.Tensor, adj_norm: torch.Tensor, layers: int) -> torch.Tensor:
    """Logits [n, C] of a `layers`-layer GCN without dropout: ReLU between layers."""
    h = x
    for i in range(layers):
        h = adj_norm @ (h @ params[f"convs.{i}.lin.weight"].T) + params[f"convs.{i}.bias"]
        if i < layers - 1:
            h = F.relu(h)
    return h


def local_update(params: Params, x: torch.Tensor, adj_norm: torch.Tensor, y: torch.Tensor, train_idx: torch.Tensor,
                 layers: int, lr: float, weight_decay: float, steps: int, create_graph: bool = False) -> Params:
    """Δ = w_steps − w_0 after `steps` full-batch SGD steps on the mean cross-entropy of the nodes
    `train_idx`; `y` is [n_train] class ids or [n_train, C] soft labels (probabilities)."""
    params = {n: p.detach().requires_grad_(True) for n, p in params.items()}
    w = dict(params)
    names = list(w)
    for _ in range(steps):
        out = gcn_forward(w, x, adj_norm, layers)[train_idx]
        loss = F.cross_entropy(out, y)
        grads = torch.autograd.grad(loss, [w[n] for n in names], create_graph=create_graph)
        w = {n: w[n] - lr * (g + weight_decay * w[n]) for n, g in zip(names, grads)}
    return {n: w[n] - params[n].detach() for n in names}
