"""Trained models in a party's messages, and the forward pass an attacker runs with them.

Methods whose messages are whole GNN models (PyG parameter names, `convs.{l}...`):
- fedavg / fedprox: "global_model" (server -> clients, every round) and "model_update" {n·w, n};
- dp-fedavg: "global_model" and "model_update" = the clipped (noised in local mode) delta w_k − w;
- dp-sgd: "global_model" and "model_update" = the client's model itself (a mean-aggregation GCN,
  privfgl.privacy.dpsgd.MeanGCN).
The final global model is the last "global_model" broadcast with a payload; client k's final model
is read from its last "model_update" with a payload (for dp-fedavg: the global model it trained from
plus its delta). Under a secure protocol the uploads carry no payload: only the global model exists.
These functions read a list of messages (a view's, or the transcript's own record for the runtime's
oracle answers) and never modify a payload.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from privfgl.federation import SERVER, client_name
from privfgl.federation.messages import Message

Params = dict[str, torch.Tensor]
MODEL_METHODS = ("fedavg", "fedprox", "dp-fedavg", "dp-sgd")


def _with_payload(messages, name: str, sender: str | None = None, receiver: str | None = None) -> list[Message]:
    return [m for m in messages if m.name == name and m.tensors is not None and (sender is None or m.sender == sender)
            and (receiver is None or m.receiver == receiver)]


def final_global_model(messages) -> Params | None:
    """The last global model broadcast (as sent to client0, or to any client), float32; None if none has a payload."""
    sent = (_with_payload(messages, "global_model", SERVER, client_name(0))
            or _with_payload(messages, "global_model", SERVER))
    return {k: v.detach().float() for k, v in sent[-1].tensors.items()} if sent else None


def final_client_model(messages, method: str, k: int) -> Params | None:
    """Client k's model from its last plaintext upload; None if the messages hold none."""
    ups = _with_payload(messages, "model_update", client_name(k), SERVER)
    if not ups:
        return None
    last = ups[-1]
    if method == "dp-sgd":
        return {n: v.detach().float() for n, v in last.tensors.items()}
    if "n" in last.tensors:  # fedavg / fedprox: n·w and n
        n = float(last.tensors["n"])
        if n == 0:
            return None
        return {p: (v.double() / n).float() for p, v in last.tensors.items() if p != "n"}
    # dp-fedavg: a delta from the global model the client received in that round (the broadcast
    # labelled round r-1, or the initial one for round 0)
    broadcasts = [m for m in messages
                  if m.name == "global_model" and m.sender == SERVER and m.receiver == client_name(k)]
    before = [m for m in broadcasts if m.round < last.round] or broadcasts[:1]
    if not before or before[-1].tensors is None:
        return None
    return {p: (before[-1].tensors[p].double() + v.double()).float() for p, v in last.tensors.items()}


@torch.no_grad()
def model_logits(method: str, model: str, layers: int, hidden: int, num_classes: int, params: Params,
                 x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
    """Eval-mode logits [n, C] of the run's architecture with `params` on (x, edge_index)."""
    x = x.float()
    if method == "dp-sgd":
        from privfgl.privacy.dpsgd import MeanGCN, mean_adjacency
        net = MeanGCN(x.shape[1], hidden, num_classes, layers)
        net.load_state_dict(params)
        return net(x, mean_adjacency(edge_index, x.shape[0]))
    from privfgl.models import build_model
    net = build_model(model, x.shape[1], hidden, num_classes, layers, 0.0)
    net.load_state_dict(params)
    net.eval()
    return net(x, edge_index)


def train_model(method: str, model: str, layers: int, hidden: int, num_classes: int, x: torch.Tensor,
                edge_index: torch.Tensor, y: torch.Tensor, train_idx: torch.Tensor, epochs: int, lr: float,
                weight_decay: float, dropout: float, seed: int) -> Params:
    """A fresh model of the run's architecture trained non-privately, full batch with Adam, on the
    nodes `train_idx` (a shadow model). Seeded; leaves the global RNG as it was."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        x = x.float()
        if method == "dp-sgd":
            from privfgl.privacy.dpsgd import MeanGCN, mean_adjacency
            net, adj = MeanGCN(x.shape[1], hidden, num_classes, layers), mean_adjacency(edge_index, x.shape[0])
            forward = lambda: net(x, adj)
        else:
            from privfgl.models import build_model
            net = build_model(model, x.shape[1], hidden, num_classes, layers, dropout)
            forward = lambda: net(x, edge_index)
        opt = torch.optim.Adam(net.parameters(), lr=lr, weight_decay=weight_decay)
        net.train()
        for _ in range(epochs):
            opt.zero_grad()
            F.cross_entropy(forward()[train_idx], y[train_idx]).backward()
            opt.step()
        return {k: v.detach().clone() for k, v in net.state_dict().items()}


def block_graph(graphs: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Disjoint union of (x, edge_index) graphs: (x [N, f], edge_index, offsets [len+1])."""
    offsets = [0]
    for x, _ in graphs:
        offsets.append(offsets[-1] + x.shape[0])
    if not graphs:
        return torch.zeros(0, 0), torch.zeros(2, 0, dtype=torch.long), torch.tensor(offsets)
    x = torch.cat([g[0] for g in graphs])
    ei = torch.cat([g[1] + off for g, off in zip(graphs, offsets)], dim=1)
    return x, ei, torch.tensor(offsets)
