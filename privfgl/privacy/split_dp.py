"""DP on split-learning messages (FedGPL's M1–M4, spec B.3): per-row clipping and Laplace or
Gaussian noise, added by the message's sender, with the sensitivity from the clip bound, never from
the data (the authors' code used max − min of the tensor and then returned it unnoised).

Messages (`--dp ...,on=m1|m2|m3|m4|split`, mode=local: the sender noises what it sends):
  M1 prompted_graph  client -> server  x̃ [ñ, d]: one row per node of a prompted sample graph
  M2 embeddings      server -> client  H [B, h]: one row per sample graph
  M3 embedding_grads client -> server  ∂L/∂H [B, h]: one row per sample
  M4 feature_grads   server -> client  ∂L/∂x̃ [ñ, d]: one row per node row of M1
Only the float rows are noised: M1's edges and batch vector travel in the clear (the record says so).

Unit and sensitivity. Every row is clipped to norm ≤ C (L1 for Laplace, L2 for Gaussian), so
replacing one row's content by zeros (the row's unit is absent, the message shape stays public)
changes the message by at most C: Laplace scale b = C/ε, Gaussian std σ·C. The privacy unit is one
row of a message: a node occurrence in one prompted sample (M1, M4) or one sample (M2, M3); a node
that occurs in several samples, or rows that are functions of several units, are not covered.

Composition over a round's minibatches (FedGPL's `split_dp_composition`):
- released (default): the client's prompt and head are fixed for the round and updated at its end
  from released messages only (methods/fedgpl/released.py), and the server computes only on what it
  received. Every sample sits in one minibatch, so, given the earlier releases, a minibatch's rows
  depend on its own samples only: the minibatches are disjoint releases (parallel composition), one
  release of sensitivity C per noised message per round.
- sequential: the client steps on clean gradients after every minibatch, so one unit moves every
  later row of the round and, through the federated prompts and heads, every row of later rounds.
  Each round of a message is then one release whose sensitivity covers them all: C for the unit's
  own row and 2C (the clip ball's diameter) for each of the round's other N − 1 rows, L1: C + 2C(N−1),
  L2: C·sqrt(1 + 4(N−1)). Laplace scale C/ε then gives ε·Δ/C per round, Gaussian σ·C/Δ.
- parallel-unsafe: the clean steps of `sequential` with the accounting of `released`. UNSOUND (one
  sample moves later minibatches' clipped rows by many times C: `privfgl audit --attack
  split-dp-sensitivity`); kept only as that audit's negative control; the record says so.
Releases compose over rounds and over the noised messages (sequentially, as if one unit fed all of
them: an upper bound): Laplace by basic and advanced composition, Gaussian by opacus' RDP/PRV.
"""
from __future__ import annotations

import math

import torch

from privfgl.privacy.accounting import PrivacyAccountant
from privfgl.privacy.noise import NoiseSource
from privfgl.privacy.spec import DPSpec

SPLIT_MESSAGES = {"prompted_graph": "M1", "embeddings": "M2", "embedding_grads": "M3", "feature_grads": "M4"}
UPLOADS = ("prompted_graph", "embedding_grads")  # what the clients send (M1, M3); M2 and M4 come from the server
COMPOSITIONS = {
    "released": "parallel over a round's minibatches (prompt and head fixed for the round, updated from "
                "released messages only); sequential over rounds and messages",
    "sequential": "sequential: each round one release per message of sensitivity C + 2C(N−1) (L1) or "
                  "C·sqrt(1 + 4(N−1)) (L2), N the round's rows of it; sequential over rounds and messages",
    "parallel-unsafe": "UNSOUND: accounted parallel over a round's minibatches (sensitivity C) while the client "
                       "steps on clean gradients between them, so one sample moves later rows; the ε below does "
                       "not bound the release",
}
UNITS = {"prompted_graph": "one node row of one prompted sample graph",
         "embeddings": "one sample graph's embedding row", "embedding_grads": "one sample's gradient row",
         "feature_grads": "one node row's gradient"}


def clip_rows(rows: torch.Tensor, bound: float, norm: int) -> torch.Tensor:
    """rows [n, d] scaled so every row has L`norm` norm ≤ bound (float64)."""
    rows = rows.double()
    size = rows.abs().sum(-1) if norm == 1 else rows.norm(dim=-1)
    return rows * (bound / size.clamp_min(bound)).unsqueeze(-1)


class SplitDP:
    """The noise on the split messages a `--dp` spec names; noises rows and keeps the accounts."""

    def __init__(self, spec: DPSpec, keep_rounds: str = "last", composition: str = "released", noise: bool = True):
        """`composition`: COMPOSITIONS; `noise`: False only for the sensitivity audit's replay, which
        measures the clipped rows (protect then clips and adds nothing)."""
        unknown = [m for m in spec.messages if m not in SPLIT_MESSAGES]
        if unknown:
            raise ValueError(f"split DP covers {', '.join(SPLIT_MESSAGES)}, not {', '.join(unknown)}")
        if spec.mode != "local":
            raise ValueError(f"--dp {spec.text!r}: split messages are noised by their sender: use mode=local")
        if composition not in COMPOSITIONS:
            raise ValueError(f"split DP composition {composition!r}; valid: {', '.join(COMPOSITIONS)}")
        self.spec, self.composition, self.noise = spec, composition, noise
        self.mechanism = spec.build()
        self.norm = 1 if spec.mechanism == "laplace" else 2
        self.source = NoiseSource(spec.seed, secure=spec.secure)
        self.accountant = PrivacyAccountant(delta=spec.delta, accountant=spec.accountant)
        self.rounds = 0
        # auditor side only (never sent; dp-noise-removal's truth): round -> (message, the clipped rows
        # before noise as float32, for the clients' uploads M1/M3; None for the server's M2/M4) of every
        # noised message in the order the noise was drawn; every round with keep_rounds "all" (as the
        # transcript keeps every payload), else the last round that ended
        self.keep_rounds = keep_rounds
        self.audit_clipped: dict[int, list[tuple[str, torch.Tensor | None]]] = {}
        self._round_clipped: list[tuple[str, torch.Tensor | None]] = []
        self.round_rows: dict[str, int] = {}  # rows of each noised message in the round so far (shapes: public)
        self.max_sensitivity: dict[str, float] = {}  # the largest per-round sensitivity accounted, per message

    def applies_to(self, name: str) -> bool:
        return name in self.spec.messages

    def protect(self, name: str, rows: torch.Tensor) -> torch.Tensor:
        """What the sender sends: `rows` [n, d] clipped per row and noised (same dtype), if `name` is
        protected; else `rows` unchanged."""
        if not self.applies_to(name):
            return rows
        clipped = clip_rows(rows.detach(), self.spec.clip, self.norm)
        self._round_clipped.append((name, clipped.float() if name in UPLOADS else None))
        self.round_rows[name] = self.round_rows.get(name, 0) + rows.shape[0]
        if not self.noise:
            return clipped.to(rows.dtype)
        return (clipped + self.mechanism.noise(clipped.shape, self.source)).to(rows.dtype)

    def sensitivity(self, name: str) -> float:
        """The sensitivity of this round's release of message `name` (L1 for Laplace, L2 for Gaussian):
        C, or under `sequential` C + 2C(N − 1) (L1) / C·sqrt(1 + 4(N − 1)) (L2) for the round's N rows."""
        C, n = self.spec.clip, max(self.round_rows.get(name, 0), 1)
        if self.composition != "sequential":
            return C
        return C + 2 * C * (n - 1) if self.norm == 1 else C * math.sqrt(1 + 4 * (n - 1))

    def end_round(self) -> None:
        """One release per noised message for the round just finished, of sensitivity `sensitivity`."""
        if self.keep_rounds != "all":
            self.audit_clipped.clear()
        self.audit_clipped[self.rounds], self._round_clipped = self._round_clipped, []
        self.rounds += 1
        for name in self.spec.messages:
            factor = self.sensitivity(name) / self.spec.clip  # the release's sensitivity in units of C
            self.max_sensitivity[name] = max(self.max_sensitivity.get(name, 0.0), self.sensitivity(name))
            if self.spec.mechanism == "gaussian":
                self.accountant.add_gaussian(self.spec.sigma / factor, 1.0)
            else:
                self.accountant.add_laplace(self.spec.epsilon * factor)
        self.round_rows = {}

    def report(self) -> dict:
        """The record's privacy fields: dp (spec, unit per message, noise, what stays in the clear), ε, δ."""
        noise = {"noise_std": self.mechanism.std} if self.spec.mechanism == "gaussian" \
            else {"noise_scale": self.mechanism.scale}
        per_message = {}
        if self.spec.mechanism == "laplace":  # the largest per-round ε of one message (sequential: ε·Δ/C)
            factor = max(self.max_sensitivity.values(), default=self.spec.clip) / self.spec.clip
            per_message = {"epsilon_per_message_per_round": self.spec.epsilon * factor}
        dp = {**self.spec.as_dict(), "scope": "split messages (FedGPL)",
              "messages": {name: SPLIT_MESSAGES[name] for name in self.spec.messages},
              "unit": {name: UNITS[name] for name in self.spec.messages},
              "sensitivity": self.spec.clip, "sensitivity_norm": f"L{self.norm} per row", **noise, **per_message,
              "releases": self.accountant.releases, "rounds": self.rounds,
              "composition": COMPOSITIONS[self.composition], "composition_mode": self.composition,
              "sound": self.composition != "parallel-unsafe",
              "round_sensitivity_max": {name: self.max_sensitivity.get(name, self.spec.clip)
                                        for name in self.spec.messages},
              "in_the_clear": "M1's edge_index and batch vector (the prompted topology); every message not listed",
              **self.source.provenance()}
        spent = self.accountant.spent() if self.accountant.releases else {"epsilon": 0.0, "delta": 0.0,
                                                                          "accountant": self.spec.accountant}
        return {"dp": dp, "epsilon": spent.pop("epsilon"), "delta": spent.pop("delta"),
                "accountant": spent.pop("accountant"), **spent}
