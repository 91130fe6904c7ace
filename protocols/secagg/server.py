"""The `secagg` server: routes the four rounds' messages, sums the masked inputs, unmasks the sum.

It never sees a client's input, seed or share in the clear: round 2's shares cross it encrypted.
In round 4 it learns, by design, the self-mask seeds b of the survivors and the pairwise-key seeds
of the clients that dropped after sharing, and nothing else: with the b's it removes the self
masks, with the dropped clients' seeds it recomputes and removes their pairwise masks, which the
survivors' inputs still carry. Every round needs at least t live clients; a reconstruction needs
t shares from the owner's share holders. Each reconstruction is checked (the s seed against the
advertised s public key, b against its commitment); when the check fails and more than t shares
arrived, another t-subset that passes is used and the holders whose shares disagree are reported
(``faulty``); with no consistent subset, ProtocolError.
"""
from __future__ import annotations

import itertools

import numpy as np

from protocols.base import ProtocolError, client
from protocols.secagg import crypto, shamir

MAX_SUBSETS = 256  # t-subsets tried when a reconstruction fails its check
ROUND_NAMES = {1: "advertise keys", 2: "share keys", 3: "masked input", 4: "unmasking"}


def names(indices) -> str:
    return ", ".join(client(k) for k in sorted(indices)) or "none"


class Server:
    def __init__(self, num_clients: int, neighbours: list[frozenset[int]], holders: list[tuple[int, ...]],
                 threshold: int):
        self.num_clients = num_clients
        self.neighbours = neighbours
        self.holders = holders
        self.threshold = threshold
        self.alive: dict[int, set[int]] = {}  # round -> clients whose message of that round arrived
        self.keys: dict[int, bytes] = {}
        self.commitments: dict[int, bytes] = {}
        self.faulty: dict[str, dict[str, list[str]]] = {}  # owner -> seed -> holders whose shares were wrong

    def check_round(self, r: int, arrived: set[int]) -> None:
        """Bonawitz et al.: abort when fewer than t clients are left after round r."""
        self.alive[r] = set(arrived)
        if len(arrived) < self.threshold:
            missing = set(range(self.num_clients)) - arrived
            raise ProtocolError(
                f"secagg round {r} ({ROUND_NAMES[r]}): only {len(arrived)} of {self.num_clients} clients remain, "
                f"fewer than the threshold t = {self.threshold}; missing: {names(missing)}"
            )

    # round 1
    def route_keys(self, keys: dict[int, bytes]) -> dict[int, dict[int, bytes]]:
        """Each live client gets the advertised keys of its live neighbours."""
        self.keys = dict(keys)
        return {v: {w: keys[w] for w in sorted(self.neighbours[v]) if w in keys} for v in keys}

    # round 2
    def route_shares(self, sent: dict[int, tuple[bytes, dict[int, bytes]]], tamper: tuple[int, int] | None = None
                     ) -> dict[int, dict[int, bytes]]:
        """Each client that shared gets the sealed shares addressed to it by the others that shared.
        ``tamper`` (fault injection, (owner, holder)): the server flips a bit of that sealed share."""
        self.commitments = {u: commitment for u, (commitment, _) in sent.items()}
        inbox: dict[int, dict[int, bytes]] = {v: {} for v in sent}
        for u, (_, sealed) in sent.items():
            for v, blob in sealed.items():
                if v in inbox:
                    if tamper == (u, v):
                        blob = blob[:-1] + bytes([blob[-1] ^ 1])
                    inbox[v][u] = blob
        return inbox

    # round 3
    def add(self, masked: dict[int, np.ndarray], out: np.ndarray | None = None) -> np.ndarray:
        """The ring sum of the masked vectors: a fresh array, or written into ``out`` (their dtype and size)."""
        total = None
        for u in sorted(masked):
            if total is None:
                total = masked[u].copy() if out is None else out
                if out is not None:
                    np.copyto(out, masked[u])
            else:
                total += masked[u]  # wraps mod 2^b: the protocol
        return total

    def check_recoverable(self) -> None:
        """After round 3, before any share is asked for: every seed round 4 must rebuild (each survivor's self-mask
        seed b, each dropped client's pairwise-key seed s) needs t share holders among the survivors. Under the
        k-regular graph a client's holders are its neighbourhood, so t survivors in all is not enough: the
        neighbours of one client can all be gone. ProtocolError names the first such client (survivors, then
        the dropped, in index order) and its missing holders; the same check in process and multi-process."""
        survivors, dropped, t = self.alive[3], self.alive[2] - self.alive[3], self.threshold
        for which, owners in (("self-mask seed", survivors), ("pairwise-key seed", dropped)):
            for u in sorted(owners):
                holders = set(self.holders[u])
                live = holders & survivors
                if len(live) < t:
                    raise ProtocolError(
                        f"secagg round 3 (masked input): cannot unmask the sum: {client(u)}'s {which} has "
                        f"{len(live)} share holders left ({names(live)}), fewer than the threshold t = {t}; "
                        f"missing: {names(holders - survivors - {u})}"
                    )

    def requests(self, ask_both: int | None = None) -> dict[int, tuple[list[int], list[int]]]:
        """Round 4 request to each survivor: (survivors whose b share it holds, dropped whose s share it holds),
        after ``check_recoverable``. ``ask_both`` (fault injection): a survivor whose s share the server asks for too."""
        self.check_recoverable()
        survivors, shared = self.alive[3], self.alive[2]
        dropped = shared - survivors
        held_by: dict[int, set[int]] = {v: set() for v in survivors}  # holder -> owners that shared (O(K m))
        for u in shared:
            for v in self.holders[u]:
                if v in held_by:
                    held_by[v].add(u)
        out = {}
        for v in sorted(survivors):
            mine = held_by[v]
            s_wanted = sorted(mine & dropped) + ([ask_both] if ask_both is not None and ask_both in mine else [])
            out[v] = (sorted(mine & survivors), s_wanted)
        return out

    def unmask(self, total: np.ndarray, answers: dict[int, dict[str, dict[int, tuple]]]) -> np.ndarray:
        """Remove the survivors' self masks and the dropped clients' pairwise masks from the sum ``total``
        (in place: the array ``add`` returned) and return it."""
        survivors, dropped = self.alive[3], self.alive[2] - self.alive[3]
        answers = _by_owner(answers)
        for u in sorted(survivors):
            committed = self.commitments[u]
            seed = self._reconstruct(u, "b", answers, lambda seed, u=u: crypto.commitment(u, seed) == committed)
            crypto.add_prg(total, crypto.self_mask_key(seed), subtract=True)
        for u in sorted(dropped):
            advertised = self.keys[u][crypto.PUBLIC_KEY_BYTES:]
            seed = self._reconstruct(u, "s", answers, lambda seed: crypto.keypair_from_seed(seed)[1] == advertised)
            s_private, _ = crypto.keypair_from_seed(seed)
            for v in sorted(self.neighbours[u] & survivors):
                shared = crypto.agree(s_private, self.keys[v][crypto.PUBLIC_KEY_BYTES:])
                # v added this mask when v < u (remove it), subtracted it when v > u (add it back)
                crypto.add_prg(total, crypto.pair_key(shared, b"pair-mask", u, v), subtract=v < u)
        return total

    def _shares(self, u: int, which: str, by_owner) -> list[tuple[int, int, bytes]]:
        return sorted(by_owner[which].get(u, ()))

    def _reconstruct(self, u: int, which: str, by_owner, valid) -> bytes:
        """u's seed from t of its holders' shares, checked by ``valid`` (its commitment or public key).
        When the first t shares fail the check and more than t arrived, other t-subsets are tried (up to
        MAX_SUBSETS): a consistent one gives the seed, and the holders whose shares disagree with it are
        recorded in ``faulty``. ProtocolError when fewer than t shares arrived or no subset is consistent."""
        shares = self._shares(u, which, by_owner)
        what = "self-mask seed" if which == "b" else "pairwise-key seed"
        t = self.threshold
        if len(shares) < t:
            holders = set(self.holders[u]) - ({u} if which == "s" else set())
            got = {v for _, v, _ in shares}
            raise ProtocolError(
                f"secagg round 4 (unmasking): cannot reconstruct {client(u)}'s {what}: {len(shares)} of its share "
                f"holders answered ({names(got)}), fewer than the threshold t = {t}; missing: "
                f"{names(holders - got)}"
            )
        points = [(x, share) for x, _, share in shares]
        seed = shamir.combine(points, t)
        if valid(seed):
            return seed
        for subset in itertools.islice(itertools.combinations(range(len(shares)), t), 1, MAX_SUBSETS):
            seed = shamir.combine([points[i] for i in subset], t)
            if valid(seed):
                good = [points[i] for i in subset[:t - 1]]
                bad = [v for i, (_, v, _) in enumerate(shares)
                       if i not in subset and shamir.combine(good + [points[i]], t) != seed]
                self.faulty.setdefault(client(u), {})[what] = [client(v) for v in bad]
                return seed
        check = "its commitment" if which == "b" else "its advertised public key"
        raise ProtocolError(
            f"secagg round 4 (unmasking): inconsistent Shamir shares: no {t} of the shares of {client(u)}'s {what} "
            f"from {names(v for _, v, _ in shares)} rebuild a seed that matches {check}; a holder (or {client(u)} "
            "when it shared) sent a malformed share"
        )


def _by_owner(answers: dict[int, dict[str, dict[int, tuple]]]) -> dict[str, dict[int, list[tuple[int, int, bytes]]]]:
    """The round-4 answers (holder -> {"b"|"s": {owner: (index, share)}}) regrouped by seed:
    {"b"|"s": {owner: [(index, holder, share), ...]}}, in one pass (not one pass per owner)."""
    out: dict[str, dict[int, list]] = {"b": {}, "s": {}}
    for v, answer in answers.items():
        for which, shares in answer.items():
            for u, (x, share) in shares.items():
                out[which].setdefault(u, []).append((x, v, share))
    return out
