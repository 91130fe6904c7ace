"""`crypten-seed-search`: the server searches the Beaver dealer's torch seed and reads multiplied values.

CrypTen 0.4.1 seeds torch generators with 64-bit seeds, but torch's CPU ``manual_seed`` keeps 32
bits. Under CrypTen's TFP provider client 0 deals the Beaver triples, drawing the masks a, b from its
"local" generator, and every Beaver product opens ε = x − a, δ = y − b to every party, the server
included. The server sums the K + 1 shares of that first opening it holds (each party's share of
an opening reaches it, and it knows its own), then searches torch seeds in [0, window): a seed is
right when ε + a is a small fixed-point number (|·| <= bound) for every opened element, and then
x‖y = (ε‖δ) + (a‖b) are the multiplied values in the clear. Under the default ``rng=chacha20`` the
dealer draws from a 256-bit ChaCha20 stream, no torch seed reproduces a, and the search finds nothing.

Attacker input: only the server's view of one computation (its "compute" messages: the shares of
the openings it received and sent) and public facts: K, the fixed-point precision, the window and
bound. Before the first opening, the dealer's local stream gave only the masks of the truncations
whose shares it scattered to the server (TFP's wrap_rng draws world_size masks each), so the offset
of a in the stream is world_size × the elements of the blobs client 0 sent the server before its
share of the opening. The first opening must be an arithmetic one (a product or square), as in
``s * s`` and FedGPL's τ̂ (a Beaver matmul of the task models).
Scores (auditor): the fraction of the clients' summed input (the computation's input) found among the
reconstructed values within the fixed-point rounding, and the max abs error of that match; baseline:
guessing 0 for every value.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from attacks.base import Attack, Knowledge, NoInput
from attacks.view import AdversaryView
from privfgl.federation import SERVER
from privfgl.federation.messages import Message
from protocols.base import ComputeResult
from protocols.base import client as client_name

RING_LOW, RING_HIGH = -(2**63), 2**63 - 1  # CrypTen's torch.randint range for a ring element


@dataclass(frozen=True)
class SeedAux:
    target: str            # the computation's name (e.g. "hidta_tau")
    round: int             # -1: the last round with this computation in the view
    num_clients: int
    precision_bits: int
    window: int            # seeds searched: [0, window)
    bound: float           # the largest |value| a multiplied value is believed to have


@dataclass(frozen=True)
class SeedSearch:
    seed: int | None        # the dealer's local seed, or None
    candidates: int         # seeds tried
    values: np.ndarray | None  # the multiplied values x‖y (float64), None when no seed was found


def server_view(result: ComputeResult, name: str, round: int = 0) -> AdversaryView:
    """The server's view of one ``secure_compute`` outside a federation: its transfers labelled as
    ``Federation.compute`` labels them (name:setup, name:compute, ...), received and sent."""
    messages = tuple(Message(round, name if t.step == "input" else f"{name}:{t.step}", t.sender, t.receiver, t.kind,
                             int(t.nbytes), None, tuple(t.blobs) or None)
                     for t in result.transfers if SERVER in (t.sender, t.receiver))
    return AdversaryView(SERVER, messages)


def _blobs(view: AdversaryView, name: str, round: int, sender: str, receiver: str) -> list[bytes]:
    found = [m for m in view.messages if m.name == name and m.round == round and m.sender == sender
             and m.receiver == receiver]
    return list(found[0].blobs or ()) if found else []


def first_opening(view: AdversaryView, target: str, round: int, num_clients: int) -> tuple[np.ndarray, int]:
    """(the first opened value ε‖δ as int64 ring elements, the dealer's local draws before its mask)."""
    name = f"{target}:compute"
    parties = [client_name(k) for k in range(num_clients)]
    reference = parties[1] if num_clients >= 2 else parties[0]  # a client that never scatters to the server
    own = _blobs(view, name, round, view.party, reference)       # the server's shares, in order
    theirs = {p: _blobs(view, name, round, p, view.party) for p in parties}
    if not own or not theirs[reference]:
        raise NoInput(f"no opening of {target!r} in round {round} in the {view.party}'s view")
    length = len(theirs[reference][0])
    shares, skipped = [own[0]], 0
    for p in parties:
        blobs = list(theirs[p])
        while blobs and len(blobs[0]) != length:  # client 0's earlier scatters (truncation masks)
            skipped += len(blobs.pop(0)) // 8
        if not blobs:
            raise NoInput(f"{p}'s share of the first opening of {target!r} is not in the view")
        shares.append(blobs[0])
    if any(len(s) != length for s in shares):
        raise NoInput(f"the first opening of {target!r}: shares of different lengths")
    total = np.zeros(length // 8, dtype=np.int64)
    for s in shares:
        total += np.frombuffer(s, dtype="<i8").astype(np.int64)  # int64 arrays wrap: the ring Z_2^64
    return total, skipped * (num_clients + 1)


def search(opened: np.ndarray, offset: int, window: int, precision_bits: int, bound: float) -> SeedSearch:
    """Try torch seeds 0..window-1 for the dealer's local generator: the seed whose draws at ``offset``
    make opened + draws decode within ±bound everywhere; then the decoded multiplied values."""
    limit = int(bound * 2**precision_bits)
    if not 0 < limit < 2**62:
        raise ValueError(f"bound: expected 0 < bound·2^p < 2^62, got bound={bound} at p={precision_bits}")
    first = int(opened[0])
    g = torch.Generator()
    for seed in range(window):
        g.manual_seed(seed)
        draw = int(torch.randint(RING_LOW, RING_HIGH, (offset + 1,), generator=g, dtype=torch.long)[offset])
        if abs((first + draw + 2**63) % 2**64 - 2**63) > limit:
            continue
        g.manual_seed(seed)
        stream = torch.randint(RING_LOW, RING_HIGH, (offset + opened.size,), generator=g, dtype=torch.long)
        ring = opened + stream[offset:].numpy()
        if np.abs(ring).max() <= limit:
            return SeedSearch(seed, seed + 1, ring.astype(np.float64) / 2.0**precision_bits)
    return SeedSearch(None, window, None)


def match(values: np.ndarray | None, truth: np.ndarray, tolerance: float) -> tuple[float, float | None]:
    """(fraction of truth's entries within tolerance of some value, max over truth of the distance to
    the nearest value); (0, None) without values."""
    if values is None or values.size == 0 or truth.size == 0:
        return 0.0, None
    ordered = np.sort(values)
    at = np.searchsorted(ordered, truth)
    below, above = ordered[np.clip(at - 1, 0, ordered.size - 1)], ordered[np.clip(at, 0, ordered.size - 1)]
    nearest = np.minimum(np.abs(below - truth), np.abs(above - truth))
    return float(np.mean(nearest <= tolerance)), float(nearest.max())


class CryptenSeedSearch(Attack):
    """`crypten-seed-search` on every CrypTen computation in the server's view (window: seeds tried;
    bound: the assumed largest |multiplied value|; round: -1 for the last one)."""

    name = "crypten-seed-search"

    def __init__(self, window: int = 2**16, bound: int = 2**20, round: int = -1):
        if window < 1 or window > 2**32:
            raise ValueError(f"window: expected 1..2^32 seeds, got {window}")
        self.window, self.bound, self.round = window, bound, round

    def targets(self, view: AdversaryView, knowledge: Knowledge, num_clients: int) -> list[str]:
        names = [m.name.rsplit(":", 1)[0] for m in view.messages if m.name.endswith(":compute")]
        if not names:
            raise NoInput(f"no CrypTen computation in the {view.party}'s view (compute runs under --protocol crypten)")
        return list(dict.fromkeys(names))

    def declare_aux(self, setup, knowledge: Knowledge, target: str) -> SeedAux:
        bits = getattr(setup.federation.protocol, "precision_bits", 16)
        return SeedAux(target, self.round, len(setup.clients), bits, self.window, float(self.bound))

    def attack(self, view: AdversaryView, aux: SeedAux) -> SeedSearch:
        r = aux.round
        if r < 0:
            rounds = [m.round for m in view.messages if m.name == f"{aux.target}:compute"]
            r = max(rounds) if rounds else 0
        opened, offset = first_opening(view, aux.target, r, aux.num_clients)
        return search(opened, offset, aux.window, aux.precision_bits, aux.bound)

    def truth(self, setup, target: str) -> np.ndarray:
        """The clients' summed input of the computation (flat float64)."""
        log = setup.federation.audit_log
        rounds = [r for (r, name) in log if name == target and (self.round < 0 or r == self.round)]
        if not rounds:
            return np.zeros(0)
        uploads = log[(max(rounds), target)]["uploads"]
        return torch.stack([u.double() for u in uploads]).sum(0).numpy()

    def score(self, rec: SeedSearch, truth: np.ndarray, aux: SeedAux) -> tuple[dict, dict]:
        tolerance = (aux.num_clients + 1) * 2.0 ** -aux.precision_bits  # each input rounded to the 2^-p grid
        fraction, error = match(rec.values, truth, tolerance)
        base_fraction, base_error = match(np.zeros(1), truth, tolerance)
        metrics = {"seed_found": rec.seed is not None, "candidates": rec.candidates, "window": aux.window,
                   "recovered_fraction": fraction, "max_abs_error": error}
        baseline = {"recovered_fraction": base_fraction, "max_abs_error": base_error, "kind": "0 for every value"}
        return metrics, baseline
