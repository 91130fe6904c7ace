"""`secagg` multi-process: every client and the server is its own OS process; the four rounds'
messages cross torch.distributed (gloo) point-to-point, client <-> server only (the star of
Bonawitz et al.: clients never talk to each other directly, the sealed shares go through the server).

Rank 0 is the server (it hosts the env:// rendezvous store, so MASTER_ADDR is the server's address),
ranks 1..K the clients 0..K-1. Every party joins with ``init_method="env://"`` (MASTER_ADDR,
MASTER_PORT, RANK, WORLD_SIZE), so the same party code runs on one machine (the session sets those
variables for the processes it spawns) or on several (``python -m protocols.secagg.multiprocess``,
one process per machine: docs/secure-aggregation.md).

The parties run the in-process round functions unchanged (``Client.advertise_keys``, ``share_keys``,
``masked_input``, ``unmask``; ``Server.check_round``, ``route_keys``, ``route_shares``, ``add``,
``requests``, ``unmask``); only the transport differs. The payload bytes on the wire are the ones
the in-process mode books, so the Transfers (built by the server, which sees every message) have the
same bytes, and the revealed sum is on the same grid. Each message is a 16-byte frame header
(kind, length: framing, like TCP's, not booked) then the payload: kind DATA, DROP (simulated
dropout: the client sends nothing more in this sum), STOP (the server aborts the sum) or ERROR
(a client refuses or fails; the payload is its message).

Dropout by process death: a client announces each message in the rendezvous store before it sends
it over gloo; the server waits up to ``timeout_s`` per round for the announcements and receives only
the announced messages (a gloo receive that times out closes all of a process's connections, so the
server never waits on gloo for a client that may be gone). A client whose message is not announced
within ``timeout_s`` (dead: ``kill_at`` makes client processes SIGKILL themselves at a round, or kill
one from outside; or hung) or whose connection fails (it died while sending) counts as dropped at
that round. The server then recovers the survivors' sum while t remain, else ProtocolError naming
the missing clients, exactly as in process. A session that lost a party restarts all processes
before its next sum. The server's death raises PartyFailure.

``SecAggSession`` starts the K + 1 processes once and serves every sum of a run until ``close()``;
it restarts them when K changes. Inputs reach the client processes as .npy files (a stopped party
can never block this process on a full pipe); results come back over pipes.
Processes are started with multiprocessing's "spawn": guard a script's entry point with
``if __name__ == "__main__":``.
"""
from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing as mp
import os
import signal
import struct
import sys
import tempfile
import time
import traceback
from multiprocessing.connection import wait

import numpy as np
import torch

from protocols.party_processes import PartyProcesses, free_port
from protocols.base import SERVER, AggregationResult, PartyFailure, ProtocolError, Transfer, client
from protocols.secagg.client import Client, KeyRing
from protocols.secagg.protocol import _ANSWER, _U32, ROUNDS, SecAggProtocol, round_clients
from protocols.secagg.quantize import make_grid
from protocols.secagg.server import Server
from protocols.secagg import crypto, shamir

DATA, DROP, STOP, ERROR = 0, 1, 2, 3
_SHM = "/dev/shm" if os.path.isdir("/dev/shm") else None
_KEY_BLOB = 4 + 2 * crypto.PUBLIC_KEY_BYTES  # index || c_pk || s_pk as the server forwards it
# header, nonce, ciphertext (index, two shares), tag
_SEALED = crypto.HEADER.size + crypto.NONCE_BYTES + 2 + 2 * shamir.SHARE_BYTES + 16
_COMMITMENT = 32
_ROUND_NAMES = {1: "advertise_keys", 2: "share_keys", 3: "masked_input", 4: "unmasking"}


class PartyGone(Exception):
    """A peer's gloo connection failed (it died) or its message was not announced within the timeout."""


class GroupBroken(Exception):
    """A gloo receive timed out: gloo then closes every connection of this process (it cannot go on)."""


SERVER_RANK = 0  # the server hosts the env:// rendezvous store (MASTER_ADDR is its address)


def client_rank(u: int) -> int:
    return u + 1


# --- transport -----------------------------------------------------------------------------------


class _Channel:
    """This process's side of the group: framed messages over gloo point-to-point, and round
    announcements in the rendezvous store. A client announces each message (a key in the store)
    before it sends it; the server polls the announcements until its timeout and receives only the
    announced messages, so a dead or hung client never blocks a gloo receive (a gloo receive that
    times out closes all of the process's connections)."""

    def __init__(self, timeout_s: float):
        from torch.distributed import distributed_c10d  # noqa: PLC0415

        self.timeout_s = float(timeout_s)
        self.store = distributed_c10d._get_default_store()
        self.sum_id = -1

    def next_sum(self) -> None:
        self.sum_id += 1  # every party counts the sums of the session in step

    def key(self, r: int, u: int) -> str:
        return f"secagg/{self.sum_id}/{r}/{u}"

    def send(self, dst: int, kind: int, payload: bytes = b"", announce: str | None = None) -> None:
        import torch.distributed as dist  # noqa: PLC0415

        try:
            if announce is not None:
                self.store.set(announce, b"1")
            dist.send(torch.tensor([kind, len(payload)], dtype=torch.int64), dst)
            if payload:
                dist.send(torch.frombuffer(bytearray(payload), dtype=torch.uint8), dst)
        except RuntimeError as e:
            raise PartyGone(str(e).splitlines()[0]) from None

    def recv(self, src: int, timeout_s: float | None = None) -> tuple[int, bytes]:
        """One message from ``src`` (blocking; GroupBroken when it does not come within the timeout)."""
        got = self._recv_ranks([src], time.monotonic() + (timeout_s or self.timeout_s))[src]
        if isinstance(got, Exception):
            raise got
        return got

    def gather(self, r: int, clients: list[int]) -> dict[int, tuple[int, bytes] | PartyGone]:
        """The server: each client's round-r message, or PartyGone when it was not announced within
        the timeout (dead or hung) or its connection failed (dead)."""
        deadline = time.monotonic() + self.timeout_s
        pending, announced = list(clients), []
        pause = 0.0005
        while pending:
            if self.store.check([self.key(r, u) for u in pending]):
                announced += pending
                break
            ready = [u for u in pending if self.store.check([self.key(r, u)])]
            announced += ready
            pending = [u for u in pending if u not in ready]
            if not pending or time.monotonic() > deadline:
                break
            time.sleep(pause)
            pause = min(pause * 2, 0.02)
        out: dict[int, tuple[int, bytes] | PartyGone] = {
            u: PartyGone(f"no round-{r} message within {self.timeout_s:g}s") for u in pending}
        # Announced: the message is on its way; a dead sender fails at once, a hung one costs the timeout.
        got = self._recv_ranks([client_rank(u) for u in announced], time.monotonic() + self.timeout_s)
        for u in announced:
            out[u] = got[client_rank(u)]
        return out

    def _recv_ranks(self, sources: list[int], deadline: float) -> dict[int, tuple[int, bytes] | PartyGone]:
        import torch.distributed as dist  # noqa: PLC0415

        def left() -> datetime.timedelta:
            return datetime.timedelta(seconds=max(deadline - time.monotonic(), 0.01))

        def wait(work) -> None:
            try:
                work.wait(left())
            except RuntimeError as e:
                if "Timed out" in str(e):
                    raise GroupBroken(str(e).splitlines()[0]) from None
                raise

        out: dict[int, tuple[int, bytes] | PartyGone] = {}
        headers = {src: torch.empty(2, dtype=torch.int64) for src in sources}
        works, bodies = {}, {}
        for src in sources:  # all receives posted at once
            try:
                works[src] = dist.irecv(headers[src], src)
            except RuntimeError as e:
                out[src] = PartyGone(str(e).splitlines()[0])
        body_works = {}
        for src, work in works.items():
            try:
                wait(work)
                kind, length = (int(v) for v in headers[src])
                out[src] = (kind, b"")
                if length:
                    bodies[src] = torch.empty(length, dtype=torch.uint8)
                    body_works[src] = dist.irecv(bodies[src], src)
            except RuntimeError as e:
                out[src] = PartyGone(str(e).splitlines()[0])
        for src, work in body_works.items():
            try:
                wait(work)
                out[src] = (out[src][0], bodies[src].numpy().tobytes())
            except RuntimeError as e:
                out[src] = PartyGone(str(e).splitlines()[0])
        return out


STARTUP_TIMEOUT_S = 120.0  # the rendezvous: every party must have joined within this


def _init(rank: int, world_size: int, timeout_s: float) -> _Channel:
    """Join the group at MASTER_ADDR:MASTER_PORT (env://; the server, rank 0, hosts the store)."""
    import torch.distributed as dist  # noqa: PLC0415

    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=max(timeout_s, STARTUP_TIMEOUT_S)))
    return _Channel(timeout_s)


# --- wire formats (the bytes the in-process mode books: protocols/secagg/protocol.py) -------------


def _chunks(blob: bytes, size: int) -> list[bytes]:
    if len(blob) % size:
        raise ProtocolError(f"secagg multiprocess: a message of {len(blob)} bytes is not a multiple of {size}")
    return [blob[i:i + size] for i in range(0, len(blob), size)]


def _sealed_by(blob: bytes, field: int) -> dict[int, bytes]:
    """Sealed shares keyed by their header's sender (field 0) or receiver (field 1)."""
    return {crypto.HEADER.unpack(s[:crypto.HEADER.size])[field]: s for s in _chunks(blob, _SEALED)}


def _request(b_wanted: list[int], s_wanted: list[int]) -> bytes:
    asked = (len(b_wanted), len(s_wanted), *b_wanted, *s_wanted)
    return struct.pack(f"<{len(asked)}I", *asked)


def _parse_request(blob: bytes) -> tuple[list[int], list[int]]:
    values = struct.unpack(f"<{len(blob) // 4}I", blob)
    nb, ns = values[0], values[1]
    return list(values[2:2 + nb]), list(values[2 + nb:2 + nb + ns])


def _answer_blobs(answer: dict) -> tuple[bytes, ...]:
    return tuple(_ANSWER.pack(kind, u, x) + share for kind, which in ((0, "b"), (1, "s"))
                 for u, (x, share) in sorted(answer[which].items()))


def _parse_answer(blob: bytes) -> dict[str, dict[int, tuple[int, bytes]]]:
    out: dict[str, dict[int, tuple[int, bytes]]] = {"b": {}, "s": {}}
    for piece in _chunks(blob, _ANSWER.size + shamir.SHARE_BYTES):
        kind, u, x = _ANSWER.unpack(piece[:_ANSWER.size])
        out["b" if kind == 0 else "s"][u] = (x, piece[_ANSWER.size:])
    return out


# --- the parties ---------------------------------------------------------------------------------


def client_sum(channel: _Channel, u: int, protocol: SecAggProtocol, num_clients: int, x: torch.Tensor,
               integer: bool, drop_round: int = 5, kill_round: int = 5, keyring: KeyRing | None = None
               ) -> dict[int, float]:
    """Client u's side of one sum over the process group; returns its seconds per round. ``keyring``: the
    party's c key pair across the session's sums (``keys="session"``), None for a fresh one per sum."""
    channel.next_sum()
    server = SERVER_RANK
    grid = make_grid(protocol.bits, protocol.clip_range, protocol.frac_bits, num_clients, integer)
    nbrs, holders, t = protocol.setup(num_clients)
    me = Client(u, nbrs[u], holders[u], t, keyring)
    seconds = {r: 0.0 for r in ROUNDS}
    incoming = b""
    for r in ROUNDS:
        if r > 1:
            kind, incoming = channel.recv(server)
            if kind == STOP:
                return seconds
        if kill_round == r:  # fault injection: this process dies mid-protocol, before its round-r message
            os.kill(os.getpid(), signal.SIGKILL)
        if drop_round <= r:
            channel.send(server, DROP, announce=channel.key(r, u))
            return seconds
        t0 = time.perf_counter()
        try:
            if r == 1:
                payload = me.advertise_keys()
            elif r == 2:
                keys = {_U32.unpack(b[:4])[0]: b[4:] for b in _chunks(incoming, _KEY_BLOB)}
                commitment, sealed = me.share_keys(keys)
                payload = commitment + b"".join(sealed[v] for v in sorted(sealed))
            elif r == 3:
                y = me.masked_input(_sealed_by(incoming, 0), grid.encode(x))
                payload = y.astype(y.dtype.newbyteorder("<")).tobytes()
            else:
                b_wanted, s_wanted = _parse_request(incoming)
                # The request carries the survivors u holds shares of: all of U3 under the complete graph.
                survivors = len(b_wanted) if protocol.graph == "complete" else max(len(b_wanted), t)
                payload = b"".join(_answer_blobs(me.unmask(b_wanted, s_wanted, survivors)))
        except ProtocolError as e:
            channel.send(server, ERROR, str(e).encode(), announce=channel.key(r, u))
            raise
        seconds[r] = time.perf_counter() - t0
        channel.send(server, DATA, payload, announce=channel.key(r, u))
    return seconds


def server_sum(channel: _Channel, protocol: SecAggProtocol, num_clients: int, integer: bool) -> dict:
    """The server's side of one sum; returns the result's pieces (see ``SecAggSession``)."""
    channel.next_sum()
    K = num_clients
    grid = make_grid(protocol.bits, protocol.clip_range, protocol.frac_bits, K, integer)
    nbrs, holders, t = protocol.setup(K)
    server = Server(K, nbrs, holders, t)
    transfers: list[Transfer] = []
    seconds = {r: 0.0 for r in ROUNDS}
    gone: dict[int, str] = {}  # client -> why its process is unreachable
    dropped: dict[int, int] = {}  # client -> round it dropped at (DROP message or gone)
    waiting: set[int] = set()  # clients that expect a message from the server

    def receive(r: int, sources) -> dict[int, bytes]:
        got = {}
        messages = channel.gather(r, sorted(sources))
        waiting.difference_update(sources)
        error = None
        for src, msg in sorted(messages.items()):  # in client order, as in process
            if isinstance(msg, PartyGone):
                gone[src], dropped[src] = str(msg), r
            elif msg[0] == DROP:
                dropped[src] = r
            elif msg[0] == ERROR:
                error = error or msg[1].decode()
            else:
                got[src] = msg[1]
                if r < 4:  # it now waits for the server's next-round message
                    waiting.add(src)
        if error is not None:
            raise ProtocolError(error)
        return got

    def send(dst: int, payload: bytes) -> None:
        if dst in gone:
            return
        try:
            channel.send(client_rank(dst), DATA, payload)
        except PartyGone as e:
            gone[dst] = str(e)

    def check(r: int, arrived, step=None):
        """server.check_round(r, arrived), or ``step()`` (a server step that may stop the sum, e.g. the per-client
        survivor check of ``Server.requests``); its ProtocolError names the processes that were lost."""
        try:
            return server.check_round(r, set(arrived)) if step is None else step()
        except ProtocolError as e:
            lost = sorted(set(gone) - set(arrived))
            if lost:
                raise ProtocolError(f"{e} (process gone: {', '.join(map(client, lost))})") from None
            raise

    try:
        # Round 1: advertise keys.
        keys = receive(1, range(K))
        for u in sorted(keys):
            transfers.append(Transfer(client(u), SERVER, "setup", "public_key", len(keys[u]), (keys[u],)))
        t0 = time.perf_counter()
        check(1, keys)
        routed = server.route_keys(keys)
        seconds[1] += time.perf_counter() - t0
        for v, got in routed.items():
            blobs = tuple(_U32.pack(w) + blob for w, blob in got.items())
            transfers.append(Transfer(SERVER, client(v), "setup", "public_key", sum(map(len, blobs)), blobs))
            send(v, b"".join(blobs))
        waiting.clear()

        # Round 2: share keys.
        raw = receive(2, routed)
        sent = {u: (blob[:_COMMITMENT], _sealed_by(blob[_COMMITMENT:], 1)) for u, blob in sorted(raw.items())}
        for u, (commitment, sealed) in sent.items():
            blobs = (commitment,) + tuple(sealed[v] for v in sorted(sealed))
            transfers.append(Transfer(client(u), SERVER, "share", "ciphertext", sum(map(len, blobs)), blobs))
        t0 = time.perf_counter()
        check(2, sent)
        inbox = server.route_shares(sent)
        seconds[2] += time.perf_counter() - t0
        for v in sorted(sent):
            blobs = tuple(inbox[v][u] for u in sorted(inbox[v]))
            if blobs:
                transfers.append(Transfer(SERVER, client(v), "share", "ciphertext", sum(map(len, blobs)), blobs))
            send(v, b"".join(blobs))  # an empty message still tells v to go on
        waiting.clear()

        # Round 3: masked input.
        raw = receive(3, sent)
        masked = {}
        for u in sorted(raw):
            transfers.append(Transfer(client(u), SERVER, "input", "ciphertext", len(raw[u]), (raw[u],)))
            masked[u] = np.frombuffer(raw[u], dtype=np.dtype(grid.dtype).newbyteorder("<")).astype(grid.dtype)
        t0 = time.perf_counter()
        check(3, masked)
        total = server.add(masked)
        requests = check(3, masked, server.requests)  # Server.check_recoverable: t live holders per seed, as in process
        seconds[3] += time.perf_counter() - t0

        # Round 4: unmasking.
        asked = {v: _request(b_wanted, s_wanted) for v, (b_wanted, s_wanted) in requests.items()}
        for v, blob in asked.items():
            send(v, blob)
        waiting.clear()
        raw = receive(4, requests)
        waiting.clear()
        answers = {}
        for v, blob in asked.items():
            transfers.append(Transfer(SERVER, client(v), "reveal", "parameters", len(blob), (blob,)))
            if v in raw:
                answers[v] = _parse_answer(raw[v])
                blobs = tuple(_answer_blobs(answers[v]))
                transfers.append(Transfer(client(v), SERVER, "reveal", "share", sum(map(len, blobs)), blobs))
        t0 = time.perf_counter()
        check(4, answers)
        total = server.unmask(total, answers)
        revealed = grid.decode(total)
        seconds[4] += time.perf_counter() - t0
    except ProtocolError:
        for v in sorted(waiting - set(gone)):  # release the clients that wait for the next round
            try:
                channel.send(client_rank(v), STOP)
            except PartyGone:
                pass
        raise
    survivors = sorted(masked)
    return {"total": revealed.numpy(), "transfers": transfers, "seconds": seconds, "survivors": survivors,
            "dropped": dict(sorted(dropped.items())), "gone": dict(sorted(gone.items())),
            "faulty": server.faulty, "threshold": t, "degree": len(nbrs[0]) if K > 1 else 0,
            "frac_bits": grid.frac_bits, "limit": grid.limit, "bits": grid.bits,
            "error_bound": 0.0 if integer else len(survivors) * 2.0 ** -(grid.frac_bits + 1)}


def _party_main(party: int, world_size: int, env: dict, protocol: SecAggProtocol, timeout_s: float, conn) -> None:
    """One party process of a session (clients 0..K-1, the server K): join the group as rank 0 (the
    server) or u + 1 (client u), then serve ("sum", ...) until ("close",)."""
    torch.set_num_threads(1)
    os.environ.update(env)
    num_clients = world_size - 1
    is_server = party == num_clients
    keyring = KeyRing() if protocol.keys == "session" else None  # this client's, for the session's sums
    try:
        # Clients wait for the server, which may itself wait up to timeout_s per round for a hung client.
        channel = _init(SERVER_RANK if is_server else client_rank(party), world_size,
                        timeout_s if is_server else 6 * timeout_s)
        conn.send(("ready", None))
        while True:
            command, payload = conn.recv()
            if command == "close":
                break
            try:
                if is_server:
                    integer, = payload
                    conn.send(("done", server_sum(channel, protocol, num_clients, integer)))
                else:
                    path, integer, drop_round, kill_round = payload
                    x = torch.from_numpy(np.load(path))
                    conn.send(("done", client_sum(channel, party, protocol, num_clients, x, integer, drop_round,
                                                  kill_round, keyring)))
            except ProtocolError as e:
                conn.send(("refused", str(e)))
            except (PartyGone, GroupBroken) as e:
                conn.send(("gone", str(e)))
        import torch.distributed as dist  # noqa: PLC0415

        dist.destroy_process_group()
    except (EOFError, KeyboardInterrupt):
        pass
    except Exception:  # report any failure to the parent instead of hanging it
        try:
            conn.send(("error", traceback.format_exc()))
        except (BrokenPipeError, OSError):
            pass


def _check_kill_at(kill_at) -> dict[int, int]:
    """{round: [clients]} -> client -> the first round it is killed at."""
    out: dict[int, int] = {}
    for r, who in sorted(round_clients("kill_at", kill_at, "{3: [1]}").items()):
        for k in who:
            out.setdefault(k, r)
    return out


class SecAggSession(PartyProcesses, SecAggProtocol):
    """Multi-process `secagg` (see the module docstring); reusable across sums until ``close()``.

    Takes every parameter of ``SecAggProtocol`` except ``faults`` (the server-side and share-tampering
    faults are in-process only), plus:
    timeout_s: seconds the server waits for a round's messages before it counts the missing clients
               (dead or hung) as dropped; clients wait 6x as long for the server. Default 60.
               Start-up (the rendezvous) may take up to STARTUP_TIMEOUT_S = 120 s.
    kill_at:   fault injection, {round: [clients]}: those client processes SIGKILL themselves at that
               round before sending its message (in the next sum only; the session then restarts).
    """

    def __init__(self, bits: int = 32, clip_range: float = 4096.0, frac_bits: int | str = "auto",
                 threshold: int | None = None, graph: str = "complete", degree: int | None = None,
                 graph_seed: int = 0, dropout: dict | None = None, dropout_rate: float = 0.0,
                 dropout_seed: int | None = None, timeout_s: float = 60.0, kill_at: dict | None = None,
                 keys: str = "per-sum"):
        super().__init__(bits=bits, clip_range=clip_range, frac_bits=frac_bits, threshold=threshold, graph=graph,
                         degree=degree, graph_seed=graph_seed, dropout=dropout, dropout_rate=dropout_rate,
                         dropout_seed=dropout_seed, keys=keys)
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
            raise ProtocolError(f"timeout_s: expected a positive number of seconds, got {timeout_s!r}")
        self.timeout_s = float(timeout_s)
        self.kill_at = _check_kill_at(kill_at)
        self.num_clients = 0
        self.startup_seconds = 0.0
        self._processes: list = []
        self._conns: list = []
        self._stale = False  # a party died or hung: restart before the next sum

    @property
    def kill_at(self) -> dict[int, int]:
        """client -> the round its process dies at, in the next sum (set it as {round: [clients]})."""
        return self._kill_at

    @kill_at.setter
    def kill_at(self, value) -> None:
        self._kill_at = _check_kill_at(value)

    def _party_params(self) -> SecAggProtocol:
        """The public parameters the parties need (no dropout generator, no session state)."""
        return SecAggProtocol(bits=self.bits, clip_range=self.clip_range, frac_bits=self.frac_bits,
                              threshold=self.threshold, graph=self.graph, degree=self.degree,
                              graph_seed=self.graph_seed, keys=self.keys)

    def start(self, num_clients: int) -> None:
        """Start K client processes and the server process; wait until all joined the group."""
        self.close()
        ctx = mp.get_context("spawn")
        world_size = num_clients + 1
        port = free_port()
        params = self._party_params()
        t0 = time.perf_counter()
        for party in range(world_size):  # clients 0..K-1, then the server (rank 0: it hosts the store)
            rank = SERVER_RANK if party == num_clients else client_rank(party)
            env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank),
                   "WORLD_SIZE": str(world_size)}
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_party_main, args=(party, world_size, env, params, self.timeout_s, child),
                               name=f"privfgl-secagg-{'server' if party == num_clients else client(party)}",
                               daemon=True)
            proc.start()
            child.close()
            self._processes.append(proc)
            self._conns.append(parent)
        self.num_clients = num_clients
        self._collect("start-up", range(world_size), max(self.timeout_s, STARTUP_TIMEOUT_S))
        self.startup_seconds = time.perf_counter() - t0

    def _names(self, ranks) -> str:
        return ", ".join(SERVER if r == self.num_clients else client(r) for r in ranks)

    def _collect(self, what: str, ranks, timeout: float, lenient: bool = False) -> dict[int, tuple]:
        """One reply from each of ``ranks``. Not lenient: PartyFailure on any death, error or timeout.
        Lenient (clients after the server answered): the dead or silent are left out."""
        deadline = time.monotonic() + timeout
        replies: dict[int, tuple] = {}
        pending_ranks = set(ranks)
        while pending_ranks:
            left = deadline - time.monotonic()
            if left <= 0:
                if lenient:
                    break
                self._fail(f"timed out after {timeout:g}s during {what}, waiting for {self._names(sorted(pending_ranks))}")
            pending = {self._conns[r]: r for r in pending_ranks}
            sentinels = {self._processes[r].sentinel: r for r in pending_ranks}
            for ready in wait(list(pending) + list(sentinels), timeout=min(left, 1.0)):
                if ready in pending:
                    rank = pending[ready]
                    if rank not in pending_ranks:
                        continue
                    try:
                        reply = ready.recv()
                    except (EOFError, OSError):
                        reply = ("error", "closed its pipe")
                    if reply[0] == "error" and not lenient:
                        self._fail(f"{self._names([rank])} failed during {what}: {reply[1].strip().splitlines()[-1]}")
                    replies[rank] = reply
                    pending_ranks.discard(rank)
                else:
                    rank = sentinels[ready]
                    if rank in pending_ranks and not self._conns[rank].poll():
                        self._processes[rank].join(timeout=1)
                        if lenient:
                            replies[rank] = ("dead", self._processes[rank].exitcode)
                            pending_ranks.discard(rank)
                            continue
                        self._fail(f"{self._names([rank])} exited (code {self._processes[rank].exitcode}) during {what}")
        return replies

    def _fail(self, message: str) -> None:
        self._kill()
        raise PartyFailure(f"secagg multiprocess: {message}; all party processes were killed")

    def _aggregate(self, values: list[torch.Tensor], integer: bool, reveal_to: str) -> AggregationResult:
        if reveal_to != "server":
            raise ProtocolError("reveal_to: secagg opens the sum to the server (it removes the masks); "
                                "valid: 'server'")
        K = len(values)
        grid = make_grid(self.bits, self.clip_range, self.frac_bits, K, integer)
        for u, x in enumerate(values):  # the range check before any party sees data
            grid.encode(x)
        self.setup(K)  # parameter errors (threshold > holders) before any process starts
        drops = self._drops(K)
        if self._stale or K != self.num_clients or not self._processes:
            self.start(K)
        kills, self._kill_at = self._kill_at, {}
        server_rank = K
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="privfgl-secagg-", dir=_SHM) as tmp:
            for rank, conn in enumerate(self._conns):
                if rank == server_rank:
                    payload = (integer,)
                else:
                    path = os.path.join(tmp, f"input-{rank}.npy")
                    np.save(path, values[rank].numpy())
                    payload = (path, integer, drops.get(rank, 5), kills.get(rank, 5))
                try:
                    conn.send(("sum", payload))
                except (BrokenPipeError, ConnectionResetError, OSError):
                    if rank == server_rank:
                        self._fail("the server is not reachable")
                    self._stale = True
            # The server bounds every round by timeout_s; 4 rounds plus the slack of a slow machine.
            server = self._collect("a secure sum", [server_rank], 6 * self.timeout_s)[server_rank]
            gone = set(server[1]["gone"]) if server[0] == "done" else set()
            # The clients' own timings; the ones the server found gone are not waited for.
            clients = self._collect("a secure sum", [k for k in range(K) if k not in gone], 5.0, lenient=True)
        wall = time.perf_counter() - t0
        lost = [k for k in range(K) if clients.get(k, ("",))[0] not in ("done", "refused")]
        if lost:
            self._stale = True  # dead, hung or out of step: fresh processes for the next sum
        if server[0] == "refused":
            raise ProtocolError(server[1])
        if server[0] == "gone":
            self._fail(f"the server lost the group: {server[1]}")
        out = server[1]
        seconds = {r: {"clients": 0.0, "server": out["seconds"][r], "client_max": 0.0} for r in ROUNDS}
        for k, reply in clients.items():
            if reply[0] == "done":
                for r in ROUNDS:
                    seconds[r]["clients"] += reply[1][r]
                    seconds[r]["client_max"] = max(seconds[r]["client_max"], reply[1][r])
        dropped = {client(k): r for k, r in sorted({**drops, **out["dropped"]}.items())}
        self.last_run = None  # the clients' secrets stay in their processes
        return AggregationResult(
            total=torch.from_numpy(out["total"]),
            transfers=out["transfers"],
            num_clients=K,
            opened_by=(SERVER,),
            phases={"protect": sum(seconds[r]["clients"] for r in (1, 2, 3)),
                    "aggregate": sum(seconds[r]["server"] for r in (1, 2, 3)),
                    "reveal": seconds[4]["clients"] + seconds[4]["server"]},
            error_bound=out["error_bound"],
            details={"survivors": out["survivors"], "dropped": dropped, "faulty_shares": out["faulty"],
                     "late": [], "threshold": out["threshold"], "graph": self.graph, "degree": out["degree"],
                     "bits": out["bits"], "frac_bits": out["frac_bits"], "clip_range": out["limit"],
                     "round_s": {_ROUND_NAMES[r]: dict(seconds[r]) for r in ROUNDS},
                     "critical_path_s": sum(seconds[r]["client_max"] + seconds[r]["server"] for r in ROUNDS),
                     "mode": "multiprocess", "wall_s": wall, "keys": self.keys,
                     "processes_gone": {client(k): why for k, why in out["gone"].items()}},
        )

    def _kill(self) -> None:
        super()._kill()
        self._stale = False



# --- one party per machine -----------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """One party of one sum, from the environment (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE):
    rank 0 is the server (it hosts the rendezvous: MASTER_ADDR is its address; --output where the
    revealed sum goes, .npy; it prints the survivors and the bytes each client sent as JSON), ranks
    1..K = WORLD_SIZE - 1 the clients 0..K-1 (--input their vector, .npy)."""
    parser = argparse.ArgumentParser(prog="python -m protocols.secagg.multiprocess", description=main.__doc__)
    parser.add_argument("--input", help="client: its input vector (.npy, float64 or int64)")
    parser.add_argument("--output", help="server: where to write the revealed sum (.npy)")
    parser.add_argument("--integer", action="store_true", help="server: the inputs are integer counts")
    parser.add_argument("--param", action="append", default=[], metavar="KEY=JSON",
                        help="a SecAggProtocol parameter, the same on every party (e.g. graph=kregular)")
    parser.add_argument("--timeout-s", type=float, default=60.0,
                        help="seconds the server waits for a round's messages before it counts the missing as dropped")
    args = parser.parse_args(argv)
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    params = {}
    for item in args.param:
        key, _, value = item.partition("=")
        try:
            params[key] = json.loads(value)
        except json.JSONDecodeError:
            params[key] = value
    protocol = SecAggProtocol(**params)
    num_clients = world_size - 1
    torch.set_num_threads(1)
    if rank == SERVER_RANK:
        channel = _init(rank, world_size, args.timeout_s)
        out = server_sum(channel, protocol, num_clients, args.integer)
        if args.output:
            np.save(args.output, out["total"])
        print(json.dumps({"survivors": out["survivors"], "dropped": out["dropped"],
                          "bytes_up": [sum(t.nbytes for t in out["transfers"] if t.sender == client(k))
                                       for k in range(num_clients)],
                          "error_bound": out["error_bound"]}))
    else:
        if not args.input:
            parser.error("a client (RANK >= 1) needs --input")
        channel = _init(rank, world_size, 6 * args.timeout_s)
        x = np.load(args.input)
        client_sum(channel, rank - 1, protocol, num_clients, torch.from_numpy(x),
                   not np.issubdtype(x.dtype, np.floating))
    import torch.distributed as dist  # noqa: PLC0415

    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
