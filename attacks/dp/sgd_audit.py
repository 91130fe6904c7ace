"""`dp-audit`'s design for node-level DP-SGD (attacks/dp/dp_audit.py picks it for --method dp-sgd): gradient
canaries (attacks/dp/gradient_canaries.py: worst-case pairs realising Δ = C·(2N_D − 1)) in one client's
per-node gradients, scored from the server's view.

`--attack dp-audit[:canaries=N,client=k,seed=S,scale=X,support=s,view=rounds,confidence=p]`.
Adversary: the server, which sees the audited client's upload every round (readable under `plain`) and the
model it broadcast before (round 0: the seeded initial model, public). The client ran E = local_epochs steps
of its optimizer on ĝ_s = (Σ clip(g) + N(0, (σΔ)²))/n, n its public count of training nodes.
- optimizer=sgd: w_E = a^E·w_0 − lr·Σ_s a^{E−1−s}·ĝ_s with a = 1 − lr·weight_decay, so the server recovers
  Σ_s a^{E−1−s}·n·ĝ_s = n·(a^E·w_0 − w_E)/lr exactly. Per round and canary, o_tj = (ς_tj·⟨that, u_j⟩ +
  A(N_D − 1)C)/(AΔ), A = Σ_s a^s: 1 + N(0, σ²B/A²) for an in-canary, N(0, σ²B/A²) for an out-canary
  (B = Σ_s a^{2s}; up to the real gradients' tiny projections), a release at most as informative as the
  round's E accounted steps. `epsilon_lower_bound`: the per-round bound (`per_step_bound`, threshold 0.5,
  half the known shift, fixed in advance; Clopper-Pearson; composed over the R rounds as √R·μ: valid
  against the accountant's claim of R·E identical 1/σ-GDP steps at rate 1, Nasr et al. 2023).
- optimizer=adam: the step m̂/(√v̂ + eps) is not linear in ĝ (and Adam's state carries the past), so the
  round's release cannot be recovered. The view allows any post-processing of the whole transcript: the
  canaries are unsigned (ς_tj = +1, so Adam's momentum accumulates their constant push: on Cora at ε = 8
  the bound is 3.99 against 2.19 with per-round signs), the score is the total step Σ_t⟨w_0 − w_E, u_j⟩/lr,
  and the one-run bounds hold for any statistic of the run with one coin per canary: `epsilon_lower_bound` is the Gaussian f-DP one-run
  bound (the accountant's claim is the composed Gaussian, (√(RE)/σ)-GDP); no per-round bound.
Also in the finding (valid): the one-run bound (Steinke et al.), split-half and Bonferroni; estimates (no
guarantee): the per-round GDP μ̂ composed (SGD) and Andrew et al.'s Gaussian fit. The one-run k is fixed
by a simulation of the claimed μ (scoring.pick_k), before the scores are seen.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from attacks.base import Attack, Knowledge, NoInput
from attacks.dp.canary_clients import CanaryDirections
from attacks.dp.estimators import gaussian_fit_epsilon, per_step_bound
from attacks.dp.gradient_canaries import GradientCanaries, sgd_released_sum
from attacks.dp.params import check_canaries_and_client, scale_and_confidence
from attacks.dp.scoring import BASELINE, per_round_metrics, score_bounds, verdict
from attacks.view import AdversaryView
from privfgl.federation import SERVER
from privfgl.federation.runtime import flatten
from privfgl.methods.dp_sgd import dp_sgd_params, initial_model
from privfgl.privacy.dpsgd import influence_count, node_sensitivity
from protocols.base import client as client_name

UPLOAD, BROADCAST = "model_update", "global_model"


@dataclass(frozen=True)
class SGDAuditAux:
    """The server's knowledge: the canary design (public), the audited client, its public training-node count
    n, the run's optimizer settings, the clip C, N_D, Δ, the seeded initial model (flat, sorted layout) and
    the public per-round signs ς_t [N]."""
    directions: CanaryDirections
    client: int
    n_train: int
    optimizer: str
    lr: float
    weight_decay: float
    local_epochs: int
    clip: float
    slots: int
    sensitivity: float
    initial: torch.Tensor
    signs: tuple[np.ndarray, ...]


@dataclass(frozen=True)
class SGDAuditScores:
    scores: np.ndarray  # [N], higher = more likely "in"
    per_round: np.ndarray  # [T, N] o_tj
    possible: np.ndarray  # [T, N] bool: the client's upload of round t was seen


@dataclass(frozen=True)
class SGDAuditTruth:
    coins: np.ndarray
    epsilon_accountant: float
    delta: float
    rounds: int


class GradientCanaryAudit(Attack):
    """`dp-audit` on node-level DP-SGD: gradient canaries realising Δ, per-round (SGD) or one-run (Adam) bounds."""

    name = "dp-audit"

    @staticmethod
    def fits(setup, method: str) -> bool:
        return method == "dp-sgd"

    def __init__(self, canaries: int = 10000, client: int = 0, seed: int = 0, scale: int | str = 10,
                 support: int = 1, view: str = "rounds", confidence: float | str = 0.95):
        check_canaries_and_client(canaries, client)
        if not isinstance(support, int) or support < 1:
            raise ValueError(f"dp-audit: support={support!r}: expected an integer >= 1")
        if view != "rounds":
            raise ValueError(f"dp-audit: view={view!r}: dp-sgd's audit reads every round's upload; valid: rounds")
        scale, confidence = scale_and_confidence(scale, confidence)
        self.canaries, self.client, self.seed, self.scale, self.support = canaries, client, seed, scale, support
        self.confidence = confidence
        self.inserted: GradientCanaries | None = None

    def prepare(self, setup, method: str) -> None:
        """Before the run: the canaries join the audited client's per-node gradients. ValueError (one line)
        on a run this audit does not fit."""
        if method != "dp-sgd":
            raise ValueError(f"dp-audit: gradient canaries are built for --method dp-sgd, not {method}")
        p = dp_sgd_params(setup.method.params)
        if not p["federated"]:
            raise ValueError("dp-audit: dp-sgd with federated=false uploads nothing; the server's audit needs "
                             "federated=true")
        if self.client >= len(setup.clients):
            raise ValueError(f"dp-audit: client={self.client}: valid: 0..{len(setup.clients) - 1}")
        if int(setup.clients[self.client].train_mask.sum()) == 0:
            raise ValueError(f"dp-audit: client={self.client} has no training nodes (it takes no step)")
        slots = influence_count(p["degree"], setup.model.layers)
        self.inserted = GradientCanaries(self.canaries, self.seed, self.scale, self.support, self.client, slots,
                                         p["clip"], signed=setup.model.optimizer == "sgd")
        setup.extras["gradient_canaries"] = self.inserted

    def targets(self, view: AdversaryView, knowledge: Knowledge, num_clients: int) -> list[str]:
        return ["canaries"]

    def declare_aux(self, setup, knowledge: Knowledge, target: str) -> SGDAuditAux:
        if self.inserted is None or self.inserted.directions is None:
            raise NoInput("dp-audit: no gradient canaries took part (prepare was not called, or no step ran)")
        p, cfg, m = dp_sgd_params(setup.method.params), setup.model, setup.method
        initial = flatten({n: v.detach() for n, v in initial_model(setup).named_parameters()})[0]
        signs = tuple(self.inserted.signs(r) for r in range(m.rounds))
        return SGDAuditAux(self.inserted.directions, self.client, int(setup.clients[self.client].train_mask.sum()),
                           cfg.optimizer, cfg.lr, cfg.weight_decay, m.local_epochs, p["clip"], self.inserted.slots,
                           node_sensitivity(p["clip"], p["degree"], cfg.layers), initial, signs)

    def attack(self, view: AdversaryView, aux: SGDAuditAux) -> SGDAuditScores:
        sender, rounds = client_name(aux.client), len(aux.signs)
        starts, ends, seen = [], [], []
        start = aux.initial
        for r in range(rounds):
            upload = view.payload(UPLOAD, r, sender)
            if upload is None and view.find(UPLOAD, r, sender):
                raise NoInput(f"dp-audit: the {view.party} sees {sender}'s upload only masked; the audit of "
                              "dp-sgd needs it readable (--protocol plain)")
            seen.append(upload is not None)
            starts.append(start)
            ends.append(flatten(upload)[0] if upload is not None else start)
            sent = view.payload(BROADCAST, r, SERVER)
            if sent is None:
                raise NoInput(f"dp-audit: no {BROADCAST} of round {r} in the {view.party}'s view")
            start = flatten(sent)[0]
        w0, w1 = torch.stack(starts), torch.stack(ends)
        signs = np.stack(aux.signs)
        if aux.optimizer == "sgd":
            released, big_a = sgd_released_sum(w0, w1, aux.n_train, aux.lr, aux.weight_decay, aux.local_epochs)
            per_round = (signs * aux.directions.project(released).numpy() + big_a * (aux.slots - 1) * aux.clip) \
                / (big_a * aux.sensitivity)
            offset = 0.5
        else:
            per_round = signs * aux.directions.project((w0 - w1) / aux.lr).numpy()
            offset = 0.0
        possible = np.repeat(np.array(seen)[:, None], per_round.shape[1], axis=1)
        scores = ((per_round - offset) * possible).sum(0)
        return SGDAuditScores(scores, per_round, possible)

    def truth(self, setup, target: str) -> SGDAuditTruth:
        report = setup.extras["dp"].report()
        return SGDAuditTruth(self.inserted.coins.copy(), float(report["epsilon"]), float(report["delta"]),
                             setup.method.rounds)

    def score(self, rec: SGDAuditScores, truth: SGDAuditTruth, aux: SGDAuditAux) -> tuple[dict, dict]:
        c, delta, conf = truth.coins, truth.delta, self.confidence
        bounds, score_metrics = score_bounds(rec.scores, c, truth.epsilon_accountant, delta, conf, self.seed)
        stat_in, stat_out = rec.per_round[:, c][rec.possible[:, c]], rec.per_round[:, ~c][rec.possible[:, ~c]]
        per_round = {}
        if aux.optimizer == "sgd":  # threshold fixed by the design: half the canary's known per-round shift (1 here)
            per_step = per_step_bound(stat_in, stat_out, 0.5, truth.rounds, delta, "gaussian", conf)
            bounds["per_round"] = per_step.epsilon_lower
            per_round = per_round_metrics(per_step, stat_in, stat_out, truth.rounds, delta, conf, self.seed)
        estimator = self.estimator(aux.optimizer)
        total = (rec.per_round * rec.possible).sum(0)
        d = aux.directions.dimension
        fit = total[c] / float(total[~c].std(ddof=1)) / math.sqrt(d)  # out-canaries' null: N(0, 1/d)
        metrics = {"epsilon_lower_bound": bounds[estimator], "epsilon_accountant": truth.epsilon_accountant,
                   "confidence": conf, "estimator": estimator, "canaries": len(c), "canaries_in": int(c.sum()),
                   "view": "rounds", "optimizer": aux.optimizer, "client": aux.client, "delta": delta,
                   **verdict(bounds[estimator], truth.epsilon_accountant), **score_metrics,
                   "gaussian_fit_epsilon_estimate": gaussian_fit_epsilon(fit, d, delta), **per_round}
        return metrics, dict(BASELINE)

    @staticmethod
    def estimator(optimizer: str) -> str:
        """The ONE estimator `epsilon_lower_bound` reports, fixed by the view before any score is seen: SGD
        (each round's release recovered) → the per-round bound; Adam → the Gaussian f-DP one-run bound."""
        return "per_round" if optimizer == "sgd" else "one_run_fdp"
