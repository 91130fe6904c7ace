"""Messages: named tensors sent from one party to another."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

SERVER = "server"


def client_name(k: int) -> str:
    """The party name of client k ("client0", "client1", ...)."""
    return f"client{k}"


def payload_nbytes(tensors: dict[str, torch.Tensor]) -> int:
    """Bytes of a plaintext payload: sum of numel × element size (what torch would serialise as data)."""
    return sum(t.numel() * t.element_size() for t in tensors.values())


@dataclass(frozen=True)
class Message:
    """One message on the channel. `tensors` is the plaintext payload (None when the receiver only
    gets an opaque blob, e.g. a ciphertext or a secret share); `nbytes` is what crossed the wire."""
    round: int
    name: str
    sender: str
    receiver: str
    kind: str  # "plaintext" | "ciphertext" | "share" | "aggregate"
    nbytes: int
    tensors: dict[str, torch.Tensor] | None = field(default=None, repr=False)
