"""Node partitions: valid, deterministic per seed, cached, label-skewed where promised."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import privfgl.data.partition as partition_module
from privfgl.data import PARTITIONS, DataError, client_csbm, client_subgraphs, contextual_sbm, partition_nodes

K = 10
GRAPH_PARTITIONS = [m for m in PARTITIONS if m != "planted"]  # "planted" reads clients a graph carries


@pytest.fixture(scope="module")
def cora_parts(cora):
    """method -> Cora parts for K=10, seed 0 (computed once)."""
    return {m: partition_nodes(cora, m, K, seed=0) for m in GRAPH_PARTITIONS}


def assert_partition(parts, num_nodes, num_clients):
    assert len(parts) == num_clients
    for p in parts:
        assert p.dtype == torch.int64 and p.dim() == 1 and p.numel() > 0
        assert torch.equal(p, torch.sort(p).values)
    flat = torch.cat(parts)
    assert flat.numel() == num_nodes  # disjoint ...
    assert torch.equal(torch.sort(flat).values, torch.arange(num_nodes))  # ... and covering


def label_js(data, parts) -> float:
    """Mean Jensen-Shannon divergence (nats) between each client's and the global label mix."""
    c = data.num_classes
    glob = np.bincount(data.y.numpy(), minlength=c) / data.num_nodes
    total = 0.0
    for p in parts:
        local = np.bincount(data.y[p].numpy(), minlength=c) / p.numel()
        mix = (local + glob) / 2
        kl = lambda a, b: float(np.sum(a[a > 0] * np.log(a[a > 0] / b[a > 0])))  # noqa: E731
        total += (kl(local, mix) + kl(glob, mix)) / 2
    return total / len(parts)


@pytest.mark.parametrize("method", GRAPH_PARTITIONS)
def test_valid_and_deterministic_on_cora(cora, cora_parts, method):
    assert_partition(cora_parts[method], cora.num_nodes, K)
    partition_nodes(cora, method, K, seed=1)  # another seed in between must not matter
    again = partition_nodes(cora, method, K, seed=0)
    assert all(torch.equal(a, b) for a, b in zip(cora_parts[method], again))


@pytest.mark.parametrize("method", GRAPH_PARTITIONS)
def test_valid_on_citeseer_with_isolated_nodes(citeseer, method):
    assert_partition(partition_nodes(citeseer, method, 5, seed=2), citeseer.num_nodes, 5)


@pytest.mark.parametrize("method", GRAPH_PARTITIONS)
def test_small_graphs_and_edge_cases(method):
    data = contextual_sbm(120, 3, 4, seed=0)
    for k in (1, 3, 7):
        assert_partition(partition_nodes(data, method, k, seed=0, num_groups=20)
                         if method.endswith("+") else partition_nodes(data, method, k, seed=0), 120, k)


@pytest.mark.parametrize("method", ["louvain", "metis", "dirichlet"])
def test_seeds_change_the_partition(cora, cora_parts, method):
    seen = [cora_parts[method]] + [partition_nodes(cora, method, K, seed=s) for s in (1, 2)]
    for i in range(3):
        for j in range(i):
            assert not all(torch.equal(a, b) for a, b in zip(seen[i], seen[j])), (i, j)


def test_louvain_is_balanced(cora, cora_parts):
    sizes = [p.numel() for p in cora_parts["louvain"]]
    assert max(sizes) < cora.num_nodes // K + 20 and min(sizes) > cora.num_nodes // K - 50


def test_label_imbalance_splits_are_skewed(cora, cora_parts):
    iid = list(torch.randperm(cora.num_nodes, generator=torch.Generator().manual_seed(0)).chunk(K))
    iid_js = label_js(cora, iid)
    for method in ("louvain+", "metis+", "dirichlet"):
        assert label_js(cora, cora_parts[method]) > 5 * iid_js, method
    # The KMeans step clusters METIS parts by label mix: more skew than plain METIS.
    assert label_js(cora, cora_parts["metis+"]) > label_js(cora, cora_parts["metis"]) + 0.02
    for method in ("louvain+", "metis+"):  # one cluster per client: unequal sizes
        sizes = [p.numel() for p in cora_parts[method]]
        assert max(sizes) > 2 * min(sizes), method


def test_cache_round_trip(cora, cora_parts, tmp_path, monkeypatch):
    first = partition_nodes(cora, "louvain", K, seed=0, cache_dir=tmp_path)
    assert all(torch.equal(a, b) for a, b in zip(first, cora_parts["louvain"]))
    (folder,) = tmp_path.iterdir()
    assert folder.name.startswith("cora-louvain-10-0-")
    assert {f.name for f in folder.iterdir()} == {"meta.json"} | {f"client_{k}.txt" for k in range(K)}
    assert json.loads((folder / "meta.json").read_text())["sizes"] == [p.numel() for p in first]
    assert (folder / "client_0.txt").read_text().split() == [str(i) for i in first[0].tolist()]

    def fail(*args, **kwargs):
        raise AssertionError("recomputed instead of reading the cache")

    monkeypatch.setattr(partition_module, "_louvain", fail)
    cached = partition_nodes(cora, "louvain", K, seed=0, cache_dir=tmp_path)
    assert all(torch.equal(a, b) for a, b in zip(first, cached))


def test_cache_key_depends_on_params_and_graph(cora, tmp_path):
    partition_nodes(cora, "dirichlet", K, seed=0, cache_dir=tmp_path)
    partition_nodes(cora, "dirichlet", K, seed=0, cache_dir=tmp_path, alpha=1.0)
    partition_nodes(contextual_sbm(300, 3, 4, name="cora"), "dirichlet", K, seed=0, cache_dir=tmp_path)
    assert len(list(tmp_path.iterdir())) == 3


def test_corrupt_cache_is_recomputed(cora, cora_parts, tmp_path):
    partition_nodes(cora, "metis", K, seed=0, cache_dir=tmp_path)
    (folder,) = tmp_path.iterdir()
    (folder / "client_3.txt").write_text("0\n1\n")
    again = partition_nodes(cora, "metis", K, seed=0, cache_dir=tmp_path)
    assert all(torch.equal(a, b) for a, b in zip(cora_parts["metis"], again))
    # the right number of ids, but one node in two clients (and one in none): recomputed too
    ids = (folder / "client_3.txt").read_text().split()
    first_of_client_0 = (folder / "client_0.txt").read_text().split()[0]
    (folder / "client_3.txt").write_text("\n".join([first_of_client_0, *ids[1:]]) + "\n")
    again = partition_nodes(cora, "metis", K, seed=0, cache_dir=tmp_path)
    assert all(torch.equal(a, b) for a, b in zip(cora_parts["metis"], again))


def test_client_subgraphs_keep_only_intra_client_edges(cora, cora_parts):
    parts = cora_parts["louvain+"]
    subs = client_subgraphs(cora, parts)
    owner = torch.empty(cora.num_nodes, dtype=torch.long)
    for k, p in enumerate(parts):
        owner[p] = k
    global_edges = set(map(tuple, cora.edge_index.t().tolist()))
    intra = (owner[cora.edge_index[0]] == owner[cora.edge_index[1]]).sum().item()
    kept = 0
    for k, (sub, p) in enumerate(zip(subs, parts)):
        assert torch.equal(sub.global_id, p) and sub.global_id.dtype == torch.int64
        assert torch.equal(sub.x, cora.x[p]) and torch.equal(sub.y, cora.y[p])
        assert sub.num_classes == 7 and sub.num_nodes == p.numel()
        src, dst = sub.global_id[sub.edge_index]
        assert (owner[src] == k).all() and (owner[dst] == k).all()
        assert set(zip(src.tolist(), dst.tolist())) <= global_edges
        kept += sub.edge_index.size(1)
    assert kept == intra < cora.edge_index.size(1)


@pytest.mark.parametrize("kind", ["partition", "unsorted", "not covering", "overlapping"])
def test_client_subgraphs_equal_pyg_subgraph_per_part(cora, cora_parts, kind):
    """One pass over the edges for all parts gives exactly PyG's subgraph(part, relabel_nodes=True) per
    part: the same edges, local ids and order (overlapping parts take the per-part path)."""
    from torch_geometric.utils import subgraph
    perm = torch.randperm(cora.num_nodes, generator=torch.Generator().manual_seed(0))
    parts = {"partition": cora_parts["metis"], "unsorted": list(torch.tensor_split(perm, K)),
             "not covering": list(torch.tensor_split(perm[:1000], 7)),
             "overlapping": [torch.arange(0, 900), torch.arange(600, 2000), torch.arange(1500, 1600)]}[kind]
    for sub, part in zip(client_subgraphs(cora, parts), parts, strict=True):
        want, _ = subgraph(part, cora.edge_index, relabel_nodes=True, num_nodes=cora.num_nodes)
        assert torch.equal(sub.edge_index, want) and sub.edge_index.is_contiguous()


def test_client_subgraphs_rejects_bad_ids(cora):
    with pytest.raises(DataError, match=r"parts\[0\].*outside"):
        client_subgraphs(cora, [torch.tensor([0, cora.num_nodes])])


@pytest.mark.parametrize("method, k, params, match", [
    ("lovain", K, {}, "unknown partition method 'lovain'; valid methods: louvain, metis, louvain\\+"),
    ("louvain", 0, {}, r"num_clients=0: must be an integer in \[1, 2708\]"),
    ("metis", 2709, {}, r"num_clients=2709"),
    ("metis", 2.5, {}, r"num_clients=2.5"),
    ("metis", K, {"alpha": 0.1}, r"unknown parameter\(s\) \['alpha'\] for partition 'metis'; valid: none"),
    ("louvain", K, {"resolutoin": 2}, "valid: resolution, delta"),
    ("dirichlet", K, {"alpha": 0}, "alpha=0: must be a number > 0"),
    ("dirichlet", K, {"min_size": 500}, r"min_size=500: must be an integer in \[1, 270\]"),
    ("metis+", K, {"num_groups": 5}, "num_groups=5: must be an integer >= num_clients=10"),
    ("metis", K, {"seed": -1}, "seed=-1: must be an integer >= 0"),
])
def test_bad_input(cora, method, k, params, match):
    with pytest.raises(DataError, match=match):
        partition_nodes(cora, method, k, **params)


def test_planted_partition_returns_the_graphs_own_clients_and_names_what_is_missing(cora):
    data = client_csbm([[5, 20, 1], [30, 2, 2], [0, 3, 40]], [0.9] * 3, [0.3] * 3, num_features=4, seed=0)
    parts = partition_nodes(data, "planted", 3)
    assert_partition(parts, data.num_nodes, 3)
    assert [torch.bincount(data.y[p], minlength=3).tolist() for p in parts] == [[5, 20, 1], [30, 2, 2], [0, 3, 40]]
    with pytest.raises(DataError, match="has 3 planted clients, got num_clients=4; use --clients 3"):
        partition_nodes(data, "planted", 4)
    with pytest.raises(DataError, match="needs a graph with planted clients"):
        partition_nodes(cora, "planted", K)


def test_unreachable_dirichlet_min_size_is_reported():
    data = contextual_sbm(100, 2, 4, seed=0)
    with pytest.raises(DataError, match="no draw in .* gave every client"):
        partition_nodes(data, "dirichlet", 10, alpha=0.01, min_size=10)


def test_metis_fills_the_parts_it_leaves_empty_when_clients_near_nodes():
    """Raw METIS leaves 11 of 120 parts of this 300-node graph empty (2.5 nodes a part); each gets the last
    node of the largest part, so every client has a node and the parts still cover the graph once."""
    data = contextual_sbm(300, 7, 16, homophily=0.81, avg_degree=3.9, seed=0)
    parts = partition_nodes(data, "metis", 120, seed=0)
    assert len(parts) == 120 and min(p.numel() for p in parts) >= 1
    assert torch.equal(torch.sort(torch.cat(parts)).values, torch.arange(300))
    assert max(p.numel() for p in parts) <= 4
