"""Stratified train/val/test node splits, globally or per client."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data

from privfgl.data.errors import DataError

# method -> (train, val, test) fractions used by its paper.
SPLIT_DEFAULTS: dict[str, tuple[float, float, float]] = {
    "opfgl": (0.2, 0.4, 0.4),
    "fedavg": (0.2, 0.4, 0.4),
    "fedspray": (0.4, 0.3, 0.3),
    "fedlog": (0.4, 0.3, 0.3),
    "fedomd": (0.01, 0.2, 0.2),
}

_EPS = 1e-9


def stratified_split(
    y: Tensor, train: float, val: float, test: float, seed: int,
) -> tuple[Tensor, Tensor, Tensor]:
    """Seeded per-class random split into disjoint bool masks (train, val, test), each [N].

    Per class of n nodes (shuffled): the first int(n * train) are train, the next int(n * val)
    are val. If the ratios sum to 1 the rest is test (as the O-pFGL authors' code); otherwise
    the next int(n * test) are test and the remaining nodes are in no mask.
    """
    ratios = {"train": train, "val": val, "test": test}
    for k, r in ratios.items():
        if isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r) or r < 0:
            raise DataError(f"split ratio {k}={r!r}: must be a finite number >= 0")
    total = train + val + test
    if total > 1 + _EPS:
        raise DataError(f"split ratios train={train}, val={val}, test={test} sum to {total:g}; "
                        "they must sum to at most 1")
    if total == 0:
        raise DataError("split ratios train, val, test are all 0; at least one must be > 0")
    if y.dim() != 1 or y.dtype.is_floating_point:
        raise DataError(f"y must be an integer label tensor of shape [N], got {y.dtype} {tuple(y.shape)}")
    rest_to_test = abs(total - 1) <= _EPS

    g = torch.Generator().manual_seed(int(seed))
    masks = [torch.zeros(y.numel(), dtype=torch.bool) for _ in range(3)]
    for c in torch.unique(y).tolist():
        idx = torch.nonzero(y == c).view(-1)
        idx = idx[torch.randperm(idx.numel(), generator=g)]
        n = idx.numel()
        n_train, n_val = int(n * train), int(n * val)
        n_test = n - n_train - n_val if rest_to_test else int(n * test)
        bounds = np.cumsum([0, n_train, n_val, n_test])
        for mask, lo, hi in zip(masks, bounds[:-1], bounds[1:]):
            mask[idx[lo:hi]] = True
    return masks[0], masks[1], masks[2]


def random_split(
    num_nodes: int, train: float, val: float, test: float, seed: int, min_train: int = 1,
) -> tuple[Tensor, Tensor, Tensor]:
    """Seeded random (not stratified) split of num_nodes nodes into disjoint bool masks [N].

    Of the shuffled nodes the first max(min(min_train, N), int(N * train)) are train, the next
    int(N * val) val, then int(N * test) test (all the rest when the ratios sum to 1). FedOMD's
    1%/20%/20% split (spec B5 #10): a per-class int() would give most classes of a small client
    no training node, so the ratio applies to the client's nodes, with at least `min_train`.
    """
    stratified_split(torch.zeros(max(int(num_nodes), 1), dtype=torch.long), train, val, test, seed)  # validates
    n = int(num_nodes)
    g = torch.Generator().manual_seed(int(seed))
    idx = torch.randperm(n, generator=g)
    n_train = max(min(int(min_train), n), int(n * train))
    n_val = min(int(n * val), n - n_train)
    n_test = n - n_train - n_val if abs(train + val + test - 1) <= _EPS else min(int(n * test), n - n_train - n_val)
    masks = [torch.zeros(n, dtype=torch.bool) for _ in range(3)]
    bounds = np.cumsum([0, n_train, n_val, n_test])
    for mask, lo, hi in zip(masks, bounds[:-1], bounds[1:]):
        mask[idx[lo:hi]] = True
    return masks[0], masks[1], masks[2]


SPLIT_MODES = ("stratified", "random")


def split_clients(subgraphs: list[Data], train: float, val: float, test: float, seed: int,
                  mode: str = "stratified") -> None:
    """Set train_mask/val_mask/test_mask on each client's Data (in place).

    Client k is split with a seed derived from (seed, k), so clients draw independently.
    mode: "stratified" (per class, `stratified_split`) or "random" (`random_split`, at least one
    training node per client).
    """
    if mode not in SPLIT_MODES:
        raise DataError(f"unknown split mode {mode!r}; valid: {', '.join(SPLIT_MODES)}")
    for k, sub in enumerate(subgraphs):
        client_seed = int(np.random.SeedSequence([int(seed), k]).generate_state(1)[0])
        if mode == "random":
            sub.train_mask, sub.val_mask, sub.test_mask = random_split(sub.num_nodes, train, val, test, client_seed)
        else:
            sub.train_mask, sub.val_mask, sub.test_mask = stratified_split(sub.y, train, val, test, client_seed)
    for name, what in (("train", "training"), ("val", "validation"), ("test", "test")):
        if not any(bool(getattr(sub, f"{name}_mask").any()) for sub in subgraphs):
            hint = ", or --split-mode random (at least one training node per client)" \
                if name == "train" and mode == "stratified" else ""
            raise DataError(f"split {train:g},{val:g},{test:g} leaves every client with no {what} node ({mode}, per "
                            f"client{' and class' if mode == 'stratified' else ''}); valid: larger ratios (e.g. "
                            f"0.2,0.4,0.4){hint}")
