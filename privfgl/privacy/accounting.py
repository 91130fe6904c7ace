"""Privacy accounting: ε(δ) of a sequence of releases.

- Gaussian releases (noise multiplier σ, sampling rate q) are composed by opacus' accountants:
  RDP (Mironov 2017; Mironov et al. 2019 for the sampled Gaussian) or PRV (Gopi et al. 2021).
- Laplace releases (pure ε_i-DP each) compose by the basic theorem (Σ ε_i) or, for k releases of
  the same ε, by the advanced theorem (Dwork, Rothblum, Vadhan 2010):
      ε' = ε·sqrt(2k·ln(1/δ')) + k·ε·(e^ε − 1)   at δ'.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

ACCOUNTANTS = ("rdp", "prv")
# RDP orders: opacus' defaults extended to 1024, so few-release (large-ε) budgets stay tight.
RDP_ALPHAS = [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)) + list(range(64, 1025, 8))


def _options(accountant: str) -> dict:
    return {"alphas": RDP_ALPHAS} if accountant == "rdp" else {}


def _opacus_accountant(name: str):
    from opacus.accountants import PRVAccountant, RDPAccountant
    if name not in ACCOUNTANTS:
        raise ValueError(f"unknown accountant {name!r}; valid: {', '.join(ACCOUNTANTS)}")
    return RDPAccountant() if name == "rdp" else PRVAccountant()


def gaussian_epsilon(steps: list[tuple[float, float, int]], delta: float, accountant: str = "rdp") -> float:
    """ε at `delta` of Gaussian releases given as (noise_multiplier σ, sample_rate q, count);
    RDP over the orders RDP_ALPHAS, PRV with opacus' default error bounds."""
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    steps = [s for s in steps if s[2] > 0]
    if not steps:
        return 0.0
    acc = _opacus_accountant(accountant)
    acc.history = [(float(sigma), float(q), int(n)) for sigma, q, n in steps]
    return float(acc.get_epsilon(delta=delta, **_options(accountant)))


@functools.lru_cache(maxsize=256)
def noise_multiplier_for(epsilon: float, delta: float, sample_rate: float = 1.0, steps: int = 1,
                         accountant: str = "rdp") -> float:
    """The smallest σ (opacus' search, tolerance 0.01 in ε) giving ε ≤ `epsilon` at `delta`. Remembered per
    argument tuple: a search at q < 1 takes seconds, and a sweep's cells ask for the same σ per seed."""
    from opacus.accountants.utils import get_noise_multiplier
    return float(get_noise_multiplier(target_epsilon=epsilon, target_delta=delta, sample_rate=sample_rate,
                                      steps=steps, accountant=accountant, **_options(accountant)))


def laplace_basic_composition(epsilons: list[float]) -> float:
    """Σ ε_i: the ε of releasing all of them (pure DP, δ = 0)."""
    return float(sum(epsilons))


def laplace_advanced_composition(epsilon: float, k: int, delta_prime: float) -> float:
    """ε' of k adaptive ε-DP releases, at δ' (Dwork–Rothblum–Vadhan); inf where e^ε overflows a
    float (ε > 709: the bound is then far above basic composition's kε anyway)."""
    if not 0 < delta_prime < 1:
        raise ValueError(f"delta' must be in (0, 1), got {delta_prime}")
    if k == 0:
        return 0.0
    if epsilon > 709:
        return math.inf
    return epsilon * math.sqrt(2 * k * math.log(1 / delta_prime)) + k * epsilon * math.expm1(epsilon)


@dataclass
class PrivacyAccountant:
    """Keeps the releases of one run and reports (ε, δ).

    Gaussian releases: add_gaussian(σ, q); Laplace releases: add_laplace(ε). A run uses one kind.
    """
    delta: float = 1e-5
    accountant: str = "rdp"
    gaussian: dict[tuple[float, float], int] = field(default_factory=dict)
    laplace: list[float] = field(default_factory=list)

    def add_gaussian(self, noise_multiplier: float, sample_rate: float = 1.0, count: int = 1) -> None:
        key = (float(noise_multiplier), float(sample_rate))
        self.gaussian[key] = self.gaussian.get(key, 0) + count

    def add_laplace(self, epsilon: float, count: int = 1) -> None:
        self.laplace.extend([float(epsilon)] * count)

    @property
    def releases(self) -> int:
        return sum(self.gaussian.values()) + len(self.laplace)

    def gaussian_epsilon_scaled(self, scale: float) -> float:
        """ε at self.delta of the same Gaussian releases with every noise multiplier times `scale` (e.g.
        the noise left once colluders remove their shares of it, privacy/shares.py)."""
        steps = [(s * scale, q, n) for (s, q), n in self.gaussian.items()]
        return gaussian_epsilon(steps, self.delta, self.accountant)

    def spent(self) -> dict:
        """{"epsilon", "delta", "accountant", ...}: Gaussian via opacus; Laplace as the smaller of
        basic (δ = 0) and advanced composition (at δ = self.delta)."""
        if self.gaussian and self.laplace:
            raise ValueError("one run composes either Gaussian or Laplace releases, not both")
        if self.laplace:
            basic = laplace_basic_composition(self.laplace)
            out = {"epsilon": basic, "delta": 0.0, "accountant": "laplace-basic", "epsilon_basic": basic}
            if len(set(self.laplace)) == 1:
                adv = laplace_advanced_composition(self.laplace[0], len(self.laplace), self.delta)
                out["epsilon_advanced"] = adv
                if adv < basic:
                    out.update(epsilon=adv, delta=self.delta, accountant="laplace-advanced")
            return out
        steps = [(s, q, n) for (s, q), n in self.gaussian.items()]
        return {"epsilon": gaussian_epsilon(steps, self.delta, self.accountant), "delta": self.delta,
                "accountant": self.accountant}
