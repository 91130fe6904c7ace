"""GAP's privacy accounting: every Gaussian release of a run under one opacus accountant, σ from the
target ε.

Edge level: the K hops, each one Gaussian release of noise multiplier σ (noise std σ·Δ on a sum of L2
sensitivity Δ) on all nodes (rate 1); the encoder and the classifier see no edge. Node level: also every
full-batch DP-SGD step of the encoder (encoder_rounds·local_epochs) and of the classifier
(rounds·local_epochs), each a release of the same σ at rate 1 (sensitivity C). The releases are composed
by opacus' RDP (or PRV) accountant as one history [(σ, 1, count)]; σ is the smallest noise multiplier
whose composition spends at most the target ε at δ (opacus' `get_noise_multiplier`, tolerance 0.01 in ε),
never a budget split by hand.
"""
from __future__ import annotations

from privfgl.methods.gap.params import GapParams
from privfgl.privacy.accounting import gaussian_epsilon, noise_multiplier_for


def release_counts(p: GapParams, rounds: int, local_epochs: int) -> dict[str, int]:
    """The releases one node's (edge level: one edge's) privacy pays for, by stage."""
    if p.unit == "edge":
        return {"hops": p.hops}
    return {"encoder_steps": p.encoder_rounds * local_epochs, "hops": p.hops, "classifier_steps": rounds * local_epochs}


def calibrate_sigma(epsilon: float, delta: float, releases: int, accountant: str) -> float:
    """σ for `releases` composed Gaussian releases at rate 1 to spend ≤ ε at δ."""
    if releases == 0:
        raise ValueError("gap: the run releases nothing about its privacy unit: no σ to calibrate")
    return noise_multiplier_for(epsilon, delta, 1.0, releases, accountant)


def spent_epsilon(sigma: float, releases: int, delta: float, accountant: str) -> float:
    """ε at δ of `releases` Gaussian releases of noise multiplier σ at rate 1 (0 for none)."""
    return gaussian_epsilon([(sigma, 1.0, releases)], delta, accountant)
