"""O-pFGL global pseudo-graph condensation (spec §1.6, Eq. 10-12, authors' code defaults).

Learnable features X' [n', f] ~ N(0, 1) with fixed labels Y'; a link predictor g_θ (MLP
2f → hidden → hidden → 1 with BatchNorm + ReLU) scores every ordered pair; the adjacency is
P = σ((G + Gᵀ)/2) with a zero diagonal and weighted edges A' = P ⊙ 1[P ≥ δ]. Loss:
    feat_alpha · Σ_c λ_c [MSE(mean_c X'^prop, μ^c) + 1[n'_c > 1] · MSE(std_c X'^prop, σ^c)]
  + smoothness_alpha · Σ_ij A'_ij mean_d exp(−(x'_id − x'_jd)²/2) / Σ_ij A'_ij
with X'^prop = [X' ‖ ÂX' ‖ …] over Â = gcn_norm(A'), λ_c = N^c / Σ N. Adam on θ for iterations
`it mod 50 < 10`, on X' otherwise.

Deviations, tagged: [code] the std (not the variance) is matched unless align="variance";
[inferred] the std is floored at 1e-6 (STD_FLOOR) so that a zero variance gives no NaN gradient;
[code] the final adjacency is g_θ without gradient but with BatchNorm still on batch statistics
(the authors' `inference` leaves the module in training mode); [inferred] the smoothness term is 0
when no edge survives (the code divides by zero); [inferred] classes with N^c = 0 get no pseudo-node.
The first linear layer on [x_i ‖ x_j] is computed as W_a x_i + W_b x_j (same function, n'·f
instead of n'²·f work).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from privfgl.methods.opfgl.stats import PooledStatistics

ADJ_CYCLE, ADJ_STEPS = 50, 10  # θ is updated on iterations it % 50 < 10 (authors' code)
# The std is sqrt(max(var, STD_FLOOR)): where a class's target std is 0 (absent words), Adam pulls
# its pseudo-nodes' coordinates together until the variance is exactly 0, and sqrt's gradient
# there (inf · 0) turns X' into NaN; below the floor the std term has no gradient instead.
STD_FLOOR = 1e-12


@dataclass
class PseudoGraph:
    """The broadcast pseudo-graph: x [n', f] float32, edge_index [2, E] int64 (both directions),
    edge_weight [E] float32 in [δ, 1], y [n'] int64."""
    x: torch.Tensor
    edge_index: torch.Tensor
    edge_weight: torch.Tensor
    y: torch.Tensor

    def tensors(self) -> dict[str, torch.Tensor]:
        return {"x": self.x, "edge_index": self.edge_index, "edge_weight": self.edge_weight, "y": self.y}

    @classmethod
    def from_tensors(cls, t: dict[str, torch.Tensor]) -> "PseudoGraph":
        return cls(t["x"], t["edge_index"], t["edge_weight"], t["y"])

    def dense_adjacency(self) -> torch.Tensor:
        """Weighted adjacency [n', n'] (zero diagonal)."""
        n = self.y.numel()
        adj = torch.zeros(n, n, dtype=self.x.dtype, device=self.x.device)
        adj[self.edge_index[0], self.edge_index[1]] = self.edge_weight
        return adj


def gcn_norm_dense(adj: torch.Tensor) -> torch.Tensor:
    """D̃^-1/2 (A + I) D̃^-1/2 of a dense weighted adjacency with a zero diagonal, [n, n]."""
    a = adj + torch.eye(adj.shape[0], dtype=adj.dtype, device=adj.device)
    inv = a.sum(dim=0).rsqrt()
    return inv[:, None] * a * inv[None, :]


class LinkPredictor(nn.Module):
    """g_θ: edge score for every ordered pair of rows of x [n, f] -> P [n, n] (symmetric, zero diagonal)."""

    def __init__(self, num_features: int, hidden: int = 128):
        super().__init__()
        self.num_features = num_features
        self.lins = nn.ModuleList([nn.Linear(2 * num_features, hidden), nn.Linear(hidden, hidden),
                                   nn.Linear(hidden, 1)])
        self.bns = nn.ModuleList([nn.BatchNorm1d(hidden), nn.BatchNorm1d(hidden)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, f = x.shape
        w = self.lins[0].weight
        left, right = x @ w[:, :f].T, x @ w[:, f:].T                       # [n, hidden] each
        h = (left[:, None, :] + right[None, :, :]).reshape(n * n, -1) + self.lins[0].bias
        for lin, bn in zip(self.lins[1:], self.bns):
            h = lin(F.relu(bn(h)))
        g = h.view(n, n)
        p = torch.sigmoid((g + g.T) / 2)
        return p - torch.diag(torch.diag(p))


def _propagate(x: torch.Tensor, norm_adj: torch.Tensor, hops: int) -> torch.Tensor:
    out, h = [x], x
    for _ in range(hops):
        h = norm_adj @ h
        out.append(h)
    return torch.cat(out, dim=1)


def _smoothness(x: torch.Tensor, adj: torch.Tensor) -> torch.Tensor:
    total = adj.sum()
    if float(total.detach()) == 0.0:
        return total
    pair = torch.exp(-0.5 * (x[:, None, :] - x[None, :, :]) ** 2).mean(dim=2)   # [n, n]
    return (adj * pair).sum() / total


def condense(stats: PooledStatistics, sizes: torch.Tensor, num_features: int, hops: int, *, iters: int,
             lr_feat: float, lr_adj: float, hidden: int, threshold: float, feat_alpha: float,
             smoothness_alpha: float, align: str, seed: int, device: str | torch.device = "cpu") -> PseudoGraph:
    """Fit a pseudo-graph with sizes[c] nodes of class c to the pooled statistics (deterministic per seed).

    stats.mean / stats.var: [C, (hops+1)·num_features]; sizes: int64 [C]."""
    device = torch.device(device)
    labels = torch.repeat_interleave(torch.arange(sizes.numel()), sizes).to(device)
    classes = sizes.nonzero().view(-1).to(device)                        # [C'] classes with pseudo-nodes
    position = torch.searchsorted(classes, labels)                        # pseudo-node -> row in classes
    n_c = sizes.to(device)[classes].float()
    member = torch.nn.functional.one_hot(position, classes.numel()).T.float()   # [C', n']
    weight = (stats.counts.double() / stats.counts.sum().clamp(min=1)).float().to(device)[classes]
    mean = stats.mean.float().to(device)[classes]
    target = (stats.var.sqrt() if align == "std" else stats.var).float().to(device)[classes]
    spread_on = (n_c > 1).float()
    any_spread = bool(spread_on.any())                                    # False with one pseudo-node per class

    torch.manual_seed(seed)
    x = torch.randn(labels.numel(), num_features, device=device).requires_grad_(True)
    link = LinkPredictor(num_features, hidden).to(device)
    opt_x = torch.optim.Adam([x], lr=lr_feat, fused=True)
    opt_link = torch.optim.Adam(link.parameters(), lr=lr_adj, fused=True)

    for it in range(iters):
        adj_step = it % ADJ_CYCLE < ADJ_STEPS
        x.requires_grad_(not adj_step)
        for q in link.parameters():
            q.requires_grad_(adj_step)
        p = link(x)
        adj = p * (p >= threshold)
        xp = _propagate(x, gcn_norm_dense(adj), hops)
        class_mean = (member @ xp) / n_c[:, None]                          # [C', D]
        loss_c = ((class_mean - mean) ** 2).mean(dim=1)
        if any_spread:
            sq = member @ (xp - class_mean[position]) ** 2 / (n_c - 1).clamp(min=1)[:, None]
            spread = sq.clamp(min=STD_FLOOR).sqrt() if align == "std" else sq
            loss_c = loss_c + spread_on * ((spread - target) ** 2).mean(dim=1)
        loss = feat_alpha * (weight * loss_c).sum() + smoothness_alpha * _smoothness(x, adj)
        opt = opt_link if adj_step else opt_x
        opt.zero_grad()
        loss.backward()
        opt.step()

    x.requires_grad_(False)
    with torch.no_grad():
        p = link(x)
        adj = p * (p >= threshold)
    edge_index = adj.nonzero().T
    return PseudoGraph(x.detach().clone(), edge_index, adj[edge_index[0], edge_index[1]].clone(), labels)
