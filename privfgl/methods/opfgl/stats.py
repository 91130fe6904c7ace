"""O-pFGL class statistics: the client side (Eq. 1-8) and the server's reveal (Eq. 9, spec §2.3).

Client k, on its own subgraph only:
- propagated features X^prop = [X ‖ ÂX ‖ … ‖ Â^h X], Â = D̃^-1/2 (A+I) D̃^-1/2   (Eq. 5) [n, (h+1)f]
- label propagation Ỹ (sym-norm A without self-loops, clamp [0,1], zero rows → 1/C)       [n, C]
- node homophily h_node (labelled neighbours only, 0 without any), H(c) = Σ h_node,
  w_dist(c) = 1 / (1 + ln(H(c) + 1))                                                      (Eq. 1-3)
- HRE reliable nodes (Eq. 7) and the per-class sufficient sums over labelled ∪ reliable nodes:
  n (int), b = 1[n ≥ min_count] (int), S1 = Σ x^prop, S2 = Σ (x^prop)², n_orig = |V_L^c|·b (int).
  Classes below min_count send zeros.
Server, after the secure sum reveals N = Σn, m = Σb, S1, S2:
  μ = S1/N,  s² = max((S2 − N μ²) / (N − m) [paper] or / (N − 1) [exact], 0).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch_geometric.data import Data


def _sparse(rows: torch.Tensor, cols: torch.Tensor, vals: torch.Tensor, n: int) -> torch.Tensor:
    return torch.sparse_coo_tensor(torch.stack([rows, cols]), vals, (n, n), check_invariants=False).coalesce()


def degrees(edge_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """Node degrees [n] (int64) of an undirected edge list without self-loops."""
    return torch.bincount(edge_index[0], minlength=num_nodes)


def gcn_adjacency(edge_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """Sparse Â = D̃^-1/2 (A + I) D̃^-1/2 [n, n], float32 (the GCN normalisation)."""
    loops = torch.arange(num_nodes)
    rows = torch.cat([edge_index[1], loops])
    cols = torch.cat([edge_index[0], loops])
    deg = torch.bincount(rows, minlength=num_nodes).float()
    inv = deg.rsqrt()
    return _sparse(rows, cols, inv[rows] * inv[cols], num_nodes)


def propagate_features(x: torch.Tensor, edge_index: torch.Tensor, hops: int) -> torch.Tensor:
    """Eq. 5: [X ‖ ÂX ‖ … ‖ Â^h X], shape [n, (hops+1)·f], float32."""
    adj = gcn_adjacency(edge_index, x.shape[0])
    out, h = [x.float()], x.float()
    for _ in range(hops):
        h = torch.sparse.mm(adj, h)
        out.append(h)
    return torch.cat(out, dim=1)


def label_propagation(y: torch.Tensor, train_mask: torch.Tensor, edge_index: torch.Tensor, num_classes: int,
                      iters: int, alpha: float) -> torch.Tensor:
    """Soft labels Ỹ [n, C] for all nodes: Y ← clamp(α·S·Y + (1−α)·Y⁰, 0, 1), S = D^-1/2 A D^-1/2
    (no self-loops), Y⁰ = one-hot train labels; rows that stay all-zero become uniform 1/C."""
    n = y.numel()
    y0 = torch.zeros(n, num_classes)
    y0[train_mask] = torch.nn.functional.one_hot(y[train_mask], num_classes).float()
    deg = degrees(edge_index, n).float()
    inv = torch.where(deg > 0, deg.rsqrt(), torch.zeros_like(deg))
    src, dst = edge_index
    s = _sparse(dst, src, inv[src] * inv[dst], n)
    out, rest = y0, (1 - alpha) * y0
    for _ in range(iters):
        out = (alpha * torch.sparse.mm(s, out) + rest).clamp_(0.0, 1.0)
    zero = out.sum(dim=1) == 0
    out[zero] = 1.0 / num_classes
    return out


def node_homophily(y: torch.Tensor, train_mask: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
    """Eq. 1: h_node [n] for labelled nodes (share of labelled neighbours with the same label;
    0 without labelled neighbours); 0 for unlabelled nodes."""
    n = y.numel()
    src, dst = edge_index
    both = train_mask[src] & train_mask[dst]
    src, dst = src[both], dst[both]
    total = torch.bincount(src, minlength=n).float()
    same = torch.bincount(src[y[src] == y[dst]], minlength=n).float()
    return torch.where(total > 0, same / total.clamp(min=1), torch.zeros(n))


def class_homophily(y: torch.Tensor, train_mask: torch.Tensor, edge_index: torch.Tensor,
                    num_classes: int) -> torch.Tensor:
    """Eq. 2: accumulated class homophily H [C] = Σ_{labelled u of class c} h_node(u), float64."""
    h = node_homophily(y, train_mask, edge_index).double()
    return torch.zeros(num_classes, dtype=torch.float64).index_add_(0, y[train_mask], h[train_mask])


def distill_factor(class_homophily_sum: torch.Tensor) -> torch.Tensor:
    """Eq. 3: w_dist [C] = 1 / (1 + ln(H(c) + 1)) (natural log)."""
    return 1.0 / (1.0 + torch.log(class_homophily_sum + 1.0))


def reliable_nodes(soft_labels: torch.Tensor, train_mask: torch.Tensor, degree: torch.Tensor,
                   class_homophily_sum: torch.Tensor, k: int, f_th: float, d_th: int,
                   ties: str = "index") -> torch.Tensor:
    """Eq. 7: bool mask [n] of unlabelled nodes with degree ≥ d_th (C1, off when d_th = 0),
    row-normalised LP confidence ≥ f_th (C2) and LP class among the top-k classes by H (C3).
    k = 0: no node (HRE off). Ties in H (the paper does not say; see HRE_TIES): "index" breaks them by
    the lower class index, "topk" takes what the authors' code takes, torch.topk(w_dist, k,
    largest=False) on the float32 factors (whichever tied class torch's CPU kernel returns)."""
    if k == 0:
        return torch.zeros_like(train_mask)
    conf, pred = (soft_labels / soft_labels.sum(dim=1, keepdim=True)).max(dim=1)
    if ties == "topk":
        chosen = torch.topk(distill_factor(class_homophily_sum).float(), min(k, class_homophily_sum.numel()),
                            largest=False).indices
    else:
        chosen = torch.sort(-class_homophily_sum, stable=True).indices[:k]
    top = torch.zeros(class_homophily_sum.numel(), dtype=torch.bool)
    top[chosen] = True
    mask = ~train_mask & (conf >= f_th) & top[pred]
    if d_th > 0:
        mask &= degree >= d_th
    return mask


@dataclass
class ClassSums:
    """One client's upload (spec §2.3). n, b, n_orig: int64 [C]; s1, s2: float64 [C, D]."""
    n: torch.Tensor
    b: torch.Tensor
    n_orig: torch.Tensor
    s1: torch.Tensor
    s2: torch.Tensor

    def floats(self) -> dict[str, torch.Tensor]:
        return {"S1": self.s1, "S2": self.s2}

    def counts(self) -> dict[str, torch.Tensor]:
        return {"n": self.n, "b": self.b, "n_orig": self.n_orig}


def class_sums(xp: torch.Tensor, labels: torch.Tensor, members: torch.Tensor, n_orig: torch.Tensor,
               num_classes: int, min_count: int) -> ClassSums:
    """Sufficient sums of xp [n, D] over the `members` (bool [n]) of each class `labels` [n];
    classes with fewer than `min_count` members send zeros (b = 0). n_orig: labelled counts [C]."""
    idx = members.nonzero().view(-1)
    lab = labels[idx]
    x = xp[idx].double()
    n = torch.bincount(lab, minlength=num_classes)
    b = (n >= min_count).long()
    s1 = torch.zeros(num_classes, xp.shape[1], dtype=torch.float64).index_add_(0, lab, x)
    s2 = torch.zeros(num_classes, xp.shape[1], dtype=torch.float64).index_add_(0, lab, x * x)
    keep = b.bool()
    return ClassSums(n * b, b, n_orig.long() * b, s1 * keep[:, None], s2 * keep[:, None])


@dataclass
class ClientView:
    """What a client keeps locally: its upload, LP soft labels [n, C], w_dist [C], reliable mask [n]."""
    sums: ClassSums
    soft_labels: torch.Tensor
    w_dist: torch.Tensor
    reliable: torch.Tensor


def client_statistics(data: Data, num_classes: int, hops: int, min_count: int, lp_iters: int, lp_alpha: float,
                      hre_k: int, f_th: float, d_th: int, hre_ties: str = "index") -> ClientView:
    """Everything client `data` computes before the upload (its own subgraph only)."""
    n = data.num_nodes
    train = data.train_mask
    soft = label_propagation(data.y, train, data.edge_index, num_classes, lp_iters, lp_alpha)
    homophily = class_homophily(data.y, train, data.edge_index, num_classes)
    reliable = reliable_nodes(soft, train, degrees(data.edge_index, n), homophily, hre_k, f_th, d_th, hre_ties)
    labels = torch.where(train, data.y, soft.argmax(dim=1))
    xp = propagate_features(data.x, data.edge_index, hops)
    n_orig = torch.bincount(data.y[train], minlength=num_classes)
    sums = class_sums(xp, labels, train | reliable, n_orig, num_classes, min_count)
    return ClientView(sums, soft, distill_factor(homophily), reliable)


@dataclass
class PooledStatistics:
    """The server's per-class view after the reveal. counts/contributors/n_orig: int64 [C];
    mean/var: float64 [C, D] (rows of withheld or empty classes are 0); present: bool [C]."""
    counts: torch.Tensor
    contributors: torch.Tensor
    n_orig: torch.Tensor
    mean: torch.Tensor
    var: torch.Tensor
    present: torch.Tensor


def pooled_statistics(counts: dict[str, torch.Tensor], sums: dict[str, torch.Tensor], var_denominator: str = "paper",
                      min_contributors: int = 0) -> PooledStatistics:
    """μ and s² from the revealed sums (Eq. 9 in sufficient-statistics form, spec §2.3).

    counts: {"n", "b", "n_orig"} [C], integers (float counts, e.g. noised by message DP, are rounded
    to the nearest integer ≥ 0); sums: {"S1", "S2"} float [C, D]. var_denominator "paper":
    N − m_c (Eq. 9), "exact": N − 1; denominators below 1 are raised to 1, s² is clamped at 0.
    Classes with N = 0, or fewer than `min_contributors` contributing clients, are withheld."""
    as_int = lambda t: t.round().clamp(min=0).long() if t.is_floating_point() else t.long()
    big_n = as_int(counts["n"])
    m = as_int(counts["b"])
    present = (big_n > 0) & (m >= min_contributors)
    s1, s2 = sums["S1"].double(), sums["S2"].double()
    nf = big_n.double().clamp(min=1)[:, None]
    mean = s1 / nf
    denom = (big_n - m if var_denominator == "paper" else big_n - 1).double().clamp(min=1)[:, None]
    var = ((s2 - nf * mean * mean) / denom).clamp(min=0.0)
    keep = present[:, None]
    return PooledStatistics(big_n * present, m * present, as_int(counts["n_orig"]) * present,
                            mean * keep, var * keep, present)


def pseudo_class_sizes(stats: PooledStatistics, per_class: int, rate: float | None) -> torch.Tensor:
    """n'_c [C] (int64): `per_class` for present classes, or ceil(rate · N_orig^c); 0 for withheld."""
    if rate is None:
        sizes = torch.full_like(stats.counts, per_class)
    else:
        sizes = torch.tensor([math.ceil(rate * int(v)) for v in stats.n_orig], dtype=torch.long)
    return sizes * stats.present
