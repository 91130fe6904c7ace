"""The adversary's view: the messages one party received or sent, copied out of the transcript.

An attack receives an `AdversaryView` and its declared auxiliary knowledge, nothing else. The view
holds detached copies of the payloads (never the tensors the parties still use) and no reference
to the runtime, the clients' data or their trainers.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from privfgl.federation import SERVER, Transcript
from privfgl.federation.messages import Message


@dataclass(frozen=True)
class AdversaryView:
    """What `party` received (in order), then what it sent (in order per receiver). Payloads are
    None where it saw only ciphertexts/shares."""
    party: str
    messages: tuple[Message, ...]

    def find(self, name: str, round: int | None = None, sender: str | None = None) -> list[Message]:
        """Messages called `name`, optionally of one round and from one sender."""
        return [m for m in self.messages if m.name == name and (round is None or m.round == round)
                and (sender is None or m.sender == sender)]

    def payload(self, name: str, round: int, sender: str) -> dict[str, torch.Tensor] | None:
        """The plaintext payload of the first such message, or None (absent or opaque)."""
        found = self.find(name, round, sender)
        return found[0].tensors if found else None


def _copy(message: Message, memo: dict[int, torch.Tensor]) -> Message:
    """The message with detached copies of its tensors (a tensor broadcast to K receivers is copied once)."""
    if message.tensors is None:
        return message
    tensors = {}
    for k, v in message.tensors.items():
        if id(v) not in memo:
            memo[id(v)] = v.detach().clone()
        tensors[k] = memo[id(v)]
    return replace(message, tensors=tensors)


def adversary_view(transcript: Transcript, party: str = SERVER) -> AdversaryView:
    """The view of `party` (default the honest-but-curious server): every message it received
    (the transcript's record of it) and every message it sent (it knows its own broadcasts),
    with copied payloads."""
    received = transcript.view(party)
    sent = [m for p in transcript.parties() if p != party for m in transcript.view(p) if m.sender == party]
    memo: dict[int, torch.Tensor] = {}
    return AdversaryView(party, tuple(_copy(m, memo) for m in received + sent))
