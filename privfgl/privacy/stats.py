"""DP release of per-class sufficient statistics (n, S1, S2) — O-pFGL's upload (specs/opfgl.md §2.6).

Per class c: n_c = |{i : y_i = c}|, S1_c = Σ x_i, S2_c = Σ x_i ⊙ x_i over rows x_i [d] clipped to
||x_i||₂ ≤ B. Adding or removing one row changes (L2): n by 1, S1 by ≤ B, S2 by ≤ B²
(||x ⊙ x||₂ ≤ ||x||₂²). With propagated features (x^prop over h hops), one node also changes the
rows of up to `influence` − 1 other nodes (N_D = Σ_{i≤h} D^i on a graph of max degree D; 1 when
h = 0 or when the row is the unit); a changed row moves S1 by ≤ 2B and S2 by ≤ √2·B² (both
squares are non-negative), and no count. So
    Δn = 1,   ΔS1 = B·(2·influence − 1),   ΔS2 = B²·(1 + √2·(influence − 1)).
The three blocks are released together by one Gaussian mechanism on (n/Δn, S1/ΔS1, S2/ΔS2),
whose L2 sensitivity is √3: noise std on block j is σ·√3·Δ_j. One release (O-pFGL uploads once):
ε from opacus' accountant with one step at sampling rate 1. Labels must not depend on other
nodes (use labelled nodes only: pseudo-labels such as O-pFGL's HRE are outside this bound).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from privfgl.privacy.accounting import gaussian_epsilon, noise_multiplier_for
from privfgl.privacy.clipping import clip_rows
from privfgl.privacy.mechanisms import GaussianMechanism
from privfgl.privacy.noise import NoiseSource

BLOCKS = ("n", "S1", "S2")


def class_sums(x: torch.Tensor, y: torch.Tensor, num_classes: int, bound: float) -> dict[str, torch.Tensor]:
    """x [m, d], y [m] -> {"n": [C], "S1": [C, d], "S2": [C, d]} (float64) over rows clipped to L2 ≤ bound."""
    xc = clip_rows(x, bound)
    onehot = torch.nn.functional.one_hot(y.long(), num_classes).double()  # [m, C]
    return {"n": onehot.sum(0), "S1": onehot.T @ xc, "S2": onehot.T @ (xc * xc)}


@dataclass(frozen=True)
class ClassStatsRelease:
    """Calibration of one DP release of class sums. bound: B; sigma: noise multiplier;
    influence: rows one node can change (1, or N_D for propagated features)."""
    bound: float
    sigma: float
    influence: int = 1

    def __post_init__(self):
        if not self.bound > 0 or not self.sigma > 0 or self.influence < 1:
            raise ValueError(f"need bound > 0, sigma > 0, influence >= 1; got {self.bound}, {self.sigma}, "
                             f"{self.influence}")

    @classmethod
    def for_epsilon(cls, epsilon: float, delta: float, bound: float, influence: int = 1) -> "ClassStatsRelease":
        """The release whose single-step ε at δ is ≤ `epsilon` (σ from opacus' search)."""
        return cls(bound, noise_multiplier_for(epsilon, delta, sample_rate=1.0, steps=1), influence)

    @property
    def sensitivities(self) -> dict[str, float]:
        """L2 sensitivity of each block to adding/removing one node."""
        b, m = self.bound, self.influence
        return {"n": 1.0, "S1": b * (2 * m - 1), "S2": b * b * (1 + math.sqrt(2) * (m - 1))}

    @property
    def noise_std(self) -> dict[str, float]:
        """σ·√3·Δ_j per block (the joint mechanism on the normalised blocks has sensitivity √3)."""
        mech = GaussianMechanism(self.sigma, math.sqrt(len(BLOCKS)))
        return {k: mech.std * s for k, s in self.sensitivities.items()}

    def noise(self, shapes: dict[str, torch.Size], source: NoiseSource, share: float = 1.0) -> dict[str, torch.Tensor]:
        """Noise per block; `share` = 1/(K - c) for one client's part of distributed noise (privacy/shares.py)."""
        mech = GaussianMechanism(self.sigma, math.sqrt(len(BLOCKS)))
        return {k: mech.noise(shapes[k], source, share) * s for k, s in self.sensitivities.items()}

    def release(self, sums: dict[str, torch.Tensor], source: NoiseSource) -> dict[str, torch.Tensor]:
        """Central release: sums + noise (all blocks, float64)."""
        noise = self.noise({k: sums[k].shape for k in BLOCKS}, source)
        return {k: sums[k].double() + noise[k] for k in BLOCKS}

    def epsilon(self, delta: float, accountant: str = "rdp") -> float:
        return gaussian_epsilon([(self.sigma, 1.0, 1)], delta, accountant)


@dataclass(frozen=True)
class StatsReleaseReport:
    """The run record's privacy fields for one accounted release of class statistics.
    mode: "central" (noise added once to the revealed sum) or "distributed" (each of the K clients
    adds a 1/(K - c) share of the variance before the secure sum); unit: the protected unit, in words;
    details: method-specific facts (degree bound, which nodes were summed, ...); source: where the
    noise came from (recorded as noise_source, seed and, when seeded, seed_warning); client_noise: each
    client's own noise draw {block: tensor} (distributed), for an auditor only (what a colluding client knows
    of its own upload: attacks/dp/opfgl_audit.py), never in the record."""
    release: ClassStatsRelease
    target_epsilon: float
    delta: float
    mode: str
    unit: str
    details: dict
    source: NoiseSource
    client_noise: tuple[dict[str, torch.Tensor], ...] = field(default=(), repr=False, compare=False)

    def report(self) -> dict:
        r = self.release
        dp = {"mechanism": "gaussian", "on": list(BLOCKS), "mode": self.mode, "unit": self.unit, "clip": r.bound,
              "clip_norm": "L2 per row", "influence": r.influence, "sigma": r.sigma, "sensitivity": r.sensitivities,
              "noise_std": r.noise_std, "target_epsilon": self.target_epsilon, "releases": 1, **self.details,
              **self.source.provenance()}
        return {"dp": dp, "epsilon": r.epsilon(self.delta), "delta": self.delta, "accountant": "rdp"}
