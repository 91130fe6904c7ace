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

Composition. Within a round every sample sits in one minibatch, so the minibatches' releases of a
message touch disjoint rows (parallel composition): one release per noised message per round.
Releases compose over rounds and over the noised messages (sequentially, as if one unit fed all of
them: an upper bound): Laplace by basic and advanced composition, Gaussian by opacus' RDP/PRV.
"""
from __future__ import annotations

import torch

from privfgl.privacy.accounting import PrivacyAccountant
from privfgl.privacy.noise import NoiseSource
from privfgl.privacy.spec import DPSpec

SPLIT_MESSAGES = {"prompted_graph": "M1", "embeddings": "M2", "embedding_grads": "M3", "feature_grads": "M4"}
UPLOADS = ("prompted_graph", "embedding_grads")  # what the clients send (M1, M3); M2 and M4 come from the server
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

    def __init__(self, spec: DPSpec, keep_rounds: str = "last"):
        unknown = [m for m in spec.messages if m not in SPLIT_MESSAGES]
        if unknown:
            raise ValueError(f"split DP covers {', '.join(SPLIT_MESSAGES)}, not {', '.join(unknown)}")
        if spec.mode != "local":
            raise ValueError(f"--dp {spec.text!r}: split messages are noised by their sender: use mode=local")
        self.spec = spec
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

    def applies_to(self, name: str) -> bool:
        return name in self.spec.messages

    def protect(self, name: str, rows: torch.Tensor) -> torch.Tensor:
        """What the sender sends: `rows` [n, d] clipped per row and noised (same dtype), if `name` is
        protected; else `rows` unchanged."""
        if not self.applies_to(name):
            return rows
        clipped = clip_rows(rows.detach(), self.spec.clip, self.norm)
        self._round_clipped.append((name, clipped.float() if name in UPLOADS else None))
        return (clipped + self.mechanism.noise(clipped.shape, self.source)).to(rows.dtype)

    def end_round(self) -> None:
        """One release per noised message for the round just finished (parallel over its minibatches)."""
        if self.keep_rounds != "all":
            self.audit_clipped.clear()
        self.audit_clipped[self.rounds], self._round_clipped = self._round_clipped, []
        self.rounds += 1
        for _ in self.spec.messages:
            if self.spec.mechanism == "gaussian":
                self.accountant.add_gaussian(self.spec.sigma, 1.0)
            else:
                self.accountant.add_laplace(self.spec.epsilon)

    def report(self) -> dict:
        """The record's privacy fields: dp (spec, unit per message, noise, what stays in the clear), ε, δ."""
        noise = {"noise_std": self.mechanism.std} if self.spec.mechanism == "gaussian" \
            else {"noise_scale": self.mechanism.scale}
        per_message = {}
        if self.spec.mechanism == "laplace":
            per_message = {"epsilon_per_message_per_round": self.spec.epsilon}
        dp = {**self.spec.as_dict(), "scope": "split messages (FedGPL)",
              "messages": {name: SPLIT_MESSAGES[name] for name in self.spec.messages},
              "unit": {name: UNITS[name] for name in self.spec.messages},
              "sensitivity": self.spec.clip, "sensitivity_norm": f"L{self.norm} per row", **noise, **per_message,
              "releases": self.accountant.releases, "rounds": self.rounds,
              "composition": "parallel over a round's minibatches; sequential over rounds and messages",
              "in_the_clear": "M1's edge_index and batch vector (the prompted topology); every message not listed",
              **self.source.provenance()}
        spent = self.accountant.spent() if self.accountant.releases else {"epsilon": 0.0, "delta": 0.0,
                                                                          "accountant": self.spec.accountant}
        return {"dp": dp, "epsilon": spent.pop("epsilon"), "delta": spent.pop("delta"),
                "accountant": spent.pop("accountant"), **spent}
