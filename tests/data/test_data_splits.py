"""Stratified node splits: floor counts per class, disjoint, seeded."""

from __future__ import annotations

import pytest
import torch

from privfgl.data import (
    SPLIT_DEFAULTS, DataError, client_subgraphs, partition_nodes, split_clients, stratified_split,
)


def class_counts(y, mask, num_classes):
    return torch.bincount(y[mask], minlength=num_classes)


@pytest.mark.parametrize("ratios", [SPLIT_DEFAULTS["opfgl"], SPLIT_DEFAULTS["fedspray"],
                                    SPLIT_DEFAULTS["fedomd"], (0.5, 0.0, 0.0), (0.0, 0.0, 1.0)])
def test_floor_counts_per_class(cora, ratios):
    train, val, test = ratios
    masks = stratified_split(cora.y, train, val, test, seed=0)
    assert all(m.dtype == torch.bool and m.shape == (cora.num_nodes,) for m in masks)
    assert ((masks[0].int() + masks[1].int() + masks[2].int()) <= 1).all()  # disjoint
    n = torch.bincount(cora.y, minlength=7)
    expect_train = torch.tensor([int(v * train) for v in n.tolist()])
    expect_val = torch.tensor([int(v * val) for v in n.tolist()])
    if abs(train + val + test - 1) < 1e-9:
        expect_test = n - expect_train - expect_val
    else:
        expect_test = torch.tensor([int(v * test) for v in n.tolist()])
    assert torch.equal(class_counts(cora.y, masks[0], 7), expect_train)
    assert torch.equal(class_counts(cora.y, masks[1], 7), expect_val)
    assert torch.equal(class_counts(cora.y, masks[2], 7), expect_test)


def test_fedomd_ratios_leave_nodes_unassigned(cora):
    masks = stratified_split(cora.y, *SPLIT_DEFAULTS["fedomd"], seed=0)
    assigned = (masks[0] | masks[1] | masks[2]).sum().item()
    assert 0.38 * cora.num_nodes < assigned < 0.41 * cora.num_nodes


def test_seeded(cora):
    a = stratified_split(cora.y, 0.2, 0.4, 0.4, seed=3)
    b = stratified_split(cora.y, 0.2, 0.4, 0.4, seed=3)
    c = stratified_split(cora.y, 0.2, 0.4, 0.4, seed=4)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not torch.equal(a[0], c[0])


def test_split_clients(cora):
    subs = client_subgraphs(cora, partition_nodes(cora, "metis", 4, seed=0))
    split_clients(subs, 0.4, 0.3, 0.3, seed=0)
    for sub in subs:
        n = torch.bincount(sub.y, minlength=7)
        expect = torch.tensor([int(v * 0.4) for v in n.tolist()])
        assert torch.equal(class_counts(sub.y, sub.train_mask, 7), expect)
        assert (sub.train_mask | sub.val_mask | sub.test_mask).all()
        assert not (sub.train_mask & sub.test_mask).any()
    first = [s.train_mask.clone() for s in subs]
    split_clients(subs, 0.4, 0.3, 0.3, seed=0)
    assert all(torch.equal(a, s.train_mask) for a, s in zip(first, subs))
    split_clients(subs, 0.4, 0.3, 0.3, seed=1)  # another run seed, other masks (a seed sweep's std means something)
    assert not any(torch.equal(a, s.train_mask) for a, s in zip(first, subs))
    # Clients draw independently: equal label vectors would still get different masks.
    twins = client_subgraphs(cora, [torch.arange(100), torch.arange(100)])
    split_clients(twins, 0.5, 0.5, 0.0, seed=0)
    assert not torch.equal(twins[0].train_mask, twins[1].train_mask)


@pytest.mark.parametrize("ratios, match", [
    ((0.6, 0.3, 0.2), "sum to 1.1; they must sum to at most 1"),
    ((-0.1, 0.5, 0.5), "train=-0.1: must be a finite number >= 0"),
    ((0.0, 0.0, 0.0), "all 0"),
    ((0.2, float("nan"), 0.2), "val=nan"),
])
def test_bad_ratios(cora, ratios, match):
    with pytest.raises(DataError, match=match):
        stratified_split(cora.y, *ratios, seed=0)


def test_float_labels_rejected():
    with pytest.raises(DataError, match="integer label tensor"):
        stratified_split(torch.zeros(5), 0.5, 0.5, 0.0, seed=0)
