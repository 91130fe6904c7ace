"""Gradient inversion of FedAvg/FedProx client updates: recover a client's training-node features
and labels from the update the server saw (w_k − w_global over one round).

Threat model: the honest-but-curious server, round 0 (fresh model), clients take `local_epochs`
full-batch SGD steps (`--optimizer sgd`, so the update is −lr·(∇ + wd·w) and magnitudes leak; with
Adam's first step only signs would) without dropout, and lr, weight decay, step count and the GCN
architecture are known (public protocol settings). Variants:

- `dlg`  (Zhu et al. 2019): L2 distance between the simulated and the observed update, features and
  soft labels optimised jointly from the prior.
- `idlg` (Zhao et al. 2020): the label multiset first, analytically (below), then DLG with labels
  initialised from it; per-node labels are the assignment of that multiset most likely under the
  optimised soft labels.
- `ig`   (Geiping et al. 2020): cosine distance plus a prior for sparse binary features
  (L1 towards sparsity and x(1−x) towards {0, 1}), labels as in iDLG.
  These three optimise every node of the client's graph; with `graph="known"` (threat a) the
  client's edges are aux; with `graph="unknown"` (threat b) the attacker reconstructs n_k nodes
  and a relaxed adjacency sigmoid(S) jointly.
- `dictionary`: analytic, graph-free. Row j of the first-layer gradient is Σ_i X_ij·M_i with
  M = Âᵀ·∂L/∂Z₁ [n, hidden], so a word held by a single node reproduces that node's signature
  M_i exactly; equal rows are grouped into signatures (plus residuals left unexplained, matching-
  pursuit style), and every word row is split over them by non-negative least squares:
  X̂[:, j] = nnls(M̂ᵀ, row_j). Unordered (scored after matching the rows to the client's nodes).
- `multistep` (attacks/uploads/multistep_inversion.py; Dimitrov et al. 2022, Geiping et al. 2020): the
  training privfgl runs by default (Adam from a fresh state, `local_epochs` full-batch steps,
  dropout) replayed differentiably from the known global model; features of the client's nodes and
  soft labels fitted so the simulated update matches the observed one (cosine). Dropout masks are
  marginalised (`masks=0`: expectation; `masks=S`: S sampled masks averaged). Round 0 only under
  Adam (privfgl's clients keep Adam's moments across rounds); graph known (aux) only.
- `support` (attacks/uploads/support_dictionary.py): the default training too, graph-free and analytic: the
  first layer's exact zeros (units a word's column did not move off the weight-decay-only path) are
  the union of its holders' active-unit supports; groups of words with one moved set are nodes, and
  every word is scored for a node by support conflicts and movement distance. Unordered.

Labels (iDLG/EC-LDA for a batch): the last bias's gradient is mean_i(p_i − y_i), so the count of
class c is n·(p̄_c − g_c), with p̄ the model's mean prediction on prior-valued features.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from scipy.optimize import linear_sum_assignment, nnls

from attacks.base import Attack, Knowledge, NoInput, client_index, needs_node_clients
from attacks.uploads.gcn import dense_adjacency, gcn_forward, gcn_normalize, local_update
from attacks.uploads.metrics import (feature_metrics, label_accuracy, match_rows, matched_sample_baseline,
                                     permuted_words_baseline, unordered_scores)
from attacks.uploads.multistep_inversion import check_replayable, fit_inputs
from attacks.uploads.support_dictionary import check_applicable, support_dictionary
from attacks.uploads.updates import ObservedUpdate, aggregate_update, client_update, round_starts
from attacks.view import AdversaryView

VARIANTS = ("dlg", "idlg", "ig", "dictionary", "multistep", "support")
GRAPH_KNOWLEDGE = ("known", "unknown")
NOISE_HANDLING = ("auto", "ignore")  # dictionary variant on DP-noised uploads
NOISE_FACTOR = 1.2  # rows and residuals under NOISE_FACTOR·ν are noise (≈ 2 std of a noise row's norm at h = 64)


@dataclass(frozen=True)
class LocalGraph:
    """A client's graph as declared aux: edges [2, E] over `num_nodes` nodes, its training nodes."""
    edge_index: torch.Tensor
    num_nodes: int
    train_idx: torch.Tensor


@dataclass(frozen=True)
class InversionAux:
    target: str
    round: int
    knowledge: Knowledge
    variant: str
    graph: LocalGraph | None
    iters: int = 300
    step_size: float = 0.1
    seed: int = 0
    masks: int = 0  # multistep: dropout marginalised by expectation (0) or S sampled masks
    labels: torch.Tensor | None = None  # multistep, labels=known: the training nodes' labels as declared aux


@dataclass(frozen=True)
class Reconstruction:
    """features [m, f] in [0, 1]; labels [m] or None; aligned: rows are the target's training
    nodes in order (else an unordered set); label_counts [C] (None when n is unknown)."""
    features: torch.Tensor
    labels: torch.Tensor | None
    aligned: bool
    label_counts: torch.Tensor | None


@dataclass(frozen=True)
class InversionTruth:
    features: torch.Tensor  # [n, f] every node of the client
    labels: torch.Tensor    # [n]
    train_idx: torch.Tensor


def _last_layer(k: Knowledge) -> int:
    return k.layers - 1


def label_counts(update: ObservedUpdate, k: Knowledge, adj_norm: torch.Tensor | None, num_nodes: int,
                 train_idx: torch.Tensor | None, n: float) -> torch.Tensor:
    """Estimated class counts [C] (float, about n in total) from the last bias's gradient."""
    grad = update.gradient(k.lr, k.weight_decay, k.local_epochs)[f"convs.{_last_layer(k)}.bias"].float()
    if adj_norm is None:  # no graph: the nodes alone (self-loops) give p̄
        adj_norm, train_idx = torch.eye(num_nodes), torch.arange(num_nodes)
    x = k.feature_prior.float().expand(num_nodes, -1)
    with torch.no_grad():
        pbar = F.softmax(gcn_forward({n: v.float() for n, v in update.before.items()}, x, adj_norm, k.layers)[train_idx],
                         dim=1).mean(0)
    return (n * (pbar - grad)).clamp(min=0)


def _round_counts(counts: torch.Tensor, n: int) -> torch.Tensor:
    """Integer counts summing to n (largest remainder)."""
    base = counts.floor().long()
    rest = n - int(base.sum())
    if rest > 0:
        base[torch.argsort(-(counts - counts.floor()), stable=True)[:rest]] += 1
    return base


def assign_labels(probs: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """Labels [m] with exactly counts[c] nodes of class c (the recovered multiset) maximising
    Σ log probs[i, label_i] (an assignment over class slots); nodes beyond Σ counts take the argmax."""
    slots = torch.repeat_interleave(torch.arange(counts.numel()), counts.clamp(min=0))
    cost = -torch.log(probs.clamp(min=1e-12))[:, slots].numpy()
    rows, cols = linear_sum_assignment(cost)
    labels = probs.argmax(dim=1)
    labels[torch.from_numpy(rows)] = slots[torch.from_numpy(cols)]
    return labels


def _flat(params: dict[str, torch.Tensor], names: list[str]) -> torch.Tensor:
    return torch.cat([params[n].reshape(-1) for n in names])


def _optimise(update: ObservedUpdate, aux: InversionAux, counts: torch.Tensor, n_train: int
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """DLG / iDLG / IG: features [m, f] and label probabilities [n_train, C]."""
    k, g = aux.knowledge, torch.Generator().manual_seed(aux.seed)
    before = {n: v.float() for n, v in update.before.items()}
    names = sorted(before)
    target = _flat({n: v.float() for n, v in update.gradient(k.lr, k.weight_decay, k.local_epochs).items()}, names)
    if aux.graph is not None:
        m, train_idx = aux.graph.num_nodes, aux.graph.train_idx
        fixed_adj = gcn_normalize(dense_adjacency(aux.graph.edge_index, m))
    else:
        m, train_idx, fixed_adj = n_train, torch.arange(n_train), None
    prior = k.feature_prior.float().clamp(1e-4, 1 - 1e-4)
    z = (torch.logit(prior).expand(m, -1) + 0.01 * torch.randn(m, prior.numel(), generator=g)).clone().requires_grad_(True)
    label_init = torch.zeros(n_train, k.num_classes) if aux.variant == "dlg" else \
        torch.log(counts / counts.sum() + 1e-3).expand(n_train, -1).clone()
    logits = (label_init + 0.01 * torch.randn(n_train, k.num_classes, generator=g)).requires_grad_(True)
    leaves = [z, logits]
    if fixed_adj is None:
        s = torch.full((m, m), -2.0).add_(0.01 * torch.randn(m, m, generator=g)).requires_grad_(True)
        leaves.append(s)
    opt = torch.optim.Adam(leaves, lr=aux.step_size)
    off_diag = 1 - torch.eye(m)
    for _ in range(aux.iters):
        opt.zero_grad()
        x = torch.sigmoid(z)
        adj = fixed_adj if fixed_adj is not None else gcn_normalize(torch.sigmoid((s + s.T) / 2) * off_diag)
        y = F.softmax(logits, dim=1)
        sim = local_update(before, x, adj, y, train_idx, k.layers, k.lr, k.weight_decay, k.local_epochs,
                           create_graph=True)
        grad = -_flat(sim, names) / (k.lr * k.local_epochs) - k.weight_decay * _flat(before, names)
        if aux.variant == "ig":
            loss = 1 - F.cosine_similarity(grad, target, dim=0) + 1e-2 * x.mean() + 1e-2 * (x * (1 - x)).mean()
        else:
            loss = ((grad - target) ** 2).sum() / (target ** 2).sum()
        loss.backward()
        opt.step()
    return torch.sigmoid(z).detach(), F.softmax(logits, dim=1).detach()


def equal_row_groups(rows: np.ndarray, min_cosine: float, norm_gap: float,
                     noise_norm: float = 0.0, margin: float = 2.0) -> list[np.ndarray]:
    """The means of the groups of >= 2 (nearly) equal rows of `rows` [w, h] (all non-zero): rows
    within cosine > `min_cosine` and |norm ratio − 1| < `norm_gap` of a group's largest row, each
    row in one group at most, largest rows first. Equal gradient rows = words held by one node.
    With isotropic noise of norm `noise_norm` per row (≈ sqrt(h)·σ), two noisy copies of a clean row
    of norm r have cosine ≈ r²/(r² + noise_norm²) and norms within ≈ sqrt(2)·σ/r of each other: the
    thresholds are loosened to these, minus `margin` times that spread (r² = ‖row‖² − noise_norm²),
    and the group is then re-centred on its mean (the largest noisy copy overestimates the norm).
    A row whose clean norm is below the noise's (r < noise_norm) anchors no group."""
    norms = np.linalg.norm(rows, axis=1)
    unit = rows / norms[:, None]
    group = -np.ones(len(rows), dtype=int)
    means = []
    for i in np.argsort(-norms, kind="stable"):
        if group[i] >= 0:
            continue
        cos_i, gap_i = min_cosine, norm_gap
        if noise_norm > 0:
            r2 = norms[i] ** 2 - noise_norm ** 2
            if r2 < noise_norm ** 2:  # signal below the noise: no reliable direction to group around
                continue
            spread = margin * math.sqrt(2.0) * noise_norm / math.sqrt(r2 * rows.shape[1])
            cos_i = min(min_cosine, r2 / (r2 + noise_norm ** 2) - spread)
            gap_i = norm_gap + spread
        near = lambda row, norm: (unit @ (row / norm) > cos_i) & (np.abs(norms / norm - 1) < gap_i) & (group < 0)
        same = near(rows[i], norms[i])
        if noise_norm > 0 and same.sum() >= 2:  # the largest copy is biased up: re-centre on the mean
            centre = rows[same].mean(0)
            same = near(centre, np.linalg.norm(centre))
        if same.sum() >= 2:
            group[same] = len(means)
            means.append(rows[same].mean(0))
    return means


def row_noise_norm(rows: np.ndarray, quantile: float = 0.1) -> float:
    """The norm of the noise in one row of a noised gradient [w, h], read from its smallest rows:
    words no node near a training node holds have a zero clean gradient, so their rows are noise
    only (≈ sqrt(h)·σ). Assumes at least `quantile` of the rows are such (Cora: 42 % of the words
    for a 50-node client)."""
    return float(np.quantile(np.linalg.norm(rows, axis=1), quantile))


def _split_over(dictionary: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Non-negative coefficients [r, words] of every row [words, hidden] over the signatures
    [r, hidden], and the residual rows."""
    coef = np.stack([_nnls(dictionary.T, row) for row in rows], axis=1)
    return coef, rows - coef.T @ dictionary


def _nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """argmin_{c ≥ 0} ||a c − b||; when the active-set solver stalls (more signatures than hidden
    units), the clipped least-squares solution."""
    try:
        return nnls(a, b, maxiter=50 * a.shape[1])[0]
    except RuntimeError:
        return np.linalg.lstsq(a, b, rcond=None)[0].clip(min=0)


def dictionary_features(update: ObservedUpdate, k: Knowledge, tol: float = 0.999, unexplained: float = 0.1,
                        max_added: int = 100, noised: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """The `dictionary` variant: node feature rows [r, f] (unordered), one per recovered signature,
    and the signatures [r, hidden] themselves.
    Signatures: groups of ≥ 2 equal first-layer gradient rows (cosine > tol, norms within 1 − tol + 1%),
    then, matching-pursuit style, the largest residuals of word rows left unexplained (relative
    residual > `unexplained`) become new signatures, at most `max_added` of them.
    `noised` (the upload carries DP noise): the noise norm ν per row is read from the update
    (row_noise_norm); rows under NOISE_FACTOR·ν are dropped as noise, equal rows are grouped up to
    the noise (equal_row_groups) and a residual must exceed NOISE_FACTOR·ν to become a signature. The factor was chosen on Cora's 10 Louvain clients under σ = 1e-4 ... 1
    against the words-permuted null (README, leakage vs ε): an auditor's attack tuned to leak more
    is the cautious side."""
    g = update.gradient(k.lr, k.weight_decay, k.local_epochs)["convs.0.lin.weight"].T.numpy()  # [f, hidden]
    norms = np.linalg.norm(g, axis=1)
    if norms.max() == 0:
        return torch.zeros(0, g.shape[0]), torch.zeros(0, g.shape[1])
    noise = row_noise_norm(g) if noised else 0.0
    active = np.nonzero((norms > 1e-3 * norms.max()) & (norms > NOISE_FACTOR * noise))[0]
    if active.size == 0:
        active = np.array([int(np.argmax(norms))])
    rows, rn = g[active], norms[active]
    atoms = equal_row_groups(rows, min_cosine=tol, norm_gap=1 - tol + 0.01, noise_norm=noise)
    if not atoms:
        atoms.append(rows[np.argmax(rn)])
    coef, residual = _split_over(np.stack(atoms), rows)
    added = 0
    while added < max_added:
        res = np.linalg.norm(residual, axis=1)
        left = [i for i in np.argsort(-res, kind="stable")
                if res[i] > max(unexplained * rn[i], NOISE_FACTOR * noise)][:min(10, max_added - added)]
        if not left:
            break
        atoms.extend(residual[i] for i in left)  # up to 10 per pass (cost: one nnls per word per pass)
        added += len(left)
        coef, residual = _split_over(np.stack(atoms), rows)
    x = np.zeros((len(atoms), g.shape[0]))
    x[:, active] = coef
    return torch.from_numpy(x.clip(0, 1)).float(), torch.from_numpy(np.stack(atoms)).float()


def signature_labels(signatures: torch.Tensor, features: torch.Tensor, before: dict[str, torch.Tensor],
                     k: Knowledge) -> torch.Tensor | None:
    """Labels [r] of recovered nodes from their signatures [r, hidden] (2-layer GCN; else None).
    A training node's signature is M_i ≈ (Σ_j Â_ji Â_j· (P − Y)) W1 ⊙ relu'(h_i): over the hidden
    units its own recovered features switch on (x̂_i W0ᵀ + b0 > 0), least squares gives its class
    coefficients a ≈ Â-weighted (p − y), and its own −y makes its class the most negative one."""
    if k.layers != 2 or signatures.shape[0] == 0:
        return None
    w0, b0 = before["convs.0.lin.weight"].float(), before["convs.0.bias"].float()
    w1 = before["convs.1.lin.weight"].float()  # [C, hidden]
    on = (features @ w0.T + b0) > 0
    coef = torch.empty(signatures.shape[0], w1.shape[0])
    for i in range(signatures.shape[0]):
        units = on[i] if int(on[i].sum()) >= w1.shape[0] else torch.ones_like(on[i])
        coef[i] = torch.linalg.lstsq(w1[:, units].T, signatures[i, units, None]).solution[:, 0]
    return coef.argmin(dim=1)


class GradientInversion(Attack):
    """`gradient-inversion`: one client's features and labels from its update (or the aggregate)."""

    name = "gradient-inversion"

    def __init__(self, variant: str = "ig", graph: str = "known", round: int = 0, iters: int = 300,
                 clients: list[int] | None = None, seed: int = 0, noise: str = "auto", masks: int = 0,
                 labels: str = "fit"):
        if variant not in VARIANTS:
            raise ValueError(f"gradient-inversion variant {variant!r}; valid: {', '.join(VARIANTS)}")
        if graph not in GRAPH_KNOWLEDGE:
            raise ValueError(f"gradient-inversion graph {graph!r}; valid: {', '.join(GRAPH_KNOWLEDGE)}")
        if noise not in NOISE_HANDLING:
            raise ValueError(f"gradient-inversion noise {noise!r}; valid: {', '.join(NOISE_HANDLING)} "
                             "(auto: read the noise level off uploads the run's --dp spec noises; ignore: never)")
        if variant == "multistep" and graph != "known":
            raise ValueError("gradient-inversion variant multistep needs graph=known (the client's edges as aux)")
        if labels not in ("fit", "known") or (labels == "known" and variant != "multistep"):
            raise ValueError(f"gradient-inversion labels {labels!r}; valid: fit, or known with variant=multistep "
                             "(the training nodes' labels as declared aux: an upper bound for the features)")
        if masks < 0:
            raise ValueError(f"gradient-inversion masks {masks!r}; valid: 0 (expected network) or a count of sampled masks")
        self.variant, self.graph, self.round, self.iters, self.clients, self.seed, self.noise, self.masks = \
            variant, graph, round, iters, clients, seed, noise, masks
        self.labels = labels
        self._aggregate: tuple[AdversaryView, int, Reconstruction] | None = None  # one aggregate, K scorings

    def targets(self, view: AdversaryView, knowledge: Knowledge, num_clients: int) -> list[str]:
        clients = self.clients if self.clients is not None else range(num_clients)
        out = [f"client{k}" for k in clients]
        if self.variant in ("dictionary", "support"):  # graph-free: also the revealed aggregate, scored per client
            out += [f"aggregate:client{k}" for k in clients]
        return out

    def declare_aux(self, setup, knowledge: Knowledge, target: str) -> InversionAux:
        needs_node_clients(self.name, knowledge.method)
        graph = None
        if self.graph == "known" and not target.startswith("aggregate") and self.variant not in ("dictionary", "support"):
            c = setup.clients[client_index(target)]
            graph = LocalGraph(c.edge_index.clone(), int(c.num_nodes), c.train_mask.nonzero().view(-1).clone())
        labels = None
        if self.labels == "known" and graph is not None:
            c = setup.clients[client_index(target)]
            labels = c.y[graph.train_idx].clone()
        return InversionAux(target, self.round, knowledge, self.variant, graph, self.iters, seed=self.seed,
                            masks=self.masks, labels=labels)

    def attack(self, view: AdversaryView, aux: InversionAux) -> Reconstruction:
        k = aux.knowledge
        if aux.variant == "multistep":
            return self._multistep(view, aux)
        if aux.variant == "support":
            return self._support(view, aux)
        if k.model != "gcn" or k.optimizer != "sgd" or k.dropout != 0:
            raise NoInput(f"needs a GCN trained with --optimizer sgd and --dropout 0 (got {k.model}, "
                          f"{k.optimizer}, dropout {k.dropout}): with Adam's first step only gradient signs leak "
                          "(variant=multistep replays Adam and dropout)")
        update = aggregate_update(view, aux.round) if aux.target.startswith("aggregate") \
            else client_update(view, client_index(aux.target), aux.round)
        if update is None:
            raise NoInput(f"no plaintext update of {aux.target} in round {aux.round} in the {view.party}'s view")
        if update.n is not None:
            n = int(round(update.n))
        elif aux.graph is not None:
            n = int(aux.graph.train_idx.numel())
        else:
            n = None  # DP-FedAvg's deltas do not carry n: counts only up to scale
        adj = gcn_normalize(dense_adjacency(aux.graph.edge_index, aux.graph.num_nodes)) if aux.graph else None
        counts = label_counts(update, k, adj, aux.graph.num_nodes if aux.graph else (n or 1),
                              aux.graph.train_idx if aux.graph else None, n or 1)
        if aux.variant == "dictionary":
            if aux.target.startswith("aggregate") and self._aggregate is not None \
                    and self._aggregate[0] is view and self._aggregate[1] == aux.round:
                return self._aggregate[2]
            noised = self.noise == "auto" and "model_update" in k.noised_messages
            features, signatures = dictionary_features(update, k, noised=noised)
            multiset = _round_counts(counts, n) if n is not None else None
            labels = signature_labels(signatures, features, {n: v.float() for n, v in update.before.items()}, k)
            rec = Reconstruction(features, labels, False, multiset)
            if aux.target.startswith("aggregate"):
                self._aggregate = (view, aux.round, rec)
            return rec
        if n is None:
            raise NoInput(f"the update of {aux.target} does not carry n and its graph is not known")
        features, probs = _optimise(update, aux, counts, n)
        if aux.graph is not None:
            features = features[aux.graph.train_idx]
        labels = probs.argmax(dim=1) if aux.variant == "dlg" else assign_labels(probs, _round_counts(counts, n))
        return Reconstruction(features, labels, aux.graph is not None, _round_counts(counts, n))

    def _multistep(self, view: AdversaryView, aux: InversionAux) -> Reconstruction:
        """The `multistep` variant: the client's local training replayed and its inputs fitted."""
        k = aux.knowledge
        check_replayable(k, aux.round, "multistep")
        if aux.target.startswith("aggregate") or aux.graph is None:
            raise NoInput("multistep needs one client's update and its graph (graph=known)")
        update = client_update(view, client_index(aux.target), aux.round)
        if update is None:
            raise NoInput(f"no plaintext update of {aux.target} in round {aux.round} in the {view.party}'s view")
        adj = gcn_normalize(dense_adjacency(aux.graph.edge_index, aux.graph.num_nodes))
        features, probs = fit_inputs(update.before, update.delta(), adj, aux.graph.train_idx, k, aux.iters,
                                     masks=aux.masks, seed=aux.seed, labels=aux.labels)
        n = int(aux.graph.train_idx.numel())
        return Reconstruction(features[aux.graph.train_idx], probs.argmax(dim=1), True,
                              _round_counts(probs.sum(0), n))

    def _support(self, view: AdversaryView, aux: InversionAux) -> Reconstruction:
        """The `support` variant on one client's update or on the revealed aggregate (computed once)."""
        k = aux.knowledge
        check_applicable(k)
        aggregate = aux.target.startswith("aggregate")
        if aggregate and self._aggregate is not None and self._aggregate[0] is view and self._aggregate[1] == aux.round:
            return self._aggregate[2]
        update = aggregate_update(view, aux.round) if aggregate else client_update(view, client_index(aux.target), aux.round)
        if update is None:
            raise NoInput(f"no plaintext update of {aux.target} in round {aux.round} in the {view.party}'s view")
        earlier = []
        if k.optimizer == "adam" and aux.round > 0:  # Adam's state carries the earlier rounds' steps
            starts = round_starts(view, aux.round)
            if starts is None:
                raise NoInput(f"round {aux.round} under Adam needs the global models of rounds 0-{aux.round - 1} "
                              "(run with --transcript all)")
            earlier = [s["convs.0.lin.weight"] for s in starts]
        features, labels = support_dictionary(update.before, update.delta(), k, earlier)
        rec = Reconstruction(features, labels, False, None)
        if aggregate:
            self._aggregate = (view, aux.round, rec)
        return rec

    def truth(self, setup, target: str) -> InversionTruth:
        c = setup.clients[client_index(target)]
        return InversionTruth(c.x.clone(), c.y.clone(), c.train_mask.nonzero().view(-1).clone())

    def score(self, rec: Reconstruction, truth: InversionTruth, aux: InversionAux) -> tuple[dict, dict]:
        k = aux.knowledge
        x_train, y_train = truth.features[truth.train_idx], truth.labels[truth.train_idx]
        metrics: dict = {"variant": aux.variant, "graph": "known" if aux.graph is not None else "unknown",
                         "nodes": int(truth.train_idx.numel())}
        prior_label = torch.full_like(y_train, int(k.label_prior.argmax()))
        if rec.aligned:
            metrics.update(feature_metrics(rec.features, x_train))
            if rec.labels is not None:
                metrics["label_acc"] = label_accuracy(rec.labels, y_train)
            baseline = {"kind": "feature marginals (prior) for every node; majority prior label",
                        **feature_metrics(k.feature_prior.float().expand_as(x_train), x_train)}
        else:  # an unordered set of rows, scored against the target (the training nodes)
            metrics["recovered_rows"] = int(rec.features.shape[0])
            metrics.update(unordered_scores(rec.features, rec.labels, x_train, y_train))
            if rec.labels is not None and rec.features.shape[0]:  # stricter: rows matched to all the client's nodes
                idx = torch.from_numpy(match_rows(rec.features, truth.features))[truth.train_idx]
                metrics["label_acc_all_nodes"] = float(((rec.labels[idx.clamp(min=0)] == y_train) & (idx >= 0)).double().mean())
            baseline = {"kind": f"{rec.features.shape[0]} rows drawn from the feature marginals, matched to the "
                                "training nodes as the reconstruction; majority prior label",
                        **matched_sample_baseline(k.feature_prior, rec.features.shape[0], x_train, seed=aux.seed),
                        "words_permuted": permuted_words_baseline(rec.features, x_train, seed=aux.seed)}
        if rec.label_counts is not None:
            counts_true = torch.bincount(y_train, minlength=k.num_classes)
            metrics["label_count_error"] = int((rec.label_counts - counts_true).abs().sum())
        baseline["label_acc"] = label_accuracy(prior_label, y_train)
        return metrics, baseline
