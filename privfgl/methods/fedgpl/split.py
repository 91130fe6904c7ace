"""FedGPL's U-shaped split step over the federation runtime (spec B.3): one minibatch of one client.

    client k                                             server
    x̃, ẽ, b = prompt(G)       ── M1 prompted_graph ──▶  H = trunk(x̃', ẽ, b)        {"x", "edge_index", "batch"}
                               ◀── M2 embeddings ─────                              {"H"}
    L = CE(head(H'), y); ∂L/∂H ── M3 embedding_grads ─▶  backprop through the trunk  {"grad"}
                               ◀── M4 feature_grads ──  ∂L/∂x̃'                      {"grad"}
    x̃.backward(∂L/∂x̃'')  -> prompt gradients

M3 and M4 carry the gradients of each sample's own loss, B·∂L/∂H and B·∂L/∂x̃ for the batch-mean
loss L over B samples (B is public: the batch vector), and the receiver divides by B: the rows then
have a scale that does not shrink with the batch size, which is what a per-row DP clip bounds.

Each message is delivered on the channel (bytes counted, the receiver's transcript holds exactly
what was sent: the noised rows when split DP protects the message). The sender of each message
noises it (SplitDP.protect). The trunk's parameter gradients stay on the server, which steps its own
optimiser after every client batch (SplitFed-v2-style sequential fine-tuning) unless it is frozen.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from privfgl.federation import Federation
from privfgl.methods.fedgpl.trunk import Trunk

M1, M2, M3, M4 = "prompted_graph", "embeddings", "embedding_grads", "feature_grads"


class SplitMessageError(ValueError):
    """A split message is missing a field or has the wrong shape or dtype."""


def check_message(name: str, tensors: dict[str, torch.Tensor], fields: dict[str, tuple]) -> None:
    """Each field present with the given (ndim, dtype kind, width or None); one-line error otherwise."""
    for key, (ndim, floating, width) in fields.items():
        t = tensors.get(key)
        if t is None:
            raise SplitMessageError(f"{name}: missing field {key!r}; expected fields {', '.join(fields)}")
        if t.dim() != ndim or t.is_floating_point() != floating or (width is not None and t.shape[-1] != width):
            raise SplitMessageError(f"{name}: field {key!r} has shape {tuple(t.shape)} and dtype {t.dtype}; expected "
                                    f"{ndim}-d {'float' if floating else 'integer'}"
                                    + (f" with last dimension {width}" if width is not None else ""))


@dataclass
class SplitServer:
    """The server's half: the trunk and its optimiser (None: frozen)."""
    trunk: Trunk
    optimizer: torch.optim.Optimizer | None

    def forward(self, m1: dict[str, torch.Tensor], num_graphs: int) -> tuple[torch.Tensor, torch.Tensor]:
        """M1 -> (x with requires_grad, H [B, h])."""
        check_message(M1, m1, {"x": (2, True, None), "edge_index": (2, False, None), "batch": (1, False, None)})
        if m1["edge_index"].shape[0] != 2 or m1["batch"].shape[0] != m1["x"].shape[0]:
            raise SplitMessageError(f"{M1}: edge_index must be [2, e] and batch one entry per row of x "
                                    f"(got {tuple(m1['edge_index'].shape)} and {tuple(m1['batch'].shape)} for "
                                    f"x {tuple(m1['x'].shape)})")
        x = m1["x"].detach().float().requires_grad_(True)
        return x, self.trunk(x, m1["edge_index"], m1["batch"], num_graphs)

    def backward(self, x: torch.Tensor, h: torch.Tensor, m3: dict[str, torch.Tensor]) -> torch.Tensor:
        """M3 (per-sample gradients [B, h]) -> per-sample-loss gradients B·∂L/∂x̃ [ñ, d]; accumulates the
        trunk's gradients of the batch-mean loss and steps its optimiser."""
        check_message(M3, m3, {"grad": (2, True, h.shape[-1])})
        if m3["grad"].shape != h.shape:
            raise SplitMessageError(f"{M3}: grad has shape {tuple(m3['grad'].shape)}; expected {tuple(h.shape)} (as H)")
        if self.optimizer is not None:
            self.optimizer.zero_grad()
        h.backward(m3["grad"].float() / h.shape[0])  # per-sample gradients -> the batch mean's
        if self.optimizer is not None:
            self.optimizer.step()
        return x.grad.detach() * h.shape[0]  # the gradient of each sample's own loss


@dataclass
class SplitClient:
    """A client's halves: its prompt and head with their optimisers."""
    prompt: nn.Module
    head: nn.Module
    optimizer: torch.optim.Optimizer
    anchor: list[torch.Tensor] | None = None  # FedProx: the round's starting parameters
    mu: float = 0.0

    def parameters(self) -> list[nn.Parameter]:
        return [*self.prompt.parameters(), *self.head.parameters()]


def split_step(fed: Federation, round: int, k: int, client: SplitClient, server: SplitServer, batch, dp=None,
               truth: list | None = None, released: list | None = None, canaries=None) -> float:
    """One minibatch (a PyG Batch with x, edge_index, batch, y [B], optionally node_ids) through M1-M4;
    returns the loss. The client's halves (client_m1, client_m3, client_m4) and the server's (server_m2,
    server_m4) in order, each message delivered on fed's channel. `dp`: a SplitDP (None: no noise).
    `truth`: the auditor's log (never sent): one entry per M1 with the round, client, the global node id of
    every row (−1: made by the prompt), the rows' clean input features and the samples' labels. `released`:
    None: the client steps its optimiser on this minibatch's clean gradients; a list: the prompt and head stay
    fixed and the minibatch's messages as they crossed (M2 H, M3 grad, M4 feature_grad, num_graphs) are
    appended to it for the round-end update (released.update_from_released). `canaries`: dp-audit's canaries
    (attacks/dp/split_audit.py), None, or an object with `rows` and `sample`. rows(name, round, k, width):
    canary rows clipped and noised by the message's sender with the message's rows (any of M1-M4) in one
    release and sent beside them as the field `canary_rows`, which no receiver reads. sample(round, k, width): a
    canary sample (one node row, a label, a weight 0 or 1) that joins this minibatch after the prompt as graph
    B: its row in M1 and M4, its H in M2, its loss (times the weight) in M3 and in the clean step; never in the
    round-end update or accuracy."""
    m1, pending = client_m1(round, k, client, batch, dp, truth, canaries)
    m1 = fed.upload(round, k, M1, m1)
    m2, held = server_m2(round, k, server, m1, dp, canaries)
    m2 = fed.send(round, k, M2, m2)
    m3 = fed.upload(round, k, M3, client_m3(round, k, client, m2, pending, dp, canaries))
    m4 = fed.send(round, k, M4, server_m4(round, k, server, held, m3, dp, canaries))
    return client_m4(client, m4, pending, released)


def _sender(dp, canaries, round: int, k: int):
    """send(name, key, rows) -> the message's fields as its sender sends them: rows noised by `dp` (if it
    protects `name`), with the canaries' rows for this message beside them."""
    protect = (lambda name, rows: rows) if dp is None else dp.protect

    def send(name: str, key: str, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        extra = None if canaries is None else canaries.rows(name, round, k, rows.shape[-1])
        if extra is None:
            return {key: protect(name, rows)}
        sent = protect(name, torch.cat([rows, extra.to(rows.dtype)]))
        return {key: sent[:len(rows)], "canary_rows": sent[len(rows):]}
    return send


def client_m1(round: int, k: int, client: SplitClient, batch, dp=None, truth: list | None = None,
              canaries=None) -> tuple[dict[str, torch.Tensor], dict]:
    """Client k's prompt on its minibatch: M1 as it sends it, and what it keeps for M3 and M4 (`pending`)."""
    B = int(batch.num_graphs)
    client.optimizer.zero_grad()
    x_p, edge_p, batch_p = client.prompt(batch.x, batch.edge_index, batch.batch, B)
    canary = None if canaries is None else canaries.sample(round, k, x_p.shape[-1])
    x_up, batch_up = x_p.detach(), batch_p
    if canary is not None:  # graph B: the canary's node rows, no edges
        x_up = torch.cat([x_up, canary.rows.to(x_up.dtype)])
        batch_up = torch.cat([batch_p, torch.full((len(canary.rows),), B, dtype=batch_p.dtype)])
    m1 = {**_sender(dp, canaries, round, k)(M1, "x", x_up), "edge_index": edge_p, "batch": batch_up}
    if truth is not None:
        rows = client.prompt.last_rows
        ids = getattr(batch, "node_ids", None)
        truth.append({"round": round, "client": k, "y": batch.y.clone(), "input_rows": int(batch.x.shape[0]),
                      "input_edges": int(batch.edge_index.shape[1]),
                      "node_ids": torch.where(rows >= 0, ids[rows.clamp_min(0)], -1) if ids is not None else None,
                      "features": torch.where((rows >= 0).unsqueeze(1), batch.x[rows.clamp_min(0)], 0.0)})
    return m1, {"x_p": x_p, "x_up": x_up, "B": B, "y": batch.y, "canary": canary}


def server_m2(round: int, k: int, server: SplitServer, m1: dict[str, torch.Tensor], dp=None,
              canaries=None) -> tuple[dict[str, torch.Tensor], tuple]:
    """The trunk on M1: M2 as the server sends it, and what it keeps for M4. The number of graphs is the
    batch vector's (public: every graph keeps at least one row)."""
    x_s, h = server.forward(m1, int(m1["batch"].max()) + 1 if m1["batch"].numel() else 0)
    return _sender(dp, canaries, round, k)(M2, "H", h.detach()), (x_s, h)


def client_m3(round: int, k: int, client: SplitClient, m2: dict[str, torch.Tensor], pending: dict, dp=None,
              canaries=None) -> dict[str, torch.Tensor]:
    """The head and loss on M2: M3 (B·∂L/∂H) as the client sends it."""
    check_message(M2, m2, {"H": (2, True, None)})
    B, canary = pending["B"], pending["canary"]
    h_c = m2["H"].detach().requires_grad_(True)
    logits = client.head(h_c)
    loss = F.cross_entropy(logits[:B], pending["y"])
    if canary is not None:  # B·∂L/∂H of its row is weight·∂CE/∂H, as every sample's own
        loss = loss + canary.weight * F.cross_entropy(logits[B:], canary.label.view(1)) / B
    if client.anchor is not None and client.mu:
        loss = loss + client.mu / 2 * sum(((p - a) ** 2).sum() for p, a in zip(client.parameters(), client.anchor))
    loss.backward()
    m3 = _sender(dp, canaries, round, k)(M3, "grad", h_c.grad.detach() * B)
    pending.update(H=m2["H"], m3=m3["grad"], loss=float(loss.detach()))
    return m3


def server_m4(round: int, k: int, server: SplitServer, held: tuple, m3: dict[str, torch.Tensor], dp=None,
              canaries=None) -> dict[str, torch.Tensor]:
    """The trunk's backward from M3 (and its optimiser step): M4 as the server sends it."""
    x_s, h = held
    return _sender(dp, canaries, round, k)(M4, "grad", server.backward(x_s, h, m3))


def client_m4(client: SplitClient, m4: dict[str, torch.Tensor], pending: dict, released: list | None = None) -> float:
    """The prompt's backward from M4 and the optimiser step (or, with `released`, the minibatch's released
    messages kept for the round-end update); returns the loss."""
    x_p, x_up, B = pending["x_p"], pending["x_up"], pending["B"]
    check_message(M4, m4, {"grad": (2, True, x_p.shape[-1])})
    if m4["grad"].shape != x_up.shape:
        raise SplitMessageError(f"{M4}: grad has shape {tuple(m4['grad'].shape)}; expected {tuple(x_up.shape)} "
                                "(as x̃)")
    feature_grad = m4["grad"][:x_p.shape[0]]  # the client's own rows (without a canary sample's)
    if released is not None:
        released.append({"H": pending["H"][:B].detach(), "grad": pending["m3"][:B].detach(),
                         "feature_grad": feature_grad.detach(), "num_graphs": B})
        return pending["loss"]
    if x_p.requires_grad:
        x_p.backward(feature_grad.to(x_p.dtype) / B)
    client.optimizer.step()
    return pending["loss"]
