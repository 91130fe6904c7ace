"""Message DP: a DPSpec applied to named aggregated messages, inside Federation.aggregate.

Client side (before the protocol), every client clips its upload — all fields jointly, L2 for
gaussian, L1 for laplace — to `clip`, so adding or removing one client changes the sum by at most
`clip` (client-level DP). Then, by mode:
- local:       each client adds the full noise to its own upload (protects every upload);
- distributed: each client adds a 1/K share of the Gaussian variance; the revealed sum of K
               shares carries N(0, (σ·clip)²) — meaningful only under a secure protocol;
- central:     one draw of noise on the revealed sum, by the server (trusted with the sum).
Every release is accounted (Gaussian: σ and the clients' sampling rate q; Laplace: ε).
"""
from __future__ import annotations

import torch

from privfgl.privacy.accounting import PrivacyAccountant
from privfgl.privacy.clipping import clip_tensors
from privfgl.privacy.noise import NoiseSource
from privfgl.privacy.spec import DPSpec

Tensors = dict[str, torch.Tensor]


class MessageDP:
    """Clips, noises and accounts the aggregations of `spec.messages` among `num_clients` clients."""

    def __init__(self, spec: DPSpec, num_clients: int):
        self.spec = spec
        self.mechanism = spec.build()
        self.num_clients = num_clients
        self.source = NoiseSource(spec.seed, secure=spec.secure)
        self.accountant = PrivacyAccountant(delta=spec.delta, accountant=spec.accountant)

    def applies_to(self, name: str) -> bool:
        return name in self.spec.messages

    def _noised(self, tensors: Tensors, share: float) -> Tensors:
        return {n: t.double() + self.mechanism.noise(t.shape, self.source, share) for n, t in tensors.items()}

    def protect(self, contributions: list[Tensors]) -> list[Tensors]:
        """What each client actually uploads: its clipped message, noised unless mode is central."""
        clipped = [clip_tensors(c, self.spec.clip, self.spec.clip_norm) for c in contributions]
        if self.spec.mode == "central":
            return clipped
        share = 1.0 if self.spec.mode == "local" else 1.0 / self.num_clients
        return [self._noised(c, share) for c in clipped]

    def reveal(self, total: Tensors, sample_rate: float = 1.0) -> Tensors:
        """The released sum (noised here in central mode); accounts this release."""
        if self.spec.mechanism == "gaussian":
            self.accountant.add_gaussian(self.spec.sigma, sample_rate)
        else:  # no amplification by sampling is claimed for Laplace releases
            self.accountant.add_laplace(self.spec.epsilon)
        return self._noised(total, 1.0) if self.spec.mode == "central" else total

    def report(self) -> dict:
        """The run record's privacy fields: dp (spec, unit, sensitivity, noise), epsilon, delta, accountant."""
        m = self.mechanism
        noise = {"noise_std": m.std} if self.spec.mechanism == "gaussian" else {"noise_scale": m.scale}
        dp = {**self.spec.as_dict(), "unit": "client (one client's whole message, add/remove)",
              "sensitivity": self.spec.clip, "sensitivity_norm": f"L{self.spec.clip_norm}", **noise,
              "releases": self.accountant.releases}
        spent = self.accountant.spent()
        return {"dp": dp, "epsilon": spent.pop("epsilon"), "delta": spent.pop("delta"),
                "accountant": spent.pop("accountant"), **spent}
