"""Gradient canaries for node-level DP-SGD (privfgl/privacy/dpsgd.py), after the Dirac gradient canaries of
Nasr, Hayes, Steinke, Balle, Tramèr, Jagielski, Carlini and Terzis, "Tight Auditing of Differentially
Private Machine Learning", USENIX Security 2023, sized to the node-level sensitivity.

N canaries join ONE client's per-node gradients, every local step, before the clip. Canary j has a unit
direction u_j in the flat parameter space (CanaryDirections: `support` coordinates, default 1, a Dirac;
DISJOINT supports, so the i.i.d. noise's projections on them are independent), an independent fair coin
b_j (the auditor's secret) and a public sign ς_tj = ±1 per round (round_signs; constant over the round's
local steps, so that what stays the same over rounds adds up like noise; all +1 when `signed` is False, the
audit's choice under Adam, whose momentum then accumulates the canary's constant push). Per step it puts in
- b_j = in:  N_D per-node gradients equal to +ς_tj·Λ·u_j (Λ = scale·C ≥ C: clipped to +ς_tj·C·u_j);
- b_j = out: N_D − 1 per-node gradients equal to −ς_tj·Λ·u_j (clipped to −ς_tj·C·u_j),
N_D = influence_count(D, k). The clipped sums of the two worlds differ by (2N_D − 1)·C·ς_tj·u_j = Δ·ς_tj·u_j,
Δ = node_sensitivity(C, D, k): exactly the sensitivity the noise is calibrated to, along u_j.

Which neighbouring pair this stands for. dpsgd.py's analysis of removing a node w (no refill): w's own
clipped gradient (≤ C) disappears and each of the ≤ N_D − 1 other gradients within its k hops moves by at
most 2C (from +C·u to −C·u at worst); nothing else moves. The in-world is w present with itself and its
N_D − 1 neighbours' gradients at +C·u; the out-world is w removed, those N_D − 1 gradients now at −C·u.
It is the worst case the sensitivity analysis allows (the bound is attained), realised directly as
per-node gradients rather than through a graph whose GCN gradients happen to flip: the claim audited is
"the released sum of clipped per-node gradients + N(0, (σΔ)²) is (μ = 1/σ)-GDP per step against a change
of at most Δ", the accountant's claim. A canary smaller than Δ (e.g. one node's C) can never make the audit
tight. The canaries hold no nodes, are not in the step's divisor (the client's public count of training
nodes), never enter accuracy, and leave Δ and the noise as accounted.

The raw norm Λ > C makes the clip do work: without the per-node clip (or with the clip applied to the
summed or mean gradient instead) the canaries' Λ·u_j reach the sum, and the audit sees the larger shift.
Only N × support × 2N_D (index, value) pairs are held (clipped_sum clips sparse rows), never dense rows.
"""
from __future__ import annotations

import numpy as np
import torch

from attacks.dp.canary_clients import CanaryDirections, round_signs

Layout = list[tuple[str, int]]  # (parameter name, numel) in a flat vector's order


def sorted_to(layout: Layout) -> torch.Tensor:
    """For each coordinate of the runtime's flat layout (fields sorted by name, federation.runtime.flatten),
    its position in `layout`'s order: int64 [d]."""
    offsets, at = {}, 0
    for name, size in layout:
        offsets[name] = at
        at += size
    return torch.cat([torch.arange(size) + offsets[name] for name, size in sorted(layout)])


class GradientCanaries:
    """The N gradient canaries of one run (the runtime side): directions in the runtime's sorted flat
    layout (what the adversary's upload vectors use), coins [N] bool (the auditor's secret), and each
    round's sparse per-node rows for private_gradient. `client`: the audited client's index."""

    def __init__(self, count: int, seed: int, scale: float, support: int, client: int, slots: int, clip: float,
                 signed: bool = True):
        self.count, self.seed, self.scale, self.support, self.client = count, seed, scale, support, client
        self.signed = signed  # public per-round signs (False: every ς_tj = +1)
        self.slots, self.clip = slots, clip  # N_D: in-world rows per canary (N_D − 1 in the out-world)
        self.coins = np.random.default_rng([seed, 0xC02]).random(count) < 0.5
        self.directions: CanaryDirections | None = None  # drawn at the first step (d is the model's)
        self.layout: Layout | None = None
        self._base: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None

    def rows(self, round: int, layout: Layout) -> tuple[torch.Tensor, torch.Tensor]:
        """This round's canary per-node gradients in `layout`'s flat order (private_gradient's): indices
        [R, support], values [R, support] (row norm Λ = scale·C), R = N_D·#in + (N_D − 1)·#out."""
        if self._base is None:
            self.layout = list(layout)
            d = sum(size for _, size in layout)
            self.directions = CanaryDirections.draw(self.count, d, self.support, self.seed)
            copies = np.where(self.coins, self.slots, self.slots - 1)
            owner = torch.from_numpy(np.repeat(np.arange(self.count), copies))
            world = torch.from_numpy(np.where(self.coins, 1.0, -1.0))[owner]
            indices = sorted_to(self.layout)[self.directions.indices[owner]]
            self._base = (owner, indices, world[:, None] * self.directions.signs[owner] * self.scale * self.clip)
        owner, indices, values = self._base
        sign = torch.from_numpy(self.signs(round)).double()[owner]
        return indices, values * sign[:, None]

    def signs(self, round: int) -> np.ndarray:
        """ς_t [N]: round_signs, or all +1 when unsigned."""
        return round_signs(self.seed, round, self.count) if self.signed else np.ones(self.count, dtype=np.int64)

    def record(self) -> dict:
        """The run record's `gradient_canaries` block (no coins: they are the audit's secret)."""
        return {"inserted": self.count, "client": self.client, "rows_in": self.slots, "rows_out": self.slots - 1,
                "raw_norm_over_clip": self.scale, "support": self.support, "signed": self.signed, "seed": self.seed,
                "note": "per-node gradients of one client, before the clip, every step; they hold no nodes and "
                        "never enter accuracy (attacks/dp/gradient_canaries.py)"}


def sgd_released_sum(w0: torch.Tensor, w1: torch.Tensor, n_train: float, lr: float, weight_decay: float,
                     local_epochs: int) -> tuple[torch.Tensor, float]:
    """What a server recovers from one round of E plain-SGD steps on ĝ_s = (noisy clipped sum)_s / n (n: the
    step's public denominator, q·n under Poisson sampling):
    w_E = a^E·w_0 − lr·Σ_s a^{E−1−s}·ĝ_s with a = 1 − lr·weight_decay, so Σ_s a^{E−1−s}·(noisy sum)_s =
    n·(a^E·w_0 − w_E)/lr (same shape as w0, w1: [..., P]). Also returns A = Σ_s a^s, the factor on a
    canary's constant per-step contribution."""
    a = 1.0 - lr * weight_decay
    big_a = sum(a ** s for s in range(local_epochs))
    return n_train * (a ** local_epochs * w0 - w1) / lr, big_a

