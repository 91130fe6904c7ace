"""Canary nodes for O-pFGL's DP class statistics (privfgl/methods/opfgl/dp.py, privfgl/privacy/stats.py).

The release is one Gaussian mechanism on the normalised blocks (n/Δn, S1/ΔS1, S2/ΔS2), [C], [C, f'] and
[C, f'] (f' = (hops + 1)·f), whose L2 sensitivity to one node is √3 under the accounted unit: a node of
the degree-bounded graph changes its own row and up to N − 1 others (N = Σ_{i ≤ hops+1} D^i), so
Δn = 1, ΔS1 = B(2N − 1), ΔS2 = B²(1 + √2(N − 1)). N canary nodes join the sum; canary j, included by an
independent fair coin (the auditor's secret), adds the accounted sensitivity of every block at one
coordinate of its own: +1 to n of its class c_j, s_j·ΔS1 to S1[c_j, a_j] and ΔS2 to S2[c_j, a_j], where
(c_j, a_j) are distinct per canary (a seeded draw without replacement of the C·f' cells, CanaryDirections
with support 1) and s_j = ±1 its public sign (a node's S1 moves either way; its S2 only up). Each block's
shift is what some node realises (a Dirac row of norm B, with N − 1 influenced rows moving by 2B each
along it for S1, or from 0 to B for S2); jointly they are the accountant's worst case, norm √3 in the
normalised blocks, so the canary audits the calibration as accounted. N is computed here from (D, hops),
independently of the method's calibration.

Canary nodes are in no client's graph and in no mask, so they are never evaluated; like canary clients
they are in the released sum, so the pseudo-graph condensed from it holds them (an audited run's accuracy
is the audit's). They send no protocol messages: the sum holds their rows as the K clients' sum would.
"""
from __future__ import annotations

import numpy as np
import torch

from attacks.dp.canary_clients import CanaryDirections, fair_coins
from privfgl.privacy.dpsgd import influence_count
from privfgl.privacy.stats import ClassStatsRelease

MESSAGE = "class_stats"


def node_influence(degree: int | None, hops: int) -> int:
    """N: the rows one node of the degree-bounded graph changes (1 at hops 0, else N_{D, hops + 1})."""
    return 1 if hops == 0 else influence_count(degree, hops + 1)


class CanaryNodes:
    """The N canary nodes of one run (the runtime side): their cells, signs and coins. `coins` [N] bool is
    the auditor's secret; `cells` (CanaryDirections on the C·f' cells of S1, support 1) is public."""

    message = MESSAGE

    def __init__(self, count: int, seed: int, num_classes: int, bound: float, influence: int):
        self.count, self.seed, self.num_classes, self.bound, self.influence = count, seed, num_classes, bound, influence
        sens = ClassStatsRelease(bound, 1.0, influence).sensitivities  # σ is not used: the unit's Δ per block
        self.sensitivities = {k: float(v) for k, v in sens.items()}
        self.coins = fair_coins(seed, count)
        self.cells: CanaryDirections | None = None  # drawn at the sum (f' is the statistics')
        self.features = 0

    def contribution(self, round: int, dp, dimension: int) -> torch.Tensor:
        """The flat [d] sum of the included canaries' rows in the runtime's layout of {n, S1, S2}: fields
        sorted by name, S1 [C, f'], S2 [C, f'], n [C]."""
        C = self.num_classes
        f, rest = divmod(dimension - C, 2 * C)
        if rest or f < 1:
            raise ValueError(f"canary nodes: a class_stats sum of {dimension} values is not {{n [C], S1, S2 [C, f']}} "
                             f"with C = {C}")
        if self.cells is None:
            self.cells, self.features = CanaryDirections.draw(self.count, C * f, 1, self.seed), f
        rows = torch.from_numpy(np.flatnonzero(self.coins))
        cell, sign = self.cells.indices[rows, 0], self.cells.signs[rows, 0]
        out = torch.zeros(dimension, dtype=torch.float64)
        out.index_add_(0, cell, sign * self.sensitivities["S1"])
        out.index_add_(0, C * f + cell, torch.full_like(sign, self.sensitivities["S2"]))
        return out.index_add_(0, 2 * C * f + cell // f, torch.full_like(sign, self.sensitivities["n"]))

    def observe(self, total: torch.Tensor) -> np.ndarray:
        """o_j [N] from a revealed flat sum: (s_j·S1[c_j, a_j]/ΔS1 + S2[c_j, a_j]/ΔS2)/2, 1 + noise for an
        included canary, noise (plus the real nodes' small sums at that cell) otherwise; under the accounted
        mechanism the noise is N(0, 1.5σ²) (each normalised block carries N(0, 3σ²))."""
        C, f = self.num_classes, self.features
        cell, sign = self.cells.indices[:, 0], self.cells.signs[:, 0]
        s1 = total[cell].double() * sign / self.sensitivities["S1"]
        s2 = total[C * f + cell].double() / self.sensitivities["S2"]
        return ((s1 + s2) / 2).numpy()

    def record(self) -> dict:
        """The run record's `canary_nodes` block (no coins: they are the audit's secret)."""
        return {"inserted": self.count, "message": self.message, "influence": self.influence, "bound": self.bound,
                "sensitivities": self.sensitivities, "seed": self.seed,
                "note": "canary nodes are in no client's graph or mask and never evaluated; their rows are in the "
                        "released class statistics (attacks/dp/canary_nodes.py)"}
