"""Attacks on FedLoG's uploads (privfgl.methods.fedlog), from the server's view. Both rely on the
public common initialisation (the broadcast seed, spec A.12.6): the server can rebuild X_head(0)
and NG(0) that every client started from, so it reads what training changed.

`stats-reconstruction` on fedlog, "synthetic_update" {x_head: r_k^c·X_head,k (rows permuted within
each class)} and "class_support" {r, holders}: the class rates r_k are read from class_support (or,
where only the synthetic upload is visible, as the ratio of each class block's mean to the known
initial block mean); each class block's mean divided by r_k^c is the mean of client k's class-c
synthetic head nodes (the within-class permutation does not change a mean), and its drift from
X_head(0), less its component along X_head(0)'s class mean (L_norm's shrinkage) and less the
mean over classes, is the class's condensed feature direction. Scored per client and class against the
client's class-c training nodes: `cosine` of the drift with the true class mean minus the
population feature marginals, `overrep_auc` of the drift ranking the words the class over-uses
(frequency >= 2x the marginal); baselines: the same drift with the classes shifted by one (is the
signal class-specific?) and 0.5. The label distribution: `label_l1` of r̂ against r_k beside the
population prior's.

`gradient-inversion` on fedlog, "generator_update" {ng: r_k^c·NG_k per class} (once, round 0):
NG_k was trained by Adam from NG(0) on the client's training features only, without weight
decay, so column j of its first layer moves if and only if some training node holds word j (a zero
input gives a zero gradient, and Adam leaves a parameter with zero gradient exactly where it was).
Per-word score: Σ_u |ΔW1[u, j]|; detected set: score > 1e-9·max. Scored against the client's
training vocabulary: `word_auc`, `detected_precision`, `detected_recall`; baseline: the population
marginals' word AUC.

Under a secure protocol the per-client payloads are shares/ciphertexts (no input); the revealed
sums are attacked instead ("aggregate:clientK", scored against client K): a class held by client K
alone is its own data in the sum (the reason for `min_contributors`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from sklearn.metrics import roc_auc_score

from attacks.base import Attack, Knowledge, NoInput, client_index
from attacks.view import AdversaryView
from privfgl.federation import SERVER, client_name


@dataclass(frozen=True)
class FedLoGAux:
    """Public: the run's FedLoG settings and seed (they fix the common initialisation), the data
    dimensions and population priors."""
    target: str
    round: int
    method_params: dict
    seed: int
    knowledge: Knowledge


def _targets(clients, num_clients: int) -> list[str]:
    ks = clients if clients is not None else range(num_clients)
    return [f"client{k}" for k in ks] + [f"aggregate:client{k}" for k in ks]


def _aux(setup, knowledge: Knowledge, target: str, round: int) -> FedLoGAux:
    if knowledge.method != "fedlog":
        return FedLoGAux(target, round, {}, 0, knowledge)
    return FedLoGAux(target, round, dict(setup.method.params), int(setup.method.seed), knowledge)


def _last_round(view: AdversaryView, name: str) -> int:
    rounds = [m.round for m in view.messages if m.name == name and m.tensors is not None]
    if not rounds:
        raise NoInput(f"no plaintext {name} in the server's view")
    return max(rounds)


def _support(view: AdversaryView, target: str) -> dict | None:
    if target.startswith("aggregate"):
        return view.payload("class_support:sum", 0, SERVER) or _revealed(view, "class_support")
    return view.payload("class_support", 0, client_name(client_index(target)))


def _revealed(view: AdversaryView, name: str) -> dict | None:
    """A sum as the server holds it: ':sum' (opened by the server) or ':reveal' (HE key holder)."""
    for suffix in (":sum", ":reveal"):
        found = [m for m in view.messages if m.name == name + suffix and m.tensors is not None]
        if found:
            return found[0].tensors
    return None


@dataclass(frozen=True)
class ClassDrift:
    rates: torch.Tensor      # r̂ [C] (NaN where unknown)
    drift: torch.Tensor      # [C, d] class-mean drift of the synthetic head nodes from X_head(0)
    classes: torch.Tensor    # bool [C]: classes with a reading


class FedLoGClassStats(Attack):
    name = "stats-reconstruction"

    def __init__(self, round: int = -1, clients: list[int] | None = None):
        self.round, self.clients = round, clients

    def targets(self, view, knowledge, num_clients):
        return _targets(self.clients, num_clients)

    def declare_aux(self, setup, knowledge, target):
        return _aux(setup, knowledge, target, self.round)

    def attack(self, view: AdversaryView, aux: FedLoGAux) -> ClassDrift:
        from privfgl.methods.fedlog.client import initial_synthetic
        from privfgl.methods.fedlog.params import resolve_params
        k = aux.knowledge
        if k.method != "fedlog":
            raise NoInput(f"this reading is for FedLoG's uploads, not {k.method}'s")
        p = resolve_params(aux.method_params)
        r = aux.round if aux.round >= 0 else None
        if aux.target.startswith("aggregate"):
            sums = [m for m in view.messages if m.name in ("synthetic_update:sum", "synthetic_update:reveal")
                    and m.tensors is not None and (r is None or m.round == r)]
            if not sums:
                raise NoInput("no revealed synthetic_update sum in the server's view")
            upload = sums[-1].tensors["x_head"]
        else:
            sender = client_name(client_index(aux.target))
            r = _last_round(view, "synthetic_update") if r is None else r
            upload = view.payload("synthetic_update", r, sender)
            if upload is None:
                raise NoInput(f"no plaintext synthetic_update of {aux.target} in the server's view")
            upload = upload["x_head"]
        C, s = k.num_classes, p.s
        x0 = initial_synthetic(C, k.num_features, p, aux.seed)[0].double().view(C, s, -1).mean(1)    # [C, d]
        block = upload.double().view(C, s, -1).mean(1)                                               # r^c · mean
        support = _support(view, aux.target)
        if support is not None:
            rates = support["r"].double()
        else:  # the scale of each block against the known initial block
            rates = (block * x0).sum(1) / (x0 * x0).sum(1)
        held = rates > 1e-12
        drift = torch.zeros_like(block)
        drift[held] = block[held] / rates[held, None] - x0[held]
        # L_norm's shrinkage moves each row along itself (≈ −x0): project x0^c out, then remove
        # what all classes share, leaving the class-specific direction
        drift = drift - ((drift * x0).sum(1, keepdim=True) / (x0 * x0).sum(1, keepdim=True)) * x0
        drift[held] -= drift[held].mean(0, keepdim=True)
        if aux.target.startswith("aggregate"):
            rates = rates / rates.sum().clamp(min=1e-12)  # Σ_k r_k over clients, as a distribution
        return ClassDrift(rates, drift, held)

    def truth(self, setup, target: str) -> dict:
        c = setup.clients[client_index(target)]
        x, y = c.x[c.train_mask].double(), c.y[c.train_mask]
        counts = torch.bincount(y, minlength=setup.num_classes).double()
        means = torch.stack([x[y == j].mean(0) if bool((y == j).any()) else torch.zeros(x.shape[1])
                             for j in range(setup.num_classes)])
        return {"rates": counts / counts.sum().clamp(min=1), "means": means, "held": counts > 0}

    def score(self, est: ClassDrift, truth: dict, aux: FedLoGAux) -> tuple[dict, dict]:
        prior = aux.knowledge.feature_prior.double()
        C = est.drift.shape[0]
        classes = [j for j in range(C) if bool(est.classes[j]) and bool(truth["held"][j])]

        def scores(shift: int) -> tuple[float, float]:
            cos, auc = [], []
            for j in classes:
                d = est.drift[(j + shift) % C]
                target = truth["means"][j] - prior
                cos.append(float(d @ target / max(float(d.norm() * target.norm()), 1e-300)))
                over = (truth["means"][j] >= 2 * prior) & (truth["means"][j] > 0)
                if 0 < int(over.sum()) < over.numel():
                    auc.append(roc_auc_score(over.numpy(), d.numpy()))
            return (float(np.mean(cos)) if cos else float("nan"), float(np.mean(auc)) if auc else float("nan"))

        cos, auc = scores(0)
        cos_shift, auc_shift = scores(1)
        metrics = {"cosine": cos, "overrep_auc": auc, "classes": len(classes),
                   "label_l1": float((est.rates - truth["rates"]).abs().sum())}
        baseline = {"cosine": cos_shift, "overrep_auc": 0.5, "classes_shifted_overrep_auc": auc_shift,
                    "label_l1": float((aux.knowledge.label_prior.double() - truth["rates"]).abs().sum()),
                    "kind": "cosine: the drift of another class (shifted by one); label_l1: the population prior"}
        return metrics, baseline


@dataclass(frozen=True)
class WordScores:
    score: torch.Tensor      # [d] per-word score Σ_u |ΔW1[u, j]|
    detected: torch.Tensor   # bool [d]


class FedLoGGeneratorInversion(Attack):
    name = "gradient-inversion"

    def __init__(self, round: int = 0, clients: list[int] | None = None, **_):
        self.clients = clients

    def targets(self, view, knowledge, num_clients):
        return _targets(self.clients, num_clients)

    def declare_aux(self, setup, knowledge, target):
        return _aux(setup, knowledge, target, 0)

    def attack(self, view: AdversaryView, aux: FedLoGAux) -> WordScores:
        from privfgl.methods.fedlog.generator import flat_params, new_generator
        from privfgl.methods.fedlog.params import generator_widths, resolve_params
        k = aux.knowledge
        if k.method != "fedlog":
            raise NoInput(f"this reading is for FedLoG's uploads, not {k.method}'s")
        p = resolve_params(aux.method_params)
        if aux.target.startswith("aggregate"):
            got = _revealed(view, "generator_update")
        else:
            got = view.payload("generator_update", 0, client_name(client_index(aux.target)))
        if got is None:
            raise NoInput(f"no plaintext generator_update for {aux.target} in the server's view")
        ng = got["ng"].double()                                            # [C, P]: r^c · NG
        support = _support(view, aux.target)
        d, w0 = k.num_features, generator_widths(p)[0]
        flat0 = flat_params(new_generator(d, p, 0)).double()
        rows = ng.abs().sum(1) > 0
        if not bool(rows.any()):
            raise NoInput(f"{aux.target}: every class was withheld")
        first = ng[rows][:, :w0 * d]                                       # first layer, per class
        if support is not None:
            scale = support["r"].double()[rows]
        else:  # most columns do not move: the median ratio to the known initial weights
            ratio = first / flat0[:w0 * d]
            scale = ratio.median(1).values
        delta = (first / scale[:, None] - flat0[:w0 * d]).view(-1, w0, d).abs().sum(1)   # [classes, d]
        score = delta.max(0).values if aux.target.startswith("aggregate") else delta.mean(0)
        return WordScores(score, score > 1e-9 * float(score.max().clamp(min=1e-300)))

    def truth(self, setup, target: str) -> torch.Tensor:
        c = setup.clients[client_index(target)]
        return (c.x[c.train_mask] > 0).any(0)

    def score(self, est: WordScores, truth: torch.Tensor, aux: FedLoGAux) -> tuple[dict, dict]:
        t = truth.numpy()
        both = 0 < t.sum() < t.size
        tp = int((est.detected & truth).sum())
        metrics = {"word_auc": float(roc_auc_score(t, est.score.numpy())) if both else float("nan"),
                   "detected_precision": tp / max(int(est.detected.sum()), 1),
                   "detected_recall": tp / max(int(truth.sum()), 1), "words": int(truth.sum())}
        baseline = {"word_auc": float(roc_auc_score(t, aux.knowledge.feature_prior.numpy())) if both else float("nan"),
                    "detected_precision": float(truth.double().mean()),
                    "kind": "population feature marginals; precision of calling every word"}
        return metrics, baseline
