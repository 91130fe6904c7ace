"""Canary edges (and canary nodes) for GAP's aggregation perturbation (privfgl/methods/gap/aggregation.py).

N canaries join one client's hop sums. Canary j is an edge between two canary nodes s_j and t_j that hold
no real neighbours; the auditor fixes their rows at every hop to the unit vectors e_{a_j} and e_{b_j}
((a_j, b_j) a public seeded draw of coordinates), the worst case the per-hop analysis allows (any
previous rows of norm ≤ 1). Included by an independent fair coin (the auditor's secret), the edge adds
to every hop's pre-noise sum:
- undirected unit: e_{a_j} to t_j's row and e_{b_j} to s_j's row: L2 norm √2, the stated sensitivity;
- directed unit (s_j→t_j): e_{a_j} to t_j's row: norm 1, the stated sensitivity;
- node unit (`unit=node`, degree bound D): a canary node w_j with D canary neighbours, its row fixed to
  unit vectors, adds one unit vector to each neighbour's row: norm √D, the stated sensitivity.
The canary rows (r per canary: 2, 1 or D; after the client's real rows) are noised by the client's own
mechanism with its real rows, released with them and never enter X_k, training or accuracy.

Per hop k the observation o_kj = the mean of the released values at the canary's r cells: coin + noise of
std σ (σ·√r per cell averaged over r cells), so each hop is a μ = 1/σ Gaussian test for one canary, as
the accountant claims.
"""
from __future__ import annotations

import numpy as np
import torch

from attacks.dp.canary_clients import fair_coins


class CanaryEdges:
    """The N canaries of one run (runtime side), r rows each. `coins` [N] bool is the auditor's secret; the
    cells [N, r], r and the client whose sums they join are public."""

    def __init__(self, count: int, seed: int, dimension: int, rows_per_canary: int, client: int = 0):
        if count < 4:
            raise ValueError(f"dp-audit: canaries={count}: expected an integer >= 4")
        self.count, self.seed, self.dimension, self.client = count, seed, dimension, client
        self.rows_per_canary = rows_per_canary
        self.coins = fair_coins(seed, count)
        rng = np.random.default_rng([seed, 0xED6E])
        self.cells = torch.from_numpy(rng.integers(0, dimension, size=(count, rows_per_canary)))

    def rows(self, hop: int) -> torch.Tensor:
        """[N·r, d] float64: the included canaries' contributions to hop `hop`'s sum (the same every hop)."""
        r = self.rows_per_canary
        out = torch.zeros(r * self.count, self.dimension, dtype=torch.float64)
        j = torch.from_numpy(np.flatnonzero(self.coins))
        rows = (r * j[:, None] + torch.arange(r)).reshape(-1)
        out[rows, self.cells[j].reshape(-1)] = 1.0
        return out

    def observe(self, released: torch.Tensor) -> np.ndarray:
        """o_j [N] from one hop's released sum [n + N·r, d] (the canary rows last): the mean of its r cells."""
        r = self.rows_per_canary
        rows = released[-r * self.count:].double().reshape(self.count, r, -1)
        return rows.gather(2, self.cells[:, :, None]).squeeze(2).mean(1).numpy()

    def record(self) -> dict:
        return {"inserted": self.count, "client": self.client, "rows_per_canary": self.rows_per_canary,
                "seed": self.seed,
                "note": "canaries join one client's hop sums before the noise, in rows of their own that never "
                        "enter training or accuracy (attacks/dp/canary_edges.py)"}
