"""`secagg`: the Protocol object. Runs the four rounds in process, one Client per client and one
Server, and books every message as a Transfer with its bytes (the server's view).

The clients' side runs in this process (``client.ClientGroup``) or, with ``workers`` > 1, in worker
processes (``pool``, ``worker``); the server's side always runs here.

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
from protocols.secagg.client import ClientGroup, KeyRing
from protocols.secagg.pool import PoolClients, Preparation, WorkerPool, check_workers
from protocols.secagg.quantize import BITS, MAX_FRAC_BITS, make_grid
from protocols.secagg.server import Server

ROUNDS = (1, 2, 3, 4)
FAULTS = ("tamper_share", "replay_share", "bad_share", "ask_both", "late")
KEYS = ("per-sum", "session")
# With offline=True the workers prepare the next sum while the caller trains: they run this much nicer
# than the caller, so that on a machine with fewer free cores than busy processes the training gets the
# CPU first (FedAvg on Cora, 2 cores: 1.43x plain at the median of 5 invocations without, 1.39x with;
# docs/secure-aggregation.md, "The workers' priority").
# The sum's own requests run while the caller waits for them, so they lose nothing to it.
OFFLINE_NICE = 10
_U32 = struct.Struct("<I")
_ANSWER = struct.Struct("<BIH")


def _is_index(k) -> bool:
    return isinstance(k, int) and not isinstance(k, bool) and k >= 0


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
        if not isinstance(who, (list, tuple, set, frozenset)) or not all(map(_is_index, who)):
            raise ProtocolError(f"{name}: round {r}: expected a list of client indices, got {who!r}")
        out[r] = frozenset(who)
    return out


def _check_dropout(dropout) -> dict[int, frozenset[int]]:
    return round_clients("dropout", dropout)


def _check_faults(faults) -> dict:
    """The shape of every fault (client indices are checked against K, and share holders against the graph,
    when a sum runs: ``_check_fault_clients``)."""
    if faults is None:
        return {}
    if not isinstance(faults, dict) or set(faults) - set(FAULTS):
        raise ProtocolError(f"faults: expected a mapping with keys among {', '.join(FAULTS)}, got {faults!r}")
    for key in ("tamper_share", "replay_share", "bad_share"):
        pair = faults.get(key)
        if key in faults and not (isinstance(pair, (list, tuple)) and len(pair) == 2 and _is_index(pair[0])
                                  and (_is_index(pair[1]) or key == "replay_share" and pair[1] == "all")
                                  and pair[0] != pair[1]):
            holder = 'a client index or "all"' if key == "replay_share" else "a client index"
            raise ProtocolError(f"faults: {key} expects [owner, holder], two client indices (holder: {holder}, "
                                f"not the owner), got {pair!r}")
    if "late" in faults and not (isinstance(faults["late"], (list, tuple)) and all(map(_is_index, faults["late"]))):
        raise ProtocolError(f"faults: late expects a list of client indices, got {faults['late']!r}")
    if "ask_both" in faults and not _is_index(faults["ask_both"]):
        raise ProtocolError(f"faults: ask_both expects one client index, got {faults['ask_both']!r}")
    return dict(faults)


def _check_fault_clients(faults: dict, holders: list[tuple[int, ...]]) -> None:
    """Every client a fault names exists, and a share fault's holder holds the owner's shares (else the
    fault could not happen: it is refused rather than silently skipped)."""
    K = len(holders)
    named = [(key, k) for key in ("tamper_share", "replay_share", "bad_share") if key in faults
             for k in faults[key] if k != "all"]
    named += [("late", k) for k in faults.get("late", ())] + ([("ask_both", faults["ask_both"])] if "ask_both" in faults else [])
    for key, k in named:
        if k >= K:
            raise ProtocolError(f"faults: {key}: client index {k} is out of range for {K} clients; valid: 0..{K - 1}")
    for key in ("tamper_share", "replay_share", "bad_share"):
        if key in faults and faults[key][1] != "all" and faults[key][1] not in holders[faults[key][0]]:
            owner, holder = faults[key]
            raise ProtocolError(f"faults: {key}: client {holder} holds no share of client {owner} (its holders: "
                                f"{', '.join(map(str, holders[owner]))})")


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
                 drawn per sum from a generator seeded once with dropout_seed (simulation only; None:
                 OS entropy; a run passes its own seed unless given one, privfgl.experiment).
    faults:      fault injection: {"tamper_share": [u, v]} the server alters u's sealed share for v;
                 {"replay_share": [u, v]} the server forwards to v, instead of u's sealed share for v, the
                 one u sealed for v in the previous sum of this protocol object (from the second sum on;
                 v = "all": to every holder of u's shares);
                 {"bad_share": [u, v]} client u sends v garbage shares (validly encrypted);
                 {"ask_both": u} the server asks for u's pairwise seed share though u survived;
                 {"late": [clients]} their masked inputs arrive after the server closed round 3.
    workers:     processes that run the clients' side of the rounds (default 1: this process). With
                 workers > 1 (``pool``) that many worker processes, started with the protocol (``start_workers``)
                 and kept until ``close()``, each act for a contiguous block of the clients (their key
                 pairs, shares, quantisation and masking), in parallel; the server stays in this process.
                 The messages, their bytes and the revealed sum are those of workers=1 (the sum is exact
                 in the ring); the clients' secrets stay in the workers, so ``last_run`` is None. A sum
                 that comes while the workers are still starting (~0.3 s) runs in this process, as with
                 workers=1 (``details["workers"]`` says which). ``phases`` and ``round_s`` add up the
                 clients' own seconds, measured in the workers.
    offline:     with workers > 1 (default False: no effect, today's rounds): after each sum the workers
                 prepare the NEXT sum of the same shape in the background (``pool.Preparation``: fresh key
                 pairs, rounds 1-2 and each client's mask vector, none of which needs the inputs), while the
                 caller goes on (trains). A sum that finds a complete preparation of its shape (K, n, ring,
                 graph, holders, threshold) and has no dropout or fault injection at rounds 1-2 routes the
                 prepared round-1/2 messages through its Server (the same Transfers as without it), then only
                 adds each client's encoded input to its prepared mask, and runs the server's part of round 3
                 and round 4; any other sum falls back to the four rounds and discards the preparation. Keys
                 stay fresh per sum: a preparation serves one sum at most. ``details["offline"]``: "prepared",
                 "fallback" (None when offline is off); ``details["offline_s"]``: the clients' seconds it took
                 (its rounds 1-2 seconds are also in ``round_s``). No preparation is made while ``dropout``
                 names rounds 1-2 or ``faults`` has bad_share / tamper_share / replay_share (every sum would fall back).
                 The workers then run at niceness +10 (``OFFLINE_NICE``): the preparation yields the CPU to the
                 caller's training.
    keys:        "per-sum" (default: Bonawitz et al.'s fresh c key pair per client per sum) or "session":
                 each client keeps its c key pair (share encryption) for as long as the process that acts
                 for it serves sums (``client.KeyRing``: this object's life until ``close()``, a worker's, a
                 party process's), so a sum after the first makes no c key pair and no c agreement. The s
                 key pairs and every seed stay fresh per sum; each sealed share is bound to its sum's s
                 public keys, so no earlier share can be replayed. Trade-off: no forward secrecy for the
                 shares (a client compromised later exposes the shares it received in the whole session).
    The sum is opened to the server (it unmasks it); reveal_to="clients" is refused.
    """

    name = "secagg"

    def __init__(self, bits: int = 32, clip_range: float = 4096.0, frac_bits: int | str = "auto",
                 threshold: int | None = None, graph: str = "complete", degree: int | None = None,
                 graph_seed: int = 0, dropout: dict | None = None, dropout_rate: float = 0.0,
                 dropout_seed: int | None = None, faults: dict | None = None, workers: int = 1,
                 offline: bool = False, keys: str = "per-sum"):
        self.workers = check_workers(workers)
        if keys not in KEYS:
            raise ProtocolError(f"keys: expected one of {', '.join(KEYS)} (the lifetime of the share-encryption "
                                f"key pairs), got {keys!r}")
        self.keys = keys
        self._keyring = KeyRing() if keys == "session" else None
        self._previous_sealed: dict[tuple[int, int], bytes] = {}  # (owner, holder) -> blob: replay_share only
        if not isinstance(offline, bool):
            raise ProtocolError(f"offline: expected True or False, got {offline!r}")
        self.offline = offline
        self._prep: Preparation | None = None  # the next sum's, being prepared (offline=True)
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
        self._pool: WorkerPool | None = None
        self._replaced = False  # the pool replaces one that failed
        self._buffer: np.ndarray | None = None
        self.start_workers(wait=False)  # the workers, if any, start while the caller sets up

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
        return self._sum(len(values), int(values[0].numel()), integer, reveal_to, values=values)

    def aggregate_remote(self, parties, num_clients: int, n: int, integer: bool,
                         reveal_to: str = "server") -> AggregationResult:
        """The sum of inputs this process never holds: ``parties(members, grid)`` returns the clients' side
        (``advertise``, ``share``, ``mask``, ``unmask`` as ``ClientGroup``'s, client -> (message, seconds)),
        run where the clients are (Ray actors: privfgl.federation.ray). A client that does not answer a
        round has dropped there. Returns the flat total (n values; int64 if ``integer``)."""
        return self._sum(num_clients, n, integer, reveal_to, remote=parties)

    def _sum(self, K: int, n: int, integer: bool, reveal_to: str, values=None, remote=None) -> AggregationResult:
        if reveal_to != "server":
            raise ProtocolError("reveal_to: secagg opens the sum to the server (it removes the masks); "
                                "valid: 'server'")
        prep = self._take_prep()  # before anything uses the pool (its thread has it until then)
        grid = make_grid(self.bits, self.clip_range, self.frac_bits, K, integer)
        nbrs, holders, t = self.setup(K)
        drops = self._drops(K)
        faults = self.faults
        _check_fault_clients(faults, holders)
        late = set(faults.get("late", ()))
        members = [(u, nbrs[u], holders[u], t) for u in range(K)]
        pool = self._ready_pool() if remote is None else None
        shape = (K, n, np.dtype(grid.dtype).str, tuple(members))
        prepared = (prep is not None and pool is not None and prep.pool is pool and prep.key == shape
                    and not any(r <= 2 for r in drops.values()) and not faults.get("bad_share")
                    and "tamper_share" not in faults and "replay_share" not in faults)
        if remote is not None:  # the clients' side where the clients are; their secrets never come here
            group = None
            parties = remote(members, grid)
            total_out = self._scratch(1, n, grid.dtype)[0]
        elif pool is None:
            group = ClientGroup(members, self._keyring)
            parties = _LocalClients(group, grid, values, self._scratch(K + 1, n, grid.dtype))
            total_out = parties.outputs[K]
        else:
            group = None
            parties = PoolClients(pool, members, grid, values, [u for u in range(K) if drops.get(u, 5) > 3],
                                  self.keys == "session")
            total_out = self._scratch(1, n, grid.dtype)[0]
        server = Server(K, nbrs, holders, t)
        transfers: list[Transfer] = []
        seconds = {r: {"clients": 0.0, "server": 0.0, "client_max": 0.0} for r in ROUNDS}

        def live(r: int, pool) -> list[int]:
            return [u for u in sorted(pool) if drops.get(u, 5) > r]

        def timed(r: int, fn, *args):
            """A server step of round r."""
            t0 = time.perf_counter()
            out = fn(*args)
            seconds[r]["server"] += time.perf_counter() - t0
            return out

        def clients_did(r: int, done: dict) -> dict:
            """The clients' messages of round r (client -> (message, seconds)) -> client -> message."""
            for _, dt in done.values():
                seconds[r]["clients"] += dt
                seconds[r]["client_max"] = max(seconds[r]["client_max"], dt)
            return {u: message for u, (message, _) in done.items()}

        # Round 1: advertise keys (prepared: the messages of the preparation, routed and booked as today).
        keys = clients_did(1, prep.keys if prepared else parties.advertise(live(1, range(K))))
        for u in sorted(keys):
            transfers.append(Transfer(client(u), SERVER, "setup", "public_key", len(keys[u]), (keys[u],)))
        timed(1, server.check_round, 1, set(keys))
        routed = timed(1, server.route_keys, keys)
        for v, got in routed.items():
            blobs = tuple(_U32.pack(w) + blob for w, blob in got.items())
            transfers.append(Transfer(SERVER, client(v), "setup", "public_key", sum(map(len, blobs)), blobs))

        # Round 2: share keys.
        bad = faults.get("bad_share")
        sent = clients_did(2, prep.sent if prepared else
                           parties.share({u: (routed[u], {bad[1]: "bad_share"} if bad and bad[0] == u else None)
                                          for u in live(2, keys)}))
        for u in sorted(sent):
            blobs = (sent[u][0],) + tuple(sent[u][1][v] for v in sorted(sent[u][1]))
            transfers.append(Transfer(client(u), SERVER, "share", "ciphertext", sum(map(len, blobs)), blobs))
        timed(2, server.check_round, 2, set(sent))
        tamper_share = tuple(faults["tamper_share"]) if "tamper_share" in faults else None
        inbox = timed(2, server.route_shares, sent, tamper_share)
        if "replay_share" in faults:  # the server forwards the previous sum's sealed share instead
            owner, target = faults["replay_share"]
            for holder in (inbox if target == "all" else [target]):
                old = self._previous_sealed.get((owner, holder))
                if old is not None and owner in inbox.get(holder, {}):
                    inbox[holder][owner] = old
            self._previous_sealed = {(u, v): blob for u, (_, sealed) in sent.items() for v, blob in sealed.items()}
        for v in sorted(sent):  # forwarded to every client that shared (U2)
            blobs = tuple(inbox[v][u] for u in sorted(inbox[v]))
            if blobs:
                transfers.append(Transfer(SERVER, client(v), "share", "ciphertext", sum(map(len, blobs)), blobs))

        # Round 3: masked input.
        if prepared:  # inbox is what the preparation routed (the same keys and shares): the masks match it
            ys = clients_did(3, parties.mask_prepared(live(3, sent), prep.workers))
        else:
            ys = clients_did(3, parties.mask({u: inbox[u] for u in live(3, sent)}))
        masked = {}
        for u in sorted(ys):  # y's little-endian ring elements (copied only if the caller keeps payloads)
            wire = (array_bytes(ys[u]),) if self.keep_payloads else ()
            transfers.append(Transfer(client(u), SERVER, "input", "ciphertext", ys[u].nbytes, wire))
            if u not in late:
                masked[u] = ys[u]
        timed(3, server.check_round, 3, set(masked))
        total = timed(3, server.add, masked, total_out)

        # Round 4: unmasking.
        requests = timed(4, server.requests, faults.get("ask_both"))
        answering = [v for v in requests if drops.get(v, 5) > 4]
        answers = clients_did(4, parties.unmask({v: (*requests[v], len(masked)) for v in answering}))
        for v, (b_wanted, s_wanted) in requests.items():
            asked = (len(b_wanted), len(s_wanted), *b_wanted, *s_wanted)
            blob = struct.pack(f"<{len(asked)}I", *asked)
            transfers.append(Transfer(SERVER, client(v), "reveal", "parameters", len(blob), (blob,)))
            if v in answers:
                blobs = tuple(_ANSWER.pack(kind, u, x) + share for kind, which in ((0, "b"), (1, "s"))
                              for u, (x, share) in sorted(answers[v][which].items()))
                transfers.append(Transfer(client(v), SERVER, "reveal", "share", sum(map(len, blobs)), blobs))
        timed(4, server.check_round, 4, set(answers))
        total = timed(4, server.unmask, total, answers)
        revealed = timed(4, grid.decode, total)

        survivors = sorted(masked)
        # Auditor-only ground truth; with workers the clients' secrets stay in the workers' processes.
        self.last_run = None if group is None else {"clients": [group.clients[u] for u in range(K)], "server": server,
                                                    "grid": grid, "survivors": survivors}
        round_names = {1: "advertise_keys", 2: "share_keys", 3: "masked_input", 4: "unmasking"}
        if self.offline and pool is not None and not (self.dropout.keys() & {1, 2}) \
                and not (self.faults.keys() & {"bad_share", "tamper_share", "replay_share"}):
            self._prep = Preparation(pool, shape, members, n, grid.dtype, self.keys == "session")  # the next sum's, from now on
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
                     "clip_range": grid.limit, "workers": (1 if remote is None else "remote") if pool is None else pool.size, "keys": self.keys,
                     "offline": ("prepared" if prepared else "fallback") if self.offline else None,
                     "offline_s": prep.client_s if prepared else 0.0,
                     "round_s": {round_names[r]: dict(seconds[r]) for r in ROUNDS},
                     # A deployment runs the clients in parallel: per round the slowest client, then the server.
                     "critical_path_s": sum(seconds[r]["client_max"] + seconds[r]["server"] for r in ROUNDS)},
        )

    def start_workers(self, wait: bool = True) -> None:
        """Start the worker processes (``workers`` > 1) if they are not running; ``wait``: until they are
        ready, so that the next sum runs in them (a sum that finds them starting runs in this process)."""
        if self.workers > 1:
            self._wait_prep()
            if self._pool is not None and (self._pool.broken or (self._pool.started and not self._pool.alive)):
                self._pool.close()  # a worker died or a sum was interrupted: start afresh
                self._pool = None
                self._replaced = True
            if self._pool is None:
                self._pool = WorkerPool(self.workers, nice=OFFLINE_NICE if self.offline else 0)
            if wait:
                self._pool.ready()

    def _ready_pool(self) -> WorkerPool | None:
        """The pool to run this sum's clients, or None: workers=1, or the workers are still starting. A pool
        that replaces a failed one is waited for: a worker that cannot start raises, every time."""
        if self.workers == 1:
            return None
        self.start_workers(wait=False)
        return self._pool if self._pool.ready(wait=self._replaced) else None

    def _scratch(self, rows: int, n: int, dtype) -> np.ndarray:
        """A (rows, n) array of ``dtype`` in this protocol's reused buffer (grown, never shrunk; freed by
        ``close``): the clients' ring vectors and the server's sum, without fresh pages every sum."""
        nbytes = rows * n * np.dtype(dtype).itemsize
        if self._buffer is None or self._buffer.nbytes < nbytes:
            self._buffer = np.empty(nbytes, dtype=np.uint8)
        return self._buffer[:nbytes].view(dtype).reshape(rows, n)

    def _wait_prep(self) -> None:
        """Wait for the preparation's thread (it has the pool until it ends); it stays there to be taken."""
        if self._prep is not None:
            self._prep.wait()

    def _take_prep(self) -> Preparation | None:
        """The preparation for this sum, if one is complete (it is handed out once: a session serves one sum)."""
        prep, self._prep = self._prep, None
        return prep if prep is not None and prep.wait() else None

    def close(self) -> None:
        """Stop the worker processes, if any (a later sum starts them again), and free the reused buffer.
        A preparation in progress is cancelled after its request in flight, then dropped."""
        if self._prep is not None:
            self._prep.cancel()
            self._prep.wait(timeout=30)
            self._prep = None
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        self._replaced = False
        self._buffer = None
        self._keyring = KeyRing() if self.keys == "session" else None  # a new session: new c key pairs


class _LocalClients:
    """Every client in this process: ``ClientGroup``'s rounds, with the inputs as given and the ring
    vectors in the protocol's reused buffer (row u: client u's y; row K: the server's sum)."""

    def __init__(self, group: ClientGroup, grid, values, outputs: np.ndarray):
        self.group, self.grid, self.outputs = group, grid, outputs
        self.inputs = values
        self.advertise, self.share, self.unmask = group.advertise, group.share, group.unmask

    def mask(self, inboxes):
        return self.group.mask(inboxes, self.grid, self.inputs, self.outputs)
