"""The `secagg` worker pool (``SecAggProtocol(workers=W)``, W > 1): W worker processes (``worker``) that act
for disjoint sets of the clients, so that the clients run their rounds in parallel, as on their own
devices; the server's side stays in the Protocol's process. Every sum's client u is run by worker
u * W // K (contiguous blocks of clients); a fresh ClientGroup per sum holds their secrets there.

The pool starts its processes when it is made (``SecAggProtocol`` makes it when it is made, so that
they start while the run sets up; a sum that comes before they are ready runs in the Protocol's
process), keeps them until ``close()``, and is stopped when it is garbage collected or at exit too (a
``weakref.finalize``); a worker also exits when the parent's end of its socket closes, so a killed
parent leaves no worker behind. A worker that dies in a sum, or a request interrupted before every
reply came back, breaks the pool: the sum raises PartyFailure and the Protocol starts a fresh pool for
its next sum (a worker that died between sums is replaced the same way, without an error; one that
dies while starting raises PartyFailure).

Why not a ``ProcessPoolExecutor`` (as ckks's ``workers``): a client's state must stay in one process for
the four rounds (an executor picks any free process), and a multiprocessing child (spawn, forkserver)
re-runs the parent's ``__main__`` module and imports ``protocols`` (torch): 2.4 to 5 s of CPU per worker
here. These workers are plain ``subprocess`` interpreters that load the client modules only (``worker``).
"""
from __future__ import annotations

import mmap
import os
import socket
import subprocess
import sys
import tempfile
import threading
import weakref
from multiprocessing.connection import Connection

import numpy as np

from protocols.base import PartyFailure, ProtocolError

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker.py")
START_TIMEOUT_S = 120.0  # a worker's start-up (python, numpy, cryptography, mpyc) takes ~0.3 s idle
REPLY_TIMEOUT_S = 600.0  # one round of one worker's clients


def check_workers(workers) -> int:
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ProtocolError(f"workers: expected an int >= 1 (processes that run the clients' rounds), got {workers!r}")
    return workers


def _shutdown(procs: list, conns: list, socks: list) -> None:
    """Stop the workers: ask, close their sockets (a worker exits on EOF too), wait, kill the stragglers."""
    for conn in conns:
        try:
            conn.send((0, "stop", None))
        except (OSError, ValueError):
            pass
    for handle in (*conns, *socks):
        try:
            handle.close()
        except OSError:
            pass
    for proc in procs:
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    procs.clear(), conns.clear(), socks.clear()


class WorkerPool:
    """W worker processes and the shared buffer of the round-3 vectors (see the module's docstring)."""

    def __init__(self, workers: int, nice: int = 0):
        """nice: added to the workers' niceness (os.nice) when they start: > 0 lets the caller's own work
        (training, while the workers prepare the next sum) take the CPU first."""
        self.size = workers
        self._procs: list[subprocess.Popen] = []
        self._conns: list[Connection] = []
        self._socks: list[socket.socket] = []
        self._finalizer = weakref.finalize(self, _shutdown, self._procs, self._conns, self._socks)
        self.broken = False
        self.pids: list[int] = []
        self.torch_loaded: list[bool] = []
        self._seq = 0
        self._buffer: mmap.mmap | None = None
        self._capacity = 0
        for _ in range(workers):
            parent, child = socket.socketpair()
            try:
                proc = subprocess.Popen([sys.executable, WORKER, str(child.fileno()), str(nice)], pass_fds=(child.fileno(),),
                                        stdin=subprocess.DEVNULL, close_fds=True)
            finally:
                child.close()
            self._procs.append(proc)
            self._socks.append(parent)
            self._conns.append(Connection(os.dup(parent.fileno())))

    # --- transport -------------------------------------------------------------------------------------
    def _fail(self, w: int, what: str) -> PartyFailure:
        self.broken = True
        try:
            code = self._procs[w].wait(timeout=1)  # a closed socket: the process is exiting
        except subprocess.TimeoutExpired:
            code = None
        state = f"exited with code {code}" if code is not None else "is running"
        return PartyFailure(f"secagg worker {w} (pid {self._procs[w].pid}) {what}; it {state}")

    def _send(self, w: int, message) -> None:
        try:
            self._conns[w].send(message)
        except (OSError, ValueError) as e:
            raise self._fail(w, f"cannot be reached ({type(e).__name__})") from None

    def _recv(self, w: int, timeout: float):
        conn = self._conns[w]
        try:
            if not conn.poll(timeout):
                raise self._fail(w, f"sent no reply within {timeout:g} s")
            return conn.recv()
        except (EOFError, OSError) as e:
            raise self._fail(w, f"is gone ({type(e).__name__})") from None

    def ready(self, wait: bool = True) -> bool:
        """Whether every worker has started (sent its first message); ``wait``: block until they have
        (PartyFailure if one exits or hangs first), else only look."""
        while len(self.pids) < self.size:
            w = len(self.pids)
            if not wait and not self._conns[w].poll(0):
                return False
            _, status, (pid, torch_loaded) = self._recv(w, START_TIMEOUT_S)
            if status != "ready":
                raise self._fail(w, f"started badly ({status})")
            self.pids.append(pid)
            self.torch_loaded.append(torch_loaded)
        return True

    def send(self, requests: dict[int, tuple[str, object]]) -> int:
        """Send worker w its request (op, payload) for each w of ``requests``; returns the sequence number
        ``collect`` expects back."""
        self.ready()
        self._seq += 1
        self.broken = True  # until every reply is back (an exception in between leaves replies unread)
        for w, (op, payload) in requests.items():
            self._send(w, (self._seq, op, payload))
        return self._seq

    def collect(self, seq: int, workers) -> dict[int, tuple[str, object]]:
        """Every reply of request ``seq`` from ``workers``: w -> (status, payload)."""
        replies = {}
        for w in workers:
            got, status, payload = self._recv(w, REPLY_TIMEOUT_S)
            if got != seq:
                raise self._fail(w, f"answered request {got} to request {seq}")
            replies[w] = (status, payload)
        self.broken = False
        return replies

    def run(self, op: str, payloads: dict[int, object]) -> dict:
        """One round: worker w runs ``payloads[w]``; returns the merged client -> (message, seconds).
        A client's refusal raises ProtocolError with its message (the lowest client index when several
        refused, which is the client that would have raised first in one process); a worker's failure
        raises PartyFailure."""
        seq = self.send({w: (op, payload) for w, payload in payloads.items()})
        return self.merge(self.collect(seq, payloads))

    def merge(self, replies: dict[int, tuple[str, object]]) -> dict:
        out, refused = {}, []
        for w, (status, payload) in sorted(replies.items()):
            if status == "error":
                last = payload.strip().splitlines()[-1] if payload.strip() else "?"
                e = PartyFailure(f"secagg worker {w} (pid {self._procs[w].pid}) failed: {last}")
                e.add_note(payload)
                raise e
            if status == "refused":
                refused.append(payload)
            else:
                out.update(payload)
        if refused:
            _, message = min(refused, key=lambda r: (r[0] is None, r[0] if r[0] is not None else 0))
            raise ProtocolError(message)
        return out

    # --- the shared buffer -----------------------------------------------------------------------------
    def buffer(self, nbytes: int) -> mmap.mmap:
        """A shared buffer of at least ``nbytes`` that every worker maps (grown, never shrunk)."""
        if self._capacity < nbytes:
            self.ready()
            size = max(nbytes, self._capacity * 3 // 2)
            if hasattr(os, "memfd_create"):
                fd = os.memfd_create("privfgl-secagg", os.MFD_CLOEXEC)
            else:  # an unlinked temporary file
                fd = os.dup(tempfile.TemporaryFile(dir="/dev/shm" if os.path.isdir("/dev/shm") else None).fileno())
            try:
                os.ftruncate(fd, size)
                buffer = mmap.mmap(fd, size)
                seq = self.send({w: ("buffer", size) for w in range(self.size)})
                for sock in self._socks:
                    socket.send_fds(sock, [b"\0"], [fd])
                self.merge(self.collect(seq, range(self.size)))
            finally:
                os.close(fd)
            self._buffer, self._capacity = buffer, size
        return self._buffer

    def close(self) -> None:
        self._buffer = None
        self._finalizer()

    @property
    def alive(self) -> bool:
        return bool(self._procs) and all(proc.poll() is None for proc in self._procs)

    @property
    def started(self) -> bool:
        """Every worker reported ready at some point (a pool that never did fails loudly in ``ready``)."""
        return len(self.pids) == self.size


class PoolClients:
    """One sum's clients, run by a WorkerPool (the in-process ``ClientGroup``'s interface: every round
    method returns client -> (message, seconds); round 3's message is the client's masked vector, a
    view of the shared buffer that stays valid until the pool's next sum).

    members: (index, neighbours, holders, threshold) of the K clients; grid: the sum's Grid;
    values: the K flat inputs (float64, or int64 for integer grids; torch tensors); copied into the
    shared buffer (those of ``senders``: the clients that will mask) while the workers run round 2.
    """

    def __init__(self, pool: WorkerPool, members: list, grid, values, senders, session: bool = False):
        self.pool, self.session = pool, session
        K, n = len(members), int(values[0].numel())
        self.owner = [u * pool.size // K for u in range(K)]
        self.members = members
        self.grid = grid
        self.values, self.senders = values, senders
        in_dtype = np.dtype(np.int64 if grid.integer else np.float64)
        out_dtype = np.dtype(grid.dtype)
        out_offset = K * n * in_dtype.itemsize
        buffer = pool.buffer(out_offset + K * n * out_dtype.itemsize)
        self.inputs = np.ndarray((K, n), in_dtype, buffer=buffer, offset=0)
        self.outputs = np.ndarray((K, n), out_dtype, buffer=buffer, offset=out_offset)
        self.layout = ((K, n), in_dtype.str, out_dtype.str, out_offset)

    def _split(self, requests) -> dict[int, dict]:
        out: dict[int, dict] = {}
        for u, request in requests.items():
            out.setdefault(self.owner[u], {})[u] = request
        return out

    def advertise(self, live) -> dict:
        payloads: dict[int, tuple] = {}
        live = list(live)
        for w in sorted({self.owner[u] for u in live}):
            mine = [m for m in self.members if self.owner[m[0]] == w]
            payloads[w] = (mine, self.grid, self.layout, [u for u in live if self.owner[u] == w], self.session)
        return self.pool.run("advertise", payloads)

    def share(self, requests) -> dict:
        payloads = self._split(requests)
        seq = self.pool.send({w: ("share", p) for w, p in payloads.items()})
        for u in self.senders:  # while the workers share their seeds (round 2 takes longer than round 1)
            np.copyto(self.inputs[u], self.values[u].numpy())
        return self.pool.merge(self.pool.collect(seq, payloads))

    def mask(self, inboxes) -> dict:
        done = self.pool.run("mask", self._split(inboxes))
        return {u: (self.outputs[u], seconds) for u, (_, seconds) in done.items()}

    def unmask(self, requests) -> dict:
        return self.pool.run("unmask", self._split(requests))

    def mask_prepared(self, live, workers) -> dict:
        """Round 3 of a sum whose rounds 1-2 a ``Preparation`` ran: the clients in ``live`` add their input to
        their prepared mask. Every worker of the preparation (``workers``) is told, so that its prepared
        session becomes the sum's group (for round 4) even when none of its clients is live."""
        live = list(live)
        for u in live:
            np.copyto(self.inputs[u], self.values[u].numpy())
        done = self.pool.run("mask_prepared", {w: (self.grid, self.layout, [u for u in live if self.owner[u] == w])
                                               for w in workers})
        return {u: (self.outputs[u], seconds) for u, (_, seconds) in done.items()}


class Preparation:
    """The offline phase (``SecAggProtocol(offline=True)``, ``workers`` > 1): rounds 1-2 and the inputs-free
    part of round 3 (each client's mask vector PRG(b_u) + sum of +-PRG(s_uv)) of the NEXT sum, run by the
    workers in the background, driven by a thread of this process, while the caller trains. Nothing here
    depends on the inputs: only on ``key`` (K, n, the ring dtype, the members: graph, holders, threshold),
    and it assumes that no client drops at rounds 1-2 and that no fault is injected there (the Protocol
    uses it only for a sum where that holds, else discards it). The routing between the clients goes
    through a throwaway ``Server``; the sum that uses the preparation routes the same messages again
    through its own Server, which books them as Transfers (the same messages as without preparation).

    Its thread uses the pool alone until ``wait`` returns: the Protocol waits before any other use of the
    pool. ``cancel`` stops it after the request in flight (each is a few ms)."""

    def __init__(self, pool: WorkerPool, key, members: list, n: int, dtype, session: bool = False):
        from protocols.secagg.server import Server  # noqa: PLC0415 (not in the workers' import path)

        self.pool, self.key, self.session = pool, key, session
        K = len(members)
        self.owner = [u * pool.size // K for u in range(K)]
        self.workers = sorted(set(self.owner))
        self.keys = self.sent = self.masked = None
        self.error: BaseException | None = None
        self._server = Server(K, [m[1] for m in members], [m[2] for m in members], members[0][3])
        self._cancel = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(members, n, np.dtype(dtype).str),
                                        name="secagg-offline", daemon=True)
        self._thread.start()

    def _split(self, requests: dict) -> dict[int, dict]:
        out: dict[int, dict] = {w: {} for w in self.workers}
        for u, request in requests.items():
            out[self.owner[u]][u] = request
        return out

    def _step(self, op: str, payloads: dict[int, object]) -> dict:
        """One step, one worker after the other: the preparation keeps one core busy beside the caller's
        process (which trains meanwhile), rather than every core (the sum itself runs them in parallel)."""
        out: dict = {}
        for w in sorted(payloads):
            out.update(self.pool.run(op, {w: payloads[w]}))
        return out

    def _run(self, members, n, dtype) -> None:
        try:
            mine = self._split({m[0]: m for m in members})
            self.keys = self._step("prep_advertise", {w: (list(ms.values()), list(ms), self.session)
                                                      for w, ms in mine.items()})
            if self._cancel.is_set():
                return
            routed = self._server.route_keys({u: m for u, (m, _) in self.keys.items()})
            self.sent = self._step("prep_share", self._split({u: (routed[u], None) for u in self.keys}))
            if self._cancel.is_set():
                return
            inbox = self._server.route_shares({u: m for u, (m, _) in self.sent.items()})
            self.masked = self._step("prep_mask", {w: (inboxes, n, dtype) for w, inboxes in
                                                      self._split({u: inbox[u] for u in self.sent}).items()})
        except BaseException as e:  # noqa: BLE001 (the sum that would use it falls back; a broken pool is replaced)
            self.error = e

    def cancel(self) -> None:
        self._cancel.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the thread; True when the preparation is complete and usable."""
        self._thread.join(timeout)
        return not self._thread.is_alive() and self.error is None and self.masked is not None

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    @property
    def client_s(self) -> float:
        """The clients' seconds of the preparation (all three steps, summed over the clients)."""
        return sum(dt for step in (self.keys, self.sent, self.masked) if step for _, dt in step.values())


__all__ = ["PoolClients", "Preparation", "WorkerPool", "check_workers"]
