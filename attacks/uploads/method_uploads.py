"""Gradient inversion on FedSpray's and FedOMD's uploads (`--attack gradient-inversion` on those methods).

The FedAvg attack (attacks.uploads.gradient_inversion) reads an SGD update of a GCN; these two methods upload
Adam-trained models, so each gets its own reading of what Adam leaves of the gradient.

FedSpray, "encoder_update" {N·ω, N} (privfgl.methods.fedspray): the server broadcast ω_global, so it
reads ω^(k) − ω_global. g_e is Linear+ReLU on raw features, trained `local_epochs` (5) Adam steps over
the client's labelled nodes only, from a fresh optimizer each round (default). Column j of the weight
change is a function of g_j(t) = Σ_i X_ij·δ_i(t) (δ_i: node i's error at the pre-activation), element-
wise through Adam, so:
  - the columns that moved are exactly the words some labelled node holds (the union, binary X);
  - words held by the same set of nodes move identically (Adam is scale-invariant, X binary): groups
    of ≥ 2 equal columns are single nodes' own words ("atoms", a node's signature, ≈ −5·lr·sign(δ_i));
  - a word shared by several nodes moves by ≈ −5·lr·sign(Σ δ_i): on the units of atom i that its
    column also moves, the signs agree with atom i. The score of word j for atom i is that agreement
    (0 unless the column moves on every unit of the atom). Columns consistent with no atom become
    atoms themselves (nodes with one own word), smallest support first (`sign-dictionary`).
  Labels: atom i's signature is −sign((q_i − y_i)ᵀW_p ⊙ relu'(pre_i)) (+ the KD term, ignored), so
  the class whose predicted sign pattern agrees best, with the known ω_global and the recovered row;
  the label multiset (weight·N of the plain proxy upload) is assigned as in iDLG.
FedOMD, "model_update" {n_i·W_i, n_i} (privfgl.methods.fedomd): one Adam step from the known global
model. The first step is −lr·g'/(|g'| + ε) with g' = g + wd·w, i.e. ≈ −lr·sign(g'), but not exactly:
the distance of |Δ|/lr from 1 is ε/(|g'| + ε), resolvable in float32 for |g'| below ~1e-3, so
|g'| = ε·r/(1 − r) (`adam-eps`) and g = g' − wd·w is the first layer's gradient up to float32
quantisation. A feature no node of the client holds (or all its occurrences dropped out) has g = 0
exactly; a feature with g ≠ 0 is held by the client. The first layer's gradient mixes every node
(the CMD term reaches all nodes; the CE term of the ~1% training nodes reaches 4 hops), so what it
gives is the client's word set and a per-word weight, not rows: reconstruction = per-feature score
Σ_u |g_uj| and the detected set {j: g_·j ≠ 0}. Later rounds (Adam's moments) and the revealed
aggregate (a mixture of clients' steps) use the deviation from the decay-only step −lr·sign(w) instead.
Under a secure protocol the per-client payloads are shares/ciphertexts (no input) and the attacks run
on the revealed sums ("aggregate:clientK", scored against client K).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from scipy.stats import spearmanr
from sklearn.metrics import average_precision_score, roc_auc_score

from attacks.base import Attack, Knowledge, NoInput, client_index
from attacks.uploads.gradient_inversion import GradientInversion, assign_labels, equal_row_groups
from attacks.uploads.metrics import label_accuracy, matched_sample_baseline, permuted_words_baseline, unordered_scores
from attacks.uploads.updates import aggregate_update, client_update
from attacks.view import AdversaryView
from privfgl.federation import SERVER, client_name

ADAM_EPS = 1e-8  # torch.optim.Adam's default, used by both methods


# ---- FedSpray: the encoder's first layer -----------------------------------------------------------
@dataclass(frozen=True)
class SprayAux:
    target: str
    round: int
    knowledge: Knowledge
    proxy_weights: str  # public method param: the proxy upload's weight is ratios or counts


@dataclass(frozen=True)
class SprayReconstruction:
    """features [r, f] in [0, 1] (unordered rows), labels [r] or None, label_counts [C] or None,
    words [f] bool: the columns that moved (the union of the labelled nodes' words)."""
    features: torch.Tensor
    labels: torch.Tensor | None
    label_counts: torch.Tensor | None
    words: torch.Tensor


def _consistency(atoms: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """[a, w]: fraction of atom a's moving units on which word column w moves with the same sign,
    0 unless w moves on every unit of a."""
    sa, sr = np.sign(atoms), np.sign(rows)
    on = sa != 0
    size = np.maximum(on.sum(-1, keepdims=True), 1)
    agree = (on[:, None, :] & (sa[:, None, :] == sr[None])).sum(-1) / size
    cover = (on[:, None, :] & (sr[None] != 0)).sum(-1) / size
    return agree * (cover >= 1.0)


def sign_dictionary(delta: np.ndarray, tol: float = 1e-4, explained: float = 0.9) -> tuple[np.ndarray, np.ndarray]:
    """(rows [r, f] with scores in [0, 1], atoms [r, h]) from the first layer's change `delta` [f, h]
    (one column of the weight per word). Atoms: groups of ≥ 2 equal columns (cosine > 1 − tol, norms
    within 1e-3), then every column consistent (score ≥ `explained`) with no atom so far, by
    ascending support size."""
    norms = np.linalg.norm(delta, axis=1)
    active = np.nonzero(norms > 0)[0]
    x = np.zeros((0, delta.shape[0]))
    if active.size == 0:
        return x, np.zeros((0, delta.shape[1]))
    rows = delta[active]
    atoms = equal_row_groups(rows, min_cosine=1 - tol, norm_gap=1e-3)
    best = _consistency(np.stack(atoms), rows).max(0) if atoms else np.zeros(len(rows))
    support = (rows != 0).sum(1)
    for i in np.argsort(support, kind="stable"):
        if best[i] >= explained:
            continue
        atoms.append(rows[i])
        best = np.maximum(best, _consistency(rows[i][None], rows)[0])
    atoms = np.stack(atoms)
    x = np.zeros((len(atoms), delta.shape[0]))
    x[:, active] = _consistency(atoms, rows)
    return x, atoms


def atom_labels(atoms: torch.Tensor, features: torch.Tensor, omega: dict[str, torch.Tensor],
                counts: torch.Tensor | None) -> torch.Tensor:
    """Labels [r]: the class c whose predicted signature −sign((q̂ − e_c)ᵀW_p) on the units the
    recovered row switches on agrees best with the atom's signs; with the multiset `counts`, the
    assignment of it that maximises the agreement (softmax of 20·agreement as probabilities)."""
    we, be = omega["embedding.weight"].float(), omega["embedding.bias"].float()
    wp, bp = omega["projector.weight"].float(), omega["projector.bias"].float()
    pre = (features >= 0.999).float() @ we.T + be
    on = (pre > 0).float()
    q = F.softmax(F.relu(pre) @ wp.T + bp, dim=1)
    sa = torch.sign(atoms)
    score = torch.empty(atoms.shape[0], wp.shape[0])
    for c in range(wp.shape[0]):
        predicted = -torch.sign((q - F.one_hot(torch.tensor(c), wp.shape[0]).float()) @ wp) * on
        score[:, c] = ((predicted == sa) & (sa != 0)).float().sum(1) / (sa != 0).float().sum(1).clamp(min=1)
    probs = F.softmax(20 * score, dim=1)
    if counts is None or int(counts.sum()) == 0:
        return probs.argmax(1)
    return assign_labels(probs, counts)


def _global_encoder(view: AdversaryView, round: int) -> dict[str, torch.Tensor] | None:
    """The encoder clients started `round` from: the server's `round`-th "global_encoder" broadcast."""
    sent = [m for m in view.messages if m.name == "global_encoder" and m.sender == SERVER
            and m.receiver == client_name(0)]
    if round >= len(sent) or sent[round].tensors is None:
        return None
    return {k: v.double() for k, v in sent[round].tensors.items()}


class FedSprayEncoderInversion(Attack):
    """`gradient-inversion` on FedSpray: labelled nodes' feature rows and labels from g_e's change."""

    name = "gradient-inversion"

    def __init__(self, round: int = 0, clients: list[int] | None = None):
        self.round, self.clients = round, clients

    def targets(self, view, knowledge, num_clients):
        clients = self.clients if self.clients is not None else range(num_clients)
        return [f"client{k}" for k in clients] + [f"aggregate:client{k}" for k in clients]

    def declare_aux(self, setup, knowledge, target):
        from privfgl.methods.fedspray.params import resolve_params
        return SprayAux(target, self.round, knowledge, resolve_params(setup.method.params).proxy_weights)

    def attack(self, view: AdversaryView, aux: SprayAux) -> SprayReconstruction:
        aggregate = aux.target.startswith("aggregate")
        name, sender = ("encoder_update:sum", SERVER) if aggregate else ("encoder_update", client_name(client_index(aux.target)))
        payload = view.payload(name, aux.round, sender)
        before = _global_encoder(view, aux.round)
        if payload is None or before is None:
            raise NoInput(f"no plaintext {name} from {sender} in round {aux.round} in the {view.party}'s view")
        n = float(payload["n"])
        delta = (payload["embedding.weight"].double() / n - before["embedding.weight"]).T.numpy()  # [f, d_s]
        rows, atoms = sign_dictionary(delta)
        features = torch.from_numpy(rows).float()
        counts = None
        proxy = view.payload("proxy_update:sum" if aggregate else "proxy_update", aux.round, sender)
        if proxy is not None and not aggregate:  # the plain proxy upload's weight: ratios (· N) or counts
            w = proxy["weight"].double() * (n if aux.proxy_weights == "ratios" else 1.0)
            counts = torch.round(w).long()
        labels = atom_labels(torch.from_numpy(atoms).float(), features, before, counts) if len(atoms) else None
        return SprayReconstruction(features, labels, counts, torch.from_numpy(np.abs(delta).max(1) > 0))

    def truth(self, setup, target):
        c = setup.clients[client_index(target)]
        return c.x.clone(), c.y.clone(), c.train_mask.nonzero().view(-1).clone()

    def score(self, rec: SprayReconstruction, truth, aux: SprayAux) -> tuple[dict, dict]:
        x, y, train_idx = truth
        k = aux.knowledge
        x_train, y_train = x[train_idx], y[train_idx]
        metrics: dict = {"variant": "sign-dictionary", "nodes": int(train_idx.numel()),
                         "recovered_rows": int(rec.features.shape[0])}
        metrics.update(unordered_scores(rec.features, rec.labels, x_train, y_train))  # rows matched to the labelled nodes
        held = (x_train > 0).any(0)
        metrics["word_set_precision"] = float((rec.words & held).sum() / max(int(rec.words.sum()), 1))
        metrics["word_set_recall"] = float((rec.words & held).sum() / max(int(held.sum()), 1))
        if rec.label_counts is not None:
            metrics["label_count_error"] = int((rec.label_counts - torch.bincount(y_train, minlength=k.num_classes)).abs().sum())
        prior = k.feature_prior.float()
        top = torch.argsort(-prior)[:max(int(rec.words.sum()), 1)]
        baseline = {"kind": f"{rec.features.shape[0]} rows drawn from the feature marginals, matched to the labelled "
                            "nodes as the reconstruction; majority prior label; the most common words as the word set",
                    **matched_sample_baseline(prior, rec.features.shape[0], x_train),
                    "words_permuted": permuted_words_baseline(rec.features, x_train),
                    "word_set_precision": float(held[top].float().mean()),
                    "label_acc": label_accuracy(torch.full_like(y_train, int(k.label_prior.argmax())), y_train)}
        return metrics, baseline


# ---- FedOMD: the first GCNConv of one Adam step --------------------------------------------------
@dataclass(frozen=True)
class OMDAux:
    target: str
    round: int
    knowledge: Knowledge
    lr: float
    weight_decay: float
    optimizer: str
    local_steps: int


@dataclass(frozen=True)
class WordProfile:
    """scores [f] (higher: more weight of word j in the client's first-layer gradient), detected [f]
    (words the gradient proves present), how: "adam-eps" or "deviation"."""
    scores: torch.Tensor
    detected: torch.Tensor
    how: str


def adam_first_step_gradient(before: torch.Tensor, after: torch.Tensor, lr: float, weight_decay: float,
                             eps: float = ADAM_EPS) -> torch.Tensor:
    """The gradient g of a fresh Adam's first step w → after: Δ = −lr·g'/(|g'| + ε), g' = g + wd·w,
    so |g'| = ε·r/(1 − r) with r = |Δ|/lr (float32 quantisation limits it to |g'| ≲ 1e-3)."""
    before, after = before.double(), after.double()
    delta = after - before
    r = (delta.abs() / lr).clamp(max=1 - 2.0 ** -24)  # r = 1 in float32: |g'| ≳ ε·2^24 (no magnitude left)
    g_prime = -torch.sign(delta) * eps * r / (1 - r)
    return g_prime - weight_decay * before


def decay_only_step(before: torch.Tensor, lr: float, weight_decay: float, eps: float = ADAM_EPS) -> torch.Tensor:
    """The first Adam step of an element whose loss gradient is 0: −lr·wd·w/(wd·|w| + ε)."""
    g = weight_decay * before
    return -lr * g / (g.abs() + eps)


class FedOMDUpdateInversion(Attack):
    """`gradient-inversion` on FedOMD: the client's words and their weight from the first layer's step."""

    name = "gradient-inversion"
    WEIGHT = "first.lin.weight"

    def __init__(self, round: int = 0, clients: list[int] | None = None, threshold: float = 0.1):
        self.round, self.clients, self.threshold = round, clients, threshold

    def targets(self, view, knowledge, num_clients):
        clients = self.clients if self.clients is not None else range(num_clients)
        return [f"client{k}" for k in clients] + [f"aggregate:client{k}" for k in clients]

    def declare_aux(self, setup, knowledge, target):
        from privfgl.methods.fedomd.params import resolve_params
        p = resolve_params(setup.method.params)
        return OMDAux(target, self.round, knowledge, p.lr, p.weight_decay, p.optimizer, p.local_steps)

    def attack(self, view: AdversaryView, aux: OMDAux) -> WordProfile:
        aggregate = aux.target.startswith("aggregate")
        update = aggregate_update(view, aux.round) if aggregate else client_update(view, client_index(aux.target), aux.round)
        if update is None:
            raise NoInput(f"no plaintext update of {aux.target} in round {aux.round} in the {view.party}'s view")
        w, after = update.before[self.WEIGHT], update.after[self.WEIGHT]  # [hidden, f]
        decay = decay_only_step(w.float(), aux.lr, aux.weight_decay).double()
        if not aggregate and aux.round == 0 and aux.optimizer == "adam" and aux.local_steps == 1:
            g = adam_first_step_gradient(w.float(), after.float(), aux.lr, aux.weight_decay)
            rel = g.abs() / (aux.weight_decay * w.abs()).clamp(min=1e-12)
            return WordProfile(g.abs().sum(0).float(), (rel > self.threshold).any(0), "adam-eps")
        dev = (after - w - decay).abs() / aux.lr  # any element whose step is not the decay-only one
        return WordProfile(dev.sum(0).float(), (dev > self.threshold).any(0), "deviation")

    def truth(self, setup, target):
        c = setup.clients[client_index(target)]
        return c.x.clone(), c.train_mask.clone()

    def score(self, rec: WordProfile, truth, aux: OMDAux) -> tuple[dict, dict]:
        x, train_mask = truth
        present, freq = (x > 0).any(0).numpy(), (x > 0).double().mean(0).numpy()
        in_train = (x[train_mask] > 0).any(0).numpy()
        prior = aux.knowledge.feature_prior.double().numpy()

        def profile(s: np.ndarray) -> dict:
            out = {"word_auc": _auc(present, s), "word_ap": float(average_precision_score(present, s))
                   if 0 < present.sum() < present.size else float("nan"),
                   "train_word_auc": _auc(in_train, s), "density_spearman": float(spearmanr(s, freq)[0])}
            over = freq > prior  # the client's over-represented words (its topic)
            out["overrep_auc"] = _auc(over, s / np.maximum(prior, 1e-6))
            return out
        det = rec.detected.numpy()
        metrics = {"variant": rec.how, **profile(rec.scores.double().numpy()), "detected_words": int(det.sum()),
                   "detected_precision": float(present[det].mean()) if det.any() else float("nan"),
                   "detected_recall": float(det[present].mean()) if present.any() else float("nan"),
                   "client_words": int(present.sum())}
        top = np.argsort(-prior, kind="stable")[:max(int(det.sum()), 1)]
        baseline = {"kind": "feature marginals (prior) as the word score; the most common words as the detected set",
                    **profile(prior), "detected_precision": float(present[top].mean())}
        return metrics, baseline


def _auc(labels: np.ndarray, scores: np.ndarray) -> float:
    return float(roc_auc_score(labels, scores)) if 0 < labels.sum() < labels.size else float("nan")


UPLOAD_INVERSIONS: dict[str, type[Attack]] = {"fedspray": FedSprayEncoderInversion, "fedomd": FedOMDUpdateInversion}


def for_method(attack: Attack, knowledge: Knowledge) -> Attack:
    """The attack's reading for the run's method: FedSpray's and FedOMD's upload inversions for
    `gradient-inversion`; FedLoG's generator inversion and class-statistics reading
    (attacks.uploads.fedlog_uploads) for `gradient-inversion` and `stats-reconstruction`; else `attack` itself."""
    from attacks.uploads.fedlog_uploads import FedLoGClassStats, FedLoGGeneratorInversion
    from attacks.uploads.stats_reconstruction import StatsReconstruction
    if knowledge.method == "fedlog":
        if isinstance(attack, GradientInversion):
            return FedLoGGeneratorInversion(clients=attack.clients)
        if isinstance(attack, StatsReconstruction):
            return FedLoGClassStats(clients=attack.clients)
    if isinstance(attack, GradientInversion) and knowledge.method in UPLOAD_INVERSIONS:
        return UPLOAD_INVERSIONS[knowledge.method](round=attack.round, clients=attack.clients)
    return attack
