"""`dp-audit`'s design for GAP (`--method gap`; attacks/dp/dp_audit.py picks it): canary edges
(attacks/dp/canary_edges.py) in one client's K hop releases.

`--attack dp-audit[:canaries=N,client=k,seed=S,confidence=p]` (defaults 5000, 0, 0, 0.95).

Whose view. In a GAP run the server sees the encoder's and the classifier's uploads only: post-processing
of each client's released hop sums H_1..H_K (and of its features and labels). The audit gives the adversary
the release itself, the strongest view the guarantee covers: when audited, client k sends its released
sums (its real rows and the canary rows, noised together) to the server as message "gap_release", and the
attack reads them from the server's view. A bound from this view bounds every post-processing of it.

Statistic: o_kj per hop (canary_edges.py), 1 + N(0, σ²) for an included canary, N(0, σ²) otherwise;
score Σ_k o_kj − K/2. `epsilon_lower_bound` is the per-hop bound (estimators.per_step_bound: threshold
1/2 fixed by the design, Clopper-Pearson, composed over the K hops as μ-GDP steps), valid against the
accountant's claim of K identical Gaussian releases at rate 1. The one-run, f-DP, split-half and
Bonferroni bounds on the scores are beside it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attacks.base import Attack, Knowledge, NoInput
from attacks.dp.canary_edges import CanaryEdges
from attacks.dp.estimators import per_step_bound
from attacks.dp.params import check_canaries_and_client, confidence_level
from attacks.dp.scoring import BASELINE, per_round_metrics, score_bounds, verdict
from attacks.view import AdversaryView
from privfgl.privacy.accounting import gaussian_epsilon

MESSAGE = "gap_release"


@dataclass(frozen=True)
class EdgeAuditAux:
    edges: CanaryEdges  # the public design (cells, client); its coins are not read by the attack
    hops: int


@dataclass(frozen=True)
class EdgeAuditTruth:
    coins: np.ndarray
    epsilon_accountant: float
    delta: float
    hops: int
    epsilon_hops: float  # the accountant's ε for the K hop releases alone (= epsilon_accountant at edge level)


class CanaryEdgeAudit(Attack):
    """`dp-audit` on GAP: canary edges in one client's noisy hop sums."""

    name = "dp-audit"

    @staticmethod
    def fits(setup, method: str) -> bool:
        """GAP with hops to audit (the node-level DP-MLP, hops=0, goes to gap_step_audit.py)."""
        from privfgl.methods.gap.params import resolve_params
        p = resolve_params(setup.method.params) if method == "gap" else None
        return p is not None and not (p.unit == "node" and p.hops == 0)

    def __init__(self, canaries: int = 5000, client: int = 0, seed: int = 0, confidence: float | str = 0.95):
        check_canaries_and_client(canaries, client)
        confidence = confidence_level(confidence)
        self.canaries, self.client, self.seed, self.confidence = canaries, client, seed, confidence
        self.edges: CanaryEdges | None = None

    def prepare(self, setup, method: str) -> None:
        from privfgl.methods.gap.params import resolve_params
        p = resolve_params(setup.method.params)
        if p.hops == 0:
            raise ValueError("dp-audit: gap with hops=0 releases nothing about the edges; valid: hops >= 1")
        if self.client >= len(setup.clients):
            raise ValueError(f"dp-audit: client={self.client}; valid: 0..{len(setup.clients) - 1}")
        rows = p.degree if p.unit == "node" else 2 if p.edge == "undirected" else 1
        self.edges = CanaryEdges(self.canaries, self.seed, setup.model.hidden, rows, self.client)
        setup.extras["gap_canaries"] = self.edges
        self.hops = p.hops

    def targets(self, view: AdversaryView, knowledge: Knowledge, num_clients: int) -> list[str]:
        return ["canaries"]

    def declare_aux(self, setup, knowledge: Knowledge, target: str) -> EdgeAuditAux:
        if self.edges is None:
            raise NoInput("dp-audit: no canary edges took part (prepare was not called before the run)")
        return EdgeAuditAux(self.edges, self.hops)

    def attack(self, view: AdversaryView, aux: EdgeAuditAux) -> tuple[np.ndarray, np.ndarray]:
        """(scores [N], per-hop observations [K, N]) from the released sums in the view."""
        found = [m for m in view.find(MESSAGE) if m.tensors is not None]
        if len(found) != 1:
            raise NoInput(f"dp-audit: {len(found)} {MESSAGE} messages in the {view.party}'s view, expected 1")
        sums = found[0].tensors
        per_hop = np.stack([aux.edges.observe(sums[f"hop{k}"]) for k in range(1, aux.hops + 1)])
        return per_hop.sum(0) - aux.hops / 2, per_hop

    def truth(self, setup, target: str) -> EdgeAuditTruth:
        report = setup.extras["dp"].report()
        dp = report["dp"]
        hops_only = gaussian_epsilon([(dp["sigma"], 1.0, dp["hops"])], report["delta"], report["accountant"])
        return EdgeAuditTruth(self.edges.coins.copy(), float(report["epsilon"]), float(report["delta"]),
                              int(dp["hops"]), hops_only)

    def score(self, rec, truth: EdgeAuditTruth, aux: EdgeAuditAux) -> tuple[dict, dict]:
        scores, per_hop = rec
        c, delta, conf = truth.coins, truth.delta, self.confidence
        bounds, score_metrics = score_bounds(scores, c, truth.epsilon_hops, delta, conf, self.seed)
        stat_in, stat_out = per_hop[:, c].reshape(-1), per_hop[:, ~c].reshape(-1)
        per_step = per_step_bound(stat_in, stat_out, 0.5, truth.hops, delta, "gaussian", conf)
        bounds["per_round"] = per_step.epsilon_lower
        metrics = {"epsilon_lower_bound": bounds["per_round"], "epsilon_accountant": truth.epsilon_accountant,
                   "confidence": conf, "estimator": "per_round (per hop)", "canaries": len(c),
                   "canaries_in": int(c.sum()), "hops": truth.hops, "delta": delta,
                   "epsilon_accountant_hops": truth.epsilon_hops,
                   **verdict(bounds["per_round"], truth.epsilon_hops), **score_metrics,
                   **per_round_metrics(per_step, stat_in, stat_out, truth.hops, delta, conf, self.seed)}
        return metrics, dict(BASELINE)
