"""GAP's privacy accounting: every Gaussian release of a run under one opacus accountant, σ from the
target ε.

Edge level: the K hops, each one Gaussian release of noise multiplier σ (noise std σ·Δ on a sum of L2
sensitivity Δ) on all nodes (rate 1); the encoder and the classifier see no edge. Node level: also every
DP-SGD step of the encoder (encoder_rounds·local_epochs) and of the classifier (rounds·local_epochs), each
a release of the same σ (sensitivity C) at the steps' sampling rate q (`sample_rate`: 1, full batch, the
default; q < 1, Poisson sampling, the subsampled Gaussian). The releases are composed by opacus' RDP (or
PRV) accountant as one history [(σ, q, steps), (σ, 1, hops)]; σ is the smallest noise multiplier whose
composition spends at most the target ε at δ (opacus' `get_noise_multiplier` for a history of one rate,
tolerance 0.01 in ε; scipy's brentq on the accountant's ε for a history of two), never a budget split by
hand.
"""
from __future__ import annotations

from scipy.optimize import brentq

from privfgl.methods.gap.params import GapParams
from privfgl.privacy.accounting import gaussian_epsilon, noise_multiplier_for

STEPS = ("encoder_steps", "classifier_steps")


def release_counts(p: GapParams, rounds: int, local_epochs: int) -> dict[str, int]:
    """The releases one node's (edge level: one edge's) privacy pays for, by stage."""
    if p.unit == "edge":
        return {"hops": p.hops}
    return {"encoder_steps": p.encoder_rounds * local_epochs, "hops": p.hops, "classifier_steps": rounds * local_epochs}


def history(sigma: float, releases: dict[str, int], sample_rate: float = 1.0) -> list[tuple[float, float, int]]:
    """The accountant's history: the DP-SGD steps at `sample_rate`, the hops at rate 1."""
    steps = sum(releases.get(s, 0) for s in STEPS)
    return [(sigma, sample_rate, steps), (sigma, 1.0, releases.get("hops", 0))]


def calibrate_sigma(epsilon: float, delta: float, releases: int | dict[str, int], accountant: str,
                    sample_rate: float = 1.0) -> float:
    """σ for the composed Gaussian releases (a count at rate 1, or release_counts' stages with the steps at
    `sample_rate`) to spend ≤ ε at δ."""
    if isinstance(releases, int):
        releases = {"hops": releases}
    rates = {rate for _, rate, count in history(1.0, releases, sample_rate) if count}
    if not rates:
        raise ValueError("gap: the run releases nothing about its privacy unit: no σ to calibrate")
    if len(rates) == 1:
        return noise_multiplier_for(epsilon, delta, rates.pop(), sum(releases.values()), accountant)

    def excess(sigma: float) -> float:  # ε(σ) − (target − 0.005): a root spends ε within [target − 0.01, target]
        return gaussian_epsilon(history(sigma, releases, sample_rate), delta, accountant) - epsilon + 0.005
    hi = noise_multiplier_for(epsilon, delta, 1.0, sum(releases.values()), accountant)  # every release at rate 1
    while excess(hi) > 0:
        hi *= 2
    lo = hi / 2
    while excess(lo) < 0:
        lo /= 2
    sigma = brentq(excess, lo, hi, xtol=1e-7)
    while excess(sigma) > 0.005:  # brentq's root may sit a hair on the wrong side of the target
        sigma += 1e-6
    return sigma


def spent_epsilon(sigma: float, releases: int | dict[str, int], delta: float, accountant: str,
                  sample_rate: float = 1.0) -> float:
    """ε at δ of the releases (a count at rate 1, or release_counts' stages) of noise multiplier σ (0 for none)."""
    if isinstance(releases, int):
        releases = {"hops": releases}
    return gaussian_epsilon(history(sigma, releases, sample_rate), delta, accountant)
