"""Message DP: a DPSpec applied to named aggregated messages, inside Federation.aggregate.

Client side (before the protocol), every client clips its upload — all fields jointly, L2 for
gaussian, L1 for laplace — to `clip`, so adding or removing one client changes the sum by at most
`clip` (client-level DP). Then, by mode:
- local:       each client adds the full noise to its own upload (protects every upload);
- distributed: each client adds a share of the Gaussian variance, sized (privacy/shares.py) so that
               the shares of any K − c clients sum to N(0, (σ·clip)²), c the clients that may collude
               with the server (default: the protocol's tolerated coalition); the revealed sum carries
               K/(K − c) × that variance — meaningful only under a secure protocol;
- central:     one draw of noise on the revealed sum, by the server (trusted with the sum).
Every release is accounted (Gaussian: σ and the clients' sampling rate q; Laplace: ε).

Noise source. OS entropy unless the spec names a seed (`seed=N`, reproducible and removable by
anyone who knows N: the record then carries `seed_warning`). Draw order, per release: local and
distributed mode, client by client, each client's fields in the order of its upload; central mode,
once, the revealed sum's fields (sorted by name, as the runtime flattens them). `noise_draws` keeps
that order as field names and shapes (public: the method's message format), `audit_clipped` the
clients' clipped uploads of the latest releases, and `audit_noise` each client's own noise draws of
the latest releases (what a colluding client knows of its own upload: attacks/dp/dp_collusion.py), both
for an auditor only (never the view).

Pre-weighted sums. Methods upload weighted means as sums, {n·W, n} (FedAvg, FedOMD's model_update,
FedSpray's encoder_update) or {p·s, p} (FedSpray's proxies), and divide after the reveal. The clip
multiplies a client's whole message by one factor c = min(1, clip/‖(n·W, n)‖), so the client's ratio
(c·n·W)/(c·n) = W is kept exactly, but its weight in the pooled mean Σ c_k n_k W_k / Σ c_k n_k becomes
c_k·n_k instead of n_k (a clipped client with a large ‖W‖ counts less). When every client is clipped,
c_k·n_k = clip/‖(W_k, 1)‖ and the noise of the released ratio is σ/Σ_k 1/‖(W_k, 1)‖ per coordinate
whatever the clip; raising the clip above the clients' norms only adds noise.

Denominator floor. The noise makes a revealed denominator (the fields in spec.DENOMINATORS: n, the
proxy weights p, …) small or negative, and the ratio would blow up or flip sign. A method that
divides revealed sums passes them through `guard_denominators(fed.dp, name, sums)` first: with DP on
`name`, every denominator field is floored elementwise at the standard deviation of the noise on
the revealed sum (Gaussian σ·clip, ×√K in local mode, ×√(K/(K − c)) in distributed mode; Laplace
√2·clip/ε, ×√K in local mode), a
function of the released value and public constants only, i.e. post-processing, which costs no
privacy; without DP on `name` the sums pass unchanged. A finite numerator divided by a floored
denominator is finite (floor > 0). The floor biases a ratio towards 0 only where its true
denominator is below one noise std, where the unfloored ratio is dominated by noise anyway.
"""
from __future__ import annotations

import torch

from privfgl.privacy.accounting import PrivacyAccountant
from privfgl.privacy.clipping import clip_rows, clip_tensors
from privfgl.privacy.noise import NoiseSource
from privfgl.privacy.shares import distributed_report, share_fraction, sized_colluders
from privfgl.privacy.spec import DENOMINATORS, DPSpec

Tensors = dict[str, torch.Tensor]
Layout = tuple[tuple[str, torch.Size], ...]  # a message's fields (name, shape) in the order noise is drawn


def layout(tensors: Tensors) -> Layout:
    return tuple((name, t.shape) for name, t in tensors.items())


def floor_denominators(total: Tensors, fields, floor: float) -> Tensors:
    """`total` with each of `fields` (those it has) replaced by max(field, floor), elementwise; the
    others unchanged. The guard before a division of revealed noisy sums: the result is >= floor > 0
    (and NaN-free) so a finite numerator divided by it is finite."""
    if not floor > 0:
        raise ValueError(f"denominator floor must be > 0, got {floor}")
    out = dict(total)
    for name in fields:
        if name in out:
            out[name] = torch.nan_to_num(out[name].double(), nan=floor).clamp(min=floor)
    return out


def guard_denominators(dp: "MessageDP | None", name: str, sums: Tensors) -> Tensors:
    """Revealed sums of message `name`, ready for the server's division: its DENOMINATORS fields
    floored at `dp.denominator_floor` when `dp` protects `name`, else `sums` unchanged."""
    if dp is None or not dp.applies_to(name):
        return sums
    return floor_denominators(sums, DENOMINATORS.get(name, ()), dp.denominator_floor)


class MessageDP:
    """Clips, noises and accounts the aggregations of `spec.messages` among `num_clients` clients.
    `tolerated_colluders`: the clients that may collude with the server under the run's protocol
    (privacy/trust.py: tolerated_colluders; 0, the default, is the server alone); in distributed mode
    the noise shares are sized against `spec.colluders`, or against these when it is None (auto)."""

    def __init__(self, spec: DPSpec, num_clients: int, tolerated_colluders: int = 0):
        self.spec = spec
        self.mechanism = spec.build()
        self.num_clients = num_clients
        self.tolerated_colluders = tolerated_colluders
        distributed = spec.mode == "distributed"
        self.colluders = sized_colluders(spec.colluders, tolerated_colluders, num_clients) if distributed else 0
        # The variance fraction of (σ·clip)² each noised upload carries: 1 (local), 1/(K - c) (distributed).
        self.share = share_fraction(num_clients, self.colluders) if distributed else 1.0
        self.source = NoiseSource(spec.seed, secure=spec.secure)
        self.accountant = PrivacyAccountant(delta=spec.delta, accountant=spec.accountant)
        # Per release, in order: one Layout per party that drew noise (the K clients, or the server).
        self.noise_draws: list[tuple[Layout, ...]] = []
        # Auditor side only: release index -> every client's clipped upload, for the latest release
        # of each protected message (a method aggregates a message at most once a round).
        self.audit_clipped: dict[int, list[Tensors]] = {}
        # Auditor side only: release index -> every client's own noise draw (local/distributed), latest
        # release of each message: a colluder's aux holds its own entries, never another client's.
        self.audit_noise: dict[int, list[Tensors]] = {}
        # Auditor side only: the clients whose noise draws an audit's coalition knows (their own), and
        # release index -> the sum of their draws, every release (attacks/dp/dp_audit.py sets who).
        self.coalition: tuple[int, ...] = ()
        self.coalition_noise: dict[int, Tensors] = {}
        # Releases whose sum missed clients (dropout): under mode=distributed each missing client's
        # 1/(K - c) share of the noise variance is missing too. Reported, never folded into epsilon.
        self.short_releases: list[dict] = []

    def note_participation(self, round: int, name: str, survivors: int) -> None:
        """Record a release whose sum holds `survivors` < K client inputs (dropout, participation mask)."""
        if survivors < self.num_clients:
            entry = {"round": round, "message": name, "survivors": survivors}
            if self.spec.mode == "distributed":  # of (σ·clip)², against the server alone
                entry["noise_variance_fraction"] = survivors * self.share
            self.short_releases.append(entry)

    def applies_to(self, name: str) -> bool:
        return name in self.spec.messages

    def _noise(self, tensors: Tensors, share: float) -> Tensors:
        return {n: self.mechanism.noise(t.shape, self.source, share) for n, t in tensors.items()}

    def protect(self, contributions: list[Tensors]) -> list[Tensors]:
        """What each client actually uploads: its clipped message, noised unless mode is central."""
        clipped = [clip_tensors(c, self.spec.clip, self.spec.clip_norm) for c in contributions]
        release = len(self.noise_draws)
        self.audit_clipped[release] = clipped
        self.audit_clipped.pop(release - len(self.spec.messages), None)
        if self.spec.mode == "central":
            return clipped
        self.noise_draws.append(tuple(layout(c) for c in clipped))
        noise = [self._noise(c, self.share) for c in clipped]
        self.audit_noise[release] = noise
        if self.coalition:
            self.coalition_noise[release] = {n: sum(noise[k][n] for k in self.coalition) for n in noise[0]}
        self.audit_noise.pop(release - len(self.spec.messages), None)
        return [{n: t.double() + z[n] for n, t in c.items()} for c, z in zip(clipped, noise)]

    def clip_rows(self, rows: torch.Tensor) -> torch.Tensor:
        """rows [n, ...], each one party's whole message flattened, clipped row by row as `protect` clips a
        client's message (the spec's clip and norm): for inputs that never exist as a dict (canary clients)."""
        return clip_rows(rows, self.spec.clip, self.spec.clip_norm)

    @property
    def sum_noise_std(self) -> float:
        """The standard deviation of the noise on each coordinate of a revealed sum: K noised uploads
        of `share` each (local, distributed), or one draw (central)."""
        m = self.mechanism
        std = m.std if self.spec.mechanism == "gaussian" else 2 ** 0.5 * m.scale
        return std * ((self.num_clients * self.share) ** 0.5 if self.spec.mode != "central" else 1.0)

    @property
    def denominator_floor(self) -> float:
        """The floor guard_denominators puts under the denominators of a revealed sum: one noise std."""
        return self.sum_noise_std

    def reveal(self, total: Tensors, sample_rate: float = 1.0) -> Tensors:
        """The released sum (noised here in central mode); accounts this release."""
        if self.spec.mechanism == "gaussian":
            self.accountant.add_gaussian(self.spec.sigma, sample_rate)
        else:  # no amplification by sampling is claimed for Laplace releases
            self.accountant.add_laplace(self.spec.epsilon)
        if self.spec.mode != "central":
            return total
        self.noise_draws.append((layout(total),))
        noise = self._noise(total, 1.0)
        return {n: t.double() + noise[n] for n, t in total.items()}

    def report(self) -> dict:
        """The run record's privacy fields: dp (spec, unit, sensitivity, noise and its source), epsilon,
        delta, accountant."""
        m = self.mechanism
        noise = {"noise_std": m.std} if self.spec.mechanism == "gaussian" else {"noise_scale": m.scale}
        dp = {**self.spec.as_dict(), "unit": "client (one client's whole message, add/remove)",
              "sensitivity": self.spec.clip, "sensitivity_norm": f"L{self.spec.clip_norm}", **noise,
              "denominator_floor": self.denominator_floor, "releases": self.accountant.releases,
              **self.source.provenance()}
        if self.spec.mode == "distributed":
            dp["distributed"] = distributed_report(self.num_clients, self.colluders, self.tolerated_colluders,
                                                   self.accountant.gaussian_epsilon_scaled)
        if self.short_releases:
            distributed = self.spec.mode == "distributed"
            dp["dropout"] = {
                "releases_missing_clients": len(self.short_releases),
                "min_survivors": min(e["survivors"] for e in self.short_releases),
                "warning": ("mode=distributed: a sum that missed clients carries only survivors/(K - c) of the "
                            "calibrated noise variance (each client adds a 1/(K - c) share); epsilon above is "
                            "accounted with every client's share and does not hold for those releases")
                           if distributed else
                           ("the sum missed clients; the noise is the calibrated one (central or local mode), so "
                            "epsilon holds; the sampling rate accounted is the configured one"),
                "releases": self.short_releases[:100]}
        spent = self.accountant.spent()
        return {"dp": dp, "epsilon": spent.pop("epsilon"), "delta": spent.pop("delta"),
                "accountant": spent.pop("accountant"), **spent}
