"""Canary clients for DP-FedAvg (Andrew, Kairouz, Oh, Oprea, McMahan, Suriyakumar, "One-shot Empirical
Privacy Estimation for Federated Learning", ICLR 2024).

N canary clients join a DP-FedAvg federation. Canary j has a fixed random unit direction u_j in the
model-update space (dimension d, the runtime's flat layout: fields sorted by name) and is included by
an independent fair coin b_j (the auditor's secret). An included canary that is sampled in a round
(rate q, as every client) uploads scale·C·ς_tj·u_j (norm scale·C ≥ C; ς_tj = ±1 a public per-round sign
from [seed, 0x516, t]): the run's own clip (MessageDP.clip_rows, the clipping every client's upload goes
through) leaves exactly C·ς_tj·u_j (ς_tj = +1 when unsigned: view=final), which joins the round's sum
before the central noise (mode=central) or beside the K clients' noise shares (mode=distributed: the
canaries add no share, so the noise on the sum is the K clients' as accounted). A canary holds no
nodes, never enters accuracy, is not in the server's divisor q·|S| (S the real survivors), and sends no
protocol messages: the sum simply holds its input. One client's sensitivity (C) and the noise are
unchanged, so the accountant's ε is the ε of the mechanism that ran with the canaries.

Directions are sparse and disjoint: `support` coordinates each (default 1: Dirac canaries, as in Nasr
et al. 2023), no coordinate shared by two canaries (a seeded permutation, numpy's PCG64 from
[seed, 0xCA7]), random signs, 1/√support each; so N × support ≤ d, and the directions are exactly
orthonormal: the i.i.d. noise's projections on them are independent N(0, (σC)²), one independent
observation per canary and round. The N × support indices and signs are held, never an N × d matrix.
The public per-round signs make what is constant over the rounds (the real clients' slowly moving
update on u_j's coordinates) add up like noise (√T) in the sign-corrected sum over rounds instead of
coherently (T) like the canary's own C per round.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch

MESSAGE = "model_update"
AUTO_COUNT = 20_000  # canaries when none are asked for (fewer when the model has fewer coordinates)


@dataclass(frozen=True)
class CanaryDirections:
    """N sparse unit directions in dimension d: indices [N, support] (distinct and ascending per row),
    signs [N, support] (±1/√support)."""
    indices: torch.Tensor
    signs: torch.Tensor
    dimension: int

    @classmethod
    def draw(cls, count: int, dimension: int, support: int, seed: int) -> "CanaryDirections":
        """`count` directions from the seed on DISJOINT supports: a seeded permutation of the d
        coordinates cut into blocks of `support` (ascending per row), random signs. Disjoint supports make
        the directions exactly orthonormal, so the projections of i.i.d. noise on them are independent."""
        if count * support > dimension:
            raise ValueError(f"dp-audit: canaries={count} × support={support} exceeds the message's "
                             f"{dimension} coordinates; valid: canaries × support <= {dimension}")
        rng = np.random.default_rng([seed, 0xCA7])
        idx = np.sort(rng.permutation(dimension)[:count * support].reshape(count, support), axis=1)
        signs = rng.integers(0, 2, size=(count, support)) * 2 - 1
        return cls(torch.from_numpy(idx), torch.from_numpy(signs).double() / support ** 0.5, dimension)

    @property
    def count(self) -> int:
        return self.indices.shape[0]

    def combine(self, weights: torch.Tensor) -> torch.Tensor:
        """Σ_j weights[j]·u_j as a dense [d] vector (float64); weights [N] or, per coordinate, [N, support]."""
        w = weights.double()
        values = (w[:, None] if w.ndim == 1 else w) * self.signs
        return torch.zeros(self.dimension, dtype=torch.float64).index_add_(0, self.indices.reshape(-1),
                                                                           values.reshape(-1))

    def project(self, vectors: torch.Tensor) -> torch.Tensor:
        """⟨v_t, u_j⟩ for vectors [T, d] → [T, N] (float64): one sparse (CSR) [N, d] × dense [d, T] product."""
        n, s = self.indices.shape
        with warnings.catch_warnings():  # torch calls its CSR layout beta; the product is checked in the tests
            warnings.simplefilter("ignore", UserWarning)
            u = torch.sparse_csr_tensor(torch.arange(0, n * s + 1, s), self.indices.reshape(-1),
                                        self.signs.reshape(-1), size=(n, self.dimension), check_invariants=True)
            return (u @ vectors.double().T).T


def fair_coins(seed: int, count: int) -> np.ndarray:
    """[count] bool: each canary's independent fair coin ("in"), the auditor's secret (PCG64 from [seed, 0xC01])."""
    return np.random.default_rng([seed, 0xC01]).random(count) < 0.5


def round_signs(seed: int, round: int, count: int) -> np.ndarray:
    """ς_t [N] in {−1, +1}: the canaries' public signs of round t."""
    return np.random.default_rng([seed, 0x516, round]).integers(0, 2, size=count) * 2 - 1


class CanaryClients:
    """The N canary parties of one run (the runtime side): their directions, coins and per-round
    sampling. `coins` [N] bool is the auditor's secret. Every canary is sampled in round t at rate q
    (`sampled[t]` [N] bool, from [seed, 0x5A3, t]), whatever its coin, as every client is; a sampled
    canary whose coin is "in" puts its input in the sum, one whose coin is "out" puts nothing (its data is
    absent: the add/remove neighbour). Who was sampled is what a server sees under `plain`."""

    def __init__(self, count: int | None, seed: int, scale: float, support: int, sample_rate: float,
                 signed: bool = True, message: str = MESSAGE):
        """count None: AUTO_COUNT canaries, or as many as the model's d coordinates hold (d // support),
        fixed at the first sum (d is the model's)."""
        self.seed, self.scale, self.support, self.sample_rate = seed, scale, support, sample_rate
        self.message = message  # the aggregated message whose sums hold the canaries' inputs
        self.signed = signed  # per-round public signs (a final-model statistic needs them all +1)
        self.count, self.coins = None, None
        if count is not None:
            self._resolve(count)
        self.directions: CanaryDirections | None = None  # drawn at the first sum (d is the model's)
        self.sampled: dict[int, np.ndarray] = {}
        # round -> the index of that round's release of `message` in dp.noise_draws (local/distributed: the
        # clients' noise draws, whose coalition sums dp.coalition_noise keeps under that index)
        self.releases: dict[int, int] = {}
        self._rows = None  # (the rows taking part, their flat indices, their signs) of the latest round

    def contribution(self, round: int, dp, dimension: int) -> torch.Tensor:
        """The sum [d] of this round's canary inputs after the run's clip: each taking part sends
        scale·C·u_j, which `dp.clip_rows` clips like any client's upload."""
        if dp is None:
            raise ValueError(f"canary clients need message DP on {self.message} (their inputs are clipped by it)")
        if dp.spec.mode != "central":
            self.releases[round] = len(dp.noise_draws) - 1
        if self.directions is None:
            if self.count is None:
                self._resolve(min(AUTO_COUNT, dimension // self.support))
            self.directions = CanaryDirections.draw(self.count, dimension, self.support, self.seed)
        sampled = np.random.default_rng([self.seed, 0x5A3, round]).random(self.count) < self.sample_rate
        self.sampled[round] = sampled
        rows = np.flatnonzero(self.coins & sampled)
        if self._rows is None or not np.array_equal(rows, self._rows[0]):  # the same rows every round at q = 1
            t = torch.from_numpy(rows)
            self._rows = (rows, self.directions.indices[t].reshape(-1), self.directions.signs[t])
        _, indices, signs = self._rows
        sign = torch.from_numpy(self.signs(round)[rows]).double()
        raw = signs * (sign * (self.scale * dp.spec.clip))[:, None]  # row norm scale·C (distinct coordinates)
        clipped = dp.clip_rows(raw)
        return torch.zeros(dimension, dtype=torch.float64).index_add_(0, indices, clipped.reshape(-1))

    def _resolve(self, count: int) -> None:
        self.count = count
        self.coins = fair_coins(self.seed, count)

    def signs(self, round: int) -> np.ndarray:
        """ς_t [N]: round_signs, or all +1 when unsigned."""
        return round_signs(self.seed, round, self.count) if self.signed else np.ones(self.count, dtype=np.int64)

    def record(self) -> dict:
        """The run record's `canary_clients` block (no coins: they are the audit's secret)."""
        return {"inserted": self.count, "message": self.message, "raw_norm_over_clip": self.scale,
                "support": self.support, "signed": self.signed, "sample_rate": self.sample_rate, "seed": self.seed,
                "note": "canary clients hold no nodes and never enter accuracy; their clipped inputs are in the "
                        "revealed sums (attacks/dp/canary_clients.py)"}
