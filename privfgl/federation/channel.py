"""The channel: carries every message between parties and counts the bytes each party moves."""
from __future__ import annotations

from collections import Counter

from privfgl.federation.messages import Message
from privfgl.federation.transcript import Transcript


class Channel:
    """Delivers messages: counts bytes per party and direction, and records the receiver's view.

    `sent[p]` / `received[p]`: bytes party p sent / received over the whole run;
    `links[(sender, receiver)]`: bytes over each directed link.
    """

    def __init__(self, transcript: Transcript):
        self.transcript = transcript
        self.sent: Counter[str] = Counter()
        self.received: Counter[str] = Counter()
        self.links: Counter[tuple[str, str]] = Counter()
        self.messages = 0

    def deliver(self, message: Message) -> None:
        self.sent[message.sender] += message.nbytes
        self.received[message.receiver] += message.nbytes
        self.links[(message.sender, message.receiver)] += message.nbytes
        self.messages += 1
        self.transcript.record(message.receiver, message)

    def observe(self, party: str, message: Message) -> None:
        """Record what `party` learns without bytes moving to it (e.g. a value it decrypts itself)."""
        self.transcript.record(party, message)
