"""Client-side prompts of FedGPL and its baselines (spec B.4, B.8): each maps a batch of sample
graphs (x [n, d], edge_index [2, e], batch [n]) to the prompted batch that crosses the split as M1.

- `VPG` (FedGPL, the authors' code form, k' = 0): a learnable p ∈ R^d scores every node
  score_i = tanh(x_i·p/||p||); each graph keeps its ceil(node_ratio·n_g) highest-scoring nodes,
  reweighted x_i·score_i (the only differentiable path to p); edges among kept nodes are ranked by
  |score_i − score_j| and the top edge_ratio of them (over the batch, largest first) are kept.
- `VPG(candidates=k)` (FedGPL*): also k learnable candidate nodes per graph, joined to node j when
  sigmoid(c_i·x_j) ≥ gamma (the paper's "<" read as ProG's "≥", spec B.10.4), scored and pruned
  with the graph's own nodes.
- `GPF`: a learnable p ∈ R^d added to every node's features (Fang et al.); the graph is unchanged.
- `ProGPrompt`: ProG's "all in one" prompt graph: `tokens` learnable token nodes joined to each
  other when sigmoid(t_i·t_j) ≥ inner_prune and to node j when sigmoid(t_i·x_j) ≥ cross_prune.

`GPF` and `ProGPrompt` also take their gradient from the received M4 alone
(`grad_from_feature_grads`): their output rows are x + p and the token rows themselves, so the
Jacobian does not involve the private features. VPG's does (x_i·tanh(x_i·p/||p||)): it has none.

`Head`: Linear(hidden → C) logits (the code's softmax-then-CE double softmax is dropped, B.10.11).

After each forward a prompt's `last_rows` [ñ] says which input row each output row came from (−1
for rows the prompt made: candidates, tokens). It is the auditor's record for scoring attacks on
M1 (never sent).
"""
from __future__ import annotations

import math

import torch
from torch import nn
from torch_geometric.nn.pool.select.topk import topk
from torch_geometric.utils import subgraph

Prompted = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # x [ñ, d], edge_index [2, ẽ], batch [ñ]


def _attach_tokens(tokens: torch.Tensor, x: torch.Tensor, edge_index: torch.Tensor, batch: torch.Tensor,
                   num_graphs: int, cross: float, inner: float | None) -> Prompted:
    """Append the k token rows to every graph of the batch and connect them: token–node edges where
    sigmoid(t·x) ≥ cross, token–token edges where sigmoid(t·t) ≥ inner (None: none). Both directions."""
    k, n = tokens.shape[0], x.shape[0]
    token_x = tokens.repeat(num_graphs, 1)                                   # [B·k, d]
    token_batch = torch.arange(num_graphs).repeat_interleave(k)              # [B·k]
    with torch.no_grad():
        link = torch.sigmoid(x @ tokens.T) >= cross                          # [n, k]
    node, slot = link.nonzero(as_tuple=True)
    tok = n + batch[node] * k + slot
    edges = [edge_index, torch.stack([node, tok]), torch.stack([tok, node])]
    if inner is not None:
        with torch.no_grad():
            inner_link = torch.sigmoid(tokens @ tokens.T) >= inner
            inner_link.fill_diagonal_(False)
        a, b = inner_link.nonzero(as_tuple=True)
        offsets = (torch.arange(num_graphs) * k).repeat_interleave(len(a))
        edges.append(torch.stack([n + offsets + a.repeat(num_graphs), n + offsets + b.repeat(num_graphs)]))
    return torch.cat([x, token_x]), torch.cat(edges, dim=1), torch.cat([batch, token_batch])


class VPG(nn.Module):
    """Virtual Prompt Graph. dim: feature width d; node_ratio α_n; edge_ratio α_e; candidates k'
    (0: the code form; > 0: FedGPL*); gamma: the candidates' link threshold."""

    def __init__(self, dim: int, node_ratio: float = 0.5, edge_ratio: float = 0.9, candidates: int = 0,
                 gamma: float = 0.5, seed: int = 0):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.p = nn.Parameter(torch.randn(dim, generator=gen) / math.sqrt(dim))
        self.candidates = nn.Parameter(torch.randn(candidates, dim, generator=gen) / math.sqrt(dim)) \
            if candidates else None
        self.node_ratio, self.edge_ratio, self.gamma = node_ratio, edge_ratio, gamma

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, batch: torch.Tensor, num_graphs: int) -> Prompted:
        if self.candidates is not None:
            x, edge_index, batch = _attach_tokens(self.candidates, x, edge_index, batch, num_graphs,
                                                  cross=self.gamma, inner=None)
        n_in = x.shape[0] - (num_graphs * self.candidates.shape[0] if self.candidates is not None else 0)
        score = torch.tanh(x @ self.p / self.p.norm())                       # [n]
        keep = topk(score, self.node_ratio, batch)                           # kept node ids, per graph
        self.last_rows = torch.where(keep < n_in, keep, -1)
        x_kept = x[keep] * score[keep].unsqueeze(-1)
        edges, _ = subgraph(keep, edge_index, relabel_nodes=True, num_nodes=x.shape[0])
        if edges.shape[1] and self.edge_ratio < 1.0:
            kept_score = score[keep].detach()
            strength = (kept_score[edges[0]] - kept_score[edges[1]]).abs()
            count = math.ceil(self.edge_ratio * edges.shape[1])
            edges = edges[:, strength.topk(count).indices.sort().values]
        return x_kept, edges, batch[keep]


class GPF(nn.Module):
    """Graph Prompt Feature: x + p for every node; the graph is unchanged."""

    def __init__(self, dim: int, seed: int = 0):
        super().__init__()
        self.p = nn.Parameter(torch.zeros(dim))
        del seed  # deterministic init (zeros), kept for a uniform constructor

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, batch: torch.Tensor, num_graphs: int) -> Prompted:
        self.last_rows = torch.arange(x.shape[0])
        return x + self.p, edge_index, batch

    def grad_from_feature_grads(self, feature_grads: torch.Tensor, num_graphs: int) -> None:
        """Adds ∂L/∂p of the batch-mean loss to p.grad from M4 alone: Σ_rows M4 / B (M4 [ñ, d])."""
        _accumulate(self.p, feature_grads.sum(0) / num_graphs)


class ProGPrompt(nn.Module):
    """ProG's all-in-one prompt graph of `tokens` learnable nodes per sample graph."""

    def __init__(self, dim: int, tokens: int = 10, cross_prune: float = 0.1, inner_prune: float = 0.3,
                 seed: int = 0):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.tokens = nn.Parameter(torch.randn(tokens, dim, generator=gen) / math.sqrt(dim))
        self.cross, self.inner = cross_prune, inner_prune

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, batch: torch.Tensor, num_graphs: int) -> Prompted:
        out = _attach_tokens(self.tokens, x, edge_index, batch, num_graphs, self.cross, self.inner)
        self.last_rows = torch.cat([torch.arange(x.shape[0]), torch.full((out[0].shape[0] - x.shape[0],), -1)])
        return out

    def grad_from_feature_grads(self, feature_grads: torch.Tensor, num_graphs: int) -> None:
        """Adds ∂L/∂tokens of the batch-mean loss from M4 alone: the token rows are the last B·k rows
        (graph-major), each a copy of its token, so their M4 rows summed over the graphs, / B."""
        k = self.tokens.shape[0]
        rows = feature_grads[feature_grads.shape[0] - num_graphs * k:]
        _accumulate(self.tokens, rows.reshape(num_graphs, k, -1).sum(0) / num_graphs)


def _accumulate(param: nn.Parameter, grad: torch.Tensor) -> None:
    grad = grad.to(param.dtype)
    param.grad = grad if param.grad is None else param.grad + grad


class Head(nn.Module):
    """H [B, hidden] -> logits [B, C]."""

    def __init__(self, hidden: int, num_classes: int, seed: int = 0):
        super().__init__()
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            self.linear = nn.Linear(hidden, num_classes)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.linear(h)


PROMPTS = {"vpg": VPG, "gpf": GPF, "prog": ProGPrompt}


def make_prompt(kind: str, dim: int, seed: int, node_ratio: float = 0.5, edge_ratio: float = 0.9,
                candidates: int = 0, gamma: float = 0.5, tokens: int = 10) -> nn.Module:
    """The client prompt named `kind` (PROMPTS)."""
    if kind == "vpg":
        return VPG(dim, node_ratio, edge_ratio, candidates, gamma, seed)
    if kind == "gpf":
        return GPF(dim, seed)
    if kind == "prog":
        return ProGPrompt(dim, tokens, seed=seed)
    raise ValueError(f"fedgpl: unknown prompt {kind!r}; valid: {', '.join(PROMPTS)}")
