"""`dp-collusion`: the server and colluding clients remove their own distributed-DP noise shares.

In mode=distributed each client adds its own share of the Gaussian noise to its upload and the secure
protocol reveals only the sum. A client that colludes with the server knows its own share (it drew it),
so the coalition subtracts the colluders' shares from the revealed sum: what is left to protect the
honest clients is their own shares. The privacy claim under test (privacy/shares.py): the shares are
sized so that the shares of the K − c honest clients still carry the full N(0, (σ·clip)²) for every
coalition of up to c colluders, c the coalition the protocol tolerates (privacy/trust.py:
tolerated_colluders: secagg t − 1, crypten K − 1, ckks/bfv K − 1 without the key holder client0).

Attacker input: only the server's view (the revealed sum of `message` in the targeted round, default
the last) and the aux: the colluding clients' own noise draws of that release (their own knowledge,
never an honest client's; the runtime's MessageDP.audit_noise) and the public σ·clip. Colluders:
`colluders=N` (default: the protocol's tolerated coalition), the clients with the highest indices
(client0, ckks/bfv's key holder, last), or `clients=a+b+...`. Reconstruction: the revealed sum minus
the colluders' shares, the coalition's estimate of the sum of the clipped uploads.

Score (auditor side): the residual against the sum of the clipped uploads (MessageDP.audit_clipped) is
the noise the coalition could not remove; over its n coordinates (zero-mean Gaussian) the std estimate
sqrt(Σr²/n) with a 95 % chi-square interval, against the calibrated σ·clip. `noise_removed` is true
when the interval lies below σ·clip: the coalition left significantly less noise than ε is accounted
at. Baseline: the same residual of the revealed sum itself (no share removed).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from scipy.stats import chi2

from attacks.base import Attack, Knowledge, NoInput, NoTruth
from attacks.dp.dp_noise_removal import release_order
from attacks.view import AdversaryView
from privfgl.federation import SERVER
from privfgl.privacy.trust import tolerated_colluders

Tensors = dict[str, torch.Tensor]
CONFIDENCE = 0.95


@dataclass(frozen=True)
class ColluderAux:
    """The coalition's knowledge: who colludes, their own noise draws of the targeted release (one dict
    per colluder, the fields of the message), the release's round and message, the public σ·clip."""
    message: str
    round: int
    colluders: tuple[int, ...]
    own_noise: tuple[Tensors, ...]
    calibrated_std: float


@dataclass(frozen=True)
class Remaining:
    revealed: Tensors  # the revealed sum as the view holds it
    denoised: Tensors  # minus the colluders' shares


def std_interval(residual: torch.Tensor, confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """(estimate, low, high) of the std of zero-mean Gaussian `residual`: sqrt(Σr²/n) and the chi-square
    interval sqrt(Σr²/χ²_n(1 − a/2)), sqrt(Σr²/χ²_n(a/2)), a = 1 − confidence."""
    r = residual.double().reshape(-1)
    n, ss = r.numel(), float(r.pow(2).sum())
    a = 1 - confidence
    return math.sqrt(ss / n), math.sqrt(ss / chi2.ppf(1 - a / 2, n)), math.sqrt(ss / chi2.ppf(a / 2, n))


class DPCollusion(Attack):
    """`dp-collusion`: the noise left on a distributed-DP sum once colluding clients remove theirs."""

    name = "dp-collusion"

    def __init__(self, message: str | None = None, round: int = -1, colluders: int | None = None,
                 clients: list[int] | None = None):
        if colluders is not None and clients is not None:
            raise ValueError("give colluders=N or clients=a+b, not both")
        if colluders is not None and (not isinstance(colluders, int) or colluders < 0):
            raise ValueError(f"colluders={colluders!r}: expected an integer >= 0")
        self.message, self.round, self.colluders, self.clients = message, round, colluders, clients

    def targets(self, view: AdversaryView, knowledge: Knowledge, num_clients: int) -> list[str]:
        return ["aggregate"]

    def _release(self, setup) -> tuple[str, int, int]:
        """(message, round, release index) of the targeted release."""
        dp = setup.federation.dp
        message = self.message or dp.spec.messages[0]
        if message not in dp.spec.messages:
            raise NoInput(f"--dp protects {', '.join(dp.spec.messages)}, not {message}")
        order = release_order(setup.federation.transcript.view(SERVER), dp.spec.messages)
        rounds = [r for r, name in order if name == message]
        round = (rounds[-1] if rounds else -1) if self.round < 0 else self.round
        if (round, message) not in order:
            raise NoInput(f"no aggregation of {message} in round {round}")
        return message, round, order.index((round, message))

    def declare_aux(self, setup, knowledge: Knowledge, target: str) -> ColluderAux:
        dp, K = setup.federation.dp, len(setup.clients)
        if dp is None or dp.spec.mechanism != "gaussian" or dp.spec.mode == "central":
            raise NoInput("no client-side Gaussian noise shares (needs --dp gaussian:...,mode=distributed|local)")
        n = tolerated_colluders(setup.federation.protocol, K) if self.colluders is None else self.colluders
        colluders = tuple(self.clients) if self.clients is not None else tuple(range(K - n, K))
        if len(colluders) >= K:
            raise ValueError(f"dp-collusion: {len(colluders)} colluders of {K} clients leave no honest share")
        message, round, release = self._release(setup)
        if release not in dp.audit_noise:
            raise NoInput(f"the run keeps the clients' noise of the latest round only; round {round} is older")
        own = dp.audit_noise[release]
        return ColluderAux(message, round, colluders, tuple({f: t.clone() for f, t in own[k].items()}
                                                            for k in colluders), dp.mechanism.std)

    def attack(self, view: AdversaryView, aux: ColluderAux) -> Remaining:
        found = [m for m in view.find(f"{aux.message}:sum", aux.round) if m.tensors is not None]
        if not found:
            raise NoInput(f"no revealed {aux.message} sum of round {aux.round} in the {view.party}'s view")
        revealed = {f: t.double() for f, t in found[0].tensors.items()}
        return Remaining(revealed, {f: t - sum(z[f] for z in aux.own_noise) for f, t in revealed.items()})

    def truth(self, setup, target: str) -> Tensors:
        """The sum of the clients' clipped uploads of the targeted release, before any noise."""
        release = self._release(setup)[2]
        dp = setup.federation.dp
        if release not in dp.audit_clipped:
            raise NoTruth("the runtime keeps the clipped uploads of the latest round only")
        clipped = dp.audit_clipped[release]
        return {f: sum(c[f].double() for c in clipped) for f in clipped[0]}

    def score(self, rec: Remaining, truth: Tensors, aux: ColluderAux) -> tuple[dict, dict]:
        names = sorted(truth)
        flat = lambda d: torch.cat([d[f].double().reshape(-1) for f in names])

        def remaining(x: Tensors) -> dict:
            std, low, high = std_interval(flat(x) - flat(truth))
            return {"remaining_std": std, "ci95_low": low, "ci95_high": high,
                    "remaining_ratio": std / aux.calibrated_std}
        metrics = remaining(rec.denoised)
        metrics.update(noise_removed=metrics["ci95_high"] < aux.calibrated_std, calibrated_std=aux.calibrated_std,
                       colluders=list(aux.colluders), coordinates=int(flat(truth).numel()))
        return metrics, {**remaining(rec.revealed), "kind": "the revealed sum itself (no share removed)"}
