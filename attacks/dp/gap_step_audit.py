"""`dp-audit`'s design for node-level GAP's DP-SGD steps (`--method gap --method-param unit=node`; with
`hops=0` the node-level DP-MLP): gradient canaries (attacks/dp/gradient_canaries.py) in one client's per-node
gradients of every encoder and classifier step, scored from the server's view.

`--attack dp-audit:stage=steps[,canaries=N,client=k,seed=S,scale=X,support=s,confidence=p]` (defaults 4000,
0, 0, 10, 1, 0.95; attacks/dp/dp_audit.py picks it for a node-level GAP run with `stage=steps`, and for
`hops=0`, which has no hops to audit, without it).

The mechanism (privfgl/methods/gap/node.py). Every step of the encoder (encoder_rounds·E) and of the
classifier (rounds·E) releases Σ_t clip(g_t) + N(0, (σC)²) over the client's training nodes (all of them,
or a Poisson sample at `sample_rate` q < 1), divided by q·n, n their public count. A node's per-node gradient depends on its own features, label and cached hop rows only
(no other node's gradient moves when it leaves), so the sensitivity is C, not dp-sgd's C·(2N_D − 1).

Canaries: N canary nodes, each with one coin (the auditor's secret) and one Dirac direction in EACH part's
parameter space (disjoint within a part; GradientCanaries with one slot per part, same seed, so the same
coins). An in-canary adds one per-node gradient Λ·ς_tj·u_j (Λ = scale·C, clipped to C) to every step of
both parts; an out-canary adds nothing: the two worlds' clipped sums differ by C·u_j, the accounted
sensitivity, in every step, as one node present in all the audited steps. They hold no nodes, are not in n,
never enter accuracy; the record's `gradient_canaries` block says how many were inserted and where. At
q < 1 the mechanism samples each in-canary's row as it samples a node (its own coin per step), so the
canary is one node at rate q, as the accountant assumes.

Adversary: the server. It reads the audited client's upload of every round (n·W with n = 1 at node level:
the model itself; readable under `plain`, a masked upload is refused) and its own broadcast before it
(round 0: the public initial model, its first broadcast).
- optimizer=sgd: the server unrolls w_E = a^E·w_0 − lr·Σ_s a^{E−1−s}·ĝ_s (a = 1 − lr·weight_decay) to
  q·n·(a^E·w_0 − w_E)/lr; per round and canary o_tj = ς_tj·⟨that, u_j⟩/(A·C), A = Σ_s a^s: 1 + N(0, σ²B/A²)
  in, N(0, σ²B/A²) out (B = Σ_s a^{2s}; plus the real gradients' small projections). `epsilon_lower_bound`
  is the per-round bound (threshold 1/2 fixed by the design, Clopper-Pearson, √R·μ over the R = encoder_rounds
  + rounds rounds of both parts, whose observations are identically distributed under the claim). At q < 1
  an in-canary's mean shift is carried only by the steps that drew it (Σ_s coin_s·a^{E−1−s}/A): a mixture,
  not a Gaussian shift, so the per-round bound does not apply: `epsilon_lower_bound` is then Steinke et al.'s one-run bound (`one_run`), valid for
  any (ε, δ) mechanism.
- optimizer=adam (the default): not invertible per round; unsigned canaries, score Σ_t⟨w_0 − w_E, u_j⟩/lr
  over both parts, `epsilon_lower_bound` the Gaussian f-DP one-run bound (sgd_audit.py's Adam route; at
  q < 1, where the steps are not Gaussian, the one-run bound `one_run`).
The claim audited: the steps' own ε, `epsilon_accountant_steps` = the accountant's ε of the
(encoder_rounds + rounds)·E Gaussian steps of noise multiplier σ at rate q. The record's ε also pays for the
K hops (audited by gap_audit.py's canary nodes); with hops=0 the two are equal.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from attacks.base import Attack, Knowledge, NoInput
from attacks.dp.estimators import per_step_bound
from attacks.dp.gradient_canaries import GradientCanaries, Layout, sgd_released_sum
from attacks.dp.params import check_canaries_and_client, scale_and_confidence
from attacks.dp.scoring import BASELINE, per_round_metrics, score_bounds, verdict
from attacks.view import AdversaryView
from privfgl.federation import SERVER
from privfgl.federation.runtime import flatten
from privfgl.privacy.accounting import gaussian_epsilon
from protocols.base import client as client_name

# part -> (upload, broadcast): the messages of privfgl/methods/gap/run.py's federated_training
PARTS = {"encoder": ("encoder_update", "global_encoder"), "classifier": ("model_update", "global_model")}


class GapStepCanaries:
    """One client's gradient canaries in both of node-level GAP's DP-SGD parts (the runtime side): one
    GradientCanaries per part, one slot each (in: one clipped per-node gradient C·ς_tj·u_j; out: none), the
    same seed and so the same coins. Directions are drawn at construction from the parts' public layouts."""

    def __init__(self, count: int, seed: int, scale: float, support: int, client: int, clip: float, signed: bool,
                 layouts: dict[str, Layout]):
        self.client, self.count = client, count
        self.parts = {part: GradientCanaries(count, seed, scale, support, client, 1, clip, signed=signed)
                      for part in PARTS}
        for part, canaries in self.parts.items():
            canaries.rows(0, layouts[part])  # draws the directions now, in the auditor's copy

    @property
    def coins(self) -> np.ndarray:
        return self.parts["encoder"].coins

    def rows(self, part: str, round: int, layout: Layout) -> tuple[torch.Tensor, torch.Tensor]:
        """Round `round`'s canary per-node gradients of `part` in `layout`'s flat order (private_gradient's)."""
        return self.parts[part].rows(round, layout)

    def record(self) -> dict:
        """The run record's `gradient_canaries` block (no coins)."""
        return {**self.parts["encoder"].record(), "parts": list(PARTS),
                "note": "per-node gradients of one client, before the clip, every encoder and classifier DP-SGD "
                        "step of node-level GAP; they hold no nodes and never enter accuracy "
                        "(attacks/dp/gap_step_audit.py)"}


@dataclass(frozen=True)
class GapStepAux:
    """The server's knowledge: the canary design (public directions and signs; coins not read), the audited
    client, its public training-node count, the steps' sampling rate, the optimizer settings, C and the rounds
    of each part."""
    canaries: GapStepCanaries
    n_train: int
    sample_rate: float
    optimizer: str
    lr: float
    weight_decay: float
    local_epochs: int
    clip: float
    rounds: dict[str, int]


@dataclass(frozen=True)
class GapStepScores:
    scores: np.ndarray  # [N]
    per_round: np.ndarray  # [R, N] o_tj, the encoder's rounds then the classifier's
    possible: np.ndarray  # [R, N] bool: the upload of that round was seen


@dataclass(frozen=True)
class GapStepTruth:
    coins: np.ndarray
    epsilon_accountant: float  # the record's: steps and hops
    epsilon_steps: float  # the accountant's ε of the DP-SGD steps alone: the claim audited
    delta: float
    rounds: int


class GapStepAudit(Attack):
    """`dp-audit:stage=steps` on node-level GAP: gradient canaries of sensitivity C in every DP-SGD step."""

    name = "dp-audit"

    @staticmethod
    def fits(setup, method: str) -> bool:
        from privfgl.methods.gap.params import resolve_params
        return method == "gap" and resolve_params(setup.method.params).unit == "node"

    def __init__(self, stage: str = "steps", canaries: int = 4000, client: int = 0, seed: int = 0,
                 scale: int | str = 10, support: int = 1, confidence: float | str = 0.95):
        if stage != "steps":
            raise ValueError(f"dp-audit: stage={stage!r}: this design audits GAP's DP-SGD steps; valid: steps "
                             "(GAP's hops: leave stage out)")
        check_canaries_and_client(canaries, client)
        if not isinstance(support, int) or support < 1:
            raise ValueError(f"dp-audit: support={support!r}: expected an integer >= 1")
        scale, confidence = scale_and_confidence(scale, confidence)
        self.canaries, self.client, self.seed, self.scale, self.support = canaries, client, seed, scale, support
        self.confidence = confidence
        self.inserted: GapStepCanaries | None = None

    def prepare(self, setup, method: str) -> None:
        """Before the run: the canaries join the audited client's per-node gradients of both parts. ValueError
        (one line) on a run this design does not fit."""
        from privfgl.methods.gap.model import Classifier, Encoder
        from privfgl.methods.gap.params import resolve_params
        if not self.fits(setup, method):
            raise ValueError(f"dp-audit: stage=steps audits node-level GAP's DP-SGD steps; valid: --method gap "
                             f"--method-param unit=node, not --method {method}")
        p, cfg = resolve_params(setup.method.params), setup.model
        if self.client >= len(setup.clients):
            raise ValueError(f"dp-audit: client={self.client}: valid: 0..{len(setup.clients) - 1}")
        if int(setup.clients[self.client].train_mask.sum()) == 0:
            raise ValueError(f"dp-audit: client={self.client} has no training nodes (it takes no step)")
        modules = {"encoder": Encoder(setup.num_features, cfg.hidden, setup.num_classes, p.encoder_layers, 0.0),
                   "classifier": Classifier(cfg.hidden, setup.num_classes, p.hops, 0.0)}
        layouts = {part: [(n, v.numel()) for n, v in m.named_parameters()] for part, m in modules.items()}
        self.inserted = GapStepCanaries(self.canaries, self.seed, self.scale, self.support, self.client, p.clip,
                                        cfg.optimizer == "sgd", layouts)
        setup.extras["gap_step_canaries"] = self.inserted
        setup.extras["gradient_canaries"] = self.inserted  # the record's block

    def targets(self, view: AdversaryView, knowledge: Knowledge, num_clients: int) -> list[str]:
        return ["canaries"]

    def declare_aux(self, setup, knowledge: Knowledge, target: str) -> GapStepAux:
        from privfgl.methods.gap.params import resolve_params
        if self.inserted is None:
            raise NoInput("dp-audit: no gradient canaries took part (prepare was not called before the run)")
        p, cfg, m = resolve_params(setup.method.params), setup.model, setup.method
        return GapStepAux(self.inserted, int(setup.clients[self.client].train_mask.sum()), p.sample_rate,
                          cfg.optimizer, cfg.lr,
                          cfg.weight_decay, m.local_epochs, p.clip,
                          {"encoder": p.encoder_rounds, "classifier": m.rounds})

    def attack(self, view: AdversaryView, aux: GapStepAux) -> GapStepScores:
        sender = client_name(aux.canaries.client)
        rows, seen = [], []
        for part, (upload_name, broadcast_name) in PARTS.items():
            directions = aux.canaries.parts[part].directions
            first = view.payload(broadcast_name, 0, SERVER)  # round 0's first broadcast: the initial model
            if first is None:
                raise NoInput(f"dp-audit: no {broadcast_name} in the {view.party}'s view")
            start = flatten(first)[0]
            for r in range(aux.rounds[part]):
                upload = view.payload(upload_name, r, sender)
                if upload is None and view.find(upload_name, r, sender):
                    raise NoInput(f"dp-audit: the {view.party} sees {sender}'s {upload_name} only masked; the "
                                  "audit of GAP's steps needs it readable (--protocol plain)")
                sent = view.find(broadcast_name, r, SERVER)
                if not sent or sent[-1].tensors is None:
                    raise NoInput(f"dp-audit: no {broadcast_name} of round {r} in the {view.party}'s view")
                if upload is not None:
                    end = flatten({n: v for n, v in upload.items() if n != "n"})[0]
                    rows.append(self._observe(start, end, directions, aux, aux.canaries.parts[part].signs(r)))
                else:
                    rows.append(np.zeros(aux.canaries.count))
                seen.append(upload is not None)
                start = flatten(sent[-1].tensors)[0]
        per_round = np.stack(rows)
        possible = np.repeat(np.array(seen)[:, None], per_round.shape[1], axis=1)
        offset = 0.5 if aux.optimizer == "sgd" else 0.0
        return GapStepScores(((per_round - offset) * possible).sum(0), per_round, possible)

    @staticmethod
    def _observe(w0: torch.Tensor, w1: torch.Tensor, directions, aux: GapStepAux, signs: np.ndarray) -> np.ndarray:
        """One round's o_j [N]: SGD, the recovered sum of noisy clipped sums along u_j over A·C; Adam, the
        round's step along u_j over lr."""
        if aux.optimizer != "sgd":
            return directions.project(((w0 - w1) / aux.lr)[None])[0].numpy()
        released, big_a = sgd_released_sum(w0, w1, aux.sample_rate * aux.n_train, aux.lr, aux.weight_decay,
                                           aux.local_epochs)
        return signs * directions.project(released[None])[0].numpy() / (big_a * aux.clip)

    def truth(self, setup, target: str) -> GapStepTruth:
        report = setup.extras["dp"].report()
        dp, m = report["dp"], setup.method
        stages = dp["releases_by_stage"]
        steps = stages["encoder_steps"] + stages["classifier_steps"]
        eps_steps = gaussian_epsilon([(dp["sigma"], dp["sample_rate"], steps)], report["delta"], report["accountant"])
        from privfgl.methods.gap.params import resolve_params
        rounds = resolve_params(m.params).encoder_rounds + m.rounds  # R: both parts' FedAvg rounds
        return GapStepTruth(self.inserted.coins.copy(), float(report["epsilon"]), eps_steps, float(report["delta"]),
                            rounds)

    def score(self, rec: GapStepScores, truth: GapStepTruth, aux: GapStepAux) -> tuple[dict, dict]:
        c, delta, conf = truth.coins, truth.delta, self.confidence
        bounds, score_metrics = score_bounds(rec.scores, c, truth.epsilon_steps, delta, conf, self.seed)
        per_round = {}
        if aux.optimizer == "sgd" and aux.sample_rate == 1:
            stat_in, stat_out = rec.per_round[:, c][rec.possible[:, c]], rec.per_round[:, ~c][rec.possible[:, ~c]]
            per_step = per_step_bound(stat_in, stat_out, 0.5, truth.rounds, delta, "gaussian", conf)
            bounds["per_round"] = per_step.epsilon_lower
            per_round = per_round_metrics(per_step, stat_in, stat_out, truth.rounds, delta, conf, self.seed)
        estimator = ("one_run" if aux.sample_rate < 1 else  # fixed by the design: sampling, then the optimizer
                     "per_round" if aux.optimizer == "sgd" else "one_run_fdp")
        metrics = {"epsilon_lower_bound": bounds[estimator], "epsilon_accountant": truth.epsilon_accountant,
                   "epsilon_accountant_steps": truth.epsilon_steps, "confidence": conf, "estimator": estimator,
                   "canaries": len(c), "canaries_in": int(c.sum()), "view": "rounds", "optimizer": aux.optimizer,
                   "sample_rate": aux.sample_rate,
                   "client": aux.canaries.client, "rounds": truth.rounds, "delta": delta,
                   **verdict(bounds[estimator], truth.epsilon_steps), **score_metrics, **per_round}
        return metrics, dict(BASELINE)

