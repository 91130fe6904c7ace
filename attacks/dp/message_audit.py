"""`dp-audit`'s design for message DP (`--dp gaussian|laplace:...,on=MESSAGE`) on any method but DP-FedAvg:
canary contributions (attacks/dp/dp_audit.py picks it when the run has message DP).

`--attack dp-audit[:canaries=N,message=NAME,seed=S,scale=X,support=s,colluders=c,confidence=p]`.
`prepare(setup)` (before the run) adds N canary contributions to every sum of one protected message
(`message`, default the first the spec protects: FedAvg/FedProx/FedOMD `model_update` {n·W, n}, FedSpray's
`encoder_update`/`proxy_update`, FedOMD's `hidden_sums`/`moment_sums`, FedGPL's `prompt_update`, O-pFGL's
`class_stats`): the canary clients of attacks/dp/canary_clients.py (Dirac directions on disjoint
coordinates, fair coins, public per-round signs, raw norm scale·C clipped by the run's own clip, sample
rate 1), whose inputs join the protocol's sum as the K clients' do. One client's sensitivity (C) and the
noise are unchanged, so the accountant's ε is the ε of the mechanism that ran with them.

The adversary and what it observes, per mode:
- local / distributed: the server (or the `--adversary` party, wherever the sum is opened to it), which
  opens `MESSAGE:sum` every round: the noised sum itself, the clients' noise inside. Distributed: plus the
  colluding clients (`colluders`, default the protocol's tolerated coalition, privacy/trust.py; the highest
  client indices), who subtract their own noise shares every round. Local: each client's full noise is in
  the sum, so the sum carries K× the variance one upload's claim is calibrated to and the bound is loose
  (valid; the claim protects each upload, which the canaries never send).
- central: refused. The trusted server sees the exact sum; what the receivers get is the method's
  post-processing of the noised sum (FedAvg's ratio Σ n·W / Σ n with a noised Σ n, ...), which does not
  give the sum back. DP-FedAvg releases Δw times a public divisor and has its own design (fedavg_audit.py).

Statistic and estimators: those of fedavg_audit.py (view=rounds), o_tj = ς_tj⟨S_t, u_j⟩/C per round of
the revealed sum S_t. `epsilon_lower_bound` is the per-round bound (per_step_bound, T = the rounds of
this message): Gaussian: threshold 1/2, √T·μ; Laplace (pure ε per release): threshold at the shift (1),
where the likelihood ratio of one Laplace draw is e^ε, the per-step ε composed as the accountant composes
Laplace releases (the smaller of T·ε and advanced composition at δ). The accountant composes every release
of every protected message; the bound composes only the audited message's, so it stays below.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch

from attacks.base import Knowledge, NoInput
from attacks.dp.canary_clients import CanaryClients
from attacks.dp.estimators import PerStepBound, per_step_bound
from attacks.dp.fedavg_audit import AuditAux, AuditScores, AuditTruth, CanaryClientAudit
from attacks.view import AdversaryView
from privfgl.federation.runtime import flatten
from privfgl.privacy.accounting import laplace_advanced_composition


class CanaryContributionAudit(CanaryClientAudit):
    """`dp-audit` on message DP: canary contributions in one protected message's sums, observed in the
    revealed noised sum (local / distributed modes)."""

    @staticmethod
    def fits(setup, method: str) -> bool:
        return method != "dp-fedavg" and getattr(setup.federation, "dp", None) is not None

    def __init__(self, message: str | None = None, **params):
        if params.get("view", "rounds") != "rounds":
            raise ValueError(f"dp-audit: view={params['view']!r}: message DP is audited on every round's revealed "
                             "sum; valid: rounds")
        super().__init__(**params)
        self.message, self.mechanism = message, None

    def prepare(self, setup, method: str) -> None:
        """Before the run: the canary contributions join every sum of the audited message. ValueError (one
        line) where the noised sum is not in the adversary's view (central mode) or the design does not fit."""
        from privfgl.privacy.trust import tolerated_colluders
        fed = setup.federation
        dp = fed.dp
        if dp is None:
            raise ValueError("dp-audit: canary contributions need --dp gaussian|laplace:...,on=MESSAGE")
        spec = dp.spec
        message = self.message or spec.messages[0]
        if message not in spec.messages:
            raise ValueError(f"dp-audit: message={message!r} is not protected by --dp; valid: "
                             f"{', '.join(spec.messages)}")
        if spec.mode == "central":
            raise ValueError(f"dp-audit: --dp ...,mode=central on {message}: the receivers get only {method}'s "
                             "post-processing of the noised sum (the trusted server sees the exact sum), which "
                             "does not give the noised sum back; valid: mode=local or mode=distributed (the server "
                             "opens the noised sum), or --method dp-fedavg")
        if spec.mechanism == "laplace" and self.support != 1:
            raise ValueError(f"dp-audit: support={self.support} under laplace (L1 clip): the clip would shrink a "
                             "spread direction below C; valid: support=1")
        self.message, self.mechanism = message, spec.mechanism
        self.clients = CanaryClients(self.canaries, self.seed, self.scale, self.support, 1.0, signed=True,
                                     message=message)
        fed.canaries = self.clients
        setup.extras["canary_clients"] = self.clients
        K = len(setup.clients)
        if spec.mode == "distributed":
            n = tolerated_colluders(fed.protocol, K) if self.colluders is None else self.colluders
            if n >= K:
                raise ValueError(f"dp-audit: colluders={n} of {K} clients leave no honest share")
            dp.coalition = tuple(range(K - n, K))

    def declare_aux(self, setup, knowledge: Knowledge, target: str) -> AuditAux:
        if self.clients is None or self.clients.directions is None:
            raise NoInput(f"dp-audit: no canary contributions took part (no sum of {self.message} was revealed)")
        dp, rounds = setup.federation.dp, sorted(self.clients.releases)
        noise = None
        if dp.coalition:
            noise = tuple(flatten(dp.coalition_noise[self.clients.releases[r]])[0] for r in rounds)
        signs = tuple(self.clients.signs(r) for r in rounds)
        return AuditAux(self.clients.directions, tuple(1.0 for _ in rounds), None, noise, dp.spec.clip, "rounds",
                        dp.coalition, signs)

    def attack(self, view: AdversaryView, aux: AuditAux) -> AuditScores:
        sums = [flatten(m.tensors)[0] for m in view.find(f"{self.message}:sum") if m.tensors is not None]
        if len(sums) != len(aux.signs):
            raise NoInput(f"dp-audit: {len(sums)} opened sums of {self.message} in the {view.party}'s view, expected "
                          f"{len(aux.signs)} (one per release); the sum is opened to another party")
        totals = torch.stack(sums).double()
        if aux.coalition_noise is not None:
            totals = totals - torch.stack(aux.coalition_noise)
        per_round = (aux.directions.project(totals) / aux.clip).numpy() * np.stack(aux.signs)
        possible = np.ones(per_round.shape, dtype=bool)
        no_model = np.full(per_round.shape[1], np.nan)  # no model here: the cosine statistic is fedavg_audit's
        return AuditScores(per_round.sum(0) - per_round.shape[0] / 2, per_round, possible, no_model)

    def truth(self, setup, target: str) -> AuditTruth:
        dp = setup.federation.dp
        rates = {q for _, q in dp.accountant.gaussian}
        if rates - {1.0}:
            raise NoInput(f"dp-audit: releases accounted at sampling rates {sorted(rates)}; canary contributions "
                          "audit rate-1 releases only")
        report = dp.report()
        return AuditTruth(self.clients.coins.copy(), float(report["epsilon"]), float(report["delta"]) or dp.spec.delta,
                          1.0, len(self.clients.releases))

    def per_step(self, stat_in: np.ndarray, stat_out: np.ndarray, truth: AuditTruth) -> PerStepBound:
        """Gaussian: fedavg_audit's (threshold 1/2, √T·μ). Laplace: threshold at the shift (1 in units of C),
        the per-release ε composed as the accountant composes Laplace releases."""
        if self.mechanism != "laplace":
            return super().per_step(stat_in, stat_out, truth)
        b = per_step_bound(stat_in, stat_out, 1.0, truth.rounds, truth.delta, "pure", self.confidence)
        composed = min(b.epsilon_lower, laplace_advanced_composition(b.step_lower, truth.rounds, truth.delta))
        return dataclasses.replace(b, epsilon_lower=composed)
