"""Where DP noise comes from: a seeded torch.Generator (reproducible experiments) or the OS's
cryptographic entropy (`secure=True`, for real use).

Both draw float64 noise on the CPU. The secure source turns `os.urandom` bits into uniforms on
(0, 1) and transforms them (Box–Muller for Gaussian, inverse CDF for Laplace). Floating-point
side channels of sampled noise (Mironov 2012) are not addressed by either source.
"""
from __future__ import annotations

import math
import os

import numpy as np
import torch


class NoiseSource:
    """Draws Gaussian and Laplace noise. `seed`: an int for a reproducible torch.Generator;
    `secure=True` ignores the seed and uses OS entropy (non-reproducible by design)."""

    def __init__(self, seed: int | None = 0, secure: bool = False):
        if not secure and seed is None:
            raise ValueError("NoiseSource needs a seed, or secure=True for OS entropy")
        self.secure = secure
        self.seed = None if secure else int(seed)
        self._gen = None if secure else torch.Generator().manual_seed(int(seed))

    def _uniform(self, n: int) -> torch.Tensor:
        """n iid uniforms on the open interval (0, 1), float64."""
        if self._gen is not None:
            u = torch.rand(n, generator=self._gen, dtype=torch.float64)
            return u.clamp_(min=2.0 ** -53)  # torch.rand is [0, 1): keep log() finite
        bits = np.frombuffer(os.urandom(8 * n), dtype=np.uint64) >> np.uint64(11)
        return torch.from_numpy((bits.astype(np.float64) + 0.5) * 2.0 ** -53)

    def gaussian(self, shape: tuple[int, ...] | torch.Size, std: float) -> torch.Tensor:
        """N(0, std²) noise of `shape`, float64."""
        shape = torch.Size(shape)
        if self._gen is not None:
            return torch.randn(shape, generator=self._gen, dtype=torch.float64) * std
        n = shape.numel()
        u1, u2 = self._uniform(n), self._uniform(n)
        z = torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(2.0 * math.pi * u2)
        return (z * std).reshape(shape)

    def laplace(self, shape: tuple[int, ...] | torch.Size, scale: float) -> torch.Tensor:
        """Laplace(0, b=scale) noise of `shape` (density exp(-|x|/b)/2b), float64."""
        shape = torch.Size(shape)
        u = self._uniform(shape.numel()) - 0.5  # (-1/2, 1/2)
        return (-scale * torch.sign(u) * torch.log1p(-2.0 * u.abs())).reshape(shape)
