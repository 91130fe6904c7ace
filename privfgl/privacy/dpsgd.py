"""Node-level DP-SGD for GNNs, with per-sample gradients computed by privfgl (torch.func).

Privacy unit: one node — its features, its label and its incident edges — of a client's graph
after degree bounding (every node keeps at most D neighbours; the graph is symmetric, so in- and
out-degree are both ≤ D). Scheme (after Daigavane et al. 2021):
1. bound_degree: keep undirected edges in a seeded random order while both ends have degree < D.
2. khop_batch: for every training node t, its k-hop neighbourhood (k = number of layers) as a
   padded dense subgraph of at most N_D = Σ_{i=0..k} D^i nodes, with the mean-aggregation
   adjacency Â = (I + A) row-normalised. The root's output on it equals its output on the whole
   bounded graph, because every node within k−1 hops has all its neighbours inside.
3. per_sample_grads: vmap(grad(loss of the root)) over the training nodes.
4. Each per-sample gradient is clipped to ||g_t||₂ ≤ C; the sum gets N(0, (σΔ)²) noise with
       Δ = C · (2·N_D − 1):
   removing node v deletes its own sample (≤ C) and changes the gradient of every other node
   within k hops of v (at most N_D − 1 of them, each by ≤ 2C); nothing else depends on v.
   The noisy sum is divided by the (public) number of training nodes.
5. Every step uses all training nodes and is accounted as a Gaussian release with noise
   multiplier σ and sampling rate 1 (no amplification by sampling is claimed: a node's influence
   spans up to N_D samples). Degree bounding is preprocessing outside the guarantee (as in
   Daigavane et al.): ε holds for node-adjacent graphs of max degree D.

The model (`MeanGCN`): `layers` layers h ← Â h Wᵀ + b, ReLU between layers, no dropout; its
parameters are named like PyG's GCNConv (`convs.i.lin.weight`, `convs.i.bias`) so FedAvg can
average them.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap

from privfgl.privacy.clipping import clip_rows
from privfgl.privacy.mechanisms import GaussianMechanism
from privfgl.privacy.noise import NoiseSource

Params = dict[str, torch.Tensor]


def influence_count(max_degree: int, hops: int) -> int:
    """N_D = Σ_{i=0..hops} D^i: the most nodes within `hops` hops of a node when degrees are ≤ D."""
    return sum(max_degree ** i for i in range(hops + 1))


def node_sensitivity(clip: float, max_degree: int, hops: int) -> float:
    """L2 sensitivity C·(2·N_D − 1) of a sum of per-node clipped gradients to removing one node."""
    return clip * (2 * influence_count(max_degree, hops) - 1)


def bound_degree(edge_index: torch.Tensor, num_nodes: int, max_degree: int, seed: int) -> torch.Tensor:
    """edge_index [2, E] (any direction, duplicates allowed) -> symmetric edge_index [2, E'] without
    self loops in which every node has at most `max_degree` neighbours (seeded greedy choice)."""
    if max_degree < 1:
        raise ValueError(f"degree bound must be >= 1, got {max_degree}")
    ei = edge_index.cpu().numpy()
    pairs = np.unique(np.sort(ei[:, ei[0] != ei[1]].T, axis=1), axis=0)
    order = np.random.default_rng(seed).permutation(len(pairs))
    degree = np.zeros(num_nodes, dtype=np.int64)
    kept = []
    for u, v in pairs[order]:
        if degree[u] < max_degree and degree[v] < max_degree:
            degree[u] += 1
            degree[v] += 1
            kept.append((u, v))
    if not kept:
        return torch.zeros(2, 0, dtype=torch.long)
    und = torch.as_tensor(np.array(kept).T, dtype=torch.long)
    return torch.cat([und, und.flip(0)], dim=1)


def mean_adjacency(edge_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """Sparse [N, N] Â = (I + A) with rows normalised to sum 1 (edge_index symmetric, no self loops)."""
    loops = torch.arange(num_nodes).repeat(2, 1)
    ei = torch.cat([edge_index, loops], dim=1)
    deg = torch.bincount(ei[0], minlength=num_nodes).double()
    values = (1.0 / deg[ei[0]]).float()
    return torch.sparse_coo_tensor(ei, values, (num_nodes, num_nodes), check_invariants=True).coalesce()


def khop_batch(edge_index: torch.Tensor, num_nodes: int, targets: torch.Tensor, hops: int,
               max_degree: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Padded k-hop subgraphs of `targets` [T] on a degree-bounded symmetric graph.

    Returns nodes [T, M] (global ids; root first; padding = num_nodes, a zero feature row) and
    adj [T, M, M] float32 (Â restricted to the subgraph; rows of nodes within hops−1 are exact),
    with M = N_D."""
    m = influence_count(max_degree, hops)
    nbrs = [[] for _ in range(num_nodes)]
    for u, v in edge_index.t().tolist():
        nbrs[u].append(v)
    nodes = torch.full((len(targets), m), num_nodes, dtype=torch.long)
    adj = torch.zeros(len(targets), m, m)
    for i, t in enumerate(targets.tolist()):
        order, depth = [t], {t: 0}
        for u in order:  # BFS; `order` grows while iterating
            if depth[u] < hops:
                for v in nbrs[u]:
                    if v not in depth:
                        depth[v] = depth[u] + 1
                        order.append(v)
        if len(order) > m:
            raise ValueError(f"node {t} has {len(order)} nodes within {hops} hops > N_D = {m}: degree not bounded")
        pos = {u: j for j, u in enumerate(order)}
        nodes[i, :len(order)] = torch.tensor(order)
        for u, j in pos.items():
            row = [j] + [pos[v] for v in nbrs[u] if v in pos]
            adj[i, j, row] = 1.0 / len(row)
    return nodes, adj


class MeanGCN(torch.nn.Module):
    """`layers` mean-aggregation graph convolutions: h ← Â (h Wᵀ) + b, ReLU between layers.

    forward(x [..., M, f], adj [..., M, M] dense, or adj sparse [N, N] with x [N, f]) -> logits."""

    def __init__(self, in_dim: int, hidden: int, out_dim: int, layers: int):
        super().__init__()
        dims = [in_dim] + [hidden] * (layers - 1) + [out_dim]
        self.convs = torch.nn.ModuleList(_Conv(a, b) for a, b in zip(dims[:-1], dims[1:]))

    def forward(self, x: torch.Tensor, adj: torch.Tensor) -> torch.Tensor:
        for i, conv in enumerate(self.convs):
            x = conv(x, adj)
            if i < len(self.convs) - 1:
                x = F.relu(x)
        return x


class _Conv(torch.nn.Module):
    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        self.lin = torch.nn.Linear(in_dim, out_dim, bias=False)
        self.bias = torch.nn.Parameter(torch.zeros(out_dim))

    def forward(self, x: torch.Tensor, adj: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        return (torch.sparse.mm(adj, h) if adj.is_sparse else adj @ h) + self.bias


def per_sample_grads(model: torch.nn.Module, params: Params, x: torch.Tensor, adj: torch.Tensor,
                     y: torch.Tensor) -> Params:
    """Gradient of each root's cross-entropy: x [T, M, f], adj [T, M, M], y [T] -> {name: [T, *shape]}."""
    def loss(p, xs, a, ys):
        logits = functional_call(model, p, (xs, a))[0]
        return F.cross_entropy(logits[None], ys[None])
    return vmap(grad(loss), in_dims=(None, 0, 0, 0))(params, x, adj, y)


def private_gradient(grads: Params, clip: float, mechanism: GaussianMechanism, source: NoiseSource,
                     denominator: float) -> Params:
    """(Σ_t clip(g_t) + N(0, (σΔ)²)) / denominator, per parameter; grads {name: [T, *shape]}."""
    names = list(grads)
    flat = torch.cat([grads[n].reshape(grads[n].shape[0], -1) for n in names], dim=1)
    total = clip_rows(flat, clip).sum(0)
    noisy = (total + mechanism.noise(total.shape, source)) / denominator
    out, i = {}, 0
    for n in names:
        size = grads[n][0].numel()
        out[n] = noisy[i:i + size].reshape(grads[n].shape[1:]).to(grads[n].dtype)
        i += size
    return out
