"""`secagg-collusion`: the server and a coalition of clients try to unmask one client's input.

Under `secagg` the server's view holds, per sum: every client's advertised X25519 public keys, the
sealed Shamir shares it forwarded, each client's masked vector y_u = q_u + PRG(b_u) + sum ±PRG(s_uv),
and, in round 4, the survivors' shares of their self-mask seeds b (so the server rebuilds every
survivor's b, by design). What protects y_u is then u's pairwise-key seed: its Shamir shares sit with
u's share holders, encrypted for them. A coalition of `colluders` of them hands the server their
decrypted shares (the declared aux). With t or more shares the server rebuilds the seed (checked
against u's advertised s public key), recomputes u's pairwise masks with its neighbours' public keys,
and recovers q_u exactly on the grid; with t - 1 or fewer the combination is independent of the seed
(Shamir) and the public-key check fails: no input.

Attacker input: only the server's view of the last sum of `message` (the keys, the masked vectors, the
round-4 shares) and the aux: the colluders' decrypted shares of the target's seed, the public graph
(the target's neighbours), the threshold and the public grid (ring width, fractional bits). The
protocol keeps its clients' state for the last sum only (`SecAggProtocol.last_run`), so the attack
applies to the last sum of the run (the default `round=-1`).
Scores: whether the pairwise-key seed was rebuilt, and the max abs error and cosine of the recovered
upload against the real one, recovered when within half a grid step; baseline: the revealed sum / K
as the target's upload.
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass

import numpy as np

from attacks.base import Attack, Knowledge, NoInput, client_index
from attacks.view import AdversaryView
from protocols.secagg import crypto, shamir
from protocols.secagg.quantize import Grid

_ANSWER = struct.Struct("<BIH")  # round-4 share: kind (0 = b, 1 = s), owner, Shamir index


@dataclass(frozen=True)
class CollusionAux:
    target: str
    message: str
    round: int
    colluders: tuple[int, ...]
    s_shares: tuple[tuple[int, bytes], ...]  # the colluders' decrypted shares of the target's pairwise-key seed
    neighbours: tuple[int, ...]
    threshold: int
    grid: Grid


@dataclass(frozen=True)
class Unmasked:
    seed_recovered: bool
    upload: np.ndarray | None  # the recovered flat upload (float64), None when the seed was not rebuilt


def _last_round(view: AdversaryView, message: str) -> int:
    rounds = [m.round for m in view.messages if m.name == message and m.kind == "ciphertext"]
    if not rounds:
        raise NoInput(f"no masked input of {message!r} in the {view.party}'s view (not a secagg run?)")
    return max(rounds)


class SecAggCollusion(Attack):
    """`secagg-collusion` on every client of `message` (default model_update); `colluders`: how many of
    the target's share holders collude ("t-1" (default) or "t" or an int)."""

    name = "secagg-collusion"

    def __init__(self, message: str = "model_update", colluders: int | str = "t-1", round: int = -1):
        if colluders not in ("t-1", "t") and (isinstance(colluders, bool) or not isinstance(colluders, int)
                                              or colluders < 0):
            raise ValueError(f"colluders: expected 't-1', 't' or an int >= 0, got {colluders!r}")
        self.message, self.colluders, self.round = message, colluders, round

    def targets(self, view: AdversaryView, knowledge: Knowledge, num_clients: int) -> list[str]:
        r = _last_round(view, self.message) if self.round < 0 else self.round
        senders = {m.sender for m in view.find(self.message, r) if m.kind == "ciphertext"}
        return [f"client{k}" for k in range(num_clients) if f"client{k}" in senders] or ["client0"]

    def declare_aux(self, setup, knowledge: Knowledge, target: str) -> CollusionAux:
        protocol = setup.federation.protocol
        run = getattr(protocol, "last_run", None)
        if getattr(protocol, "name", "") != "secagg":
            raise NoInput("the run's protocol is not secagg")
        if run is None:
            raise NoInput("secagg ran the clients in worker or party processes (workers > 1 or mode=multiprocess), "
                          "where their shares stay; audit collusion on secagg in this process (workers=1)")
        u = client_index(target)
        server = run["server"]
        t = server.threshold
        wanted = {"t-1": t - 1, "t": t}.get(self.colluders, self.colluders)
        holders = [v for v in server.holders[u] if v != u and u in run["clients"][v].shares_held]
        coalition = tuple(holders[:wanted])
        shares = tuple((run["clients"][v].shares_held[u][0], run["clients"][v].shares_held[u][1]) for v in coalition)
        return CollusionAux(target, self.message, self.round, coalition, shares, tuple(sorted(server.neighbours[u])),
                            t, run["grid"])

    def attack(self, view: AdversaryView, aux: CollusionAux) -> Unmasked:
        u = client_index(aux.target)
        name = aux.message
        r = _last_round(view, name) if aux.round < 0 else aux.round
        masked = [m for m in view.find(name, r, aux.target) if m.kind == "ciphertext" and m.blobs]
        keys = {m.sender: m.blobs[0] for m in view.find(name + ":setup", r) if m.receiver == view.party and m.blobs}
        if not masked or aux.target not in keys:
            raise NoInput(f"no masked input or keys of {aux.target} for {name!r} in round {r} in the view")
        if not aux.s_shares:
            return Unmasked(False, None)
        seed = shamir.combine(list(aux.s_shares), len(aux.s_shares))
        _, s_public = crypto.keypair_from_seed(seed)
        if s_public != keys[aux.target][crypto.PUBLIC_KEY_BYTES:]:
            return Unmasked(False, None)  # fewer than t shares: the combination is not the seed
        # The target's self-mask seed: the survivors' shares the server received in round 4 (by design).
        b_shares = []
        for m in view.find(name + ":reveal", r):
            if m.receiver != view.party or m.kind != "share" or not m.blobs:
                continue
            for blob in m.blobs:
                kind, owner, x = _ANSWER.unpack(blob[:_ANSWER.size])
                if kind == 0 and owner == u:
                    b_shares.append((x, blob[_ANSWER.size:]))
        if len(b_shares) < aux.threshold:
            raise NoInput(f"the server did not receive t shares of {aux.target}'s self-mask seed (it dropped)")
        shared_in_round_2 = {m.sender for m in view.find(name + ":share", r) if m.receiver == view.party}
        peers = {v: keys[f"client{v}"][crypto.PUBLIC_KEY_BYTES:] for v in aux.neighbours
                 if f"client{v}" in shared_in_round_2 and f"client{v}" in keys}
        upload = unmask_input(masked[0].blobs[0], u, seed, peers, shamir.combine(b_shares, aux.threshold), aux.grid)
        return Unmasked(True, upload.astype(np.float64))

    def truth(self, setup, target: str) -> np.ndarray | None:
        log = setup.federation.audit_log
        keys = [k for k in log if k[1] == self.message]
        if not keys:
            return None
        r = max(k[0] for k in keys) if self.round < 0 else self.round
        uploads = log.get((r, self.message), {}).get("uploads")
        return None if uploads is None else [x.double().numpy() for x in uploads]

    def score(self, rec: Unmasked, truth, aux: CollusionAux) -> tuple[dict, dict]:
        metrics = {"seed_recovered": rec.seed_recovered, "colluders": len(aux.colluders), "threshold": aux.threshold}
        baseline: dict = {"seed_recovered": False}
        if truth is None:
            return metrics, baseline
        real = truth[client_index(aux.target)]
        guess = np.sum(truth, axis=0) / len(truth)
        half_step = 0.0 if aux.grid.integer else 2.0 ** -(aux.grid.frac_bits + 1)
        base_err = float(np.abs(guess - real).max())
        baseline.update(max_abs_error=base_err, cosine=_cosine(guess, real), recovered=base_err <= half_step,
                        kind="the revealed sum / K as the target's upload")
        if rec.upload is None or rec.upload.size != real.size:
            metrics.update(recovered=False)
            return metrics, baseline
        err = float(np.abs(rec.upload - real).max())
        metrics.update(max_abs_error=err, cosine=_cosine(rec.upload, real), recovered=err <= half_step)
        return metrics, baseline


def unmask_input(masked: bytes, u: int, s_seed: bytes, peers: dict[int, bytes], b_seed: bytes, grid: Grid) -> np.ndarray:
    """Client u's upload from its masked vector y (the wire bytes), its pairwise-key seed, the s public keys
    of the neighbours it masked with (v -> 32 bytes) and its self-mask seed: y - PRG(b) -+ PRG(s_uv), read
    back from ``grid``. Exact on the grid when the seeds are u's seeds of the sum y belongs to."""
    s_private, _ = crypto.keypair_from_seed(s_seed)
    y = np.frombuffer(masked, dtype=np.dtype(grid.dtype).newbyteorder("<")).astype(grid.dtype)
    y -= crypto.expand(crypto.self_mask_key(b_seed), y.size, y.dtype)
    for v, v_public in peers.items():
        mask = crypto.expand(crypto.pair_key(crypto.agree(s_private, v_public), b"pair-mask", u, v), y.size, y.dtype)
        if u < v:
            y -= mask
        else:
            y += mask
    return grid.decode(y).numpy()


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    with np.errstate(over="ignore", invalid="ignore"):
        value = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
    return value if math.isfinite(value) else 0.0

