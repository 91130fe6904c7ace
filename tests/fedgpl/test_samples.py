"""FedGPL client datasets (spec B.1, B.8): node-, edge- and graph-level tasks as |C|-way
classification of small induced graphs, split 1:1:1:1 per class and divided among a third of the
clients per task."""
import numpy as np
import pytest
import torch
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import shortest_path
from torch_geometric.data import Data
from torch_geometric.utils import is_undirected

from privfgl.data import contextual_sbm
from privfgl.methods.fedgpl.samples import (
    TASKS, ClientSamples, build_task_samples, client_datasets, reduce_features, split_samples,
)

HOPS = {"node": (2, 5), "edge": (1, 3), "graph": (1, 5)}  # (start, most) hops, spec B.8
MIN_NODES, MAX_NODES = 40, 80


@pytest.fixture(scope="module")
def sbm():
    return contextual_sbm(num_nodes=300, num_classes=3, num_features=16, homophily=0.85, seed=0)


@pytest.fixture(scope="module")
def id_graph(sbm):
    """The SBM graph with one feature, the node's own id, so that a sample's x names its nodes."""
    return Data(x=torch.arange(sbm.num_nodes, dtype=torch.float32).unsqueeze(1), edge_index=sbm.edge_index,
                y=sbm.y)


@pytest.fixture(scope="module")
def samples(id_graph):
    return {task: build_task_samples(id_graph, task, max_per_class=10, min_nodes=MIN_NODES,
                                     max_nodes=MAX_NODES) for task in TASKS}


def node_ids(sample: Data) -> torch.Tensor:
    return sample.x[:, 0].long()


def hops_from_seeds(graph: Data, seeds: torch.Tensor) -> np.ndarray:
    """[N] the hop distance of every node to its nearest seed (inf if unreachable)."""
    n = graph.num_nodes
    adj = csr_matrix((np.ones(graph.edge_index.size(1)), graph.edge_index.numpy()), shape=(n, n))
    return shortest_path(adj, unweighted=True, indices=seeds.numpy()).min(axis=0)


# ---- reduce_features ------------------------------------------------------------------------------
def test_reduce_features_is_a_deterministic_truncated_svd_to_dim_float32():
    x = torch.randn(60, 40, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    z = reduce_features(x, dim=10, seed=3)
    assert z.shape == (60, 10) and z.dtype == torch.float32
    assert torch.equal(z, reduce_features(x, dim=10, seed=3))
    singular_values = torch.linalg.svdvals(x)[:3].float()
    assert torch.allclose(z[:, :3].norm(dim=0), singular_values, rtol=1e-3)


def test_reduce_features_zero_pads_when_fewer_features_or_samples_than_dim():
    x = torch.randn(5, 3)
    z = reduce_features(x, dim=6)
    assert torch.equal(z[:, :3], x) and not z[:, 3:].any()
    assert reduce_features(torch.randn(5, 40), dim=10).shape == (5, 10)


# ---- build_task_samples ---------------------------------------------------------------------------
@pytest.mark.parametrize("task", TASKS)
def test_samples_are_induced_graphs_with_local_symmetric_edges_and_seeds_first(id_graph, samples, task):
    global_edges = set(map(tuple, id_graph.edge_index.t().tolist()))
    for s in samples[task]:
        ids = node_ids(s)
        n = ids.numel()
        assert s.x.dtype == torch.float32 and s.edge_index.dtype == torch.int64
        assert s.y.shape == (1,) and s.y.dtype == torch.int64 and s.center.dtype == torch.int64
        assert ids.unique().numel() == n
        assert torch.equal(ids[:s.center.numel()], s.center)
        assert s.edge_index.min() >= 0 and s.edge_index.max() < n
        assert is_undirected(s.edge_index, num_nodes=n) and not (s.edge_index[0] == s.edge_index[1]).any()
        kept = set(ids.tolist())
        induced = {(u, v) for u, v in global_edges if u in kept and v in kept}
        assert set(map(tuple, ids[s.edge_index].t().tolist())) == induced


@pytest.mark.parametrize("task", TASKS)
def test_sample_sizes_lie_within_min_and_max_nodes(samples, task):
    assert all(MIN_NODES <= s.num_nodes <= MAX_NODES for s in samples[task])


@pytest.mark.parametrize("task", TASKS)
def test_neighbourhood_grows_hop_by_hop_until_min_nodes_and_is_cut_keeping_the_nearest(id_graph, samples,
                                                                                     task):
    start, most = HOPS[task]
    for s in samples[task]:
        hops = hops_from_seeds(id_graph, s.center)
        kept = np.zeros(id_graph.num_nodes, dtype=bool)
        kept[node_ids(s).numpy()] = True
        reach = hops[kept & (hops <= most)].max()  # the farthest kept hop (padding aside)
        assert kept[hops < reach].all()  # every nearer node is kept
        if reach > start:  # grown past the start only while too small
            assert (hops < reach).sum() < MIN_NODES


def test_node_samples_are_ego_graphs_of_distinct_centres_labelled_by_the_centre(id_graph, samples):
    centres = torch.cat([s.center for s in samples["node"]])
    assert centres.unique().numel() == centres.numel() == 3 * 10
    assert all(int(s.y) == int(id_graph.y[s.center]) for s in samples["node"])


def test_edge_samples_grow_around_distinct_same_label_edges_labelled_by_that_label(id_graph, samples):
    global_edges = set(map(tuple, id_graph.edge_index.t().tolist()))
    pairs = [tuple(s.center.tolist()) for s in samples["edge"]]
    assert len(set(pairs)) == len(pairs) == 3 * 10
    for s, (u, v) in zip(samples["edge"], pairs):
        assert (u, v) in global_edges
        assert int(id_graph.y[u]) == int(id_graph.y[v]) == int(s.y)


def test_graph_samples_grow_around_3_to_5_distinct_seeds_of_their_label(id_graph, samples):
    assert len(samples["graph"]) == 3 * 10
    for s in samples["graph"]:
        assert 3 <= s.center.numel() <= 5 and s.center.unique().numel() == s.center.numel()
        assert (id_graph.y[s.center] == s.y).all()


def test_small_neighbourhoods_are_padded_with_random_same_class_nodes_as_far_as_the_class_allows():
    y = torch.arange(12) % 2  # two classes of 6 nodes, no edges
    graph = Data(x=torch.arange(12, dtype=torch.float32).unsqueeze(1),
                 edge_index=torch.empty(2, 0, dtype=torch.long), y=y)
    padded = build_task_samples(graph, "node", max_per_class=6, min_nodes=5, max_nodes=10)
    assert len(padded) == 12
    for s in padded:
        assert s.num_nodes == 5 and (y[node_ids(s)] == s.y).all() and s.edge_index.numel() == 0
    whole_class = build_task_samples(graph, "node", max_per_class=1, min_nodes=10, max_nodes=10)
    assert [s.num_nodes for s in whole_class] == [6, 6]


def test_a_class_with_fewer_than_max_per_class_nodes_centres_each_node_once(id_graph):
    node = build_task_samples(id_graph, "node", max_per_class=1000, min_nodes=5, max_nodes=10)
    assert sorted(int(s.center) for s in node) == list(range(id_graph.num_nodes))


@pytest.mark.parametrize("task", TASKS)
def test_samples_are_deterministic_per_seed_and_differ_across_seeds(id_graph, task):
    def build(seed):
        return build_task_samples(id_graph, task, max_per_class=5, seed=seed, min_nodes=20, max_nodes=30)

    first, again, other = build(0), build(0), build(1)
    for a, b in zip(first, again):
        assert torch.equal(a.x, b.x) and torch.equal(a.edge_index, b.edge_index)
        assert torch.equal(a.center, b.center)
    assert [s.center.tolist() for s in first] != [s.center.tolist() for s in other]


def test_unknown_task_and_bad_sizes_are_rejected(id_graph):
    with pytest.raises(ValueError, match="task"):
        build_task_samples(id_graph, "link")
    with pytest.raises(ValueError, match="min_nodes"):
        build_task_samples(id_graph, "node", min_nodes=50, max_nodes=40)


# ---- split_samples --------------------------------------------------------------------------------
def test_split_cuts_each_class_1_1_1_1_into_train_val_and_two_test_quarters():
    labels = torch.tensor([0] * 8 + [1] * 5 + [2] * 3)
    split = split_samples(labels, seed=0)
    assert split.dtype == torch.int64 and split.shape == labels.shape
    counts = {c: torch.bincount(split[labels == c], minlength=3).tolist() for c in range(3)}
    assert counts == {0: [2, 2, 4], 1: [2, 1, 2], 2: [1, 1, 1]}
    assert torch.equal(split, split_samples(labels, seed=0))
    assert not torch.equal(split, split_samples(labels, seed=1))


# ---- client_datasets ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def iid_clients(sbm):
    return client_datasets(sbm, num_clients=6, dim=8, max_per_class=20, seed=0)


def test_a_third_of_the_clients_per_task_in_task_order(iid_clients):
    assert all(isinstance(c, ClientSamples) for c in iid_clients)
    assert [c.task for c in iid_clients] == ["node", "node", "edge", "edge", "graph", "graph"]
    for c in iid_clients:
        assert len(c.graphs) == c.y.numel() == c.split.numel()
        assert torch.equal(c.y, torch.cat([g.y for g in c.graphs]))
        assert all(g.x.shape[1] == 8 and 100 <= g.num_nodes <= 300 for g in c.graphs)


def test_iid_clients_get_equal_disjoint_shares_of_every_split(iid_clients):
    for task in TASKS:
        clients = [c for c in iid_clients if c.task == task]
        for part in range(3):
            sizes = [int((c.split == part).sum()) for c in clients]
            assert max(sizes) - min(sizes) <= 1 and min(sizes) > 0
        graphs = [id(g) for c in clients for g in c.graphs]
        assert len(set(graphs)) == len(graphs)
    graph_task = [c for c in iid_clients if c.task == "graph"]
    assert sum(len(c.graphs) for c in graph_task) == 3 * 20


def test_small_dirichlet_alpha_skews_the_clients_label_distributions(sbm, iid_clients):
    skewed = client_datasets(sbm, num_clients=6, dim=8, max_per_class=20, dirichlet_alpha=0.1, seed=0)

    def mean_top_class_share(clients):
        return float(np.mean([torch.bincount(c.y).max() / c.y.numel() for c in clients]))

    assert mean_top_class_share(skewed) > mean_top_class_share(iid_clients) + 0.2
    assert all(set(c.split.tolist()) == {0, 1, 2} for c in skewed)


def test_client_datasets_are_deterministic_per_seed_and_differ_across_seeds(sbm, iid_clients):
    again = client_datasets(sbm, num_clients=6, dim=8, max_per_class=20, seed=0)
    other = client_datasets(sbm, num_clients=6, dim=8, max_per_class=20, seed=1)
    for a, b in zip(iid_clients, again):
        assert torch.equal(a.y, b.y) and torch.equal(a.split, b.split)
        assert all(torch.equal(g.center, h.center) and torch.equal(g.x, h.x)
                   for g, h in zip(a.graphs, b.graphs))
    assert [g.center.tolist() for g in iid_clients[0].graphs] != [g.center.tolist() for g in other[0].graphs]


@pytest.mark.parametrize("num_clients", [4, 0, -3])
def test_num_clients_must_be_a_positive_multiple_of_3(sbm, num_clients):
    with pytest.raises(ValueError, match=f"num_clients={num_clients}"):
        client_datasets(sbm, num_clients=num_clients)


def test_cora_gives_nine_clients_of_100_to_300_node_graphs_in_100_dimensions(cora):
    clients = client_datasets(cora, max_per_class=5)
    assert [c.task for c in clients] == ["node"] * 3 + ["edge"] * 3 + ["graph"] * 3
    graphs = [g for c in clients for g in c.graphs]
    assert len(graphs) == 3 * 7 * 5
    assert all(g.x.shape[1] == 100 and 100 <= g.num_nodes <= 300 for g in graphs)
