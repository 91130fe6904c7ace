"""`secagg`: the Protocol object. Runs the four rounds in process, one Client per client and one
Server, and books every message as a Transfer with its bytes (the server's view).

Wire format (all little-endian), per sum:
  round 1  client -> server   "setup"  public_key  c_pk || s_pk (64 B)
           server -> client   "setup"  public_key  per live neighbour: index (4 B) || c_pk || s_pk
  round 2  client -> server   "share"  ciphertext  commitment to b (32 B), then per live holder one
                                                   sealed share: (sender, receiver) (8 B) || nonce (12 B)
                                                   || ChaCha20-Poly1305(index (2 B) || s share || b share) (52 B)
           server -> client   "share"  ciphertext  the sealed shares addressed to it, as sent
  round 3  client -> server   "input"  ciphertext  the masked vector y (n x b/8 bytes)
  round 4  server -> client   "reveal" parameters  the indices of the survivors and the dropped it
                                                   asks about (4 B each, after two 4-byte counts)
           client -> server   "reveal" share       per owner: kind (1 B) || owner (4 B) || index (2 B) || share (17 B)
"""
from __future__ import annotations

import struct
import time

import numpy as np
import torch

from protocols.base import SERVER, AggregationResult, Protocol, ProtocolError, Transfer, array_bytes, client
from protocols.secagg import graph as graphs
from protocols.secagg.client import Client
from protocols.secagg.quantize import BITS, MAX_FRAC_BITS, make_grid
from protocols.secagg.server import Server

ROUNDS = (1, 2, 3, 4)
FAULTS = ("tamper_share", "bad_share", "ask_both", "late")
_U32 = struct.Struct("<I")
_ANSWER = struct.Struct("<BIH")


def round_clients(name: str, value, example: str = "{3: [1, 4]}") -> dict[int, frozenset[int]]:
    """A `{round: client indices}` parameter (`dropout`, `kill_at`) checked: rounds 1-4, indices >= 0."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ProtocolError(f"{name}: expected a mapping round -> client indices, e.g. {example}, got {value!r}")
    out = {}
    for r, who in value.items():
        try:
            r = int(r)
        except (TypeError, ValueError):
            r = None
        if r not in ROUNDS:
            raise ProtocolError(f"{name}: round keys must be 1, 2, 3 or 4, got {value!r}")
        if isinstance(who, int):
            who = [who]
        if not isinstance(who, (list, tuple, set, frozenset)) or not all(
                isinstance(k, int) and not isinstance(k, bool) and k >= 0 for k in who):
            raise ProtocolError(f"{name}: round {r}: expected a list of client indices, got {who!r}")
        out[r] = frozenset(who)
    return out


def _check_dropout(dropout) -> dict[int, frozenset[int]]:
    return round_clients("dropout", dropout)


def _check_faults(faults) -> dict:
    if faults is None:
        return {}
    if not isinstance(faults, dict) or set(faults) - set(FAULTS):
        raise ProtocolError(f"faults: expected a mapping with keys among {', '.join(FAULTS)}, got {faults!r}")
    for key in ("tamper_share", "bad_share"):
        if key in faults and not (isinstance(faults[key], (list, tuple)) and len(faults[key]) == 2):
            raise ProtocolError(f"faults: {key} expects [owner, holder], got {faults[key]!r}")
    return dict(faults)


class SecAggProtocol(Protocol):
    """Pairwise-masking secure aggregation (Bonawitz et al. 2017; SecAgg+, Bell et al. 2020).

    bits:        ring width b of Z_{2^b}: 32 (default, 4 bytes per value) or 64.
    clip_range:  the public range |x| <= clip_range of every client's float input (default 4096);
                 an input outside it raises ProtocolError. Integer inputs use |x| <= (2^(b-1)-1)//K.
    frac_bits:   the grid 2^-frac_bits for floats: "auto" (default: the finest grid on which K inputs
                 in range cannot wrap the ring) or an int (refused when too fine).
    threshold:   t, the share holders needed to reconstruct a seed (default floor(2m/3) + 1, m the
                 holders per client: K for "complete", degree + 1 for "kregular"). Collusion bound:
                 the server and t - 1 clients learn nothing beyond the sum.
    graph:       "complete" (default) or "kregular" (SecAgg+); degree: k (default 2*ceil(log2 K));
                 graph_seed: the public seed of the k-regular graph's ring order.
    dropout:     {round: [client indices]} dropped at that round (1..4) in every sum (fault injection).
    dropout_rate, dropout_seed: each client also drops with this probability at a uniform round,
                 drawn per sum from a generator seeded once with dropout_seed (simulation only).
    faults:      fault injection: {"tamper_share": [u, v]} the server alters u's sealed share for v;
                 {"bad_share": [u, v]} client u sends v garbage shares (validly encrypted);
                 {"ask_both": u} the server asks for u's pairwise seed share though u survived;
                 {"late": [clients]} their masked inputs arrive after the server closed round 3.
    The sum is opened to the server (it unmasks it); reveal_to="clients" is refused.
    """

    name = "secagg"

    def __init__(self, bits: int = 32, clip_range: float = 4096.0, frac_bits: int | str = "auto",
                 threshold: int | None = None, graph: str = "complete", degree: int | None = None,
                 graph_seed: int = 0, dropout: dict | None = None, dropout_rate: float = 0.0,
                 dropout_seed: int | None = None, faults: dict | None = None):
        if bits not in BITS:
            raise ProtocolError(f"bits: expected one of {', '.join(map(str, BITS))}, got {bits!r}")
        if isinstance(clip_range, bool) or not isinstance(clip_range, (int, float)) or not 0 < clip_range < 2.0**62:
            raise ProtocolError(f"clip_range: expected a number in (0, 2^62), got {clip_range!r}")
        if frac_bits != "auto" and (isinstance(frac_bits, bool) or not isinstance(frac_bits, int)
                                    or not 0 <= frac_bits <= MAX_FRAC_BITS):
            raise ProtocolError(f"frac_bits: expected 'auto' or an int in 0..{MAX_FRAC_BITS}, got {frac_bits!r}")
        if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 1):
            raise ProtocolError(f"threshold: expected None or an int >= 1, got {threshold!r}")
        if graph not in graphs.GRAPHS:
            raise ProtocolError(f"graph: unknown graph {graph!r}; valid: {', '.join(graphs.GRAPHS)}")
        if degree is not None and (isinstance(degree, bool) or not isinstance(degree, int) or degree < 1):
            raise ProtocolError(f"degree: expected None or an int >= 1, got {degree!r}")
        if not isinstance(dropout_rate, (int, float)) or not 0 <= dropout_rate < 1:
            raise ProtocolError(f"dropout_rate: expected a number in [0, 1), got {dropout_rate!r}")
        self.bits, self.clip_range, self.frac_bits = bits, float(clip_range), frac_bits
        self.threshold, self.graph, self.degree, self.graph_seed = threshold, graph, degree, graph_seed
        self.dropout = _check_dropout(dropout)
        self.dropout_rate = float(dropout_rate)
        self._dropout_rng = np.random.default_rng(dropout_seed)
        self.faults = _check_faults(faults)
        self.last_run: dict | None = None  # auditor-only ground truth of the last sum (clients' secrets)

    def _drops(self, num_clients: int) -> dict[int, int]:
        """client -> the round it drops at (absent: it never drops)."""
        drops = {}
        for r in sorted(self.dropout, reverse=True):
            for k in self.dropout[r]:
                if k >= num_clients:
                    raise ProtocolError(
                        f"dropout: client index {k} at round {r} is out of range for {num_clients} clients")
                drops[k] = r
        if self.dropout_rate > 0:
            hit = self._dropout_rng.random(num_clients) < self.dropout_rate
            at = self._dropout_rng.integers(1, 5, num_clients)
            for k in np.flatnonzero(hit):
                drops[int(k)] = min(drops.get(int(k), 5), int(at[k]))
        return drops

    def setup(self, num_clients: int) -> tuple[list[frozenset[int]], list[tuple[int, ...]], int]:
        """The public graph, each client's share holders and the threshold for K clients."""
        nbrs = graphs.neighbours(self.graph, num_clients, self.degree, self.graph_seed)
        holders = [tuple(sorted(nbrs[u] | {u})) for u in range(num_clients)]
        m = min(len(h) for h in holders)
        t = graphs.default_threshold(m) if self.threshold is None else self.threshold
        if t > m:
            raise ProtocolError(
                f"threshold: t = {t} exceeds the {m} share holders per client ({self.graph} graph, "
                f"{num_clients} clients); valid: 1..{m}"
            )
        return nbrs, holders, t

    def _aggregate(self, values: list[torch.Tensor], integer: bool, reveal_to: str) -> AggregationResult:
        if reveal_to != "server":
            raise ProtocolError("reveal_to: secagg opens the sum to the server (it removes the masks); "
                                "valid: 'server'")
        K = len(values)
        grid = make_grid(self.bits, self.clip_range, self.frac_bits, K, integer)
        nbrs, holders, t = self.setup(K)
        drops = self._drops(K)
        faults = self.faults
        late = set(faults.get("late", ()))
        clients = [Client(u, nbrs[u], holders[u], t) for u in range(K)]
        server = Server(K, nbrs, holders, t)
        transfers: list[Transfer] = []
        seconds = {r: {"clients": 0.0, "server": 0.0, "client_max": 0.0} for r in ROUNDS}

        def live(r: int, pool) -> list[int]:
            return [u for u in sorted(pool) if drops.get(u, 5) > r]

        def timed(r: int, party: str, fn, *args):
            t0 = time.perf_counter()
            out = fn(*args)
            dt = time.perf_counter() - t0
            seconds[r]["server" if party == SERVER else "clients"] += dt
            if party != SERVER:
                seconds[r]["client_max"] = max(seconds[r]["client_max"], dt)
            return out

        # Round 1: advertise keys.
        keys = {}
        for u in live(1, range(K)):
            keys[u] = timed(1, "c", clients[u].advertise_keys)
            transfers.append(Transfer(client(u), SERVER, "setup", "public_key", len(keys[u]), (keys[u],)))
        timed(1, SERVER, server.check_round, 1, set(keys))
        routed = timed(1, SERVER, server.route_keys, keys)
        for v, got in routed.items():
            blobs = tuple(_U32.pack(w) + blob for w, blob in got.items())
            transfers.append(Transfer(SERVER, client(v), "setup", "public_key", sum(map(len, blobs)), blobs))

        # Round 2: share keys.
        sent = {}
        bad = faults.get("bad_share")
        for u in live(2, keys):
            tamper = {bad[1]: "bad_share"} if bad and bad[0] == u else None
            sent[u] = timed(2, "c", clients[u].share_keys, routed[u], tamper)
            blobs = (sent[u][0],) + tuple(sent[u][1][v] for v in sorted(sent[u][1]))
            transfers.append(Transfer(client(u), SERVER, "share", "ciphertext", sum(map(len, blobs)), blobs))
        timed(2, SERVER, server.check_round, 2, set(sent))
        tamper_share = tuple(faults["tamper_share"]) if "tamper_share" in faults else None
        inbox = timed(2, SERVER, server.route_shares, sent, tamper_share)
        for v in sorted(sent):  # forwarded to every client that shared (U2)
            blobs = tuple(inbox[v][u] for u in sorted(inbox[v]))
            if blobs:
                transfers.append(Transfer(SERVER, client(v), "share", "ciphertext", sum(map(len, blobs)), blobs))

        # Round 3: masked input.
        masked = {}
        for u in live(3, sent):
            def mask(u=u):
                return clients[u].masked_input(inbox[u], grid.encode(u, values[u]))
            y = timed(3, "c", mask)
            wire = array_bytes(y)
            transfers.append(Transfer(client(u), SERVER, "input", "ciphertext", len(wire), (wire,)))
            if u not in late:
                masked[u] = y
        timed(3, SERVER, server.check_round, 3, set(masked))
        total = timed(3, SERVER, server.add, masked)

        # Round 4: unmasking.
        requests = timed(4, SERVER, server.requests, faults.get("ask_both"))
        answers = {}
        for v, (b_wanted, s_wanted) in requests.items():
            asked = (len(b_wanted), len(s_wanted), *b_wanted, *s_wanted)
            blob = struct.pack(f"<{len(asked)}I", *asked)
            transfers.append(Transfer(SERVER, client(v), "reveal", "parameters", len(blob), (blob,)))
            if drops.get(v, 5) <= 4:
                continue
            answers[v] = timed(4, "c", clients[v].unmask, b_wanted, s_wanted, len(masked))
            blobs = tuple(_ANSWER.pack(kind, u, x) + share for kind, which in ((0, "b"), (1, "s"))
                          for u, (x, share) in sorted(answers[v][which].items()))
            transfers.append(Transfer(client(v), SERVER, "reveal", "share", sum(map(len, blobs)), blobs))
        timed(4, SERVER, server.check_round, 4, set(answers))
        total = timed(4, SERVER, server.unmask, total, answers)
        t0 = time.perf_counter()
        revealed = grid.decode(total)
        seconds[4]["server"] += time.perf_counter() - t0

        survivors = sorted(masked)
        self.last_run = {"clients": clients, "server": server, "grid": grid, "survivors": survivors}
        round_names = {1: "advertise_keys", 2: "share_keys", 3: "masked_input", 4: "unmasking"}
        return AggregationResult(
            total=revealed,
            transfers=transfers,
            num_clients=K,
            opened_by=(SERVER,),
            phases={"protect": sum(seconds[r]["clients"] for r in (1, 2, 3)),
                    "aggregate": sum(seconds[r]["server"] for r in (1, 2, 3)),
                    "reveal": seconds[4]["clients"] + seconds[4]["server"]},
            error_bound=0.0 if integer else len(survivors) * 2.0 ** -(grid.frac_bits + 1),
            details={"survivors": survivors, "dropped": {client(k): r for k, r in sorted(drops.items())},
                     "faulty_shares": server.faulty,
                     "late": sorted(late), "threshold": t, "graph": self.graph,
                     "degree": len(nbrs[0]) if K > 1 else 0, "bits": grid.bits, "frac_bits": grid.frac_bits,
                     "clip_range": grid.limit,
                     "round_s": {round_names[r]: dict(seconds[r]) for r in ROUNDS},
                     # A deployment runs the clients in parallel: per round the slowest client, then the server.
                     "critical_path_s": sum(seconds[r]["client_max"] + seconds[r]["server"] for r in ROUNDS)},
        )
