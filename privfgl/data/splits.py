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


def split_clients(subgraphs: list[Data], train: float, val: float, test: float, seed: int) -> None:
    """Set train_mask/val_mask/test_mask on each client's Data (in place).

    Client k is split with a seed derived from (seed, k), so clients draw independently.
    """
    for k, sub in enumerate(subgraphs):
        client_seed = int(np.random.SeedSequence([int(seed), k]).generate_state(1)[0])
        sub.train_mask, sub.val_mask, sub.test_mask = stratified_split(sub.y, train, val, test, client_seed)
