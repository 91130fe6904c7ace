"""Node membership inference against the trained models in the adversary's view, and the empirical
ε lower bound it certifies (`--attack membership[:variant=loss|shadow,target=all|global|clients,...]`).

Question: was candidate node v one of the training nodes (its label in the loss) of the model?
- target "global": the final global model (the server broadcasts it, so it is in the server's view
  under every protocol). Members: every client's training nodes; non-members: held-out nodes
  (validation/test) of the same clients' graphs, which no model trained on.
- target "clientK": client K's final model, read from its last plaintext upload (fedavg/fedprox:
  n·w / n; dp-fedavg: the global model it started from + its clipped delta; dp-sgd: the model).
  Under a secure protocol the uploads are shares/ciphertexts: no input.
Declared knowledge (aux): the run's public settings (architecture, optimizer, lr, weight decay,
dropout, rounds × local epochs), the candidate nodes — as many members as non-members, shuffled —
with the graphs they sit in (features, edges; copies of the client subgraphs) and their labels, and
a disjoint pool of held-out nodes of the same graphs that the adversary knows are non-members (the
other part of the held-out set; only the shadow variant uses it). It does not know which candidate
is a member. The model comes from the view only.

Variants:
- loss (Yeom et al., CSF 2018): score = −cross-entropy of the model on the candidate (its label),
  the model run on the candidate's graph. Members have lower loss.
- shadow (Shokri et al., S&P 2017, for GNNs as Olatunji et al. 2021): `shadows` GNNs of the same
  architecture, trained (Adam, rounds × local_epochs full-batch epochs, same lr/wd/dropout) on a
  random half of the known non-member pool, the other half left out; an attack classifier
  (logistic regression on the sorted posterior, the true class's log-probability, the loss and the
  entropy) learns shadow-in vs shadow-out and scores the candidates under the target model.

Scores: AUC and TPR at FPR 1 % / 10 % beside the baseline of a guess (0.5 and the FPR itself); the
empirical ε lower bound (attacks.dp.dp_audit_bound) at 95 % confidence — threshold chosen on a random
half of the candidates, Clopper–Pearson on the other half (`epsilon_lb`), and the Bonferroni
maximum over 50 thresholds on all candidates (`epsilon_lb_bonferroni`) — next to the accountant's
ε of the run (the record's privacy block), and the largest bound these candidates could certify at
all (a perfect attack): `epsilon_lb_ceiling` for the split half (its evaluation half's counts at α),
`epsilon_lb_bonferroni_ceiling` for the Bonferroni bound (all candidates at α / the thresholds
tried). `dp_covers` says whether the accountant's ε bounds this target against the server: the
global model always (it is post-processing of the noised release); a client's upload only under
dp-sgd or message DP in local mode (central and distributed uploads carry no or 1/K of the noise).
`candidates=canaries`: the candidates are the auditor's canary nodes instead (privfgl.data.canaries: the
run option `--canaries N` inserts them before training, each a member by an independent coin); no
candidates (no input) in a run without canaries (`privfgl audit` and sweeps refuse that before the run).
The held-out real nodes remain the shadow pool.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score, roc_curve
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from attacks.base import Attack, Knowledge, NoInput, client_index, needs_node_clients
from attacks.dp.dp_audit_bound import (bound_over_thresholds, candidate_thresholds, max_certifiable_epsilon,
                                       split_half_bound)
from attacks.view import AdversaryView
from attacks.models.view_models import (MODEL_METHODS, block_graph, final_client_model, final_global_model,
                                        model_logits, train_model)

VARIANTS = ("loss", "shadow")
TARGETS = ("all", "global", "clients")
CANDIDATES = ("nodes", "canaries")  # the run's own nodes, or the auditor's canaries (privfgl.data.canaries)
FPRS = (0.01, 0.1)
CONFIDENCE = 0.95


@dataclass(frozen=True)
class MembershipAux:
    """Declared knowledge for one target (copies only). Nodes are (graph, node) rows into `graphs`."""
    target: str
    variant: str
    knowledge: Knowledge
    epochs: int  # rounds × local_epochs: how long the target trained (public)
    graphs: tuple[tuple[torch.Tensor, torch.Tensor], ...]  # (x, edge_index) per graph
    candidates: torch.Tensor  # [m, 2]
    labels: torch.Tensor  # [m]
    pool: torch.Tensor  # [p, 2] known non-members, disjoint from the candidates
    all_labels: tuple[torch.Tensor, ...]  # per graph: labels of the candidate and pool nodes (-1 elsewhere)
    shadows: int
    seed: int
    accountant: dict  # the run's public privacy block: epsilon, delta, accountant
    dp_covers: bool | None


def dp_covers(privacy: dict, method: str, target: str) -> bool | None:
    """Does the accountant's ε bound this target against the server? None without DP."""
    if privacy.get("epsilon") is None:
        return None
    if target == "global" or method == "dp-sgd":
        return True
    return (privacy.get("dp") or {}).get("mode") == "local"


def attack_features(logits: torch.Tensor, labels: torch.Tensor) -> np.ndarray:
    """Per node: sorted probabilities (descending), log p(true class), the loss margin and the entropy."""
    logp = F.log_softmax(logits.double(), dim=1)
    p = logp.exp()
    true = logp.gather(1, labels.view(-1, 1)).squeeze(1)
    other = logp.masked_fill(F.one_hot(labels, logp.shape[1]).bool(), -math.inf).max(1).values
    entropy = -(p * logp).sum(1)
    return torch.cat([p.sort(1, descending=True).values, torch.stack([true, true - other, entropy], 1)], 1).numpy()


class Membership(Attack):
    """`membership`: a membership score per candidate node (higher = more likely a training node)."""

    name = "membership"

    def __init__(self, variant: str = "loss", target: str = "all", clients: list[int] | None = None,
                 shadows: int = 4, seed: int = 0, epochs: int | None = None, candidates: str = "nodes"):
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {', '.join(VARIANTS)}, got {variant!r}")
        if target not in TARGETS:
            raise ValueError(f"target must be one of {', '.join(TARGETS)}, got {target!r}")
        if shadows < 1:
            raise ValueError(f"shadows must be >= 1, got {shadows}")
        self.variant, self.target, self.clients, self.shadows, self.seed = variant, target, clients, shadows, seed
        if candidates not in CANDIDATES:
            raise ValueError(f"candidates must be one of {', '.join(CANDIDATES)}, got {candidates!r}")
        self.epochs, self.candidates = epochs, candidates

    def targets(self, view: AdversaryView, knowledge: Knowledge, num_clients: int) -> list[str]:
        clients = self.clients if self.clients is not None else range(num_clients)
        out = ["global"] if self.target in ("all", "global") else []
        return out + ([f"client{k}" for k in clients] if self.target in ("all", "clients") else [])

    # ---- runtime side ------------------------------------------------------------------------------
    def _members(self, setup, target: str) -> list[int]:
        return list(range(len(setup.clients))) if target == "global" else [client_index(target)]

    def _draw(self, setup, target: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Runtime side, deterministic per (seed, target): candidates [m, 2] (as many training nodes
        as held-out ones, shuffled), the known non-member pool [p, 2] and the candidates' membership [m]."""
        ks = self._members(setup, target)
        rng = np.random.default_rng([self.seed, 0 if target == "global" else ks[0] + 1])
        canaries = setup.extras.get("canaries", {"nodes": torch.zeros(0, 2, dtype=torch.long),
                                                 "member": torch.zeros(0, dtype=torch.bool)})
        rows = [(ks.index(int(k)), int(i), bool(b)) for (k, i), b in zip(canaries["nodes"].tolist(),
                                                                       canaries["member"].tolist()) if int(k) in ks]
        inserted = {(g, i) for g, i, _ in rows}  # canaries are never real candidates nor in the pool
        members, held = [], []
        for g, k in enumerate(ks):
            c = setup.clients[k]
            members += [(g, int(i)) for i in c.train_mask.nonzero().view(-1) if (g, int(i)) not in inserted]
            held += [(g, int(i)) for i in (~c.train_mask).nonzero().view(-1) if (g, int(i)) not in inserted]
        held = [held[i] for i in rng.permutation(len(held))]
        if self.candidates == "canaries":  # every canary of these clients; its coin says if it trained
            rows = [rows[i] for i in rng.permutation(len(rows))]
            return (torch.tensor([(g, i) for g, i, _ in rows], dtype=torch.long).view(-1, 2),
                    torch.tensor(held, dtype=torch.long).view(-1, 2),
                    torch.tensor([b for *_, b in rows], dtype=torch.bool))
        m = min(len(members), len(held) // 2)
        members = [members[i] for i in rng.permutation(len(members))[:m]]
        cand = members + held[:m]
        order = rng.permutation(len(cand))
        return (torch.tensor([cand[i] for i in order], dtype=torch.long).view(-1, 2),
                torch.tensor(held[m:], dtype=torch.long).view(-1, 2), torch.from_numpy(order < m))

    def declare_aux(self, setup, knowledge: Knowledge, target: str) -> MembershipAux:
        needs_node_clients(self.name, knowledge.method)
        from privfgl.privacy import privacy_block
        ks = self._members(setup, target)
        cand, pool, _ = self._draw(setup, target)
        ys = [setup.clients[k].y for k in ks]
        label_of = lambda rows: torch.tensor([int(ys[g][i]) for g, i in rows.tolist()], dtype=torch.long)
        known = []
        for g in range(len(ks)):
            y = torch.full_like(ys[g], -1)
            for rows in (cand, pool):
                sel = rows[rows[:, 0] == g, 1]
                y[sel] = ys[g][sel]
            known.append(y)
        privacy = privacy_block(setup)
        public = {k: privacy.get(k) for k in ("epsilon", "delta", "accountant")}
        epochs = self.epochs if self.epochs is not None else setup.method.rounds * max(setup.method.local_epochs, 1)
        return MembershipAux(target, self.variant, knowledge, int(epochs),
                             tuple((setup.clients[k].x.detach().clone(), setup.clients[k].edge_index.detach().clone())
                                   for k in ks), cand, label_of(cand), pool, tuple(known),
                             self.shadows, self.seed, public, dp_covers(privacy, knowledge.method, target))

    def truth(self, setup, target: str) -> torch.Tensor:
        return self._draw(setup, target)[2]

    # ---- adversary side ----------------------------------------------------------------------------
    def attack(self, view: AdversaryView, aux: MembershipAux) -> torch.Tensor:
        k = aux.knowledge
        if k.method not in MODEL_METHODS:
            raise NoInput(f"membership reads the models of {', '.join(MODEL_METHODS)}, not {k.method}")
        if aux.target == "global":
            params = final_global_model(view.messages)
        else:
            params = final_client_model(view.messages, k.method, client_index(aux.target))
        if params is None:
            raise NoInput(f"no plaintext model of {aux.target} in the {view.party}'s view")
        if aux.candidates.shape[0] == 0:
            raise NoInput(f"{aux.target} has no candidate nodes")
        x, ei, off = block_graph(list(aux.graphs))
        rows = off[aux.candidates[:, 0]] + aux.candidates[:, 1]
        logits = model_logits(k.method, k.model, k.layers, k.hidden, k.num_classes, params, x, ei)
        if aux.variant == "loss":
            return -F.cross_entropy(logits[rows].double(), aux.labels, reduction="none")
        return self._shadow_scores(aux, x, ei, off, logits[rows])

    def _shadow_scores(self, aux: MembershipAux, x, ei, off, target_logits: torch.Tensor) -> torch.Tensor:
        k = aux.knowledge
        pool = off[aux.pool[:, 0]] + aux.pool[:, 1]
        if pool.numel() < 4:
            raise NoInput(f"{aux.target}: {pool.numel()} known non-members, too few to train shadow models")
        y = torch.cat(aux.all_labels).clamp(min=0)
        rng = np.random.default_rng(aux.seed)
        feats, member = [], []
        for s in range(aux.shadows):
            perm = torch.from_numpy(rng.permutation(pool.numel()))
            inside, outside = pool[perm[: pool.numel() // 2]], pool[perm[pool.numel() // 2:]]
            params = train_model(k.method, k.model, k.layers, k.hidden, k.num_classes, x, ei, y, inside, aux.epochs,
                                 k.lr, k.weight_decay, k.dropout, seed=aux.seed * 1000 + s)
            logits = model_logits(k.method, k.model, k.layers, k.hidden, k.num_classes, params, x, ei)
            feats += [attack_features(logits[inside], y[inside]), attack_features(logits[outside], y[outside])]
            member += [np.ones(inside.numel()), np.zeros(outside.numel())]
        clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
        clf.fit(np.concatenate(feats), np.concatenate(member))
        return torch.from_numpy(clf.decision_function(attack_features(target_logits, aux.labels)))

    # ---- auditor side ------------------------------------------------------------------------------
    def score(self, scores: torch.Tensor, truth: torch.Tensor, aux: MembershipAux) -> tuple[dict, dict]:
        s, t = scores.double().numpy(), truth.numpy().astype(bool)
        delta = aux.accountant.get("delta") or 0.0
        alpha = 1 - CONFIDENCE
        fpr, tpr, _ = roc_curve(t, s)
        split = split_half_bound(s, t, delta=delta, alpha=alpha, seed=aux.seed)
        bonf = bound_over_thresholds(s, t, delta=delta, alpha=alpha)
        metrics = {"variant": aux.variant, "auc": float(roc_auc_score(t, s)) if 0 < t.sum() < t.size else math.nan,
                   **{f"tpr_at_fpr_{f:g}": float(tpr[fpr <= f].max()) for f in FPRS},
                   "epsilon_lb": split.epsilon_lb, "epsilon_lb_bonferroni": bonf.epsilon_lb,
                   "epsilon_point": bonf.epsilon_point, "confidence": CONFIDENCE,
                   # what a perfect attack could certify with these candidates: the split half's counts at α,
                   # and all of them at α / (the thresholds tried)
                   "epsilon_lb_ceiling": max_certifiable_epsilon(split.tp + split.fn, split.fp + split.tn, delta, alpha),
                   "epsilon_lb_bonferroni_ceiling": max_certifiable_epsilon(
                       int(t.sum()), int((~t).sum()), delta, alpha / max(len(candidate_thresholds(s)), 1)),
                   "accountant_epsilon": aux.accountant.get("epsilon"), "delta": delta,
                   "accountant": aux.accountant.get("accountant"), "dp_covers": aux.dp_covers,
                   "members": int(t.sum()), "non_members": int((~t).sum()), "counts": split.as_dict()}
        baseline = {"auc": 0.5, **{f"tpr_at_fpr_{f:g}": f for f in FPRS}, "epsilon_lb": 0.0,
                    "kind": "a guess that ignores the model (ROC on the diagonal)"}
        return metrics, baseline
