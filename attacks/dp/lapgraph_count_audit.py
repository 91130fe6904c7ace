"""dp-audit of LapGraph's noisy edge count, the ε_count part of its ε (auditor side: from the released
counts and the coins to the bound).

A client's count is one scalar a run, so one run cannot audit it; the design is N independent releases of
one public graph through the real release (privfgl/methods/lapgraph/release.py; the runner is
experiments/lapgraph_count_audit.py). Release d holds the canary edge {u, v}, a non-edge of the graph, when
the auditor's secret fair coin c_d is in: |E| moves by 1, the count's L1 sensitivity, and one entry of the
triangle by 1. What the adversary reads is what release d publishes: its number of edges T̃_d (the rounded,
clipped noisy count; post-processing of it). Score: T̃_d. Bound: Steinke, Nasr, Jagielski (NeurIPS 2023)
one-run 95 % lower bound at δ = 0 over the N draws (independent releases, each one canary), its k guesses each
way fixed before any score by simulating the claimed count mechanism (coin + Lap(1/ε_count)), as
attacks/dp/lapgraph_audit.py does for the entries. The count is ε_count-DP, so a valid bound is ≤ ε_count;
`caught` compares it with ε_count, not with the record's whole ε. `family` m > 1: the family's bound and
verdict as attacks/dp/dp_audit.py's `family=m` gives them (`family_metrics`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attacks.dp.dp_audit import family_metrics
from attacks.dp.estimators import guess_counts, one_run_epsilon
from attacks.dp.lapgraph_audit import pick_k_laplace
from attacks.dp.scoring import BASELINE, verdict


@dataclass
class CountAudit:
    """The count's scoring at `confidence` (a design's `score` contract, so `family_metrics` applies)."""
    confidence: float = 0.95

    def score(self, released_counts: np.ndarray, coins: np.ndarray, epsilon_count: float) -> tuple[dict, dict]:
        """released_counts [N] (edges each release published), coins [N] bool (the canary edge in)."""
        m = len(coins)
        if released_counts.shape != (m,):
            raise ValueError(f"count audit: {released_counts.shape} released counts for {m} coins")
        k = pick_k_laplace(m, epsilon_count, self.confidence)
        r, v = guess_counts(released_counts.astype(np.float64), coins, k, k)
        bound = one_run_epsilon(m, r, v, 0.0, self.confidence)
        return ({"epsilon_lower_bound": bound, "epsilon_count": epsilon_count, "releases": m, "one_run_k": k,
                 "one_run_correct": f"{v}/{r}", "confidence": self.confidence, **verdict(bound, epsilon_count)},
                dict(BASELINE))


def count_audit(released_counts: np.ndarray, coins: np.ndarray, epsilon_count: float,
                confidence: float = 0.95, family: int = 1) -> dict:
    """The count's bound and its verdict against `epsilon_count`; with `family` > 1 also the family's."""
    audit = CountAudit(confidence)
    metrics, _ = audit.score(released_counts, coins, epsilon_count)
    if family > 1:
        metrics |= family_metrics(audit, metrics, released_counts, coins, epsilon_count, family)
    return metrics
