"""Reconstruction of individual nodes from O-pFGL's per-class sufficient statistics.

A client's upload holds, per class c, n_c (members: labelled plus HRE pseudo-labelled nodes),
S1 = Σ x^prop and S2 = Σ (x^prop)² with x^prop = [X ‖ ÂX ‖ …] (the first f columns are the raw
features). The attacker estimates every member of class c as follows:
- n_c = 1: S1 is the node's propagated row, raw features included, exactly;
- n_c = 2: per dimension the two values are the roots μ ± √(S2/2 − μ²): where they coincide the
  mean is exact, elsewhere which node holds which root is ambiguous, so both members get the mean;
- n_c ≥ 3: the class mean S1/n_c (the S2 spread adds no per-node information).
Scored per member node: AUC over its raw features, cosine of its propagated row, exact recovery of
its raw binary features; grouped by class size. Under a secure protocol the per-client uploads are
ciphertexts/shares (no input); the revealed sum is attacked the same way, against the union of all
clients' members per class ("aggregate").
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from sklearn.metrics import roc_auc_score

from attacks.base import Attack, Knowledge, NoInput, client_index
from attacks.view import AdversaryView
from privfgl.federation import SERVER, client_name

SIZE_BUCKETS = ((1, 1), (2, 2), (3, 5), (6, 10), (11, 10**9))


@dataclass(frozen=True)
class StatsAux:
    target: str
    knowledge: Knowledge


@dataclass(frozen=True)
class ClassEstimates:
    """Per class: members n [C] and the estimate of every member's propagated row [C, D]."""
    counts: torch.Tensor
    rows: torch.Tensor


@dataclass(frozen=True)
class ClassMembers:
    """Ground truth: per class, the propagated rows [n_c, D] of the nodes behind its statistics."""
    rows: list[torch.Tensor]


def estimate_members(n: torch.Tensor, s1: torch.Tensor) -> torch.Tensor:
    """The estimate of a member of each class [C, D]: S1/n (exact for n = 1)."""
    return s1.double() / n.double().clamp(min=1)[:, None]


class StatsReconstruction(Attack):
    """`stats-reconstruction` against O-pFGL's class_stats / class_counts."""

    name = "stats-reconstruction"

    def __init__(self, clients: list[int] | None = None):
        self.clients = clients

    def targets(self, view: AdversaryView, knowledge: Knowledge, num_clients: int) -> list[str]:
        clients = self.clients if self.clients is not None else range(num_clients)
        return [f"client{k}" for k in clients] + ["aggregate"]

    def declare_aux(self, setup, knowledge: Knowledge, target: str) -> StatsAux:
        return StatsAux(target, knowledge)

    def attack(self, view: AdversaryView, aux: StatsAux) -> ClassEstimates:
        if aux.knowledge.method != "opfgl":
            raise NoInput(f"stats-reconstruction reads O-pFGL class statistics, not {aux.knowledge.method} messages")
        if aux.target == "aggregate":
            stats, counts = view.payload("class_stats:sum", 0, SERVER), view.payload("class_counts:sum", 0, SERVER)
        else:
            sender = client_name(client_index(aux.target))
            stats, counts = view.payload("class_stats", 0, sender), view.payload("class_counts", 0, sender)
        if stats is None or counts is None:
            raise NoInput(f"no plaintext class statistics of {aux.target} in the {view.party}'s view")
        n = counts["n"].long()
        return ClassEstimates(n, estimate_members(n, stats["S1"]))

    def truth(self, setup, target: str) -> ClassMembers:
        from privfgl.methods.opfgl.params import resolve_params
        from privfgl.methods.opfgl.stats import client_statistics, propagate_features
        p = resolve_params(setup.method.params)
        ks = range(len(setup.clients)) if target == "aggregate" else [client_index(target)]
        rows: list[list[torch.Tensor]] = [[] for _ in range(setup.num_classes)]
        for k in ks:
            c = setup.clients[k]
            v = client_statistics(c, setup.num_classes, p.hops, p.min_count, p.lp_iters, p.lp_alpha, p.hre_k, p.f_th,
                                  p.d_th, p.hre_ties)
            labels = torch.where(c.train_mask, c.y, v.soft_labels.argmax(dim=1))
            members = (c.train_mask | v.reliable) & v.sums.b.bool()[labels]
            xp = propagate_features(c.x, c.edge_index, p.hops).double()
            for cls in range(setup.num_classes):
                rows[cls].append(xp[members & (labels == cls)])
        return ClassMembers([torch.cat(r) for r in rows])

    def score(self, est: ClassEstimates, truth: ClassMembers, aux: StatsAux) -> tuple[dict, dict]:
        f = aux.knowledge.num_features
        prior = aux.knowledge.feature_prior.double().numpy()
        by_size: dict[str, dict] = {}
        base_by_size: dict[str, dict] = {}
        for lo, hi in SIZE_BUCKETS:
            auc, base_auc, cos, exact, nodes = [], [], [], [], 0
            for cls, members in enumerate(truth.rows):
                size = int(est.counts[cls])
                if not lo <= size <= hi or members.shape[0] == 0:
                    continue
                guess = est.rows[cls].numpy()
                for row in members.numpy():
                    nodes += 1
                    raw = row[:f] > 0.5
                    if 0 < raw.sum() < f:
                        auc.append(roc_auc_score(raw, guess[:f]))
                        base_auc.append(roc_auc_score(raw, prior))
                    cos.append(float(guess @ row / max(np.linalg.norm(guess) * np.linalg.norm(row), 1e-300)))
                    exact.append(bool(((guess[:f] > 0.5) == raw).all()))
            if nodes:
                label = f"{lo}" if lo == hi else (f"{lo}-{hi}" if hi < 10**9 else f">={lo}")
                by_size[label] = {"nodes": nodes, "raw_auc": float(np.mean(auc)) if auc else float("nan"),
                                  "prop_cosine": float(np.mean(cos)), "exact_fraction": float(np.mean(exact))}
                base_by_size[label] = {"raw_auc": float(np.mean(base_auc)) if base_auc else float("nan")}
        return {"by_class_size": by_size}, {"kind": "feature marginals (prior) for every node",
                                              "by_class_size": base_by_size}
