"""LapGraph's release of one client's graph (LinkTeller, S&P 2022, §VI "LapGraph"; the authors'
`perturb_adj_continuous` in worker.py), computed once, before any training.

A = the client's symmetric 0/1 adjacency [n, n] (self loops dropped; an undirected edge {u, v} is the one
upper-triangle entry A[min(u, v), max(u, v)]); m = n(n−1)/2 upper-triangle entries, |E| = their sum.
1. Entries: Ã_ij = A_ij + Lap(1/ε_entries) for every i < j. One undirected edge changes exactly one entry
   by 1: L1 sensitivity 1, so the noisy triangle is ε_entries-DP.
2. Count: T̃ = |E| + Lap(1/ε_count), rounded and clipped to [0, m]. One edge changes |E| by 1: L1
   sensitivity 1, ε_count-DP.
   Together (basic composition, exact for pure DP): ε = ε_entries + ε_count, δ = 0.
3. `rank` k > 0 (the Eclipse-style variant, docs/eclipse.md): the noisy symmetric matrix is truncated to
   its top-k singular triplets (torch.linalg.svd).
4. `select` top (the authors'): the T̃ largest entries of the (truncated) noisy triangle are the released
   undirected edges. `select` map: each noisy entry y is kept iff its posterior probability of being an edge
   is >= 1/2, with the Laplace likelihood ratio f(y − 1)/f(y) = exp(ε_entries·(|y| − |y − 1|)) and the prior
   P(edge) = T̃/m (`map_keep`): the per-entry Bayes decision, which keeps nothing where no noisy value can
   outweigh the prior (ε_entries < log((m − T̃)/T̃)) and nearly the top-T̃ where the noise is small.
Steps 3 and 4 read only the two noisy releases and the public n: post-processing. Noise comes from the client's
NoiseSource (privfgl/privacy/noise.py: OS entropy or a seeded torch generator).

Audit canaries (attacks/dp/lapgraph_audit.py): R extra entries (pairs of canary nodes appended to the
matrix, each pair's 0/1 entry the auditor's coin) are noised in the same draw as the real triangle and
returned separately; they never enter the count, the selection, training or accuracy.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from privfgl.methods.lapgraph.params import LapGraphParams
from privfgl.privacy.noise import NoiseSource


@dataclass(frozen=True)
class Release:
    """One client's release: `edge_index` [2, 2E'] (both directions of the E' released edges: E' = T̃ under
    `select` top), `count` T̃,
    `canaries` [R] float64 (the noisy canary entries; None without canaries)."""
    edge_index: torch.Tensor
    count: int
    canaries: torch.Tensor | None


def upper_entries(edge_index: torch.Tensor, n: int) -> torch.Tensor:
    """[n(n−1)/2] float64: the 0/1 upper triangle (row-major, i < j) of the symmetrised adjacency of
    edge_index [2, E] (either direction of an edge, or both, gives the same entry; self loops dropped)."""
    u, v = edge_index
    keep = u != v
    i, j = torch.minimum(u, v)[keep], torch.maximum(u, v)[keep]
    dense = torch.zeros(n, n, dtype=torch.float64)
    dense[i, j] = 1.0
    rows, cols = torch.triu_indices(n, n, offset=1)
    return dense[rows, cols]


def low_rank(entries: torch.Tensor, n: int, rank: int) -> torch.Tensor:
    """The upper triangle [n(n−1)/2] of the rank-`rank` SVD truncation of the symmetric matrix (zero
    diagonal) whose upper triangle is `entries`."""
    rows, cols = torch.triu_indices(n, n, offset=1)
    dense = torch.zeros(n, n, dtype=torch.float64)
    dense[rows, cols] = entries
    dense = dense + dense.T
    u, s, vh = torch.linalg.svd(dense)
    k = min(rank, n)
    return ((u[:, :k] * s[:k]) @ vh[:k])[rows, cols]


def map_keep(noisy: torch.Tensor, count: int, epsilon_entries: float) -> torch.Tensor:
    """[m] bool: the noisy entries [m] whose posterior log-odds of being an edge,
    log(T̃ / (m − T̃)) + ε_entries·(|y| − |y − 1|), are >= 0 (prior T̃/m, T̃ = `count`, the noisy count)."""
    m = noisy.numel()
    if count <= 0 or count >= m:
        return torch.full((m,), count > 0, dtype=torch.bool)
    log_odds = math.log(count / (m - count)) + epsilon_entries * (noisy.abs() - (noisy - 1.0).abs())
    return log_odds >= 0


def release(edge_index: torch.Tensor, n: int, p: LapGraphParams, source: NoiseSource,
            canaries: torch.Tensor | None = None) -> Release:
    """The client's LapGraph release of its graph (n nodes, edge_index [2, E]); `canaries` [R] 0/1 float64:
    audit entries noised with the triangle (module docstring)."""
    entries = upper_entries(edge_index, n)
    m = entries.numel()
    values = entries if canaries is None else torch.cat([entries, canaries.double()])
    noisy = values + source.laplace(values.shape, 1.0 / p.epsilon_entries)
    noisy, noisy_canaries = noisy[:m], (None if canaries is None else noisy[m:])
    count = float(entries.sum()) + float(source.laplace((1,), 1.0 / p.epsilon_count)[0])
    count = int(min(max(round(count), 0), m))
    if p.rank > 0:
        noisy = low_rank(noisy, n, p.rank)
    if p.select == "map":
        kept = map_keep(noisy, count, p.epsilon_entries).nonzero().flatten()
    else:
        kept = torch.topk(noisy, count).indices
    rows, cols = torch.triu_indices(n, n, offset=1)
    i, j = rows[kept], cols[kept]
    return Release(torch.stack([torch.cat([i, j]), torch.cat([j, i])]), count, noisy_canaries)
