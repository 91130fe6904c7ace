"""GAP's aggregation perturbation (Sajadmanesh et al., USENIX Security 2023, "GAP: Differentially
Private Graph Neural Networks with Aggregation Perturbation"; the authors' `PMA` mechanism), on one
client's graph, computed once.

X_0 = the encoder's embeddings with every row scaled to unit L2 norm [N, d]. For k = 1..K:
    H_k = A X_{k-1} + N(0, (σΔ)² I),   X_k = H_k with every row scaled to unit L2 norm,
where (A X)_i = Σ_{j : j→i ∈ E} X_j sums the rows of i's in-neighbours (edge_index [2, E]: row 0 the
source j, row 1 the target i; duplicates are merged and self loops dropped first, so every edge enters
once). The K+1 matrices are the client's cached input to the classifier.

Sensitivity of one hop, given X_{k-1} (every row of norm ≤ 1: the previous release, normalised):
- directed unit (one edge j→i): removing it changes row i of A X_{k-1} by X_{k-1}[j] only: ≤ 1, = 1
  whenever X_{k-1}[j] ≠ 0.
- undirected unit (one edge {u, v}, stored as u→v and v→u): rows u and v change by X[v] and X[u]:
  L2 ≤ √2, = √2 whenever both rows are non-zero.
Each hop is a Gaussian mechanism of noise multiplier σ on that sensitivity, its input the previous
releases (adaptive composition); the K hops are composed by one opacus accountant
(privfgl/methods/gap/accounting.py). Everything after (normalisation, the classifier, its uploads) is
post-processing. The encoder's embeddings X_0 depend on features and labels only, which edge-level DP
does not protect.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch_geometric.utils import coalesce, remove_self_loops

from privfgl.privacy.mechanisms import GaussianMechanism
from privfgl.privacy.noise import NoiseSource

# hop k -> extra rows [R, d] (float64) that join the hop's sum before the noise: an auditor's canaries
CanaryRows = Callable[[int], torch.Tensor]


def unit_rows(x: torch.Tensor) -> torch.Tensor:
    """x [N, d] with every non-zero row scaled to L2 norm 1 (zero rows stay 0)."""
    return F.normalize(x, p=2.0, dim=-1)


def clean_edges(edge_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """edge_index [2, E] without self loops and duplicates (each directed edge once)."""
    ei, _ = remove_self_loops(edge_index)
    return coalesce(ei, num_nodes=num_nodes)


def neighbour_sum(x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
    """(A x)_i = Σ_{j→i} x_j: x [N, d], edge_index [2, E] (source, target) -> [N, d]."""
    return torch.zeros_like(x).index_add_(0, edge_index[1], x[edge_index[0]])


def perturbed_hops(x0: torch.Tensor, edge_index: torch.Tensor, hops: int, mechanism: GaussianMechanism | None,
                   source: NoiseSource | None, canaries: CanaryRows | None = None
                   ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """([X_0, ..., X_K] each [N, d] float32, the released noisy sums H_1..H_K [N + R, d] float64 when
    `canaries` is given, else []).

    edge_index must be clean (clean_edges). `mechanism` None: no noise (a non-private reference, no
    guarantee). `canaries(k)`: R rows appended to hop k's sum before the noise; they are noised with it,
    returned in the release (its last R rows) and never enter X_k."""
    n = x0.shape[0]
    x = unit_rows(x0.float())
    out, released = [x], []
    for k in range(1, hops + 1):
        total = neighbour_sum(x, edge_index).double()
        if canaries is not None:
            total = torch.cat([total, canaries(k).double()])
        if mechanism is not None:
            total = total + mechanism.noise(total.shape, source)
        if canaries is not None:
            released.append(total.clone())
        x = unit_rows(total[:n]).float()
        out.append(x)
    return out, released
