"""FedLoG's local model (spec A.2): a GraphSAGE embedder shared by real and synthetic nodes, two
prototype-interaction classifiers (head- and tail-degree branches) and the degree-gated mixture.

Shapes: x [n, d] raw features; h [n, D] embeddings (D = embed_dim); prototypes [s·C, D] in
class-major order (rows c·s .. c·s+s−1 are class c); log-probabilities [n, C]."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn.models import GraphSAGE
from torch_geometric.utils import scatter

from privfgl.methods.fedlog.params import FedLoGParams


class PrototypeInteraction(nn.Module):
    """One layer of Eqs. 14-18 at the query v against every prototype j:
    m_vj = MLP_msg([h_v || n_v, d_vj]), d_vj = ||[h_v||n_v] − [h_j||h_j]||², t_vj = (h_v − h_j)·MLP_trans(m_vj),
    h'_v = h_v + mean_j t_vj. The first Linear of MLP_msg is split into its [h_v||n_v] and d_vj columns,
    so the pairwise cost is the d_vj column plus the 64-wide layers after it."""

    def __init__(self, dim: int):
        super().__init__()
        self.msg_in = nn.Linear(2 * dim + 1, dim)
        self.msg_out = nn.Linear(dim, dim)
        self.trans = nn.Sequential(nn.Linear(dim, dim), nn.SiLU(), nn.Linear(dim, dim), nn.SiLU(),
                                   nn.Linear(dim, 1, bias=False))
        nn.init.xavier_uniform_(self.trans[-1].weight, gain=0.001)  # [C]: the update starts near 0

    def forward(self, h: torch.Tensor, n: torch.Tensor, protos: torch.Tensor) -> torch.Tensor:
        dim = h.shape[1]
        dist = sqdist(h, protos) + sqdist(n, protos)            # [B, P]
        w_q, w_d = self.msg_in.weight[:, :2 * dim], self.msg_in.weight[:, 2 * dim]
        base = torch.cat([h, n], 1) @ w_q.T + self.msg_in.bias                          # [B, D]
        m = F.silu(base[:, None, :] + dist[..., None] * w_d)                             # [B, P, D]
        m = F.silu(self.msg_out(m))
        w = self.trans(m).squeeze(-1)                                                    # [B, P]
        return h + h * w.mean(1, keepdim=True) - (w @ protos) / protos.shape[0]


class BranchClassifier(nn.Module):
    """φ_H or φ_T: the paper's stacked prototype-interaction layers, or the authors' code's effective
    form, LayerNorm of the query (spec A.12.3: its message passing adds zeros); in both the
    prototypes are the embedder's outputs as they are (the code's `clsf` normalises only its query)."""

    def __init__(self, dim: int, layers: int, form: str):
        super().__init__()
        self.form = form
        if form == "paper":
            self.layers = nn.ModuleList(PrototypeInteraction(dim) for _ in range(layers))
        else:
            self.norm = nn.LayerNorm(dim)

    def forward(self, h: torch.Tensor, n: torch.Tensor, protos: torch.Tensor, s: int) -> torch.Tensor:
        """log p(c | v) from the negative squared distance to each class's prototype mean (Eq. 4). [B, C]."""
        if self.form == "paper":
            for layer in self.layers:
                h = layer(h, n, protos)
        else:
            h = self.norm(h)
        means = protos.view(-1, s, protos.shape[1]).mean(1)                             # [C, D]
        return (-sqdist(h, means)).log_softmax(-1)


class FedLoGModel(nn.Module):
    """φ_k = {φ_E, φ_H, φ_T}: everything a client uploads (the synthetic features are data, kept apart)."""

    def __init__(self, in_dim: int, p: FedLoGParams):
        super().__init__()
        self.embedder = GraphSAGE(in_dim, p.hidden, num_layers=2, out_channels=p.embed_dim, dropout=p.dropout)
        self.head = BranchClassifier(p.embed_dim, p.classifier_layers, p.classifier)
        self.tail = BranchClassifier(p.embed_dim, p.classifier_layers, p.classifier)


def sqdist(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Squared Euclidean distances [A, B] (no square root, so the gradient is defined at 0)."""
    return ((a * a).sum(1, keepdim=True) - 2 * a @ b.T + (b * b).sum(1)).clamp(min=0)


def gate(degree: torch.Tensor, tail_degree: int) -> torch.Tensor:
    """α = σ(deg − (λ+1)) (Eq. 5): the head branch's weight per node. [n]."""
    return torch.sigmoid(degree.float() - (tail_degree + 1))


def mix(lp_head: torch.Tensor, lp_tail: torch.Tensor, alpha: torch.Tensor, form: str = "prob") -> torch.Tensor:
    """log p of the mixture: log(α p_head + (1−α) p_tail) ("prob", the paper), or the code's
    α log p_head + (1−α) log p_tail ("log", not normalised; used for its loss only). [B, C]."""
    a = alpha.clamp(1e-12, 1 - 1e-12)[:, None]
    if form == "log":
        return a * lp_head + (1 - a) * lp_tail
    return torch.logaddexp(a.log() + lp_head, (1 - a).log() + lp_tail)


def neighbour_mean(h: torch.Tensor, edge_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """n_v = mean of h over v's in-neighbours (0 for an isolated node). [n, D]."""
    src, dst = edge_index
    return scatter(h[src], dst, dim=0, dim_size=num_nodes, reduce="mean")


def in_degree(edge_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    return torch.bincount(edge_index[1], minlength=num_nodes)
