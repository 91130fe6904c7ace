"""Where DP noise (and the sampling coins of DP-FedAvg and of GAP's DP-SGD) come from: the OS's
cryptographic entropy (the default everywhere, `secure=True`) or a seeded torch.Generator (reproducible
experiments only).

A seeded source is reproducible by anyone who knows the seed, and the seed is in the run record:
such a reader regenerates the noise and subtracts it (attacks/dp/dp_noise_removal.py), so ε then holds
only against an adversary who does not know the seed. `provenance()` gives the run record's fields
that say which source a release used. Both sources draw float64 on the CPU. The secure source turns
`os.urandom` bits into uniforms on (0, 1) and transforms them (Box–Muller for Gaussian, inverse CDF
for Laplace). Floating-point side channels of sampled noise (Mironov 2012) are not addressed by either.
"""
from __future__ import annotations

import math
import os

import numpy as np
import torch

OS = "os"  # the setting (--dp ...,seed=os; method params) that selects OS entropy


def seed_warning(kind: str, seed: int) -> str:
    """The run record's warning on a seeded source of `kind` ("noise", "sampling")."""
    return (f"seeded {kind} (seed {seed}): ε holds only against an adversary who does not know the seed, and the "
            f"seed is in the run record; anyone who reads it can regenerate the {kind}")


class NoiseSource:
    """Draws uniforms, Gaussian and Laplace noise. `seed`: an int for a reproducible torch.Generator;
    `secure=True` ignores the seed and uses OS entropy (non-reproducible by design)."""

    def __init__(self, seed: int | None = 0, secure: bool = False):
        if not secure and seed is None:
            raise ValueError("NoiseSource needs a seed, or secure=True for OS entropy")
        self.secure = secure
        self.seed = None if secure else int(seed)
        self._gen = None if secure else torch.Generator().manual_seed(int(seed))

    @classmethod
    def from_setting(cls, setting: int | str) -> "NoiseSource":
        """The source a `seed` setting names: "os" (OS entropy) or an integer seed."""
        if setting == OS:
            return cls(None, secure=True)
        if isinstance(setting, bool) or not isinstance(setting, int):
            raise ValueError(f"a noise seed is an integer or {OS!r}, got {setting!r}")
        return cls(setting)

    def for_client(self, k: int, purpose: int = 0x5EED) -> "NoiseSource":
        """Client k's own source: OS entropy again, or a generator seeded from this seed, k and `purpose`
        (client_steps.client_seed), so that a client draws the same noise wherever it runs. Its provenance
        names this source's seed, which regenerates every client's."""
        if self.secure:
            return NoiseSource(None, secure=True)
        from privfgl.federation.client_steps import client_seed  # noqa: PLC0415
        own = NoiseSource(client_seed(self.seed, k, purpose))
        own.seed = self.seed
        return own

    def provenance(self, kind: str = "noise") -> dict:
        """The run record's fields on this source: {"noise_source": "os" | "seeded", "seed": N | None},
        plus "seed_warning" when seeded. kind="sampling" names them sampling_source, sampling_seed and
        sampling_seed_warning."""
        prefix = "" if kind == "noise" else f"{kind}_"
        out = {f"{kind}_source": OS if self.secure else "seeded", f"{prefix}seed": self.seed}
        if not self.secure:
            out[f"{prefix}seed_warning"] = seed_warning(kind, self.seed)
        return out

    def uniform(self, n: int) -> torch.Tensor:
        """n iid uniforms on the open interval (0, 1), float64."""
        if self._gen is not None:
            u = torch.rand(n, generator=self._gen, dtype=torch.float64)
            return u.clamp_(min=2.0 ** -53)  # torch.rand is [0, 1): keep log() finite
        bits = np.frombuffer(os.urandom(8 * n), dtype=np.uint64) >> np.uint64(11)
        return torch.from_numpy((bits.astype(np.float64) + 0.5) * 2.0 ** -53)

    def coins(self, n: int, p: float) -> torch.Tensor:
        """n independent Bernoulli(p) coins [n] bool (Poisson sampling's inclusions), from `uniform`."""
        return self.uniform(n) < p

    def gaussian(self, shape: tuple[int, ...] | torch.Size, std: float) -> torch.Tensor:
        """N(0, std²) noise of `shape`, float64."""
        shape = torch.Size(shape)
        if self._gen is not None:
            return torch.randn(shape, generator=self._gen, dtype=torch.float64) * std
        n = shape.numel()
        u1, u2 = self.uniform(n), self.uniform(n)
        z = torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(2.0 * math.pi * u2)
        return (z * std).reshape(shape)

    def laplace(self, shape: tuple[int, ...] | torch.Size, scale: float) -> torch.Tensor:
        """Laplace(0, b=scale) noise of `shape` (density exp(-|x|/b)/2b), float64."""
        shape = torch.Size(shape)
        u = self.uniform(shape.numel()) - 0.5  # (-1/2, 1/2)
        return (-scale * torch.sign(u) * torch.log1p(-2.0 * u.abs())).reshape(shape)
