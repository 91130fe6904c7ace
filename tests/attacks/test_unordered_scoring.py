"""The scorers of unordered reconstructions: every target row gets its own reconstructed row, a target
left without one counts as wrong, and the baseline gets the same matching."""
import pytest
import torch

from attacks.uploads.metrics import matched_sample_baseline, unordered_scores

X = torch.tensor([[1, 1, 0, 0, 0, 0], [0, 0, 1, 1, 0, 0], [0, 0, 0, 0, 1, 1]], dtype=torch.float32)
Y = torch.tensor([0, 1, 2])


def test_a_shuffled_exact_reconstruction_scores_perfectly():
    order = torch.tensor([2, 0, 1])
    m = unordered_scores(X[order], Y[order], X, Y)
    assert m["auc_per_feature"] == 1.0 and m["label_acc"] == 1.0 and m["matched_rows"] == 3


def test_labels_play_no_part_in_the_matching():
    m = unordered_scores(X, torch.tensor([1, 2, 0]), X, Y)
    assert m["auc_per_feature"] == 1.0 and m["label_acc"] == 0.0


def test_a_target_left_without_a_row_is_a_wrong_label_and_an_empty_row():
    m = unordered_scores(X[:2], Y[:2], X, Y)  # two rows for three targets
    assert m["matched_rows"] == 2 and abs(m["label_acc"] - 2 / 3) < 1e-12 and m["cosine"] < 1.0
    empty = unordered_scores(torch.zeros(0, 6), torch.zeros(0, dtype=torch.long), X, Y)
    assert empty["matched_rows"] == 0 and empty["label_acc"] == 0.0


def test_extra_rows_do_not_help_the_baseline_past_the_reconstruction():
    prior = torch.full((6,), 1 / 3)
    base = matched_sample_baseline(prior, rows=3, true_x=X, seed=0)
    assert base["matched_rows"] == 3 and base["auc_per_feature"] < 1.0
    many = matched_sample_baseline(prior, rows=200, true_x=X, seed=0)  # the matching picks lucky draws
    assert many["auc_per_feature"] >= base["auc_per_feature"]


def test_split_feature_rows_are_scored_against_the_population_mean_and_reidentified_by_their_own_entry():
    from attacks.split.split_features import score_rows
    true = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 2.0]])  # row 2: the prompt's
    prior = torch.tensor([1.0, 1.0, 0.0])
    rows = torch.tensor([[1.0, 0.0, 0.0], [0.0, -1.0, 0.0], [0.6, 0.0, 0.8], [0.0, 0.6, 0.8]])  # unit rows
    ids = torch.tensor([0, 1, 0, 2])
    own = torch.tensor([[1.0, 0, 0], [0, 1, 0], [0, 0, 0], [0, 0, 1]])  # similarity [rows, 3 dictionary entries]
    metrics, baseline = score_rows(rows, true, prior, own, ids)
    assert metrics["rows_scored"] == 3 and metrics["cosine"] == pytest.approx((1 + 1 + 0.8) / 3)  # |cos|, up to sign
    assert baseline["cosine"] == pytest.approx((2 ** -0.5 + 2 ** -0.5 + 0) / 3)  # the population mean's |cos|
    assert (metrics["reid_top1"], metrics["reid_auc"]) == (1.0, 1.0)  # each row's own entry is its most similar
    shuffled = own[:, [2, 0, 1]]  # every row's most similar entry is another's
    wrong, _ = score_rows(rows, true, prior, shuffled, ids)
    assert wrong["reid_top1"] == 0.0 and (baseline["reid_top1"], baseline["reid_auc"]) == (1 / 3, 0.5)
