"""`dp-audit`'s design for LapGraph (`--method lapgraph`; attacks/dp/dp_audit.py picks it): canary pairs in
one client's noisy adjacency.

`--attack dp-audit[:canaries=N,client=k,seed=S,confidence=p]` (defaults 20000, 0, 0, 0.95).

Canaries. 2N canary nodes are appended to client k's matrix as N disjoint pairs; pair j's entry is the
auditor's secret fair coin c_j (edge or not). One canary edge changes one entry by 1, the stated L1
sensitivity. The N entries are noised in the same draw as the client's real triangle (privfgl/methods/
lapgraph/release.py) and never enter the count, the selection, training or accuracy; the canary nodes'
other entries are 0 and their noise, never read by anything, is not drawn.

Whose view. In a LapGraph run the server sees FedAvg uploads: post-processing of each client's released
graph (and of its features and labels). The audit gives the adversary the noisy entries themselves, the
strongest view the guarantee covers: the audited client sends them to the server as "lapgraph_release",
and the attack reads them from the server's view; a bound from this view bounds every post-processing.

Score: the released canary entry. Bound: Steinke, Nasr, Jagielski (NeurIPS 2023) one-run 95 % lower bound
on ε (estimators.one_run_epsilon, δ = 0), its k guesses each way fixed before any score is read, by
simulating the claimed mechanism (coin + Lap(1/ε_entries), public seed). The entries are ε_entries-DP, so
a valid bound is ≤ ε_entries ≤ ε (the record's ε); `caught` compares it with the record's ε.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from attacks.base import Attack, Knowledge, NoInput
from attacks.dp.canary_clients import fair_coins
from attacks.dp.estimators import guess_counts, one_run_epsilon
from attacks.dp.params import check_canaries_and_client, confidence_level
from attacks.dp.scoring import BASELINE, K_FRACTIONS, verdict
from attacks.view import AdversaryView

MESSAGE = "lapgraph_release"


class CanaryPairs:
    """The N canary pairs of one run (runtime side): `coins` [N] bool is the auditor's secret; the count and
    the client whose matrix they join are public."""

    def __init__(self, count: int, seed: int, client: int = 0):
        self.count, self.seed, self.client = count, seed, client
        self.coins = fair_coins(seed, count)

    def entries(self) -> torch.Tensor:
        """[N] float64: the pairs' 0/1 adjacency entries before the noise."""
        return torch.from_numpy(self.coins.astype(np.float64))


@dataclass(frozen=True)
class PairAuditAux:
    count: int  # public: how many canary entries the release carries
    epsilon_entries: float  # the claim the guess counts are chosen against (public: in the record)


@dataclass(frozen=True)
class PairAuditTruth:
    coins: np.ndarray
    epsilon_accountant: float
    epsilon_entries: float


def pick_k_laplace(m: int, epsilon: float, confidence: float) -> int:
    """The k (guesses each way) that maximises the one-run bound at the mean correct count of four simulated
    games of the claimed mechanism (coin + Lap(1/ε), seeded: public, fixed before any real score)."""
    ks = sorted({max(1, int(m * f)) for f in K_FRACTIONS if 2 * max(1, int(m * f)) <= m}) or [max(1, m // 2)]
    rng = np.random.default_rng(0x1A9)
    games = []
    for _ in range(4):
        c = rng.random(m) < 0.5
        games.append((c + rng.laplace(0.0, 1.0 / epsilon, m), c))

    def expected(k: int) -> float:
        v = round(float(np.mean([guess_counts(s, c, k, k)[1] for s, c in games])))
        return one_run_epsilon(m, 2 * k, v, 0.0, confidence)
    return max(ks, key=expected)


class CanaryPairAudit(Attack):
    """`dp-audit` on LapGraph: canary pairs in one client's noisy adjacency."""

    name = "dp-audit"

    @staticmethod
    def fits(setup, method: str) -> bool:
        return method == "lapgraph"

    def __init__(self, canaries: int = 20000, client: int = 0, seed: int = 0, confidence: float | str = 0.95):
        check_canaries_and_client(canaries, client)
        self.canaries, self.client, self.seed = canaries, client, seed
        self.confidence = confidence_level(confidence)
        self.pairs: CanaryPairs | None = None

    def prepare(self, setup, method: str) -> None:
        if self.client >= len(setup.clients):
            raise ValueError(f"dp-audit: client={self.client}; valid: 0..{len(setup.clients) - 1}")
        self.pairs = CanaryPairs(self.canaries, self.seed, self.client)
        setup.extras["lapgraph_canaries"] = self.pairs

    def targets(self, view: AdversaryView, knowledge: Knowledge, num_clients: int) -> list[str]:
        return ["canaries"]

    def declare_aux(self, setup, knowledge: Knowledge, target: str) -> PairAuditAux:
        if self.pairs is None:
            raise NoInput("dp-audit: no canary pairs took part (prepare was not called before the run)")
        return PairAuditAux(self.pairs.count, float(setup.extras["dp"].report()["dp"]["epsilon_entries"]))

    def attack(self, view: AdversaryView, aux: PairAuditAux) -> np.ndarray:
        """scores [N]: the noisy canary entries in the server's view."""
        found = [m for m in view.find(MESSAGE) if m.tensors is not None]
        if len(found) != 1:
            raise NoInput(f"dp-audit: {len(found)} {MESSAGE} messages in the {view.party}'s view, expected 1")
        scores = found[0].tensors["canary_entries"].double().numpy()
        if scores.shape != (aux.count,):
            raise NoInput(f"dp-audit: {scores.shape} canary entries, expected ({aux.count},)")
        return scores

    def truth(self, setup, target: str) -> PairAuditTruth:
        report = setup.extras["dp"].report()
        return PairAuditTruth(self.pairs.coins.copy(), float(report["epsilon"]), float(report["dp"]["epsilon_entries"]))

    def score(self, scores: np.ndarray, truth: PairAuditTruth, aux: PairAuditAux) -> tuple[dict, dict]:
        m, conf = len(truth.coins), self.confidence
        k = pick_k_laplace(m, aux.epsilon_entries, conf)
        r, v = guess_counts(scores, truth.coins, k, k)
        bound = one_run_epsilon(m, r, v, 0.0, conf)
        metrics = {"epsilon_lower_bound": bound, "epsilon_accountant": truth.epsilon_accountant,
                   "epsilon_entries": truth.epsilon_entries, "confidence": conf, "estimator": "one_run (delta = 0)",
                   "canaries": m, "canaries_in": int(truth.coins.sum()), "one_run_k": k,
                   "one_run_correct": f"{v}/{r}", "delta": 0.0,
                   "bound_over_entries": bound / truth.epsilon_entries, **verdict(bound, truth.epsilon_accountant)}
        return metrics, dict(BASELINE)
