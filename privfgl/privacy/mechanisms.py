"""The Laplace and Gaussian mechanisms, calibrated from an explicit sensitivity.

The sensitivity is always a declared bound (from clipping), never measured on the data:
- Laplace(ε, Δ1): noise Lap(b) per coordinate with b = Δ1 / ε; ε-DP for one release.
- Gaussian(σ, Δ2): noise N(0, (σ·Δ2)²) per coordinate; σ is the noise multiplier that the
  accountants (RDP/PRV) take, so ε(δ) depends on σ, the sampling rate and the number of releases.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from privfgl.privacy.noise import NoiseSource


@dataclass(frozen=True)
class LaplaceMechanism:
    """ε-DP release of a value whose L1 sensitivity is at most `l1_sensitivity`."""
    epsilon: float
    l1_sensitivity: float

    def __post_init__(self):
        if not self.epsilon > 0:
            raise ValueError(f"Laplace epsilon must be > 0, got {self.epsilon}")
        if not self.l1_sensitivity > 0:
            raise ValueError(f"Laplace L1 sensitivity must be > 0, got {self.l1_sensitivity}")

    @property
    def scale(self) -> float:
        """b = Δ1 / ε (the noise's standard deviation is √2·b)."""
        return self.l1_sensitivity / self.epsilon

    def noise(self, shape, source: NoiseSource, share: float = 1.0) -> torch.Tensor:
        """Noise of `shape` (float64). `share` must be 1: Laplace noise is not split across parties."""
        if share != 1.0:
            raise ValueError("Laplace noise cannot be split into per-client shares (use the Gaussian mechanism)")
        return source.laplace(shape, self.scale)

    def release(self, x: torch.Tensor, source: NoiseSource) -> torch.Tensor:
        return x.double() + self.noise(x.shape, source)


@dataclass(frozen=True)
class GaussianMechanism:
    """Release with noise N(0, (σ·Δ2)²); (ε, δ) comes from an accountant over all releases."""
    noise_multiplier: float
    l2_sensitivity: float

    def __post_init__(self):
        if not self.noise_multiplier > 0:
            raise ValueError(f"Gaussian noise multiplier sigma must be > 0, got {self.noise_multiplier}")
        if not self.l2_sensitivity > 0:
            raise ValueError(f"Gaussian L2 sensitivity must be > 0, got {self.l2_sensitivity}")

    @property
    def std(self) -> float:
        """σ·Δ2, the standard deviation of the noise on every coordinate."""
        return self.noise_multiplier * self.l2_sensitivity

    def noise(self, shape, source: NoiseSource, share: float = 1.0) -> torch.Tensor:
        """Noise of `shape` carrying `share` of the variance (1/(K - c) per client in distributed DP:
        any K - c independent shares sum to N(0, (σΔ2)²), privacy/shares.py)."""
        if not 0 < share <= 1:
            raise ValueError(f"noise share must be in (0, 1], got {share}")
        return source.gaussian(shape, self.std * share ** 0.5)

    def release(self, x: torch.Tensor, source: NoiseSource) -> torch.Tensor:
        return x.double() + self.noise(x.shape, source)
