"""The client's round-end update from released messages only (split_dp_composition=released).

Under split DP the client's prompt and head stay fixed for the whole round, so every minibatch's
messages are a function of that minibatch's samples and of earlier releases only: the minibatches
are disjoint releases (parallel composition, privacy/split_dp.py). At the round's end the client
updates from what crossed the split, never from its clean labels or features, so the next round's
state is post-processing of the releases too:

- head: a label estimate per sample from its M3 row as sent. With the round's fixed head z = W·H + b,
  M3_i = W^T(softmax(z_i) − onehot(y_i)) up to the clip's positive factor, plus noise. The least-squares
  δ̂_i solving W^T δ̂_i = M3_i has its one negative entry (p_y − 1) at the label: ŷ_i = argmin δ̂_i
  (needs h ≥ classes). The head then takes one optimiser step per minibatch, in the round's order, on
  the cross-entropy of head(H_i) against ŷ_i, H_i the M2 row the client received.
- prompt: GPF and ProG take their gradient from the received M4 rows alone
  (prompt.grad_from_feature_grads), one step per minibatch with the head's. VPG's gradient needs the
  clean features, so a VPG prompt stays at its round-start value (the common initial prompt).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from privfgl.methods.fedgpl.split import SplitClient

PROMPTS_UPDATED = ("gpf", "prog")  # prompts whose gradient is a function of M4 alone


def label_estimates(weight: torch.Tensor, grads: torch.Tensor) -> torch.Tensor:
    """ŷ [B] from the head's weight W [C, h] and the M3 rows as sent [B, h]: argmin of the least-squares
    δ̂ [C, B] with W^T δ̂ = M3^T."""
    delta = torch.linalg.lstsq(weight.detach().double().T, grads.detach().double().T).solution
    return delta.argmin(0)


def update_from_released(client: SplitClient, released: list[dict[str, torch.Tensor | int]]) -> None:
    """One optimiser step per minibatch of the round from its released messages: each entry of
    `released` holds H (M2 received, [B, h]), grad (M3 sent, [B, h]), feature_grad (M4 received,
    [ñ, d]) and num_graphs (B). Reads nothing else of the client's data."""
    weight = client.head.linear.weight.detach().clone()  # the head that made this round's M3
    labels = [label_estimates(weight, m["grad"]) for m in released]
    for m, y in zip(released, labels):
        client.optimizer.zero_grad()
        loss = F.cross_entropy(client.head(m["H"].float()), y)
        if client.anchor is not None and client.mu:
            loss = loss + client.mu / 2 * sum(((p - a) ** 2).sum() for p, a in zip(client.parameters(), client.anchor))
        loss.backward()
        if hasattr(client.prompt, "grad_from_feature_grads"):
            client.prompt.grad_from_feature_grads(m["feature_grad"].float(), int(m["num_graphs"]))
        client.optimizer.step()
