"""FedLoG's evaluation regimes (privfgl.data.settings): who trains on what, and what each setting tests."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.data import Data

from privfgl.data import partition_nodes
from privfgl.data.settings import CROP_RATE, HOPS, build_regime, crop_nodes, missing_classes, regime_of

K = 3


def metis(graph, num_parts):
    return partition_nodes(graph, "metis", num_parts, seed=0)


@pytest.fixture(scope="module")
def closed(cora):
    return build_regime(cora, "closed", metis, K, seed=0)


@pytest.fixture(scope="module")
def open_(cora):
    return build_regime(cora, "open", metis, K, seed=0)


def setting(regime, name):
    (s,) = [s for s in regime.settings if s.name == name]
    return s


def neighbours_within(edge_index: torch.Tensor, seeds: set[int], hops: int) -> set[int]:
    """Nodes within `hops` hops of `seeds` (both edge directions), by breadth-first search."""
    adjacency: dict[int, set[int]] = {}
    for a, b in edge_index.t().tolist():
        adjacency.setdefault(a, set()).add(b)
        adjacency.setdefault(b, set()).add(a)
    reached, frontier = set(seeds), set(seeds)
    for _ in range(hops):
        frontier = {n for f in frontier for n in adjacency.get(f, ())} - reached
        reached |= frontier
    return reached


def test_regimes_of_setting_lists():
    assert regime_of(("seen",)) is None
    assert regime_of(("seen", "new-client")) == regime_of(("missing-class",)) == "closed"
    assert regime_of(("open-set",)) == "open"


@pytest.mark.parametrize("counts, missing", [
    ([50, 3, 40, 10], [1, 3]),      # 3, then 10: 13 < 20 but two classes is the most
    ([50, 30, 40, 25], [3]),        # 25 >= 20 after one class
    ([5, 5, 40, 0, 60], [0, 1]),    # ties -> lower class id; the empty class 3 is not a candidate
    ([10, 90, 0], []),              # two classes: removing one would leave fewer than 2
    ([4, 90, 50], [0]),             # three classes: at most one may go
])
def test_missing_classes_are_the_smallest_shares_until_20_nodes_at_most_2_classes_keeping_2(counts, missing):
    y = torch.cat([torch.full((n,), c) for c, n in enumerate(counts)])
    assert missing_classes(y[torch.randperm(y.numel())]) == missing


def test_the_new_client_is_never_a_training_client(cora, closed):
    new = setting(closed, "new-client").graphs
    assert all(g is new[0] for g in new) and bool(new[0].test_mask.all())
    assert new[0].num_nodes == closed.new_client_nodes
    trained = torch.cat([c.global_id for c in closed.clients])
    assert not bool(torch.isin(new[0].global_id, trained).any())
    parts = metis(cora, K + 1)
    assert torch.equal(new[0].global_id, parts[K])  # part K, untouched


def test_missing_classes_leave_the_training_graph_and_are_tested_in_the_missing_class_setting(cora, closed):
    parts = metis(cora, K + 1)
    missing_graphs = setting(closed, "missing-class").graphs
    for k, client in enumerate(closed.clients):
        missing = closed.missing_classes[k]
        assert missing == missing_classes(cora.y[parts[k]]) and 1 <= len(missing) <= 2
        assert not bool(torch.isin(client.y, torch.tensor(missing)).any())
        removed = parts[k][torch.isin(cora.y[parts[k]], torch.tensor(missing))]
        assert closed.removed_nodes[k] == removed.numel()
        assert torch.equal(client.global_id, parts[k][~torch.isin(parts[k], removed)])
        g = missing_graphs[k]
        tested = set(g.global_id[g.test_mask].tolist())
        assert set(removed.tolist()) <= tested
        assert bool(torch.isin(g.y[g.test_mask], torch.tensor(missing)).all())
        assert not tested & set(client.global_id.tolist())
    # the training graph keeps exactly the global edges among its nodes
    c = closed.clients[0]
    ids = c.global_id.tolist()
    expected = {(a, b) for a, b in cora.edge_index.t().tolist() if a in set(ids) and b in set(ids)}
    assert {(ids[a], ids[b]) for a, b in c.edge_index.t().tolist()} == expected


def test_unseen_node_tests_nodes_outside_the_training_graph_of_trained_classes_within_h_hops(cora, closed):
    unseen, missing = setting(closed, "unseen-node"), setting(closed, "missing-class")
    parts = metis(cora, K + 1)
    for k, client in enumerate(closed.clients):
        g = unseen.graphs[k]
        assert g.x is missing.graphs[k].x and g.edge_index is missing.graphs[k].edge_index  # one graph, two masks
        own = set(client.global_id.tolist())
        removed = parts[k][torch.isin(cora.y[parts[k]], torch.tensor(closed.missing_classes[k]))]
        assert set(g.global_id.tolist()) == neighbours_within(cora.edge_index, own, HOPS) | set(removed.tolist())
        test_ids = g.global_id[g.test_mask]
        assert not set(test_ids.tolist()) & own
        assert not bool(torch.isin(g.y[g.test_mask], torch.tensor(closed.missing_classes[k])).any())
        outside = ~torch.isin(g.global_id, client.global_id)
        assert torch.equal(g.test_mask | missing.graphs[k].test_mask, outside)  # every outside node is tested once
        assert g.edge_index.size(1) > client.edge_index.size(1)  # edges to other clients' nodes come back


def test_open_set_crops_20_percent_before_partitioning_and_tests_only_cropped_nodes(cora, open_):
    cropped = crop_nodes(cora.num_nodes, seed=0)
    assert cropped.numel() == round(CROP_RATE * cora.num_nodes) == open_.cropped_nodes
    trained = torch.cat([c.global_id for c in open_.clients])
    assert not bool(torch.isin(trained, cropped).any())
    assert open_.new_client_nodes + trained.numel() + sum(open_.removed_nodes) == cora.num_nodes - cropped.numel()
    unseen, missing = setting(open_, "open-set-unseen-node"), setting(open_, "open-set-missing-class")
    cropped_set = set(cropped.tolist())
    for k, client in enumerate(open_.clients):
        g = unseen.graphs[k]
        own = set(client.global_id.tolist())
        allowed = torch.tensor(sorted(own | cropped_set))  # paths only through k's own nodes and cropped nodes
        through = cora.edge_index[:, torch.isin(cora.edge_index, allowed).all(0)]
        assert set(g.global_id.tolist()) == neighbours_within(through, own, HOPS)
        for s, classes_in in ((unseen, False), (missing, True)):
            mask = s.graphs[k].test_mask
            assert set(g.global_id[mask].tolist()) <= cropped_set
            assert bool((torch.isin(g.y[mask], torch.tensor(open_.missing_classes[k])) == classes_in).all())
        assert torch.equal(unseen.graphs[k].test_mask | missing.graphs[k].test_mask, torch.isin(g.global_id, cropped))
    assert sum(int(g.test_mask.sum()) for g in missing.graphs) > 0


def test_regimes_are_deterministic_per_seed(cora, closed, open_):
    again = build_regime(cora, "open", metis, K, seed=0)
    assert all(torch.equal(a.global_id, b.global_id) for a, b in zip(open_.clients, again.clients))
    assert all(torch.equal(a.test_mask, b.test_mask) and torch.equal(a.edge_index, b.edge_index)
               for s, t in zip(open_.settings, again.settings) for a, b in zip(s.graphs, t.graphs))
    assert not torch.equal(crop_nodes(cora.num_nodes, 0), crop_nodes(cora.num_nodes, 1))
    assert build_regime(cora, "closed", metis, K, seed=0).metadata() == closed.metadata()


def test_a_tiny_path_graph_by_hand():
    # the path 0-1-...-9; client 0 holds nodes 0-4, client 1 nodes 5-8, the new client node 9
    y = torch.tensor([0, 0, 0, 1, 2, 2, 1, 1, 0, 0])
    edges = [(i, i + 1) for i in range(9)]
    data = Data(x=torch.eye(10), y=y, edge_index=torch.tensor(edges + [(b, a) for a, b in edges]).t())
    parts = [torch.arange(0, 5), torch.arange(5, 9), torch.tensor([9])]
    regime = build_regime(data, "closed", lambda graph, num_parts: parts, 2, seed=0)
    # client 0: classes 1 and 2 tie at one node -> 1; taking 2 as well would leave one class
    # client 1: classes 0 and 2 tie at one node -> 0; likewise no second class
    assert regime.missing_classes == [[1], [0]] and regime.removed_nodes == [1, 1]
    assert [c.global_id.tolist() for c in regime.clients] == [[0, 1, 2, 4], [5, 6, 7]]
    assert sorted(map(tuple, regime.clients[0].edge_index.t().tolist())) == [(0, 1), (1, 0), (1, 2), (2, 1)]  # 4 alone
    graphs = setting(regime, "unseen-node").graphs
    assert [g.global_id.tolist() for g in graphs] == [list(range(0, 7)), list(range(3, 10))]  # 2 hops (+ removed)
    tested = {s.name: [g.global_id[g.test_mask].tolist() for g in s.graphs] for s in regime.settings}
    assert tested == {"unseen-node": [[5], [3, 4]], "missing-class": [[3, 6], [8, 9]], "new-client": [[9], [9]]}
    assert regime.metadata() == {"regime": "closed", "h": 2, "reported": ["seen", "unseen-node", "missing-class",
                                                                          "new-client"],
                                 "missing_classes": [[1], [0]], "removed_nodes": [1, 1], "new_client_nodes": 1,
                                 "cropped_nodes": 0}
