"""Metrics follow the papers' conventions (sklearn macro-F1 over all classes; weighted means)."""
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import f1_score
from torch_geometric.data import Data

from privfgl.evaluation import RoundTracker
from privfgl.metrics import accuracy, confusion_by_client, macro_f1, node_homophily, weighted_mean


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 8), st.lists(st.tuples(st.integers(0, 7), st.integers(0, 7), st.integers(0, 2)),
                                   min_size=1, max_size=60))
def test_per_client_macro_f1_and_accuracy_equal_sklearn_over_all_classes(num_classes, triples):
    y = torch.tensor([a % num_classes for a, _, _ in triples])
    pred = torch.tensor([b % num_classes for _, b, _ in triples])
    client = torch.tensor([c for _, _, c in triples])
    conf = confusion_by_client(pred, y, client, 3, num_classes)
    for k in range(3):
        mine = client == k
        if not bool(mine.any()):
            assert float(accuracy(conf[k])) == 0.0
            continue
        expected = f1_score(y[mine].numpy(), pred[mine].numpy(), labels=list(range(num_classes)), average="macro",
                            zero_division=0)
        assert abs(float(macro_f1(conf[k])) - expected) < 1e-9
        assert abs(float(accuracy(conf[k])) - float((pred[mine] == y[mine]).double().mean())) < 1e-12


def test_absent_classes_count_as_zero_f1():
    y = torch.tensor([0, 0, 1, 1])
    zero = torch.zeros(4, dtype=torch.long)
    assert float(macro_f1(confusion_by_client(y, y, zero, 1, 2)[0])) == 1.0
    assert float(macro_f1(confusion_by_client(y, y, zero, 1, 4)[0])) == 0.5  # two of four classes never occur


def test_weighted_mean():
    assert weighted_mean(torch.tensor([1.0, 0.0]), torch.tensor([1.0, 3.0])) == 0.25
    assert weighted_mean(torch.tensor([1.0]), torch.tensor([0.0])) == 0.0


def client(y, train, test):
    n = len(y)
    mask = lambda idx: torch.isin(torch.arange(n), torch.tensor(idx, dtype=torch.long))
    return Data(y=torch.tensor(y), train_mask=mask(train), val_mask=mask(test), test_mask=mask(test), num_nodes=n)


def test_tracker_weights_clients_by_node_count_and_pools_minority_nodes():
    a = client([0, 0, 1, 1], train=[0, 1], test=[2, 3])          # majority class 0; test labels 1, 1
    b = client([2, 2, 2, 2, 2, 2, 0, 1], train=[0, 1, 2], test=[3, 4, 5, 6, 7])  # majority 2
    tracker = RoundTracker([a, b], num_classes=3)
    logits_a = torch.eye(3)[torch.tensor([0, 0, 1, 0])]          # test: one right, one wrong
    logits_b = torch.eye(3)[torch.tensor([2, 2, 2, 2, 2, 2, 0, 2])]  # test: 4 of 5 right
    e = tracker.evaluate(0, [logits_a, logits_b])
    assert abs(e["test_acc"] - (4 * 0.5 + 8 * 0.8) / 12) < 1e-12  # weighted by node count
    assert abs(e["test_acc_micro"] - 5 / 7) < 1e-12               # pooled over test nodes
    assert abs(e["minority_acc"] - 2 / 4) < 1e-12                 # a: labels 1,1 (1 right); b: labels 0,1 (1 right)
    assert [c["test_correct"] for c in e["per_client"]] == [1, 4]
    summary = tracker.summary()
    assert summary["best_round"] == 0 and summary["per_client"][1]["n_test"] == 5
    assert abs(summary["test_acc_macro"] - (0.5 + 0.8) / 2) < 1e-12      # unweighted mean over clients
    assert abs(summary["minority_acc_macro"] - (1 / 2 + 1 / 2) / 2) < 1e-12  # a: 1 of 2; b: 1 of 2


def test_minority_accuracy_is_split_by_node_homophily_within_the_client_graph():
    # majority training class 0; test nodes 2, 3, 4, 6 all have label 1, so all are minority nodes
    c = client([0, 0, 1, 1, 1, 2, 1], train=[0, 1], test=[2, 3, 4, 6])
    edges = [(0, 2), (2, 4), (3, 5), (6, 6)]  # h: node 2 = 1/2, node 3 = 0, node 4 = 1; node 6 only a self-loop
    c.edge_index = torch.tensor([[a for a, b in edges] + [b for a, b in edges],
                                 [b for a, b in edges] + [a for a, b in edges]])
    tracker = RoundTracker([c], num_classes=3)
    pred = torch.tensor([0, 0, 1, 0, 2, 2, 1])  # node 2 right, 3 wrong, 4 wrong, 6 right
    e = tracker.evaluate(0, [torch.eye(3)[pred]])
    assert e["minority_by_homophily"] == {"low": {"n": 1, "acc": 0.0},       # node 3
                                          "high": {"n": 2, "acc": 0.5},      # nodes 2 (h = 1/2) and 4
                                          "isolated": {"n": 1, "acc": 1.0}}  # node 6
    assert tracker.summary()["minority_by_homophily"] == e["minority_by_homophily"]


def test_clients_without_edges_put_every_minority_node_in_the_isolated_bin():
    tracker = RoundTracker([client([0, 0, 1, 1], train=[0, 1], test=[2, 3])], num_classes=2)
    e = tracker.evaluate(0, [torch.eye(2)[torch.tensor([0, 0, 1, 0])]])
    assert e["minority_by_homophily"]["isolated"] == {"n": 2, "acc": 0.5}
    assert e["minority_by_homophily"]["low"] == {"n": 0, "acc": None}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 2), min_size=1, max_size=12), st.lists(st.tuples(st.integers(0, 11), st.integers(0, 11)),
                                                                     max_size=30))
def test_node_homophily_is_the_share_of_neighbours_with_the_same_label(labels, pairs):
    n = len(labels)
    edges = {(a % n, b % n) for a, b in pairs} | {(b % n, a % n) for a, b in pairs}  # undirected, both ways
    y = torch.tensor(labels)
    edge_index = torch.tensor(sorted(edges), dtype=torch.long).t().reshape(2, -1)
    h = node_homophily(y, edge_index, n)
    for i in range(n):
        neighbours = [a for a, b in edges if b == i and a != i]
        if not neighbours:
            assert bool(h[i].isnan())
        else:
            assert abs(float(h[i]) - sum(labels[a] == labels[i] for a in neighbours) / len(neighbours)) < 1e-12


def split_client(y, train, val, test):
    n = len(y)
    mask = lambda idx: torch.isin(torch.arange(n), torch.tensor(idx, dtype=torch.long))
    return Data(y=torch.tensor(y), train_mask=mask(train), val_mask=mask(val), test_mask=mask(test), num_nodes=n)


def test_the_reported_round_is_chosen_on_validation_never_on_test_and_a_tie_keeps_the_earlier():
    c = split_client([0, 1, 0, 1, 0, 1], train=[0, 1], val=[2, 3], test=[4, 5])
    right, wrong = torch.eye(2)[torch.tensor([0, 1])], torch.eye(2)[torch.tensor([1, 0])]
    rounds = [torch.cat([right, right, wrong]),   # round 0: val 1.0, test 0.0
              torch.cat([right, wrong, right]),   # round 1: val 0.0, test 1.0
              torch.cat([right, right, right])]   # round 2: val 1.0 (a tie with round 0), test 1.0
    for select in ("val_acc", "val_loss"):
        tracker = RoundTracker([c], num_classes=2, select=select)
        for r, logits in enumerate(rounds):
            tracker.evaluate(r, [logits])
        summary = tracker.summary()
        assert (summary["best_round"], summary["test_acc"], summary["last"]["test_acc"]) == (0, 0.0, 1.0), select


def test_macro_f1_is_the_node_weighted_mean_of_the_clients_and_the_pooled_one_beside_it():
    a = client([0, 0, 1, 1], train=[0, 1], test=[2, 3])
    b = client([2, 2, 2, 2, 2, 2, 0, 1], train=[0, 1, 2], test=[3, 4, 5, 6, 7])
    pred_a, pred_b = torch.tensor([0, 0, 1, 0]), torch.tensor([2, 2, 2, 2, 2, 2, 0, 2])
    e = RoundTracker([a, b], num_classes=3).evaluate(0, [torch.eye(3)[pred_a], torch.eye(3)[pred_b]])
    f1 = lambda y, p: f1_score(y, p, labels=[0, 1, 2], average="macro", zero_division=0)
    f1_a, f1_b = f1([1, 1], [1, 0]), f1([2, 2, 2, 0, 1], [2, 2, 2, 0, 2])
    assert abs(e["test_f1_macro"] - (4 * f1_a + 8 * f1_b) / 12) < 1e-12
    assert abs(e["test_f1_macro_micro"] - f1([1, 1, 2, 2, 2, 0, 1], [1, 0, 2, 2, 2, 0, 2])) < 1e-12
