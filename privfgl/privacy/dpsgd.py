"""Node-level DP-SGD for GNNs, with per-sample gradients computed by privfgl (torch.func).

Privacy unit: one node — its features, its label and its incident edges — of a client's graph.
Scheme (after Daigavane et al.), with k = number of layers, N_{D,j} = Σ_{i=0..j} D^i, N_D = N_{D,k}:
1. bound_degree, a local rule: node u ranks its own neighbours v by a priority π_u(v) that depends
   on (seed, id(u), id(v)) only (pair_priorities: BLAKE2b keyed by the seed), top_D(u) is its D
   lowest-priority neighbours (all of them when deg(u) ≤ D), and the undirected edge {u, v} is kept
   iff v ∈ top_D(u) and u ∈ top_D(v). Every node keeps ≤ D neighbours.
2. khop_batch: for every training node t, its k-hop neighbourhood as a padded dense subgraph of at
   most N_D nodes, with the mean-aggregation adjacency Â = (I + A) row-normalised. The root's output
   on it equals its output on the whole bounded graph, because every node within k−1 hops has all
   its neighbours inside.
3. per_sample_grads: vmap(grad(loss of the root)) over the training nodes.
4. Each per-sample gradient is clipped to ||g_t||₂ ≤ C; the sum gets N(0, (σΔ)²) noise with
   Δ = node_sensitivity(C, D, k) = C·(2·N_D − 1), and is divided by the (public) number of
   training nodes. When this Δ holds is stated below.
5. Every step uses all training nodes and is accounted as a Gaussian release with noise
   multiplier σ and sampling rate 1 (no amplification by sampling is claimed: a node's influence
   spans up to N_D samples).

Removing one node w from the client's real graph G. Write B = bound(G), B' = bound(G − w), with the
same seed and the other nodes keeping their ids, so every remaining pair keeps its priorities.
- A node u not adjacent to w in G has the same ranked list, hence the same top_D(u).
- A neighbour u of w loses w from its list: top_D'(u) = top_D(u) ∖ {w}, except when w ∈ top_D(u)
  and deg_G(u) > D, where u "refills": top_D'(u) = top_D(u) ∖ {w} ∪ {x_u}, x_u its (D+1)-th.
- So every top set only grows apart from w: B' ⊇ B − w. The edges of B at w (≤ D) disappear, and
  the added edges are A_w = B' ∖ B ⊆ {{u, x_u} : u refills}: |A_w| ≤ #{u ∈ N_G(w) : deg_G(u) > D,
  w ∈ top_D(u)} ≤ deg_G(w). Nothing else changes (locality): every changed edge is incident to w or
  to a neighbour of w in G, and the nodes whose bounded neighbourhood changes are w, its ≤ D
  neighbours in B and the ≤ 2|A_w| ends of A_w. (The old global rule — one greedy pass over all
  edges in a seeded order — had no such property: a removal cascades through the whole graph.)
Sensitivity. Root t's loss depends only on the neighbour sets in B of the nodes within k−1 hops of
t (and on features within k hops), so t's gradient changes only if a node within k−1 hops of t in B
changed its neighbourhood: t is within k hops of w (≤ N_{D,k} − 1 nodes besides w) or within k−1
hops of an end of an added edge (≤ 2·N_{D,k−1} per edge). Each such gradient moves by ≤ 2C, w's own
sample by ≤ C:
    Δ(w) ≤ C·(2·N_{D,k} − 1) + 4C·N_{D,k−1}·|A_w| = node_sensitivity(C, D, k, refills=|A_w|).
The noise uses refills = 0, so the stated ε holds for node-adjacent pairs (G, G − w) in which
removing w adds no edge to the bounded graph (A_w = ∅) — in particular for every graph of max
degree ≤ D (then B = G and nothing refills). It does NOT hold for every pair of real graphs: |A_w|
is bounded by deg_G(w), not by D and k (a hub whose neighbours each have D more neighbours of
degree 1: about deg_G(w)·D/(D + 1) of them refill, each adding an edge), so no Δ in terms of D and
k alone covers them. For graphs
of max degree ≤ Δ_G (a public bound), node_sensitivity(C, D, k, refills=Δ_G) is a valid Δ.
Measured on Cora (louvain, 10 clients, every node removed once, k = 2, seed 0), gradients that
change besides w's, max / mean over removals: D = 3: 58 / 4.2 (N_D − 1 = 12, exceeded by 68 of
2708 removals; old global rule: 242 / 147, exceeded by 2651); D = 5: 53 / 6.8 (N_D − 1 = 30,
exceeded by 11; old: 229 / 125, exceeded by 2618).
Ids and seed: the statement holds for every seed, so the seed may be public, provided the other
nodes keep their ids in G − w. bound_degree's default ids are positions; a removal that renumbers
the later nodes redraws their priorities, so pass stable ids (node_ids, e.g. a client's global_id).

The model (`MeanGCN`): `layers` layers h ← Â h Wᵀ + b, ReLU between layers, no dropout; its
parameters are named like PyG's GCNConv (`convs.i.lin.weight`, `convs.i.bias`) so FedAvg can
average them.
"""
from __future__ import annotations

import hashlib

import numpy as np
import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap

from privfgl.privacy.clipping import clip_rows
from privfgl.privacy.mechanisms import GaussianMechanism
from privfgl.privacy.noise import NoiseSource

Params = dict[str, torch.Tensor]
SparseRows = tuple[torch.Tensor, torch.Tensor]  # indices [R, s] int64, values [R, s]


def influence_count(max_degree: int, hops: int) -> int:
    """N_D = Σ_{i=0..hops} D^i: the most nodes within `hops` hops of a node when degrees are ≤ D."""
    return sum(max_degree ** i for i in range(hops + 1))


def affected_count(max_degree: int, hops: int, refills: int = 0) -> int:
    """The most per-node gradients, besides the removed node's own, that removing one node changes:
    (N_{D,hops} − 1) + 2·refills·N_{D,hops−1}, where `refills` bounds the edges that the removal adds
    to the bounded graph (module docstring; 0 when the graph has max degree ≤ D)."""
    if refills < 0:
        raise ValueError(f"refills must be >= 0, got {refills}")
    return influence_count(max_degree, hops) - 1 + 2 * refills * influence_count(max_degree, hops - 1)


def node_sensitivity(clip: float, max_degree: int, hops: int, refills: int = 0) -> float:
    """L2 sensitivity of a sum of per-node clipped gradients to removing one node: C·(2·N_D − 1)
    when the removal adds no edge to the bounded graph (refills = 0), C·(2·N_D − 1) + 4C·N_{D,hops−1}
    ·refills when it adds at most `refills` (module docstring)."""
    return clip * (1 + 2 * affected_count(max_degree, hops, refills))


def bound_degree(edge_index: torch.Tensor, num_nodes: int, max_degree: int, seed: int, *,
                 node_ids: torch.Tensor | None = None) -> torch.Tensor:
    """edge_index [2, E] (any direction, duplicates and self loops allowed) -> symmetric edge_index
    [2, E'] without self loops, a subset of the input's edges, in which every node has at most
    `max_degree` = D neighbours.

    Local rule (module docstring): node u ranks its own neighbours v by the priority
    `pair_priorities(seed, id(u), id(v))`, which depends on (seed, id(u), id(v)) only, and the
    undirected edge {u, v} is kept iff v is among u's D lowest-priority neighbours and u among v's
    (a node with at most D neighbours accepts all of them). `node_ids` [num_nodes] gives each
    node's stable id (default: its index), so the other nodes keep their priorities when a node is
    removed and the rest relabelled. Deterministic per (seed, ids); equal 64-bit priorities (about
    deg²·2⁻⁶⁵ likely per node) are ordered by neighbour id. Cost: one keyed hash per undirected
    edge with an end of degree > D, and one sort of those edges' directed copies: O(E log E)."""
    if max_degree < 1:
        raise ValueError(f"degree bound must be >= 1, got {max_degree}")
    n = int(num_nodes)
    ids = np.arange(n, dtype=np.int64) if node_ids is None else node_ids.cpu().numpy().astype(np.int64)
    if node_ids is not None and (ids.shape != (n,) or (n and ids.min() < 0) or len(np.unique(ids)) != n):
        raise ValueError(f"node_ids must be {n} distinct non-negative ids, got shape {tuple(ids.shape)}")
    ei = edge_index.cpu().numpy().astype(np.int64, copy=False)
    ei = ei[:, ei[0] != ei[1]]
    keys = np.sort(np.minimum(ei[0], ei[1]) * n + np.maximum(ei[0], ei[1]))
    keys = keys[np.concatenate([[True], keys[1:] != keys[:-1]])] if len(keys) else keys
    pairs = len(keys)
    src = np.concatenate([keys // n, keys % n])  # directed copies: i and i + pairs are one edge
    dst = np.concatenate([keys % n, keys // n])
    degree = np.bincount(src, minlength=n)
    ranked = degree[src] > max_degree  # only a node with more than D neighbours has to choose
    hashed = ranked[:pairs] | ranked[pairs:]
    priority = np.zeros(2 * pairs, dtype=np.uint64)
    if hashed.any():
        priority[np.concatenate([hashed, hashed])] = pair_priorities(
            seed, ids[src[:pairs][hashed]], ids[dst[:pairs][hashed]]).reshape(-1)
    chosen = ~ranked
    r = np.flatnonzero(ranked)
    order = r[np.lexsort((ids[dst[r]], priority[r], src[r]))]  # by node, then its priority for the neighbour
    starts = np.flatnonzero(np.concatenate([[True], src[order][1:] != src[order][:-1]])) if len(order) else order
    rank = np.arange(len(order)) - np.repeat(starts, np.diff(np.append(starts, len(order))))
    chosen[order] = rank < max_degree  # among src's D lowest-priority neighbours
    kept = np.stack([src[:pairs], dst[:pairs]])[:, chosen[:pairs] & chosen[pairs:]]
    und = torch.as_tensor(kept, dtype=torch.long)
    return torch.cat([und, und.flip(0)], dim=1)


def pair_priorities(seed: int, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Both ends' priorities for the undirected edges {u_i, v_i}: uint64 [2, len(u)], row 0 is u's
    priority for v and row 1 v's for u. One BLAKE2b digest keyed by the seed over (min id, max id)
    (uint64 little-endian): its first 8 bytes are the smaller id's priority, its last 8 the larger
    id's. So a node's priority for a neighbour depends on (seed, its id, the neighbour's id) only,
    the two ends' priorities are independent outputs of the keyed hash, and seeds differ."""
    u, v = np.asarray(u, dtype=np.int64), np.asarray(v, dtype=np.int64)
    a, b = np.minimum(u, v), np.maximum(u, v)
    base = hashlib.blake2b(key=int(seed).to_bytes(16, "little", signed=True), digest_size=16,
                           person=b"privfgl.degree")
    msg = np.stack([a, b], axis=1).astype("<u8").tobytes()

    def digest(i: int) -> bytes:
        h = base.copy()
        h.update(msg[i:i + 16])
        return h.digest()
    out = np.frombuffer(b"".join([digest(i) for i in range(0, len(msg), 16)]), dtype="<u8").reshape(-1, 2)
    first = (u <= v)
    return np.stack([np.where(first, out[:, 0], out[:, 1]), np.where(first, out[:, 1], out[:, 0])]).astype(np.uint64)


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


def clipped_sum(flat: torch.Tensor, clip: float, extra: SparseRows | None = None) -> torch.Tensor:
    """Σ_t clip(g_t) [d] float64 over the per-node gradients flat [T, d] and, for an auditor, `extra`
    per-node gradients held sparsely (attacks/dp/gradient_canaries.py): indices [R, s] (distinct within a
    row, so clipping a row's s values clips the row) and values [R, s]."""
    total = clip_rows(flat, clip).sum(0)
    if extra is not None:
        indices, values = extra
        total = total.index_add(0, indices.reshape(-1), clip_rows(values, clip).reshape(-1))
    return total


def private_gradient(grads: Params, clip: float, mechanism: GaussianMechanism, source: NoiseSource,
                     denominator: float, extra: SparseRows | None = None) -> Params:
    """(Σ_t clip(g_t) + N(0, (σΔ)²)) / denominator, per parameter; grads {name: [T, *shape]}, flattened in
    their order; `extra`: more per-node gradients in that flat layout (clipped_sum)."""
    names = list(grads)
    flat = torch.cat([grads[n].reshape(grads[n].shape[0], grads[n].shape[1:].numel()) for n in names], dim=1)
    total = clipped_sum(flat, clip, extra)
    noisy = (total + mechanism.noise(total.shape, source)) / denominator
    out, i = {}, 0
    for n in names:
        size = grads[n].shape[1:].numel()
        out[n] = noisy[i:i + size].reshape(grads[n].shape[1:]).to(grads[n].dtype)
        i += size
    return out
