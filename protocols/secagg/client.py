"""One `secagg` client: its state and its four rounds (Bonawitz et al. 2017, semi-honest variant).

1. advertise keys: X25519 pairs c (share encryption: fresh, or its session's from a ``KeyRing``) and
   s (always fresh: derived from a fresh 16-byte seed, pairwise masks); sends both public keys to the
   server.
2. share keys: draws the self-mask seed b; Shamir-shares the s seed and b among its share holders
   (one `shamir.split` call, an independent polynomial per seed); sends each holder its two shares
   encrypted under their c agreement (through the server), bound to this sum (the two s public keys
   are authenticated with it), and a commitment to b.
3. masked input: y = q + PRG(b) + sum over neighbours v that shared in round 2 of +-PRG(s_uv)
   (+ when u < v), in Z_{2^b}.
4. unmasking: the server names the survivors (self-mask shares wanted) and the dropped (pairwise
   seed shares wanted). An honest client refuses a request that names one client in both lists,
   asks for its own pairwise seed (it sent its masked input, so that seed must stay secret), or
   lists fewer survivors than the threshold.

Session keys (``keys="session"``): a ``KeyRing`` keeps each client's c key pair, and the share keys
derived from its agreements with its peers' c public keys, across the sums of a session, so a sum
costs no c key pair and no c agreement once every pair has met; the s key pair and the seeds stay
fresh per sum. What it changes: the server learns no c private key in any case (it is never shared,
unlike the s seed), so the sums' secrecy against the server and t - 1 clients is the same; what is
lost is forward secrecy: a client device compromised later exposes the shares it received in every
sum of the session, not only in the sum it was compromised in. The binding of each sealed share to
its sum's s public keys is what keeps the server from replaying an earlier sum's share under a
reused key (tested: ``faults={"replay_share": ...}``).

``ClientGroup`` runs the rounds of a set of clients, in increasing index order: every client in the
Protocol's own process (``workers=1``), or one worker process's share of them (``workers`` > 1,
``protocols.secagg.pool``). This module and what it imports (``crypto``, ``shamir``, ``quantize``)
must not import torch: the workers load them without it.
"""
from __future__ import annotations

import os
import time

import numpy as np

from protocols.base import ProtocolError, client
from protocols.secagg import crypto, shamir


def share_context(sender_s_public: bytes, receiver_s_public: bytes) -> bytes:
    """What a sealed share is bound to besides its (sender, receiver): this sum's s public keys of both
    (fresh per sum), so a share sealed in another sum does not open, even under a session's c key."""
    return sender_s_public + receiver_s_public


class KeyRing:
    """c key pairs, one per client index, and the share keys derived from them: a Client's own for one sum
    (``keys="per-sum"``), or, under ``keys="session"``, held by the process that acts for the clients (the
    Protocol's, a worker's, a party's) for as long as it serves sums. A share key is cached per (client, peer, peer's c public key): a peer that shows a new c
    public key gets a new agreement."""

    def __init__(self):
        self._pairs: dict[int, tuple] = {}
        self._share_keys: dict[tuple[int, int, bytes], bytes] = {}

    def c_pair(self, u: int) -> tuple:
        """Client u's c key pair (private key, raw public key), made on first use from the OS CSPRNG."""
        if u not in self._pairs:
            self._pairs[u] = crypto.new_keypair()
        return self._pairs[u]

    def share_key(self, u: int, v: int, v_public: bytes) -> bytes:
        """The share-encryption key of the pair {u, v} as client u derives it (u's pair must exist)."""
        key = (u, v, v_public)
        if key not in self._share_keys:
            shared = crypto.agree(self._pairs[u][0], v_public)
            self._share_keys[key] = crypto.pair_key(shared, b"share-encryption", u, v)
        return self._share_keys[key]


class Client:
    def __init__(self, index: int, neighbours: frozenset[int], holders: tuple[int, ...], threshold: int,
                 keyring: KeyRing | None = None):
        self.index = index
        self.neighbours = neighbours
        self.holders = holders  # closed neighbourhood, sorted: who holds this client's shares
        self.threshold = threshold
        self.keyring = keyring or KeyRing()  # its own (a fresh c key pair this sum), or the session's
        # Secrets: fresh per sum (the c pair: per session with a shared keyring), from the OS CSPRNG.
        self._s_private = None
        self._s_public = b""
        self.s_seed = self.b_seed = None  # kept for the auditor's ground truth only
        self.peer_keys: dict[int, tuple[bytes, bytes]] = {}
        self.shares_held: dict[int, tuple[int, bytes, bytes]] = {}  # owner -> (index, s share, b share)
        self.masked_with: set[int] = set()

    def advertise_keys(self) -> bytes:
        _, c_public = self.keyring.c_pair(self.index)
        self.s_seed = crypto.fresh_seed()
        self._s_private, self._s_public = crypto.keypair_from_seed(self.s_seed)
        return c_public + self._s_public

    def share_keys(self, keys: dict[int, bytes], tamper: dict | None = None) -> tuple[bytes, dict[int, bytes]]:
        """keys: neighbour -> its advertised c||s public keys. Returns (commitment to b, holder -> sealed shares).
        ``tamper``: fault injection ({holder: "bad_share"}): that holder gets random bytes as its shares."""
        p = crypto.PUBLIC_KEY_BYTES
        self.peer_keys = {v: (blob[:p], blob[p:]) for v, blob in keys.items()}
        self.b_seed = crypto.fresh_seed()
        shares = shamir.split([self.s_seed, self.b_seed], self.threshold, self.holders)  # one polynomial each
        sealed = {}
        for v in self.holders:
            x, (s_share, b_share) = shares[v]
            if v == self.index:
                self.shares_held[v] = (x, s_share, b_share)
                continue
            if v not in self.peer_keys:  # holder dropped before advertising its keys
                continue
            if tamper and tamper.get(v) == "bad_share":
                s_share, b_share = os.urandom(shamir.SHARE_BYTES), os.urandom(shamir.SHARE_BYTES)
            key = self._share_key(v)
            sealed[v] = crypto.seal(key, self.index, v, x.to_bytes(2, "big") + s_share + b_share,
                                    share_context(self._s_public, self.peer_keys[v][1]))
        return crypto.commitment(self.index, self.b_seed), sealed

    def masked_input(self, sealed: dict[int, bytes], q: np.ndarray) -> np.ndarray:
        """sealed: owner -> its encrypted shares for this client (forwarded by the server). q: the encoded
        input; it becomes the masked vector y (the masks are added to it in place) and is returned."""
        return crypto.add_prgs(q, self._open_shares(sealed))  # y: q with the masks added in place

    def mask_vector(self, sealed: dict[int, bytes], n: int, dtype) -> np.ndarray:
        """The offline phase (``offline=True``): round 3 without the input, i.e. PRG(b) + sum of +-PRG(s_uv)
        as a fresh ring vector of n values; ``masked_input`` of any q is q + this vector (mod 2^b)."""
        return crypto.add_prgs(np.zeros(n, dtype), self._open_shares(sealed))

    def _open_shares(self, sealed: dict[int, bytes]) -> list[tuple[bytes, bool]]:
        """Open the round-2 shares addressed to this client; returns its masks' (PRG key, subtract) list."""
        n = shamir.SHARE_BYTES
        for u, blob in sealed.items():
            try:
                plain = crypto.open_sealed(self._share_key(u), blob, u, self.index,
                                           share_context(self.peer_keys[u][1], self._s_public))
            except crypto.ShareAuthError as e:
                raise ProtocolError(
                    f"secagg round 3: {client(self.index)} rejects the encrypted share from {client(u)} ({e}): it was "
                    f"modified, re-addressed or replayed from another sum on its way through the server; "
                    f"{client(self.index)} aborts"
                ) from None
            x = plain[0] << 8 | plain[1]
            self.shares_held[u] = (x, plain[2:2 + n], plain[2 + n:2 + 2 * n])
        self.masked_with = set(sealed)  # the neighbours that shared in round 2
        masks = [(crypto.self_mask_key(self.b_seed), False)]
        masks += [(self.pair_mask_key(v), self.index > v) for v in sorted(self.masked_with)]  # + when u < v
        return masks

    def _share_key(self, v: int) -> bytes:
        """The pair's share-encryption key (rounds 2 and 3), derived once per peer c public key."""
        return self.keyring.share_key(self.index, v, self.peer_keys[v][0])

    def pair_mask_key(self, v: int) -> bytes:
        return crypto.pair_key(crypto.agree(self._s_private, self.peer_keys[v][1]), b"pair-mask", self.index, v)

    def unmask(self, survivors: list[int], dropped: list[int], num_survivors: int) -> dict[str, dict[int, tuple]]:
        """The server's request -> {"b": {survivor: share}, "s": {dropped: share}} (the shares this client holds)."""
        me = client(self.index)
        both = sorted(set(survivors) & set(dropped))
        if both:
            raise ProtocolError(
                f"secagg round 4: {me} refuses to unmask: the server asked for both the pairwise-key seed share "
                f"and the self-mask seed share of {', '.join(map(client, both))}, which would unmask their inputs"
            )
        if self.index in dropped:
            raise ProtocolError(
                f"secagg round 4: {me} refuses to unmask: the server lists it as dropped, but it sent its masked "
                "input; revealing its own pairwise-key seed share could unmask it"
            )
        if num_survivors < self.threshold:
            raise ProtocolError(
                f"secagg round 4: {me} refuses to unmask: the server lists {num_survivors} survivors, fewer than "
                f"the threshold t = {self.threshold}"
            )
        b = {u: (self.shares_held[u][0], self.shares_held[u][2]) for u in survivors if u in self.shares_held}
        s = {u: (self.shares_held[u][0], self.shares_held[u][1]) for u in dropped if u in self.shares_held}
        return {"b": b, "s": s}


class ClientGroup:
    """The clients one process acts for, round by round. ``members``: (index, neighbours, holders,
    threshold) of each. Every round method takes client -> its request, runs the clients in increasing
    index order and returns client -> (its message, the seconds it took). A client's ProtocolError
    propagates at once (the later clients of the round do not run; ``current`` names the one that raised)."""

    def __init__(self, members, keyring: KeyRing | None = None):
        self.clients = {u: Client(u, neighbours, holders, t, keyring) for u, neighbours, holders, t in members}
        self.current: int | None = None

    def _run(self, requests: dict, step) -> dict:
        out = {}
        for u in sorted(requests):
            self.current = u
            t0 = time.perf_counter()
            message = step(self.clients[u], requests[u])
            out[u] = (message, time.perf_counter() - t0)
        self.current = None
        return out

    def advertise(self, live) -> dict[int, tuple[bytes, float]]:
        """Round 1 for the clients in ``live``: their c||s public keys."""
        return self._run(dict.fromkeys(live), lambda c, _: c.advertise_keys())

    def share(self, requests: dict[int, tuple[dict, dict | None]]) -> dict:
        """Round 2: client -> (its neighbours' keys as routed, tamper) -> (commitment, holder -> sealed shares)."""
        return self._run(requests, lambda c, r: c.share_keys(*r))

    def mask(self, inboxes: dict[int, dict[int, bytes]], grid, inputs, outputs) -> dict:
        """Round 3: client u encodes ``inputs[u]`` on ``grid`` into ``outputs[u]`` (a ring vector it owns)
        and masks it there with the shares in its inbox: u -> (outputs[u], now its masked vector y)."""
        return self._run(inboxes, lambda c, inbox: c.masked_input(inbox, grid.encode(inputs[c.index],
                                                                                     outputs[c.index])))

    def premask(self, inboxes: dict[int, dict[int, bytes]], n: int, dtype) -> dict:
        """The offline phase: round 3 without the inputs. Each client opens its inbox and keeps its mask
        vector (``Client.mask_vector``) for ``mask_prepared``: u -> (None, seconds)."""
        self.masks = {}

        def step(c, inbox):
            self.masks[c.index] = c.mask_vector(inbox, n, dtype)

        return self._run(inboxes, step)

    def mask_prepared(self, live, grid, inputs, outputs) -> dict:
        """Round 3 after ``premask``: client u encodes ``inputs[u]`` into ``outputs[u]`` and adds its prepared
        mask vector there (the same y as ``mask``: addition in Z_{2^b}); each mask is used once."""
        def step(c, _):
            y = grid.encode(inputs[c.index], outputs[c.index])
            y += self.masks.pop(c.index)  # wraps mod 2^b
            return y

        return self._run(dict.fromkeys(live), step)

    def unmask(self, requests: dict[int, tuple[list[int], list[int], int]]) -> dict:
        """Round 4: client -> (survivors, dropped, survivor count) asked -> its shares answer."""
        return self._run(requests, lambda c, r: c.unmask(*r))
