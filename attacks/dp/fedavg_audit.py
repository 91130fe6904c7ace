"""`dp-audit`'s design for DP-FedAvg (attacks/dp/dp_audit.py picks it for --method dp-fedavg): canary clients (attacks/dp/canary_clients.py) and the estimators of
attacks/dp/estimators.py, from the adversary's view only.

`--attack dp-audit[:canaries=N|auto,view=rounds|final,seed=S,scale=X,support=s,colluders=c,confidence=p]`
(defaults: auto = 20,000 canaries or d // support on a smaller model, rounds, 0, 10, 1, the protocol's
tolerated coalition, 0.95).
`prepare(setup)` (before the run) adds N canary clients to the federation. The adversary, per DP mode:
- central (and local): the receivers of the released global models, any client. view=rounds: every
  round's model; view=final: the initial and the final one only. Under `plain` the server also sees who
  was sampled each round (every upload is visible), and so does the adversary's aux then.
- distributed: the server (it sees each revealed noised sum, equivalently each released model) plus the
  colluding clients: `colluders` (default the protocol's tolerated coalition, privacy/trust.py), the
  highest client indices as in attacks/dp/dp_collusion.py; they subtract their own noise shares, every round.

Statistic. Δ_t = w_{t+1} − w_t of the released models, less β·Δ_{t−1} (the server's momentum β, public;
β = 0 by default), times the public divisor q·|S_t|/η (the noised sum of round t), minus the coalition's own noise; per round o_tj = ς_tj⟨Δ_t, u_j⟩/C, ς_tj canary j's public
sign of round t (view=rounds; +1 under view=final, whose statistic needs a constant direction): 1 + N(0, σ²)
for a sampled in-canary, N(0, σ²) otherwise, up to the real clients' and other canaries' tiny
projections. Score of
canary j: the log-likelihood-ratio order Σ_t o_tj − n_j/2 over the n_j rounds it may have taken part in
(all rounds, or under a visible sample the rounds it was sampled). view=final: the cosine of u_j with
w_T − w_0 (Andrew et al.'s statistic).

Estimators (attacks/dp/estimators.py). Valid at `confidence`: the per-round bound (`per_step_bound`: each
round's o_tj pooled, a threshold fixed at half the canary's shift, Clopper-Pearson, √T·μ; valid against the
claim that the T rounds are identical Gaussian releases, the accountant's claim at rate 1; Nasr et al.
2023); the one-run bound (Steinke et al.) and its Gaussian f-DP refinement (Mahloujifar et al.), each with
k₊ = k₋ = k guesses fixed before the scores are seen (the k maximising the bound in a simulation of the
CLAIMED mechanism, μ = gdp_mu(ε, δ)); the split-half and Bonferroni membership bounds on the canaries'
scores (attacks/dp/dp_audit_bound.py; independent canaries: disjoint supports). `epsilon_lower_bound` is
ONE of them, fixed by the claim and the view before the scores are seen (`estimator`), so it needs no
correction for choosing. Estimates (no guarantee): the per-round GDP μ̂ composed over the rounds, with its
parametric interval, and Andrew et al.'s Gaussian fit.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from attacks.base import Attack, Knowledge, NoInput
from attacks.dp.canary_clients import MESSAGE, CanaryClients, CanaryDirections
from attacks.dp.estimators import PerStepBound, gaussian_fit_epsilon, per_step_bound
from attacks.dp.params import scale_and_confidence
from attacks.dp.scoring import BASELINE, per_round_metrics, score_bounds, verdict
from attacks.view import AdversaryView
from privfgl.federation import SERVER
from privfgl.federation.runtime import flatten
from privfgl.methods.dp_fedavg import dp_fedavg_params
from protocols.base import client as client_name

VIEWS = ("rounds", "final")


@dataclass(frozen=True)
class AuditAux:
    """The adversary's knowledge: the canary design (public, as in the papers), the public divisors per
    round, the sample per round when the protocol shows it (else None), the coalition's own noise per
    round (flat [d], or None), the clip C and the view mode."""
    directions: CanaryDirections
    divisors: tuple[float, ...]
    sampled: tuple[np.ndarray, ...] | None
    coalition_noise: tuple[torch.Tensor, ...] | None
    clip: float
    view: str
    colluders: tuple[int, ...]
    signs: tuple[np.ndarray, ...]  # ς_t [N] per round (public design)
    momentum: float = 0.0  # the server's momentum β (a public method param): Δ_t − β·Δ_{t−1} = η·(noised mean)


@dataclass(frozen=True)
class AuditScores:
    scores: np.ndarray  # [N], higher = more likely "in"
    per_round: np.ndarray | None  # [T, N] o_tj (view=rounds)
    possible: np.ndarray | None  # [T, N] bool: round t may hold canary j's input
    cosines: np.ndarray  # [N] cosine of u_j with w_T − w_0


@dataclass(frozen=True)
class AuditTruth:
    coins: np.ndarray
    epsilon_accountant: float
    delta: float
    accounted_sample_rate: float
    rounds: int


class CanaryClientAudit(Attack):
    """`dp-audit` on DP-FedAvg: canary clients and the one-run, f-DP, per-round and Gaussian-fit estimators."""

    name = "dp-audit"

    @staticmethod
    def fits(setup, method: str) -> bool:
        return method == "dp-fedavg"

    def __init__(self, canaries: int | str = "auto", view: str = "rounds", seed: int = 0, scale: int | str = 10,
                 support: int = 1, colluders: int | None = None, confidence: float | str = 0.95):
        if canaries == "auto":
            canaries = None  # CanaryClients: AUTO_COUNT, or d // support on a smaller model
        elif not isinstance(canaries, int) or canaries < 4:
            raise ValueError(f"dp-audit: canaries={canaries!r}: expected an integer >= 4, or auto")
        if view not in VIEWS:
            raise ValueError(f"dp-audit: view={view!r}: valid: {', '.join(VIEWS)}")
        if not isinstance(support, int) or support < 1:
            raise ValueError(f"dp-audit: support={support!r}: expected an integer >= 1")
        scale, confidence = scale_and_confidence(scale, confidence)
        if colluders is not None and (not isinstance(colluders, int) or colluders < 0):
            raise ValueError(f"dp-audit: colluders={colluders!r}: expected an integer >= 0")
        self.canaries, self.view, self.seed, self.scale, self.support = canaries, view, seed, scale, support
        self.colluders, self.confidence = colluders, confidence
        self.clients: CanaryClients | None = None

    def prepare(self, setup, method: str) -> None:
        """Before the run: the canary clients join the federation (and a distributed coalition keeps its
        own noise draws of every round). ValueError (one line) on a run this audit does not fit."""
        from privfgl.privacy.trust import tolerated_colluders
        fed = setup.federation
        if method != "dp-fedavg":
            raise ValueError(f"dp-audit: canary clients are built for --method dp-fedavg, not {method}")
        if fed.dp is None or not fed.dp.applies_to(MESSAGE) or fed.dp.spec.mechanism != "gaussian":
            raise ValueError("dp-audit: needs --dp gaussian:...,on=update (DP-FedAvg's client-level DP)")
        q = dp_fedavg_params(setup.method.params)["q"]
        self.clients = CanaryClients(self.canaries, self.seed, self.scale, self.support, q, signed=self.view == "rounds")
        fed.canaries = self.clients
        setup.extras["canary_clients"] = self.clients
        K = len(setup.clients)
        if fed.dp.spec.mode == "distributed":
            n = tolerated_colluders(fed.protocol, K) if self.colluders is None else self.colluders
            if n >= K:
                raise ValueError(f"dp-audit: colluders={n} of {K} clients leave no honest share")
            fed.dp.coalition = tuple(range(K - n, K))

    def targets(self, view: AdversaryView, knowledge: Knowledge, num_clients: int) -> list[str]:
        return ["canaries"]

    def declare_aux(self, setup, knowledge: Knowledge, target: str) -> AuditAux:
        if self.clients is None or self.clients.directions is None:
            raise NoInput("dp-audit: no canary clients took part (prepare was not called, or no sum was revealed)")
        fed, dp = setup.federation, setup.federation.dp
        p = dp_fedavg_params(setup.method.params)
        rounds = sorted(r for r, name in fed.participation if name == MESSAGE)
        divisors = tuple(p["q"] * len(fed.survivors(r, MESSAGE)) / p["server_lr"] for r in rounds)
        visible = fed.protocol.name == "plain"  # the server sees every upload, so who was sampled
        sampled = tuple(self.clients.sampled[r].copy() for r in rounds) if visible else None
        noise = None
        if dp.coalition:
            noise = tuple(flatten(dp.coalition_noise[i])[0] for i in range(len(rounds)))
        signs = tuple(self.clients.signs(r) for r in rounds)
        return AuditAux(self.clients.directions, divisors, sampled, noise, dp.spec.clip, self.view, dp.coalition,
                        signs, p["server_momentum"])

    def attack(self, view: AdversaryView, aux: AuditAux) -> AuditScores:
        receiver = view.party if view.party != SERVER else client_name(0)
        models = [flatten(m.tensors)[0] for m in view.find("global_model") if m.receiver == receiver
                  and m.tensors is not None]
        if len(models) != len(aux.divisors) + 1:
            raise NoInput(f"dp-audit: {len(models)} global models in the {view.party}'s view, expected "
                          f"{len(aux.divisors) + 1} (the initial one and one per round)")
        u = aux.directions
        final = models[-1] - models[0]
        cosines = (u.project(final[None])[0] / max(float(final.norm()), 1e-300)).numpy()
        if aux.view == "final":
            return AuditScores(cosines, None, None, cosines)
        steps = [b - a for a, b in zip(models, models[1:])]
        sums = torch.stack([(step - aux.momentum * prev) * d  # undo the server's momentum: η·(this round's mean)
                            for step, prev, d in zip(steps, [torch.zeros_like(steps[0]), *steps], aux.divisors)])
        if aux.coalition_noise is not None:
            sums = sums - torch.stack(aux.coalition_noise)
        per_round = (u.project(sums) / aux.clip).numpy() * np.stack(aux.signs)
        possible = np.stack(aux.sampled) if aux.sampled is not None else np.ones(per_round.shape, dtype=bool)
        scores = (per_round * possible).sum(0) - possible.sum(0) / 2
        return AuditScores(scores, per_round, possible, cosines)

    def truth(self, setup, target: str) -> AuditTruth:
        report = setup.extras["dp"].report()
        rounds = len([1 for _, name in setup.federation.participation if name == MESSAGE])
        return AuditTruth(self.clients.coins.copy(), float(report["epsilon"]), float(report["delta"]),
                          float(report["dp"]["accounted_sample_rate"]), rounds)

    def score(self, rec: AuditScores, truth: AuditTruth, aux: AuditAux) -> tuple[dict, dict]:
        c, delta, conf = truth.coins, truth.delta, self.confidence
        bounds, score_metrics = score_bounds(rec.scores, c, truth.epsilon_accountant, delta, conf, self.seed)
        per_round = {}
        if rec.per_round is not None:
            stat_in = rec.per_round[:, c][rec.possible[:, c]]
            stat_out = rec.per_round[:, ~c][rec.possible[:, ~c]]
            per_step = self.per_step(stat_in, stat_out, truth)
            bounds["per_round"] = per_step.epsilon_lower
            per_round = per_round_metrics(per_step, stat_in, stat_out, truth.rounds, delta, conf, self.seed)
        estimator = self.estimator(truth.accounted_sample_rate, rec.per_round is not None)
        metrics = {"epsilon_lower_bound": bounds[estimator], "epsilon_accountant": truth.epsilon_accountant,
                   "confidence": conf, "estimator": estimator, "canaries": len(c), "canaries_in": int(c.sum()),
                   "view": aux.view, "delta": delta, **verdict(bounds[estimator], truth.epsilon_accountant),
                   **score_metrics,
                   "gaussian_fit_epsilon_estimate": gaussian_fit_epsilon(
                       self._fit_statistic(rec, c, aux.directions.dimension), aux.directions.dimension, delta),
                   **per_round}
        return metrics, dict(BASELINE)

    def per_step(self, stat_in: np.ndarray, stat_out: np.ndarray, truth: AuditTruth) -> PerStepBound:
        """The per-round bound against the Gaussian claim: the threshold fixed by the design at half the
        canary's per-round shift (C, i.e. 1 in these units)."""
        return per_step_bound(stat_in, stat_out, 0.5, truth.rounds, truth.delta, "gaussian", self.confidence)

    @staticmethod
    def estimator(accounted_sample_rate: float, per_round: bool) -> str:
        """The ONE estimator `epsilon_lower_bound` reports, fixed by the claim and the view before any score
        is seen (so no correction for choosing): unsampled Gaussian rounds seen one by one → the per-round
        bound (valid against the claim as the accountant composes it); unsampled, final model only → the
        Gaussian f-DP one-run bound; sampled (amplification claimed) → the one-run bound, valid against
        any (ε, δ) claim."""
        if accounted_sample_rate == 1.0:
            return "per_round" if per_round else "one_run_fdp"
        return "one_run"

    @staticmethod
    def _fit_statistic(rec: AuditScores, coins: np.ndarray, dimension: int) -> np.ndarray:
        """The in-canaries' statistics for Andrew et al.'s fit against N(0, 1/d): view=final their cosines;
        view=rounds (signed canaries: the final delta holds no coherent canary) their sign-corrected sums
        Σ_t o_tj divided by the out-canaries' spread and by √d (the out-canaries' null is then N(0, 1/d))."""
        if rec.per_round is None:
            return rec.cosines[coins]
        total = (rec.per_round * rec.possible).sum(0)
        return total[coins] / float(total[~coins].std(ddof=1)) / math.sqrt(dimension)
