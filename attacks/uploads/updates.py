"""FedAvg/FedProx updates as the server observes them, and the gradients they imply.

Client k trains from the global model it received (the server's own broadcast) and uploads
("model_update") either n_k·w_k and n_k (FedAvg/FedProx) or its model delta w_k − w (DP-FedAvg,
clipped and, with local DP, noised; n_k is not sent). Under a secure protocol the server sees only
the revealed sum ("model_update:sum"): the n-weighted mean of the models, or the sum of the deltas.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from attacks.view import AdversaryView
from privfgl.federation import SERVER, client_name

Params = dict[str, torch.Tensor]


@dataclass(frozen=True)
class ObservedUpdate:
    """One round's model before and after local training (float64, PyG parameter names) and its
    weight n (a client's training nodes, or their sum over clients for the aggregate; None when
    the upload does not carry it, as DP-FedAvg's deltas)."""
    source: str
    round: int
    before: Params
    after: Params
    n: float | None

    def delta(self) -> Params:
        return {k: self.after[k] - self.before[k] for k in self.before}

    def gradient(self, lr: float, weight_decay: float, steps: int) -> Params:
        """The mean gradient implied by `steps` SGD steps: −Δ/(lr·steps) − weight_decay·w_before
        (exact for one step; the average gradient along the path for more)."""
        return {k: -d / (lr * steps) - weight_decay * self.before[k] for k, d in self.delta().items()}


def _global_model(view: AdversaryView, round: int) -> Params | None:
    """The global model clients trained from in `round`: the server's (round)-th broadcast."""
    sent = [m for m in view.messages if m.name == "global_model" and m.sender == SERVER and m.receiver == client_name(0)]
    if round >= len(sent) or sent[round].tensors is None:
        return None
    return {k: v.double() for k, v in sent[round].tensors.items()}


def round_starts(view: AdversaryView, round: int) -> list[Params] | None:
    """The global models clients started rounds 0 .. round − 1 from (oldest first), or None when the
    view lacks one (a transcript that kept only the last round)."""
    starts = [_global_model(view, r) for r in range(round)]
    return None if any(s is None for s in starts) else starts


def _after(payload: dict[str, torch.Tensor], before: Params, contributors: int) -> tuple[Params, float | None]:
    """The model after training and n: n-weighted sums / n, or before + mean delta (DP-FedAvg)."""
    if "n" in payload:
        n = float(payload["n"])
        return {k: v.double() / n for k, v in payload.items() if k != "n"}, n
    return {k: before[k] + v.double() / contributors for k, v in payload.items()}, None


def client_update(view: AdversaryView, k: int, round: int = 0) -> ObservedUpdate | None:
    """Client k's update in `round`, or None when the server did not see it in the clear."""
    before = _global_model(view, round)
    payload = view.payload("model_update", round, client_name(k))
    if before is None or payload is None:
        return None
    after, n = _after(payload, before, 1)
    return ObservedUpdate(client_name(k), round, before, after, n)


def aggregate_update(view: AdversaryView, round: int = 0) -> ObservedUpdate | None:
    """The revealed aggregate of `round` as one update: the n-weighted mean of the clients' models,
    or (deltas) the mean delta over the clients that sent one."""
    before = _global_model(view, round)
    payload = view.payload("model_update:sum", round, SERVER)
    if before is None or payload is None:
        return None
    senders = {m.sender for m in view.find("model_update", round)}
    after, n = _after(payload, before, max(len(senders), 1))
    return ObservedUpdate("aggregate", round, before, after, n)
