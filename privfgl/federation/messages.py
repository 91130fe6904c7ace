"""Messages: named tensors, or serialized blobs, sent from one party to another."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from protocols.base import SERVER  # noqa: F401 (re-exported with client_name: the parties' names)
from protocols.base import client as client_name  # noqa: F401


def payload_nbytes(tensors: dict[str, torch.Tensor]) -> int:
    """Bytes of a plaintext payload: sum of numel × element size (what torch would serialise as data)."""
    return sum(t.numel() * t.element_size() for t in tensors.values())


@dataclass(frozen=True)
class Message:
    """One message on the channel. `tensors` is the plaintext payload (None when the receiver only
    gets opaque bytes); `blobs` are the serialized objects as they crossed the wire (SEAL
    ciphertexts, keys and parameters; secret shares as little-endian int64), else None; `nbytes`
    is what crossed the wire (0 for what a party observes without receiving it)."""
    round: int
    name: str
    sender: str
    receiver: str
    kind: str  # "plaintext" | "ciphertext" | "share" | "aggregate" | "parameters" | "public_key"
    nbytes: int
    tensors: dict[str, torch.Tensor] | None = field(default=None, repr=False)
    blobs: tuple[bytes, ...] | None = field(default=None, repr=False)
