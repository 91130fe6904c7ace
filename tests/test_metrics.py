"""Metrics follow the papers' conventions (sklearn macro-F1 over all classes; weighted means)."""
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import f1_score

from privfgl.metrics import aggregate_metrics, client_metrics, confusion, macro_f1


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 8), st.lists(st.tuples(st.integers(0, 7), st.integers(0, 7)), min_size=1, max_size=60))
def test_macro_f1_equals_sklearn_over_all_classes(num_classes, pairs):
    y = torch.tensor([a % num_classes for a, _ in pairs])
    pred = torch.tensor([b % num_classes for _, b in pairs])
    expected = f1_score(y.numpy(), pred.numpy(), labels=list(range(num_classes)), average="macro", zero_division=0)
    assert abs(macro_f1(confusion(pred, y, num_classes)) - expected) < 1e-9


def test_absent_classes_count_as_zero_f1():
    y = torch.tensor([0, 0, 1, 1])
    assert macro_f1(confusion(y, y, 2)) == 1.0
    assert macro_f1(confusion(y, y, 4)) == 0.5  # two of four classes never occur


def test_client_metrics_and_minority_accuracy():
    logits = torch.eye(3)[torch.tensor([0, 0, 1, 2, 2])]
    y = torch.tensor([0, 1, 1, 2, 0])
    m = client_metrics(logits, y, torch.ones(5, dtype=torch.bool), 3, majority_class=0)
    assert m["acc"] == 3 / 5
    assert (m["n_minority"], m["minority_correct"]) == (3, 2)  # labels 1, 1, 2: two right


def test_aggregation_is_weighted_and_pooled():
    a = client_metrics(torch.eye(2)[torch.tensor([0, 0])], torch.tensor([0, 0]), torch.ones(2, dtype=torch.bool), 2)
    b = client_metrics(torch.eye(2)[torch.tensor([0, 0, 0, 0])], torch.tensor([1, 1, 1, 1]),
                       torch.ones(4, dtype=torch.bool), 2)
    assert aggregate_metrics([a, b])["acc"] == 2 / 6
    assert aggregate_metrics([a, b], weights=[1, 1])["acc"] == 0.5
