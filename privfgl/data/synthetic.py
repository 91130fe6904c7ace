"""Contextual stochastic block model (CSBM): seeded synthetic graphs with planted classes.

Used for unit tests, scaling benchmarks, and as stand-ins for datasets that are not
available offline (same node, feature and class counts as the real one).
"""

from __future__ import annotations

import math

import torch
from torch_geometric.data import Data
from torch_geometric.utils import remove_self_loops, to_undirected

from privfgl.data.errors import DataError

# The generic dataset "sbm": a small graph for tests and quick runs.
SBM_DEFAULTS: dict = dict(num_nodes=2000, num_features=64, num_classes=5, homophily=0.8, avg_degree=5.0)

# Stand-ins: name -> contextual_sbm keyword arguments. Node/feature/class counts are the PyG
# versions of the real datasets; homophily is their edge homophily, avg_degree their mean degree.
SYNTHETIC_PRESETS: dict[str, dict] = {
    "sbm-pubmed": dict(num_nodes=19717, num_features=500, num_classes=3, homophily=0.80, avg_degree=4.5),
    "sbm-computers": dict(num_nodes=13752, num_features=767, num_classes=10, homophily=0.78, avg_degree=35.8),
    "sbm-photo": dict(num_nodes=7650, num_features=745, num_classes=8, homophily=0.83, avg_degree=31.1),
    "sbm-cs": dict(num_nodes=18333, num_features=6805, num_classes=15, homophily=0.81, avg_degree=8.9),
    "sbm-physics": dict(num_nodes=34493, num_features=8415, num_classes=5, homophily=0.93, avg_degree=14.4),
    "sbm-wikics": dict(num_nodes=11701, num_features=300, num_classes=10, homophily=0.65, avg_degree=36.9),
}


def contextual_sbm(
    num_nodes: int,
    num_classes: int,
    num_features: int,
    homophily: float = 0.8,
    feature_signal: float = 1.0,
    avg_degree: float = 5.0,
    seed: int = 0,
    name: str = "sbm",
) -> Data:
    """Sample a contextual SBM graph.

    Classes are balanced (sizes differ by at most one). Every node starts Poisson(avg_degree / 2)
    edges; each goes to a uniform node of the same class with probability ``homophily``, else to
    a uniform node of another class. Edges are made undirected, deduplicated, self loops dropped,
    so the mean degree is about ``avg_degree`` and the edge homophily about ``homophily``.
    Features: x_i = feature_signal * mu_{y_i} + N(0, I), with mu_c a random direction of unit
    norm in expectation (so feature_signal is the class-mean norm in noise-std units).

    Returns Data with x float32 [N, F], y int64 [N], edge_index int64 [2, E], name, num_classes.
    """
    _check_sbm_args(num_nodes, num_classes, num_features, homophily, feature_signal, avg_degree)
    g = torch.Generator().manual_seed(seed)
    y = torch.randperm(num_nodes, generator=g) % num_classes
    by_class = torch.argsort(y, stable=True)  # node ids sorted by class
    counts = torch.bincount(y, minlength=num_classes)
    offsets = torch.cumsum(counts, 0) - counts  # start of each class in by_class

    out_degree = torch.poisson(torch.full((num_nodes,), avg_degree / 2), generator=g).long()
    src = torch.repeat_interleave(torch.arange(num_nodes), out_degree)
    cls_size, cls_start = counts[y[src]], offsets[y[src]]
    others = num_nodes - cls_size
    same = (torch.rand(src.numel(), generator=g) < homophily) | (others == 0)
    u = torch.rand(src.numel(), generator=g, dtype=torch.float64)
    pos_same = cls_start + torch.minimum((u * cls_size).long(), cls_size - 1)
    # Uniform index into the nodes outside the class: skip over the class's block.
    pos_other = torch.minimum((u * others).long(), (others - 1).clamp(min=0))
    pos_other = pos_other + cls_size * (pos_other >= cls_start)
    dst = by_class[torch.where(same, pos_same, pos_other)]

    edge_index, _ = remove_self_loops(torch.stack([src, dst]))
    edge_index = to_undirected(edge_index, num_nodes=num_nodes)

    means = torch.randn(num_classes, num_features, generator=g) / math.sqrt(num_features)
    x = feature_signal * means[y] + torch.randn(num_nodes, num_features, generator=g)
    return Data(x=x, y=y, edge_index=edge_index, name=name, num_classes=num_classes)


def _check_sbm_args(
    num_nodes: int, num_classes: int, num_features: int,
    homophily: float, feature_signal: float, avg_degree: float,
) -> None:
    if num_nodes < 1:
        raise DataError(f"num_nodes={num_nodes}: must be >= 1")
    if not 1 <= num_classes <= num_nodes:
        raise DataError(f"num_classes={num_classes}: must be in [1, num_nodes={num_nodes}]")
    if num_features < 1:
        raise DataError(f"num_features={num_features}: must be >= 1")
    if not 0.0 <= homophily <= 1.0:
        raise DataError(f"homophily={homophily}: must be in [0, 1]")
    if not feature_signal >= 0.0:
        raise DataError(f"feature_signal={feature_signal}: must be >= 0")
    if not avg_degree >= 0.0:
        raise DataError(f"avg_degree={avg_degree}: must be >= 0")
