"""The adversary's view: the messages one party received or sent, copied out of the transcript.

An attack receives an `AdversaryView` and its declared auxiliary knowledge, nothing else. The view
holds detached copies of the payloads (never the tensors the parties still use) and no reference
to the runtime, the clients' data or their trainers.
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
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


class _CopiedOnRead(Mapping):
    """A message's payload whose tensors are detached copies, each made when first read (a run's view
    of 20 rounds holds hundreds of model-sized tensors; an attack reads few of them). `memo` is shared
    by the view, so a tensor broadcast to K receivers is copied once. The originals are the transcript's
    records, which nothing writes after the run."""

    def __init__(self, tensors: dict[str, torch.Tensor], memo: dict[int, torch.Tensor]):
        self._tensors, self._memo = tensors, memo

    def __getitem__(self, key: str) -> torch.Tensor:
        v = self._tensors[key]
        if id(v) not in self._memo:
            self._memo[id(v)] = v.detach().clone()
        return self._memo[id(v)]

    def __iter__(self) -> Iterator[str]:
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)


def _copy(message: Message, memo: dict[int, torch.Tensor]) -> Message:
    """The message with detached copies of its tensors, made on first read (_CopiedOnRead)."""
    if message.tensors is None:
        return message
    return replace(message, tensors=_CopiedOnRead(message.tensors, memo))


def observed_messages(transcript: Transcript, party: str = SERVER) -> list[Message]:
    """Every message `party` received (in order), then every message it sent (in order per receiver):
    the transcript's own records, payloads not copied (for the auditor's side; attacks get
    `adversary_view`)."""
    received = transcript.view(party)
    return received + [m for p in transcript.parties() if p != party for m in transcript.view(p) if m.sender == party]


def adversary_view(transcript: Transcript, party: str = SERVER) -> AdversaryView:
    """The view of `party` (default the honest-but-curious server): every message it received
    (the transcript's record of it) and every message it sent (it knows its own broadcasts),
    with copied payloads (each tensor copied when an attack first reads it)."""
    memo: dict[int, torch.Tensor] = {}
    return AdversaryView(party, tuple(_copy(m, memo) for m in observed_messages(transcript, party)))


VIEW_FORMAT = 1


def save_view(view: AdversaryView, folder: str | Path) -> Path:
    """Write `view` as files an auditor can read without privfgl: folder/view.json lists the
    messages in order ({"round", "name", "sender", "receiver", "kind", "nbytes", "tensors":
    {field: "NAME.npy"}, "blobs": ["NAME.bin", ...]}); tensors are .npy files (numpy.load), blobs the
    exact bytes received (SEAL serializations, little-endian int64 shares). The files of a view saved
    in the folder before are removed first (other files are left). Returns view.json's path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for old in [*folder.glob("m[0-9][0-9][0-9][0-9][0-9][0-9]-*.npy"),
                *folder.glob("m[0-9][0-9][0-9][0-9][0-9][0-9]-*.bin"), folder / "view.json"]:
        old.unlink(missing_ok=True)  # a view saved there before: its files would mix with this one's
    entries = []
    for i, m in enumerate(view.messages):
        entry = {"round": m.round, "name": m.name, "sender": m.sender, "receiver": m.receiver, "kind": m.kind,
                 "nbytes": m.nbytes, "tensors": {}, "blobs": []}
        for field, t in (m.tensors or {}).items():
            entry["tensors"][field] = f"m{i:06d}-{field}.npy"
            np.save(folder / entry["tensors"][field], t.detach().cpu().numpy())
        for j, blob in enumerate(m.blobs or ()):
            entry["blobs"].append(f"m{i:06d}-{j}.bin")
            (folder / entry["blobs"][-1]).write_bytes(blob)
        entries.append(entry)
    path = folder / "view.json"
    path.write_text(json.dumps({"format": VIEW_FORMAT, "party": view.party, "messages": entries}, indent=1))
    return path


def load_view(folder: str | Path) -> AdversaryView:
    """The view written by `save_view`. Raises ValueError (one line) for a file name in view.json that
    is not a plain file name inside `folder` (absolute, with a directory part or "..", or a symlink
    that leads out of it): a view.json from elsewhere must not make the reader open any other file."""
    folder = Path(folder)
    data = json.loads((folder / "view.json").read_text())
    messages = []
    for i, e in enumerate(data["messages"]):
        tensors = {f: torch.from_numpy(np.load(view_file(folder, name, f"messages[{i}].tensors[{f!r}]")))
                   for f, name in e["tensors"].items()} or None
        blobs = tuple(view_file(folder, name, f"messages[{i}].blobs[{j}]").read_bytes()
                      for j, name in enumerate(e["blobs"])) or None
        messages.append(Message(e["round"], e["name"], e["sender"], e["receiver"], e["kind"], e["nbytes"], tensors,
                                blobs))
    return AdversaryView(data["party"], tuple(messages))


def view_file(folder: Path, name, entry: str) -> Path:
    """folder/name for the view.json entry `entry`; ValueError unless `name` is a plain file name
    whose real path (symlinks followed) lies in `folder`."""
    plain = isinstance(name, str) and name not in ("", ".", "..") and Path(name).name == name
    path = folder / name if plain else None
    if path is None or Path(os.path.realpath(path)).parent != Path(os.path.realpath(folder)):
        raise ValueError(f"{folder / 'view.json'}: {entry} = {name!r} is not a file of the view's folder; valid: a "
                         f"plain file name (no '/', '..' or absolute path, no symlink out) inside {folder}")
    return path
