"""Graph structure recovery from one client's upload (`--attack edge-recovery`; issue #20): the
client's edges from its FedAvg/FedProx/DP-FedAvg update, its node features known.

Threat model: the honest-but-curious server, round 0 (the client trains from the global model the
server broadcast), the protocol's model and optimizer settings public (Knowledge). Declared aux:
client K's node features X [n, f] and which of its nodes are training nodes (the candidate nodes,
as link stealing's He et al. threat model; not its edges, not its labels unless `labels=known`).

Two parts, following GRAIN (Drencheva et al., "GRAIN: Exact Graph Reconstruction from Gradients",
ICLR 2025) where it applies and gradient matching where it does not:

1. `exact` (one full-batch SGD step without dropout, `--optimizer sgd --local-epochs 1 --dropout 0`).
   The first GCN layer's weight gradient is ∂L/∂W0ᵀ = (ÂX)ᵀ G (G = ∂L/∂(ÂXW0ᵀ), [n, hidden]): its rows
   lie in the span of the propagated features ÂX, and when G's non-zero rows S (the nodes within one
   hop of a training node) number fewer than the hidden units, the spans are equal (GRAIN's span
   check, Lemma: rank(G_S) = |S|). With X known and of full row rank, B = Â G = (Xᵀ)⁺ ∂L/∂W0ᵀ is
   read exactly, and its column span U = Â·span{e_i : i ∈ S} is spanned by the columns Â[:, i],
   i ∈ S, each supported on node i's closed neighbourhood N[i]. The attack finds, for every node,
   the sparsest vector of U that is non-zero on it (L1 minimisation, a linear program), and accepts
   it as a column of Â only if it passes GRAIN-style degree consistency: for some centre c of its
   support T, the ratios u_c²·|T|/u_j² (= the degrees d_j of c's neighbours, as Â[j, c] =
   1/sqrt(d_j d_c)) are all integers ≥ 2. An accepted block gives c's whole neighbourhood: its edges
   (c, j) and the non-edges (c, j ∉ T). Rank of B = hidden (|S| ≥ hidden: privfgl's default
   hidden 64 on Cora) means the condition fails: the part reports itself not applicable.
   Implemented from GRAIN: the span of the first layer's gradient and degree-consistent 1-hop
   blocks. Not implemented: GRAIN's unknown discrete features (here X is aux), its span checks of
   deeper layers' blocks and its depth-first search that glues blocks into one graph (the blocks here
   are read off directly; edges between two nodes outside S are left to part 2).

2. `fit` (any round-0 training privfgl replays: Adam or SGD, several local epochs, dropout
   marginalised as the expected network or `masks=S` sampled masks, as
   attacks/uploads/multistep_inversion.py): a relaxed adjacency A = sigmoid((L + Lᵀ)/2) over the client's
   node pairs, normalised as the client's GCN does (Â = D̃^-1/2 (A + I) D̃^-1/2), and soft labels of
   the training nodes, fitted so that the replayed local training from the known global model
   matches the observed update in cosine (+ `sparsity`·mean(A)). The logits start at
   logit(`density`) + the features' cosine similarity (standardised, weight `prior`; 0: flat), so
   pairs the update says nothing about (outside the training nodes' two-hop field) keep the aux's
   ranking. The edge score of a pair is its final logit; part 1's edges and non-edges override it.

3. `support` (FedAvg/DP-FedAvg uploads without DP noise, Adam in round 0 or SGD; weight `support`,
   0 = off): the units each word's first-layer column moved on off the weight-decay-only path are read
   exactly (attacks/uploads/support_dictionary.py), and a node's support (the hidden units its neighbourhood
   switches on) is at most what all its words moved on, exactly that for a node holding a word of its
   own; adjacent nodes share most of their supports. The supports' Jaccard similarity joins the
   features' in the starting logits. Under Adam the fit only blurs that ranking (Cora K = 20 clients
   0-7: AUC 0.862 and AP 0.291 without it, 0.849 / 0.266 after 200 iterations), so `iters=auto`
   (the default) skips the fit there and runs FIT_ITERS iterations otherwise. `support=auto` (the
   default) uses the supports under Adam only: after one SGD step the fit reads the gradient's
   magnitudes, and starting it from the supports cost AUC 0.838 -> 0.830, AP 0.265 -> 0.230.

Scored (auditor side) as edge AUC / AP over all node pairs of the client, and over its edges against
degree-matched non-edges (attacks.models.link_stealing.degree_matched_pairs); baselines: random scores,
the degree-matched random graph (score d_i·d_j with the true degrees: a configuration model with
the client's degree sequence), and the aux alone (cosine of the known features, as link stealing).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from scipy.optimize import linprog
from sklearn.metrics import average_precision_score, roc_auc_score

from attacks.base import Attack, Knowledge, NoInput, client_index, needs_node_clients
from attacks.uploads.gcn import gcn_normalize
from attacks.models.link_stealing import degree_matched_pairs, pair_similarity
from attacks.uploads.multistep_inversion import LABEL_ITERS, check_replayable, simulate_local_training
from attacks.uploads.support_dictionary import check_applicable, moved_units, node_supports, support_jaccard
from attacks.uploads.updates import ObservedUpdate, client_update
from attacks.view import AdversaryView

EXACT_MODES = ("auto", "off")
EXACT_SCORE = 50.0  # logit given to pairs the exact part decided (edge: +, non-edge: −)
FIT_ITERS = 200  # iters=auto: the fit's length where it runs
SUPPORT_WEIGHT = 4.0  # support=auto under Adam: the Jaccard's weight beside the features' (prior 1); Cora K = 20 seed 0 clients 0-7


@dataclass(frozen=True)
class EdgeAux:
    target: str
    round: int
    knowledge: Knowledge
    x: torch.Tensor  # [n, f] client K's node features (a copy)
    train_idx: torch.Tensor  # [n_train] which of its nodes are training nodes
    labels: torch.Tensor | None  # labels=known: the training nodes' labels
    iters: int | str  # or "auto"
    seed: int
    masks: int
    exact: str
    prior: float
    density: float
    sparsity: float
    support: float | str  # a weight, or "auto"


@dataclass(frozen=True)
class EdgeReconstruction:
    """scores [n, n] symmetric (higher = more likely an edge); exact_edges [e, 2] and exact_centres
    (nodes whose whole neighbourhood part 1 read); details: how each part went."""
    scores: torch.Tensor
    exact_edges: np.ndarray
    exact_centres: list[int]
    details: dict


def _sparsest_in_span(q: np.ndarray, i: int) -> np.ndarray | None:
    """argmin ‖u‖₁ over u = q a with u_i = 1 (q [n, r] an orthonormal basis): a linear program in
    (a, t), −t ≤ q a ≤ t."""
    n, r = q.shape
    c = np.r_[np.zeros(r), np.ones(n)]
    a_ub = np.block([[q, -np.eye(n)], [-q, -np.eye(n)]])
    a_eq = np.r_[q[i], np.zeros(n)][None]
    res = linprog(c, A_ub=a_ub, b_ub=np.zeros(2 * n), A_eq=a_eq, b_eq=[1.0],
                  bounds=[(None, None)] * r + [(0, None)] * n, method="highs")
    return q @ res.x[:r] if res.status == 0 else None


def degree_consistent_centre(u: np.ndarray, tol: float = 2e-3, support_tol: float = 1e-4
                             ) -> tuple[int, np.ndarray, dict[int, float]] | None:
    """(centre c, support T) if u is a multiple of a column Â[:, c] of a GCN-normalised adjacency:
    one sign on its support T, and for some c ∈ T the implied degrees u_c²·|T|/u_j² of the others are
    integers ≥ 2 (within tol), returned with the degrees {node: d} the block implies (c: |T|); of
    several such centres, the one implying the smallest degrees. None otherwise."""
    u = u * np.sign(u[np.argmax(np.abs(u))])
    t = np.flatnonzero(np.abs(u) > support_tol * np.abs(u).max())
    if t.size < 2 or (u[t] < 0).any():
        return None
    m, found = t.size, []
    for c in t:
        d = u[c] ** 2 * m / u[t] ** 2
        others = t != c
        if np.all(np.abs(d[others] - np.round(d[others])) < tol * d[others]) \
                and np.all(np.round(d[others]) >= 2):
            found.append((int(c), {int(j): (float(m) if j == c else float(np.round(dj))) for j, dj in zip(t, d)}))
    if not found:
        return None
    # the degrees another centre implies are all scaled by (u_c'/u_c)²: the block is ambiguous when
    # they are integers too; take the most parsimonious reading (smallest degrees; any for |T| = 2,
    # where every reading gives the same edge)
    return min(((c, t, d) for c, d in found), key=lambda b: sum(b[2].values()))


def exact_blocks(update: ObservedUpdate, x: torch.Tensor, k: Knowledge, rank_tol: float = 1e-5
                 ) -> tuple[list[tuple[int, np.ndarray, dict]], dict]:
    """Part 1: the degree-consistent 1-hop blocks (centre, closed neighbourhood) read from the first
    layer's gradient of one SGD step, and what the span check found (rank, applicability)."""
    g = update.gradient(k.lr, k.weight_decay, k.local_epochs)["convs.0.lin.weight"].double()  # [h, f] = Gᵀ Â X
    xd = x.double()
    n = xd.shape[0]
    b = torch.linalg.pinv(xd.T) @ g.T  # [n, h] = Â G where X has full row rank
    sv = torch.linalg.svdvals(b)
    rank = int((sv > rank_tol * sv[0]).sum()) if sv.numel() and sv[0] > 0 else 0
    info = {"rank": rank, "hidden": int(g.shape[0]), "features_rank": int(torch.linalg.matrix_rank(xd))}
    if rank == 0 or rank >= min(g.shape[0], n):
        info["applicable"] = False
        info["reason"] = (f"rank of the first layer's gradient {rank} = min(hidden, nodes): more nodes in its "
                          "support than hidden units, GRAIN's span condition fails")
        return [], info
    info["applicable"] = True
    q = torch.linalg.svd(b, full_matrices=False).U[:, :rank].numpy()
    blocks, seen = [], set()
    for i in range(n):
        if np.abs(q[i]).max() < 1e-9:  # no vector of the span touches node i
            continue
        u = _sparsest_in_span(q, i)
        found = None if u is None else degree_consistent_centre(u)
        if found is not None and found[0] not in seen:
            seen.add(found[0])
            blocks.append(found)
    info["candidates"] = len(blocks)
    blocks = consistent_blocks(blocks)
    info["blocks"] = len(blocks)
    return blocks, info


def consistent_blocks(blocks: list[tuple[int, np.ndarray, dict[int, float]]]) -> list[tuple[int, np.ndarray, dict]]:
    """The blocks (centre, support, implied degrees) that agree with each other. GRAIN glues blocks
    into one graph by search; here the necessary conditions of one graph are checked pairwise, both
    blocks of a failed pair dropped, until none fails: symmetry (c' ∈ T_c iff c ∈ T_c' for two
    centres), one degree per node (within 1 %), and no node in more blocks than its degree."""
    keep = list(range(len(blocks)))
    changed = True
    while changed:
        changed = False
        for x in list(keep):
            for y in list(keep):
                if x >= y or x not in keep or y not in keep:
                    continue
                (cx, tx, dx), (cy, ty, dy) = blocks[x], blocks[y]
                if (cy in tx) != (cx in ty) or any(abs(dx[j] - dy[j]) > 0.01 * dx[j] for j in dx.keys() & dy.keys()):
                    keep.remove(x)
                    keep.remove(y)
                    changed = True
        count: dict[int, int] = {}
        for i in keep:
            for j in blocks[i][1]:
                count[int(j)] = count.get(int(j), 0) + 1
        for i in list(keep):
            if any(count[j] > round(d) for j, d in blocks[i][2].items()):
                keep.remove(i)
                changed = True
    return [blocks[i] for i in keep]


def _standardised(sim: torch.Tensor) -> torch.Tensor:
    """A pair score [n, n] standardised over the off-diagonal pairs."""
    vals = sim[~torch.eye(sim.shape[0], dtype=torch.bool)]
    return (sim - vals.mean()) / vals.std().clamp(min=1e-12)


def initial_logits(x: torch.Tensor, density: float, prior: float, support_sim: torch.Tensor | None = None,
                   support: float = 0.0) -> torch.Tensor:
    """Edge logits [n, n] before the fit (and the scores when iters = 0): logit(density) + prior ·
    the features' cosine + support · the nodes' support Jaccard (both standardised)."""
    init = torch.logit(torch.tensor(density)) + prior * _standardised(pair_similarity(x.float(), "cosine").float())
    if support_sim is not None and support:
        init = init + support * _standardised(support_sim.float())
    return init * (1 - torch.eye(x.shape[0]))


def fit_adjacency(before: dict, delta: dict, x: torch.Tensor, train_idx: torch.Tensor, k: Knowledge, iters: int,
                  labels: torch.Tensor | None = None, masks: int = 0, seed: int = 0, prior: float = 1.0,
                  density: float = 0.02, sparsity: float = 0.0, step_size: float = 0.1,
                  support_sim: torch.Tensor | None = None, support: float = 0.0) -> tuple[torch.Tensor, dict]:
    """Part 2: edge logits [n, n] (symmetric, zero diagonal) whose relaxed adjacency, replayed through the
    client's local training, best matches the observed update `delta` in cosine, from initial_logits."""
    g = torch.Generator().manual_seed(seed)
    before = {name: p.float() for name, p in before.items()}
    names = sorted(before)
    target = torch.cat([delta[name].float().reshape(-1) for name in names])
    x = x.float()
    n = x.shape[0]
    off = 1 - torch.eye(n)
    init = initial_logits(x, density, prior, support_sim, support)
    logits_a = (init + 0.01 * torch.randn(n, n, generator=g)).requires_grad_(True)

    def masks_of() -> list[list[torch.Tensor]] | None:
        if not masks or k.dropout == 0:
            return None
        scale = 1.0 / (1.0 - k.dropout)
        return [[(torch.rand(n, k.hidden, generator=g) >= k.dropout).float() * scale for _ in range(k.layers - 1)]
                for _ in range(k.local_epochs)]

    def flat(out: dict) -> torch.Tensor:
        return torch.cat([out[nm].reshape(-1) for nm in names])

    def loss_of(s: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = torch.sigmoid((s + s.T) / 2) * off
        adj = gcn_normalize(a)
        if masks and k.dropout > 0:
            sims = torch.stack([flat(simulate_local_training(before, x, adj, y, train_idx, k, masks_of()))
                                for _ in range(masks)]).mean(0)
        else:
            sims = flat(simulate_local_training(before, x, adj, y, train_idx, k))
        return 1 - F.cosine_similarity(sims, target, dim=0), a

    n_train = train_idx.numel()
    if labels is not None:
        label_logits = 20.0 * F.one_hot(labels, k.num_classes).float()
    else:  # labels first at the initial adjacency, then jointly (as fit_inputs)
        label_logits = (torch.log(k.label_prior.float().clamp(min=1e-3)).expand(n_train, -1)
                        + 0.01 * torch.randn(n_train, k.num_classes, generator=g)).clone().requires_grad_(True)
        opt = torch.optim.Adam([label_logits], lr=0.1)
        for _ in range(LABEL_ITERS if iters else 0):
            opt.zero_grad()
            loss_of(logits_a.detach(), F.softmax(label_logits, dim=1))[0].backward()
            opt.step()
    leaves = [logits_a] + ([label_logits] if labels is None else [])
    opt = torch.optim.Adam(leaves, lr=step_size)
    first = last = float("nan")
    for it in range(iters):
        opt.zero_grad()
        loss, a = loss_of(logits_a, F.softmax(label_logits, dim=1))
        (loss + sparsity * a.mean()).backward()
        opt.step()
        first = float(loss.detach()) if it == 0 else first
        last = float(loss.detach())
    s = ((logits_a + logits_a.T) / 2).detach() * off
    return s, {"loss_first": round(first, 4), "loss_last": round(last, 4)}


class EdgeRecovery(Attack):
    """`edge-recovery`: client K's adjacency from its round-`round` upload (features known)."""

    name = "edge-recovery"

    def __init__(self, round: int = 0, iters: int | str = "auto", clients: list[int] | None = None, seed: int = 0,
                 masks: int = 0, labels: str = "fit", exact: str = "auto", prior: str | int | float = 1,
                 density: str | float = 0.02, sparsity: str | float = 0.3, support: str | float = "auto"):
        if labels not in ("fit", "known"):
            raise ValueError(f"edge-recovery labels {labels!r}; valid: fit, known (the training labels as declared aux)")
        if exact not in EXACT_MODES:
            raise ValueError(f"edge-recovery exact {exact!r}; valid: {', '.join(EXACT_MODES)}")
        if masks < 0 or (iters != "auto" and (not isinstance(iters, int) or iters < 0)):
            raise ValueError(f"edge-recovery masks and iters must be >= 0 (iters: or auto), got masks={masks!r}, iters={iters!r}")
        self.round, self.iters, self.clients, self.seed, self.masks = round, iters, clients, seed, masks
        self.labels, self.exact = labels, exact
        self.prior, self.density, self.sparsity = float(prior), float(density), float(sparsity)
        self.support = support if support == "auto" else float(support)
        if self.support != "auto" and self.support < 0:
            raise ValueError(f"edge-recovery support {support!r}; valid: auto, or a weight >= 0 (0: off)")
        if not 0 < self.density < 1:
            raise ValueError(f"edge-recovery density {density!r}; valid: 0 < density < 1")

    def targets(self, view: AdversaryView, knowledge: Knowledge, num_clients: int) -> list[str]:
        return [f"client{k}" for k in (self.clients if self.clients is not None else range(num_clients))]

    def declare_aux(self, setup, knowledge: Knowledge, target: str) -> EdgeAux:
        needs_node_clients(self.name, knowledge.method)
        c = setup.clients[client_index(target)]
        train = c.train_mask.nonzero().view(-1).clone()
        labels = c.y[train].clone() if self.labels == "known" else None
        return EdgeAux(target, self.round, knowledge, c.x.detach().clone(), train, labels, self.iters, self.seed,
                       self.masks, self.exact, self.prior, self.density, self.sparsity, self.support)

    def attack(self, view: AdversaryView, aux: EdgeAux) -> EdgeReconstruction:
        k = aux.knowledge
        check_replayable(k, aux.round, "edge-recovery")
        update = client_update(view, client_index(aux.target), aux.round)
        if update is None:
            raise NoInput(f"no plaintext update of {aux.target} in round {aux.round} in the {view.party}'s view")
        one_step = k.optimizer == "sgd" and k.local_epochs == 1 and k.dropout == 0 and update.n is not None
        details: dict = {}
        blocks: list[tuple[int, np.ndarray, dict]] = []
        if aux.exact == "auto" and one_step and "model_update" not in k.noised_messages:
            blocks, details["exact"] = exact_blocks(update, aux.x, k)
        else:
            details["exact"] = {"applicable": False, "reason": "off" if aux.exact == "off" else
                                "needs one full-batch SGD step without dropout or noise (n in the upload)"}
        support_sim = None
        weight = aux.support if aux.support != "auto" else (SUPPORT_WEIGHT if k.optimizer == "adam" else 0.0)
        if weight:
            try:
                check_applicable(k)  # round 0 under Adam (check_replayable above); SGD has no state
                supports, covered = node_supports(moved_units(update.before, update.delta(), k), aux.x)
                support_sim = torch.from_numpy(support_jaccard(supports))
                details["support"] = {"applicable": True, "nodes_with_words_moved": int(covered.sum())}
            except NoInput as reason:
                details["support"] = {"applicable": False, "reason": str(reason)}
        iters = aux.iters
        if iters == "auto":  # under Adam the fit from the supports' ranking only blurs it (docs/attacks-graph.md)
            iters = 0 if support_sim is not None and k.optimizer == "adam" else FIT_ITERS
        details["fit_iters"] = iters
        if iters:
            scores, details["fit"] = fit_adjacency(update.before, update.delta(), aux.x, aux.train_idx, k, iters,
                                                   aux.labels, aux.masks, aux.seed, aux.prior, aux.density, aux.sparsity,
                                                   support_sim=support_sim, support=weight)
        else:
            scores = initial_logits(aux.x, aux.density, aux.prior, support_sim, weight)
        edges = []
        for c, t, _ in blocks:
            scores[c, :] = scores[:, c] = -EXACT_SCORE
            for j in t:
                if j != c:
                    scores[c, j] = scores[j, c] = EXACT_SCORE
                    edges.append((min(c, j), max(c, j)))
        exact_edges = np.unique(np.array(edges, dtype=int).reshape(-1, 2), axis=0)
        return EdgeReconstruction(scores, exact_edges, sorted(c for c, _, _ in blocks), details)

    def truth(self, setup, target: str) -> torch.Tensor:
        return setup.clients[client_index(target)].edge_index.detach().clone()

    def score(self, rec: EdgeReconstruction, edge_index: torch.Tensor, aux: EdgeAux) -> tuple[dict, dict]:
        n = aux.x.shape[0]
        ei = edge_index[:, edge_index[0] != edge_index[1]]
        adj = torch.zeros(n, n, dtype=torch.bool)
        adj[ei[0], ei[1]] = adj[ei[1], ei[0]] = True
        iu = torch.triu_indices(n, n, 1)
        y = adj[iu[0], iu[1]].numpy()
        deg = adj.sum(1).double() + 1

        def pair_scores(s: torch.Tensor) -> dict[str, float]:
            v = s[iu[0], iu[1]].double().numpy()
            return {"auc": float(roc_auc_score(y, v)), "ap": float(average_precision_score(y, v))} \
                if 0 < y.sum() < y.size else {"auc": float("nan"), "ap": float("nan")}

        pos, neg = degree_matched_pairs(edge_index, n, aux.seed)

        def matched(s: torch.Tensor) -> dict[str, float]:
            lab = np.r_[np.ones(len(pos)), np.zeros(len(neg))]
            v = np.r_[s[pos[:, 0], pos[:, 1]].numpy(), s[neg[:, 0], neg[:, 1]].numpy()]
            return {"dm_auc": float(roc_auc_score(lab, v)), "dm_ap": float(average_precision_score(lab, v))} \
                if len(pos) and len(neg) else {"dm_auc": float("nan"), "dm_ap": float("nan")}

        feat = pair_similarity(aux.x, "cosine")
        degree = deg[:, None] * deg[None, :]
        metrics = {**pair_scores(rec.scores), **matched(rec.scores.double()), "nodes": n,
                   "training_nodes": int(aux.train_idx.numel()), "edges": int(y.sum()),
                   "labels": "known" if aux.labels is not None else "fit"}
        metrics["support_applicable"] = bool(rec.details.get("support", {}).get("applicable", False))
        metrics["fit_iters"] = rec.details.get("fit_iters")
        ex = rec.details.get("exact", {})
        metrics["exact_applicable"] = bool(ex.get("applicable", False))
        if ex.get("applicable"):
            truth = {(int(u), int(v)) for u, v in zip(iu[0][y], iu[1][y])} if y.any() else set()
            got = {tuple(e) for e in rec.exact_edges.tolist()}
            metrics["exact_centres"] = len(rec.exact_centres)
            metrics["exact_centres_correct"] = int(sum(set(np.flatnonzero(adj[c].numpy())) ==
                                                       {j for (a, b) in got for j in (a, b) if c in (a, b) and j != c}
                                                       for c in rec.exact_centres))
            metrics["exact_edges"] = len(got)
            metrics["exact_precision"] = len(got & truth) / len(got) if got else float("nan")
            metrics["exact_recall"] = len(got & truth) / max(len(truth), 1)
        d_pairs, d_matched = pair_scores(degree), matched(degree)
        f_pairs, f_matched = pair_scores(feat), matched(feat)
        baseline = {"auc": 0.5, "ap": float(y.mean()), "dm_auc": 0.5, "dm_ap": 0.5,
                    "auc_degree": d_pairs["auc"], "ap_degree": d_pairs["ap"], "dm_auc_degree": d_matched["dm_auc"],
                    "auc_aux": f_pairs["auc"], "ap_aux": f_pairs["ap"], "dm_auc_aux": f_matched["dm_auc"],
                    "dm_ap_aux": f_matched["dm_ap"],
                    "kind": "random scores (auc, ap over all pairs; dm_*: edges vs degree-matched non-edges); "
                            "*_degree: a random graph with the true degrees (score d_i·d_j); *_aux: the aux alone, "
                            "cosine of the node features"}
        return metrics, baseline
