"""`dp-audit`'s design for FedGPL's split-message DP (`--dp laplace|gaussian:...,on=m1..m4`): canary rows.

`--attack dp-audit[:canaries=N,message=m1|m2|m3|m4,seed=S,scale=X,confidence=p]` on `--method fedgpl`
(attacks/dp/dp_audit.py picks it when the run noises a split message).

The unit and the neighbouring relation are privfgl's (privacy/split_dp.py): one row of a message,
clipped to norm ≤ C (L1 for Laplace, L2 for Gaussian); a neighbour replaces the row's content by zeros
(the message's shape stays public). So a canary is a ROW SLOT: canary j (N in all, client j mod K) has a
slot in the first minibatch's audited message of its client in every round (M1 `prompted_graph` or M3
`embedding_grads`, which the client sends; M2 `embeddings` or M4 `feature_grads`, which the server sends
to that client), sent as the field `canary_rows` [N_k, d] beside the real rows and clipped and noised by
the sender's same `SplitDP.protect` call (one concatenated release). Its content is scale·C·e_i (a Dirac on the
public coordinate i = (j div K) mod d) if the canary's fair coin b_j is in, zeros if out, in every round;
the clip leaves exactly C·e_i, the accounted sensitivity. Every slot is sent either way, so the row
count reveals nothing; the canary rows are no sample of the client's: they enter no loss, no update and
no accuracy (the server's trunk reads only `x`/`grad`, the client's head and prompt only `H`/`grad`).

Who is protected, and the adversary (split_dp.py: mode=local, the sender noises what it sends; the
accountant composes M1-M4 "as if one unit fed all of them", the unit being a client's sample row):
- M1, M3 (uploads): the client's rows (a node row of a prompted sample, a sample's gradient row),
  against the server that receives them.
- M2, M4 (downloads): the client's rows as the server's trunk returns them (a sample graph's embedding
  H = trunk(x̃), a node row's gradient ∂L/∂x̃; `split-decoder` decodes the sample's features from
  them), clipped to C and noised by the server, one release of sensitivity C per round as for M1/M3,
  against whoever sees the downlink to client k. privfgl has no eavesdropper party; the receiving
  client's view holds exactly that downlink (`--adversary clientK`), and the attack reads only the
  M2/M4 addressed to it, so it scores that client's own N/K slots. The server is no adversary of
  M2/M4: it computed the rows before the noise.
A view that does not receive the audited message is refused in one line (a no_input finding).
Observation of canary j in round t:
o_tj = (its received row at coordinate i)/C = b_j + noise/C, noise Laplace(C/ε) or N(0, (σC)²) per entry,
independent over rows, coordinates and rounds. Score: Σ_t o_tj.

Estimators (attacks/dp/estimators.py). `epsilon_lower_bound` is fixed before any score is seen:
the per-round bound (`per_step_bound`, each round's o_tj pooled): claim "pure" for Laplace with the
threshold at the canary's shift (o ≥ 1: the Laplace likelihood ratio there is e^ε), composed over the T
rounds as the accountant composes the audited message's releases (the smaller of T·ε and advanced
composition at δ); claim "gaussian" for Gaussian with the threshold at half the shift, √T·μ. Beside
it: Steinke et al.'s one-run bound on the scores (any (ε, δ) claim), k picked by simulation before the
scores are seen. `epsilon_accountant` is the run's ε (every noised message and round); the bound covers
the audited message only, whose own composed ε is `epsilon_accountant_message`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from attacks.base import Attack, Knowledge, NoInput
from attacks.dp.estimators import gdp_mu, guess_counts, one_run_epsilon, per_step_bound
from attacks.dp.params import scale_and_confidence
from attacks.dp.scoring import BASELINE, pick_k, verdict
from attacks.view import AdversaryView
from privfgl.privacy.accounting import PrivacyAccountant
from privfgl.federation import SERVER
from protocols.base import client as client_name

# the clients' uploads M1, M3 (received by the server), then the server's downloads M2, M4 (received by the
# client); the first the run noises is audited by default
MESSAGES = {"m1": "prompted_graph", "m3": "embedding_grads", "m2": "embeddings", "m4": "feature_grads"}
DOWNLOADS = ("embeddings", "feature_grads")
FIELD = "canary_rows"


class CanaryRows:
    """N canary row slots of one split message (the auditor's secret: the coins). Slot j belongs to client
    j mod K and holds scale·C·e_i, i = (j div K) mod d, when coin j is in, zeros when out."""

    def __init__(self, count: int, clients: int, message: str, clip: float, scale: float, seed: int):
        self.count, self.clients, self.message, self.clip, self.scale = count, clients, message, clip, scale
        self.coins = np.random.default_rng([seed, 0x5C4]).random(count) < 0.5
        self.sent: set[tuple[int, int]] = set()  # (round, client) whose canary rows went out

    def owned(self, k: int) -> np.ndarray:
        """Canary indices of client k, in slot order."""
        return np.arange(k, self.count, self.clients)

    def coordinates(self, k: int, width: int) -> np.ndarray:
        return (self.owned(k) // self.clients) % width

    def rows(self, name: str, round: int, k: int, width: int) -> torch.Tensor | None:
        """Client k's canary rows [N_k, width] (before the clip) for its first `name` message of `round`;
        None for every other message."""
        if name != self.message or (round, k) in self.sent or not len(self.owned(k)):
            return None
        self.sent.add((round, k))
        owned = self.owned(k)
        rows = torch.zeros(len(owned), width, dtype=torch.float64)
        slots = torch.as_tensor(np.flatnonzero(self.coins[owned]))
        rows[slots, torch.as_tensor(self.coordinates(k, width))[slots]] = self.scale * self.clip
        return rows

    def sample(self, round: int, k: int, width: int) -> None:
        """Canary rows insert no sample (split_step's other hook)."""
        return None

    def record(self) -> dict:
        """The run record's `canary_rows` block (how many were inserted, never the coins)."""
        return {"inserted": self.count, "message": self.message, "raw_norm_over_clip": self.scale,
                "rounds_sent": len({r for r, _ in self.sent}),
                "note": "auditor's canary row slots beside the client's rows (field canary_rows), clipped and "
                        "noised with them; in no loss, no update, no accuracy"}


@dataclass(frozen=True)
class CanarySample:
    """One canary sample as split_step takes it: node rows [1, d] (after the prompt), label [] and weight."""
    rows: torch.Tensor
    label: torch.Tensor
    weight: float


class CanarySamples:
    """Canary SAMPLES (experiments/dp_audit_split_influence.py; no dp-audit design uses them: see
    docs/dp-audit.md): one per client and round, joining the client's first minibatch of the round after
    its prompt; its coin (fair, independent per client and round) sets its loss weight, 1 (in) or 0 (out:
    its M3 row is zeros and it moves nothing, the accounted neighbour). Its node row scale·v (v the public
    direction, e.g. the mean public feature row) and its label (r·K + k) mod classes are public; so are
    its M1 row and the H the server computes from it. Under a clean step between minibatches its loss
    moves the head, and with it every later M3 row of the round."""

    def __init__(self, clients: int, classes: int, scale: float, seed: int, rounds: int, direction: torch.Tensor):
        self.clients, self.classes, self.scale, self.seed = clients, classes, scale, seed
        self.direction = direction.double() / direction.double().norm()
        self.coins = np.random.default_rng([seed, 0x5A3]).random((rounds, clients)) < 0.5
        self.sent: set[tuple[int, int]] = set()
        self.count = rounds * clients

    def rows(self, name: str, round: int, k: int, width: int) -> None:
        return None

    def sample(self, round: int, k: int, width: int) -> CanarySample | None:
        if (round, k) in self.sent or round >= len(self.coins):
            return None
        self.sent.add((round, k))
        label = torch.tensor((round * self.clients + k) % self.classes)
        return CanarySample((self.scale * self.direction).unsqueeze(0), label, float(self.coins[round, k]))

    def record(self) -> dict:
        return {"inserted": len(self.sent), "kind": "sample", "raw_norm": self.scale,
                "note": "one canary sample per client and round in its first minibatch (loss weight = its coin); "
                        "in no round-end update and no accuracy"}


@dataclass(frozen=True)
class RowAux:
    """The public design: the audited message, the canary count N, the clients K (slot j: client j mod K,
    coordinate (j div K) mod d), the clip C."""
    message: str
    count: int
    clients: int
    clip: float


@dataclass(frozen=True)
class RowTruth:
    coins: np.ndarray
    mechanism: str
    epsilon_accountant: float
    epsilon_message: float
    delta: float
    rounds: int  # the releases of the audited message the accountant composed (one per round)
    step: float  # the accounted per-round ε (Laplace) or noise multiplier (Gaussian) of the audited message


class CanaryRowAudit(Attack):
    """`dp-audit` on FedGPL's split DP: canary rows, the per-round bound and the one-run bound."""

    name = "dp-audit"

    @staticmethod
    def fits(setup, method: str) -> bool:
        return method == "fedgpl" and setup.extras.get("split_dp_spec") is not None

    def __init__(self, canaries: int = 2000, message: str | None = None, seed: int = 0, scale: int | str = 10,
                 confidence: float | str = 0.95):
        if not isinstance(canaries, int) or canaries < 4:
            raise ValueError(f"dp-audit: canaries={canaries!r}: expected an integer >= 4")
        if message is not None and message not in MESSAGES:
            raise ValueError(f"dp-audit: message={message!r}: valid: {', '.join(MESSAGES)}")
        scale, confidence = scale_and_confidence(scale, confidence)
        self.canaries, self.message, self.seed, self.scale, self.confidence = canaries, message, seed, scale, confidence
        self.rows: CanaryRows | None = None

    def prepare(self, setup, method: str) -> None:
        """Before the run: the canary row slots, which split_step sends with the audited message."""
        spec = setup.extras.get("split_dp_spec")
        noised = [key for key, name in MESSAGES.items() if spec is not None and name in spec.messages]
        if not noised:
            raise ValueError("dp-audit: canary rows need --dp laplace|gaussian:...,on=m1|m2|m3|m4|split (FedGPL's "
                             "split DP)")
        key = self.message or noised[0]
        if key not in noised:
            raise ValueError(f"dp-audit: message={key}: the run's --dp noises {', '.join(noised)}; valid: one of them")
        self.rows = CanaryRows(self.canaries, len(setup.clients), MESSAGES[key], spec.clip, self.scale, self.seed)
        setup.extras["split_canaries"] = self.rows

    def targets(self, view: AdversaryView, knowledge: Knowledge, num_clients: int) -> list[str]:
        return ["canaries"]

    def declare_aux(self, setup, knowledge: Knowledge, target: str) -> RowAux:
        if self.rows is None or not self.rows.sent:
            raise NoInput("dp-audit: no canary rows were sent (prepare was not called before the run)")
        return RowAux(self.rows.message, self.rows.count, self.rows.clients, self.rows.clip)

    def attack(self, view: AdversaryView, aux: RowAux) -> np.ndarray:
        """o [T, N]: each visible round's received canary rows at their coordinates, over C (the rounds the
        transcript kept: every round with --transcript all, else the last); NaN for the slots of M2/M4
        that went to another client."""
        key = next(key for key, name in MESSAGES.items() if name == aux.message)
        if aux.message in DOWNLOADS:
            receivers = [k for k in range(aux.clients) if client_name(k) == view.party]
            if not receivers:
                raise NoInput(f"dp-audit: message={key} goes from the server to each client; the {view.party} "
                              f"is no receiver of it; valid: --adversary client0 … client{aux.clients - 1}")
        elif view.party != SERVER:
            raise NoInput(f"dp-audit: message={key} goes from each client to the server; the {view.party} is no "
                          "receiver of it; valid: --adversary server")
        else:
            receivers = list(range(aux.clients))
        received = [m for m in view.find(aux.message) if m.tensors and FIELD in m.tensors and m.receiver == view.party]
        rounds = sorted({m.round for m in received})
        if not rounds:
            raise NoInput(f"dp-audit: no canary rows in the {view.party}'s view")
        out = np.full((len(rounds), aux.count), np.nan)
        for t, r in enumerate(rounds):
            for k in receivers:
                owned = np.arange(k, aux.count, aux.clients)
                sender = SERVER if aux.message in DOWNLOADS else client_name(k)
                found = [m for m in received if m.round == r and m.sender == sender]
                if len(owned) and not found:
                    raise NoInput(f"dp-audit: no canary rows of {client_name(k)} in round {r} in the "
                                  f"{view.party}'s view")
                if len(owned):
                    rows = found[0].tensors[FIELD].double()
                    coords = torch.as_tensor((owned // aux.clients) % rows.shape[-1])
                    out[t, owned] = (rows[torch.arange(len(owned)), coords] / aux.clip).numpy()
        return out

    def truth(self, setup, target: str) -> RowTruth:
        dp = setup.extras["dp"]
        report, spec = dp.report(), dp.spec
        factor = dp.max_sensitivity.get(self.rows.message, spec.clip) / spec.clip
        alone = PrivacyAccountant(delta=spec.delta, accountant=spec.accountant)
        if spec.mechanism == "laplace":
            step = spec.epsilon * factor
            alone.add_laplace(step, dp.rounds)
        else:
            step = spec.sigma / factor
            alone.add_gaussian(step, 1.0, dp.rounds)
        return RowTruth(self.rows.coins.copy(), spec.mechanism, float(report["epsilon"]),
                        float(alone.spent()["epsilon"]), spec.delta, dp.rounds, step)

    def score(self, obs: np.ndarray, truth: RowTruth, aux: RowAux) -> tuple[dict, dict]:
        seen = ~np.isnan(obs).any(0)  # the slots the adversary received (M2/M4: its own N/K)
        obs, c, T, delta, conf = obs[:, seen], truth.coins[seen], truth.rounds, truth.delta, self.confidence
        pure = truth.mechanism == "laplace"
        # fixed by the design: the Laplace threshold at the canary's shift (1 in units of C), Gaussian at half
        step = per_step_bound(obs[:, c].ravel(), obs[:, ~c].ravel(), 1.0 if pure else 0.5, T, delta,
                              "pure" if pure else "gaussian", conf)
        per_round = step.epsilon_lower
        if pure:  # the accountant takes the smaller of basic and advanced composition (privacy/accounting.py)
            alone = PrivacyAccountant(delta=delta)
            alone.add_laplace(step.step_lower, T)
            per_round = min(per_round, float(alone.spent()["epsilon"])) if step.step_lower > 0 else 0.0
        scores = obs.sum(0)
        m = len(c)
        claim = truth.epsilon_message if math.isfinite(truth.epsilon_message) else 50.0
        k = pick_k(m, gdp_mu(claim, delta if delta > 0 else 1e-5),
                   lambda m, r, v: one_run_epsilon(m, r, v, delta, conf))
        r, v = guess_counts(scores, c, k, k)
        one_run = one_run_epsilon(m, r, v, delta, conf)
        metrics = {"epsilon_lower_bound": per_round, "epsilon_accountant": truth.epsilon_accountant,
                   "epsilon_accountant_message": truth.epsilon_message, "confidence": conf, "estimator": "per_round",
                   "canaries": m, "canaries_in": int(c.sum()), "canaries_inserted": aux.count,
                   "message": aux.message,
                   "view": "rounds" if obs.shape[0] == T else f"{obs.shape[0]} of {T} rounds (the transcript kept)",
                   "delta": delta, **verdict(per_round, truth.epsilon_accountant),
                   "bound_over_message": per_round / truth.epsilon_message,
                   "per_round_epsilon": per_round, "per_round_claim": step.claim,
                   "per_round_step_lower": step.step_lower, "per_round_step_accounted": truth.step,
                   "per_round_observations": f"{step.ins}+{step.outs}",
                   "per_round_errors": f"{step.false_negatives} FN, {step.false_positives} FP",
                   "rounds": T, "rounds_observed": obs.shape[0], "one_run_epsilon": one_run, "one_run_k": k,
                   "one_run_correct": f"{v}/{r}"}
        return metrics, dict(BASELINE)
