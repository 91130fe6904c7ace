"""`dp-audit`'s design for O-pFGL's DP class statistics (`--method opfgl --method-param dp_epsilon=E,dp_clip=B,
dp_degree=D`; attacks/dp/dp_audit.py picks it): canary nodes (attacks/dp/canary_nodes.py), one release.

`--attack dp-audit[:canaries=N,seed=S,colluders=c,confidence=p]`. `prepare(setup)` (before the run) adds N
canary nodes to the class_stats sum. The adversary: the party that opens the noised sum, the server by
default (dp_mode=distributed: the clients' noise shares are in it), plus the colluding clients
(`colluders`, default the coalition the shares are sized against, `dp_colluders`; the highest client
indices), who subtract their own noise draws. dp_mode=central is refused: the trusted server holds the
exact sum and the noised statistics never leave it (the clients receive the pseudo-graph condensed from
them), so no party's view holds the release.

Statistic: o_j (canary_nodes.py), in units of the canaries' normalised shift. Estimators: those of
fedavg_audit.py with T = 1. `epsilon_lower_bound` is the per-step bound (per_step_bound: threshold 1/2
fixed by the design, Gaussian claim, one step), valid against the accountant's claim of one σ-Gaussian
release of sensitivity √3 (μ = 1/σ); the one-run and f-DP bounds, split-half and Bonferroni beside.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attacks.base import Knowledge, NoInput
from attacks.dp.canary_nodes import CanaryNodes, node_influence
from attacks.dp.fedavg_audit import AuditAux, AuditScores, AuditTruth, CanaryClientAudit
from attacks.view import AdversaryView
from privfgl.federation.runtime import flatten


@dataclass(frozen=True)
class NodeAuditAux(AuditAux):
    """AuditAux (one round, the cells as directions) and the public canary design."""
    nodes: CanaryNodes | None = None


class CanaryNodeAudit(CanaryClientAudit):
    """`dp-audit` on O-pFGL's DP statistics: canary nodes in the one release of class sums."""

    @staticmethod
    def fits(setup, method: str) -> bool:
        from privfgl.methods.opfgl.params import resolve_params
        return method == "opfgl" and resolve_params(setup.method.params).dp_epsilon is not None

    def __init__(self, canaries: int = 1000, seed: int = 0, colluders: int | None = None,
                 confidence: float | str = 0.95):
        super().__init__(canaries=canaries, seed=seed, colluders=colluders, confidence=confidence)
        self.nodes: CanaryNodes | None = None

    def prepare(self, setup, method: str) -> None:
        """Before the run: the canary nodes join the class_stats sum. ValueError (one line) on central mode."""
        from privfgl.methods.opfgl.dp import colluders, dp_mode
        from privfgl.methods.opfgl.params import resolve_params
        p, fed = resolve_params(setup.method.params), setup.federation
        if dp_mode(p, fed.protocol.name) == "central":
            raise ValueError("dp-audit: O-pFGL's dp_mode=central keeps the noised statistics on the trusted server "
                             "(the clients receive only the pseudo-graph condensed from them); valid: dp_mode=distributed "
                             "under --protocol secagg|ckks|crypten, where the server opens the noised sum")
        K = len(setup.clients)
        n = colluders(p, fed.protocol, K)[0] if self.colluders is None else self.colluders
        if n >= K:
            raise ValueError(f"dp-audit: colluders={n} of {K} clients leave no honest share")
        self.coalition = tuple(range(K - n, K))
        self.nodes = CanaryNodes(self.canaries, self.seed, setup.num_classes, p.dp_clip,
                                 node_influence(p.dp_degree, p.hops))
        fed.canaries = self.nodes
        setup.extras["canary_nodes"] = self.nodes

    def declare_aux(self, setup, knowledge: Knowledge, target: str) -> NodeAuditAux:
        if self.nodes is None or self.nodes.cells is None:
            raise NoInput("dp-audit: no canary nodes took part (prepare was not called, or no sum was revealed)")
        own = setup.extras["dp"].client_noise
        noise = (flatten({b: sum(own[k][b] for k in self.coalition) for b in own[0]})[0],) if self.coalition else None
        ones = np.ones(self.nodes.count, dtype=np.int64)
        return NodeAuditAux(self.nodes.cells, (1.0,), None, noise, self.nodes.bound, "rounds", self.coalition,
                            (ones,), nodes=self.nodes)

    def attack(self, view: AdversaryView, aux: NodeAuditAux) -> AuditScores:
        sums = [flatten(m.tensors)[0] for m in view.find(f"{aux.nodes.message}:sum") if m.tensors is not None]
        if len(sums) != 1:
            raise NoInput(f"dp-audit: {len(sums)} opened class_stats sums in the {view.party}'s view, expected 1 (the "
                          "sum is opened to another party, e.g. server_efficient opens it to the clients)")
        total = sums[0].double() - (aux.coalition_noise[0] if aux.coalition_noise is not None else 0.0)
        o = aux.nodes.observe(total)
        possible = np.ones((1, o.size), dtype=bool)
        return AuditScores(o - 0.5, o[None], possible, np.full(o.size, np.nan))

    def truth(self, setup, target: str) -> AuditTruth:
        report = setup.extras["dp"].report()
        return AuditTruth(self.nodes.coins.copy(), float(report["epsilon"]), float(report["delta"]), 1.0, 1)

