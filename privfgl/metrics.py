"""Classification metrics for every client at once, from per-client confusion matrices.

Conventions (DESIGN.md, specs/opfgl.md §1.9): macro-F1 is over ALL C classes of the dataset, as
sklearn's `f1_score(average="macro", labels=range(C), zero_division=0)`: a class absent from a
client's test nodes and never predicted there counts as F1 = 0 (this is why label-skewed FGL papers
report low F1). Per-client values are aggregated with given weights (the runtime uses each client's
node count), and micro (pooled over all nodes). Minority accuracy: accuracy on test nodes whose
label is not their client's majority training class.
"""
from __future__ import annotations

import torch


def confusion_by_client(pred: torch.Tensor, y: torch.Tensor, client: torch.Tensor, num_clients: int,
                        num_classes: int) -> torch.Tensor:
    """[K, C, C] counts per client (rows = true class, columns = predicted) of nodes given as
    pred, y, client: int64 [M] each."""
    C = num_classes
    index = (client * C + y) * C + pred
    return torch.bincount(index, minlength=num_clients * C * C).view(num_clients, C, C)


def macro_f1(conf: torch.Tensor) -> torch.Tensor:
    """Mean F1 over all C classes of confusion matrices [..., C, C] -> [...]; a class with no true
    and no predicted node scores 0 (sklearn, labels=range(C), zero_division=0)."""
    tp = conf.diagonal(dim1=-2, dim2=-1).double()
    denom = (conf.sum(-1) + conf.sum(-2)).double()
    return (2 * tp / denom.clamp(min=1)).mean(-1)


def accuracy(conf: torch.Tensor) -> torch.Tensor:
    """Accuracy of confusion matrices [..., C, C] -> [...] (0 where there is no node)."""
    n = conf.sum((-2, -1)).double()
    return conf.diagonal(dim1=-2, dim2=-1).sum(-1).double() / n.clamp(min=1)


def weighted_mean(values: torch.Tensor, weights: torch.Tensor) -> float:
    """Σ w_k v_k / Σ w_k over clients (0.0 when the weights sum to 0)."""
    total = float(weights.sum())
    return float((values.double() * weights.double()).sum()) / total if total else 0.0


def node_homophily(y: torch.Tensor, edge_index: torch.Tensor | None, num_nodes: int) -> torch.Tensor:
    """FedSpray's Eq. 1 per node: the share of its neighbours (``edge_index`` [2, E], both directions
    of an undirected edge stored, self-loops ignored) with its label ``y`` [n]; NaN without a
    neighbour (and for every node when ``edge_index`` is None). float64 [n]. Unlike O-pFGL's
    statistic (methods/opfgl/stats.py) it reads every neighbour's label: evaluation only."""
    if edge_index is None:
        return torch.full((num_nodes,), float("nan"), dtype=torch.float64)
    src, dst = edge_index[0], edge_index[1]
    keep = src != dst
    src, dst = src[keep], dst[keep]
    degree = torch.bincount(dst, minlength=num_nodes).double()
    same = torch.bincount(dst, weights=(y[src] == y[dst]).double(), minlength=num_nodes)
    return torch.where(degree > 0, same / degree.clamp(min=1), torch.tensor(float("nan"), dtype=torch.float64))
