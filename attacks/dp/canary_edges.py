"""Canary edges for GAP's aggregation perturbation (privfgl/methods/gap/aggregation.py).

N canaries join one client's hop sums. Canary j is an edge between two canary nodes s_j and t_j that hold
no real neighbours; the auditor fixes their rows at every hop to the unit vectors e_{a_j} and e_{b_j}
((a_j, b_j) a public seeded draw of coordinates), the worst case the per-hop analysis allows (any
previous rows of norm ≤ 1). Included by an independent fair coin (the auditor's secret), the edge adds
to every hop's pre-noise sum:
- undirected unit: e_{a_j} to t_j's row and e_{b_j} to s_j's row: L2 norm √2, the stated sensitivity;
- directed unit (s_j→t_j): e_{a_j} to t_j's row: norm 1, the stated sensitivity.
The canary rows (2N undirected, N directed; after the client's N real rows) are noised by the client's
own mechanism with its real rows, released with them and never enter X_k, training or accuracy.

Per hop k the observation o_kj = the mean of the released values at the canary's cells: coin + noise of
std σ (σ·√2 per cell averaged over two cells, or σ·1 on one), so each hop is a μ = 1/σ Gaussian test
for one canary, as the accountant claims.
"""
from __future__ import annotations

import numpy as np
import torch

from attacks.dp.canary_clients import fair_coins


class CanaryEdges:
    """The N canary edges of one run (runtime side). `coins` [N] bool is the auditor's secret; the cells
    `a`, `b` [N] and the client whose sums they join are public."""

    def __init__(self, count: int, seed: int, dimension: int, undirected: bool, client: int = 0):
        if count < 4:
            raise ValueError(f"dp-audit: canaries={count}: expected an integer >= 4")
        self.count, self.seed, self.dimension, self.undirected, self.client = count, seed, dimension, undirected, client
        self.coins = fair_coins(seed, count)
        rng = np.random.default_rng([seed, 0xED6E])
        self.a = torch.from_numpy(rng.integers(0, dimension, size=count))
        self.b = torch.from_numpy(rng.integers(0, dimension, size=count))

    @property
    def rows_per_canary(self) -> int:
        return 2 if self.undirected else 1

    def rows(self, hop: int) -> torch.Tensor:
        """[R, d] float64: the included canaries' contributions to hop `hop`'s sum (the same every hop)."""
        r = self.rows_per_canary
        out = torch.zeros(r * self.count, self.dimension, dtype=torch.float64)
        j = torch.from_numpy(np.flatnonzero(self.coins))
        out[r * j, self.a[j]] = 1.0
        if self.undirected:
            out[r * j + 1, self.b[j]] = 1.0
        return out

    def observe(self, released: torch.Tensor) -> np.ndarray:
        """o_j [N] from one hop's released sum [n + R, d] (the canary rows last)."""
        r = self.rows_per_canary
        rows = released[-r * self.count:].double()
        j = torch.arange(self.count)
        o = rows[r * j, self.a]
        if self.undirected:
            o = (o + rows[r * j + 1, self.b]) / 2
        return o.numpy()

    def record(self) -> dict:
        return {"inserted": self.count, "client": self.client, "unit": "undirected" if self.undirected else "directed",
                "seed": self.seed,
                "note": "canary edges join one client's hop sums before the noise, in rows of their own that never "
                        "enter training or accuracy (attacks/dp/canary_edges.py)"}
