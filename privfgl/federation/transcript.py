"""The transcript: what each party observed, message by message.

Attacks read a party's view from here and nothing else. Every message's metadata (round, name,
sender, kind, bytes) is always kept; payloads (tensors and serialized blobs) are kept according to `keep`:
"all" rounds, only the "last" round seen (default; bounded memory for long runs), or "none".
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from privfgl.federation.messages import Message

KEEP_POLICIES = ("all", "last", "none")


class Transcript:
    def __init__(self, keep: str = "last"):
        if keep not in KEEP_POLICIES:
            raise ValueError(f"unknown transcript policy {keep!r}; valid: {', '.join(KEEP_POLICIES)}")
        self.keep = keep
        self._views: dict[str, list[Message]] = defaultdict(list)
        self._latest_round = -1

    def record(self, party: str, message: Message) -> None:
        if self.keep == "none":
            message = replace(message, tensors=None, blobs=None)
        elif self.keep == "last" and message.round > self._latest_round:
            self._drop_payloads_before(message.round)
        self._latest_round = max(self._latest_round, message.round)
        self._views[party].append(message)

    def _drop_payloads_before(self, round_: int) -> None:
        for view in self._views.values():
            for i, m in enumerate(view):
                if (m.tensors is not None or m.blobs is not None) and m.round < round_:
                    view[i] = replace(m, tensors=None, blobs=None)

    def view(self, party: str, name: str | None = None, round: int | None = None) -> list[Message]:
        """Messages `party` observed, optionally filtered by message name and round."""
        return [m for m in self._views.get(party, [])
                if (name is None or m.name == name) and (round is None or m.round == round)]

    def parties(self) -> list[str]:
        return sorted(self._views)

    def summary(self, party: str) -> dict[str, int]:
        """Counts of observed messages by kind, e.g. {"plaintext": 1000, "aggregate": 100}."""
        counts: dict[str, int] = defaultdict(int)
        for m in self._views.get(party, []):
            counts[m.kind] += 1
        return dict(counts)
