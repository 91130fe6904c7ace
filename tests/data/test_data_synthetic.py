"""Contextual SBM: seeded, shaped as asked, with the asked homophily and degree."""

from __future__ import annotations

import time

import pytest
import torch

from privfgl.data import CLIENT_PRESETS, SYNTHETIC_PRESETS, DataError, client_csbm, contextual_sbm, load_dataset
from privfgl.metrics import node_homophily


def edge_homophily(data) -> float:
    src, dst = data.edge_index
    return (data.y[src] == data.y[dst]).float().mean().item()


def test_seeded():
    a, b = contextual_sbm(500, 4, 16, seed=7), contextual_sbm(500, 4, 16, seed=7)
    c = contextual_sbm(500, 4, 16, seed=8)
    assert torch.equal(a.x, b.x) and torch.equal(a.y, b.y) and torch.equal(a.edge_index, b.edge_index)
    assert not torch.equal(a.edge_index, c.edge_index)


@pytest.mark.parametrize("homophily", [0.1, 0.5, 0.9])
def test_homophily_and_degree(homophily):
    data = contextual_sbm(5000, 5, 8, homophily=homophily, avg_degree=8.0, seed=0)
    assert edge_homophily(data) == pytest.approx(homophily, abs=0.03)
    assert data.edge_index.size(1) / data.num_nodes == pytest.approx(8.0, rel=0.05)
    assert torch.bincount(data.y).tolist() == [1000] * 5
    assert not (data.edge_index[0] == data.edge_index[1]).any()


def test_features_carry_class_signal():
    data = contextual_sbm(3000, 3, 64, feature_signal=4.0, seed=0)
    means = torch.stack([data.x[data.y == c].mean(0) for c in range(3)])
    nearest = torch.cdist(data.x, means).argmin(1)
    assert (nearest == data.y).float().mean() > 0.8
    assert data.x.dtype == torch.float32


def test_single_class_and_edgeless_graphs():
    one = contextual_sbm(50, 1, 4, homophily=0.0, seed=0)
    assert one.edge_index.size(1) > 0 and edge_homophily(one) == 1.0
    assert contextual_sbm(50, 2, 4, avg_degree=0.0).edge_index.size(1) == 0


def test_100k_nodes_in_seconds():
    start = time.perf_counter()
    data = contextual_sbm(100_000, 10, 32, avg_degree=10.0, seed=0)
    assert time.perf_counter() - start < 10.0
    assert data.num_nodes == 100_000 and edge_homophily(data) == pytest.approx(0.8, abs=0.01)


def test_presets_shaped_like_real_datasets():
    shapes = {name: (p["num_nodes"], p["num_features"], p["num_classes"])
              for name, p in SYNTHETIC_PRESETS.items()}
    assert shapes["sbm-cora"] == (2708, 1433, 7)
    assert shapes["sbm-pubmed"] == (19717, 500, 3)
    assert shapes["sbm-computers"] == (13752, 767, 10)
    assert shapes["sbm-photo"] == (7650, 745, 8)
    assert shapes["sbm-cs"] == (18333, 6805, 15)
    assert shapes["sbm-physics"] == (34493, 8415, 5)
    assert shapes["sbm-wikics"] == (11701, 300, 10)
    assert len(shapes) == 7


@pytest.mark.parametrize("kwargs, match", [
    (dict(num_nodes=0), "num_nodes"),
    (dict(num_classes=20), "num_classes"),
    (dict(num_features=0), "num_features"),
    (dict(homophily=1.5), "homophily"),
    (dict(avg_degree=-1.0), "avg_degree"),
    (dict(feature_signal=float("nan")), "feature_signal"),
])
def test_bad_arguments(kwargs, match):
    args = {"num_nodes": 10, "num_classes": 2, "num_features": 3, **kwargs}
    with pytest.raises(DataError, match=match):
        contextual_sbm(**args)


def test_planted_clients_have_their_label_counts_their_own_edges_and_the_asked_homophily():
    counts = [[40, 900, 60], [700, 150, 150]]
    data = client_csbm(counts, [0.95, 0.9], [0.2, 0.5], num_features=8, avg_degree=6.0, seed=0)
    again = client_csbm(counts, [0.95, 0.9], [0.2, 0.5], num_features=8, avg_degree=6.0, seed=0)
    assert torch.equal(data.edge_index, again.edge_index) and torch.equal(data.x, again.x)
    for k in range(2):
        assert torch.bincount(data.y[data.client == k], minlength=3).tolist() == counts[k]
    src, dst = data.edge_index
    assert torch.equal(data.client[src], data.client[dst])          # no edge between clients
    h = node_homophily(data.y, data.edge_index, data.num_nodes)
    for k, majority, (h_major, h_minor) in ((0, 1, (0.95, 0.2)), (1, 0, (0.9, 0.5))):
        mine = (data.client == k) & ~torch.isnan(h)
        major, minor = mine & (data.y == majority), mine & (data.y != majority)
        assert float(h[major].mean()) == pytest.approx(h_major, abs=0.05)
        # undirected: majority nodes' off-class edges and same-class minority edges also land on them
        assert float(h[minor].mean()) == pytest.approx(h_minor, abs=0.1)


def test_the_pubmed_clients_stand_in_has_the_papers_client_sizes():
    data = load_dataset("sbm-pubmed-clients")
    sizes = torch.bincount(data.client).tolist()
    assert sizes == [1768, 1415, 2287, 1333, 1300, 1401, 1754]     # FedSpray README Table 4
    assert data.x.shape == (11258, 500) and data.num_classes == 3
    assert CLIENT_PRESETS["sbm-pubmed-clients"]["homophily_minority"][2] == 0.17   # paper Table 1


@pytest.mark.parametrize("kwargs, match", [
    (dict(label_counts=[[1, -1]]), "non-negative class counts"),
    (dict(label_counts=[[0, 0], [1, 1]]), "at least one node"),
    (dict(homophily_majority=[0.9]), r"homophily_majority: expected 2 values in \[0, 1\]"),
    (dict(homophily_minority=[0.3, 1.5]), "homophily_minority"),
])
def test_bad_planted_client_arguments(kwargs, match):
    args = dict(label_counts=[[3, 1], [1, 3]], homophily_majority=[0.9, 0.9], homophily_minority=[0.3, 0.3],
                num_features=2)
    with pytest.raises(DataError, match=match):
        client_csbm(**{**args, **kwargs})
