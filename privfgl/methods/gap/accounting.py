"""GAP's privacy accounting: the K hop releases, one opacus accountant, σ from the target ε.

Each hop is one Gaussian release of noise multiplier σ (noise std σ·Δ on a sum of L2 sensitivity Δ),
on all nodes (sampling rate 1). The K releases are composed by opacus' RDP (or PRV) accountant as one
history [(σ, 1, K)]; σ is the smallest noise multiplier whose composition spends at most the target ε at
δ (opacus' `get_noise_multiplier`, tolerance 0.01 in ε), never a budget split by hand.
"""
from __future__ import annotations

from privfgl.privacy.accounting import gaussian_epsilon, noise_multiplier_for


def calibrate_sigma(epsilon: float, delta: float, hops: int, accountant: str) -> float:
    """σ for `hops` composed Gaussian releases at rate 1 to spend ≤ ε at δ."""
    if hops == 0:
        raise ValueError("gap: hops=0 releases nothing about the edges: no σ to calibrate")
    return noise_multiplier_for(epsilon, delta, 1.0, hops, accountant)


def spent_epsilon(sigma: float, hops: int, delta: float, accountant: str) -> float:
    """ε at δ of `hops` Gaussian releases of noise multiplier σ at rate 1 (0 for hops = 0)."""
    return gaussian_epsilon([(sigma, 1.0, hops)], delta, accountant)
