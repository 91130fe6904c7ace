"""`crypten` multi-process: every client and the server is its own OS process running CrypTen.

Ranks 0..K-1 are the clients, rank K the server; they meet over torch.distributed (gloo) at
tcp://127.0.0.1:<free port>. Each client process encodes its tensor with the same fixed-point
encoding as the in-process mode (``crypten_compat.encode``), CrypTen shares every input with
pseudo-random zero sharing (PRZS: no input traffic, pairwise seeds fixed at ``crypten.init``),
every party sums its shares and the ring sum is opened to the server only. The opened int64 ring
sum is the exact sum of the encodings, so the revealed total is bitwise equal to in-process.

``CryptenSession`` starts the processes once and serves many sums (the runtime calls it every
round); it restarts them when the number of clients changes. Inputs and results travel over
multiprocessing pipes owned by this module (not ``crypten.mpc.run_multiprocess``). A party that
dies, hangs or fails raises ``PartyFailure`` within ``timeout_s`` and every party process is
killed; the next sum starts fresh processes.
Processes are started with multiprocessing's "spawn": a script that uses this mode must guard its
entry point with ``if __name__ == "__main__":`` (the CLI and pytest already do).

Bytes: with PRZS a client sends nothing to share its input; at the reveal it sends its summed
share (8 bytes per value) to the server (gloo reduce); bytes_down is 0. The transfers carry sizes
only: the share bytes travel inside gloo between the party processes. Sums open to the server
only (``reveal_to="clients"`` raises ProtocolError; use the in-process mode for that).
Phases: "protect" is the slowest client's encoding; "aggregate" the rest of the wall time (PRZS
sharing, local sums, opening to the server, inter-process messages); "reveal" is inside it (0).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import tempfile
import time
import traceback
from multiprocessing.connection import wait

import numpy as np
import torch

from protocols.party_processes import PartyProcesses, free_port
from protocols.base import SERVER, AggregationResult, PartyFailure, Protocol, ProtocolError, Transfer, client
from protocols.crypten_backend import (
    check_fixed_point_range,
    check_precision_bits,
    decode_total,
    fixed_point_error_bound,
)


_SHM = "/dev/shm" if os.path.isdir("/dev/shm") else None


def _party_main(rank: int, world_size: int, rendezvous: str, precision_bits: int, conn) -> None:
    """Entry point of one party process: join CrypTen, then serve ("sum", ...) until ("close",)."""
    torch.set_num_threads(1)
    from protocols import crypten_compat  # noqa: PLC0415 - imported in the child only

    num_clients = world_size - 1
    try:
        crypten_compat.init_party(rank, world_size, rendezvous)
        conn.send(("ready", None))
        while True:
            command, payload = conn.recv()
            if command == "close":
                break
            shape, path = payload  # path: this client's input (.npy); None on the server
            t0 = time.perf_counter()
            encoded = None
            if path is not None:
                encoded = crypten_compat.encode(torch.from_numpy(np.load(path)), precision_bits)
            t1 = time.perf_counter()
            opened = crypten_compat.party_secure_sum(encoded, shape, num_clients, server=num_clients)
            t2 = time.perf_counter()
            conn.send(("done", (None if opened is None else opened.numpy(), t1 - t0, t2 - t1)))
        crypten_compat.shutdown_party()
    except (EOFError, KeyboardInterrupt):
        pass
    except Exception:  # report any failure to the parent instead of hanging it
        conn.send(("error", traceback.format_exc()))


class CryptenSession(PartyProcesses, Protocol):
    """Multi-process CrypTen secure sum; reusable across calls (see module docstring).

    precision_bits: fractional bits of the fixed-point encoding (0..48, default 16).
    timeout_s:      seconds allowed for start-up and for each sum before PartyFailure.
    """

    name = "crypten"

    def __init__(self, precision_bits: int = 16, timeout_s: float = 120.0):
        self.precision_bits = check_precision_bits(precision_bits)
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
            raise ProtocolError(f"timeout_s: expected a positive number of seconds, got {timeout_s!r}")
        self.timeout_s = float(timeout_s)
        self.num_clients = 0
        self.startup_seconds = 0.0
        self._processes: list = []
        self._conns: list = []

    def start(self, num_clients: int) -> None:
        """Start K client processes and the server process and wait until all joined CrypTen."""
        self.close()
        ctx = mp.get_context("spawn")
        world_size = num_clients + 1
        rendezvous = f"tcp://127.0.0.1:{free_port()}"
        t0 = time.perf_counter()
        for rank in range(world_size):
            parent, child = ctx.Pipe()
            proc = ctx.Process(
                target=_party_main,
                args=(rank, world_size, rendezvous, self.precision_bits, child),
                name=f"privfgl-crypten-{rank}",
                daemon=True,
            )
            proc.start()
            child.close()
            self._processes.append(proc)
            self._conns.append(parent)
        self.num_clients = num_clients
        self._collect("start-up")
        self.startup_seconds = time.perf_counter() - t0

    def _collect(self, what: str) -> list:
        """Wait for one reply from every party; PartyFailure on death, error or timeout."""
        deadline = time.monotonic() + self.timeout_s
        replies: dict[int, object] = {}
        while len(replies) < len(self._conns):
            left = deadline - time.monotonic()
            if left <= 0:
                missing = [r for r in range(len(self._conns)) if r not in replies]
                self._fail(f"timed out after {self.timeout_s:g}s during {what}, waiting for {self._names(missing)}")
            pending = {self._conns[r]: r for r in range(len(self._conns)) if r not in replies}
            sentinels = {self._processes[r].sentinel: r for r in pending.values()}
            for ready in wait(list(pending) + list(sentinels), timeout=min(left, 1.0)):
                if ready in pending:
                    rank = pending[ready]
                    try:
                        status, payload = ready.recv()
                    except (EOFError, OSError):  # includes ConnectionResetError
                        self._fail(f"{self._names([rank])} closed its pipe during {what}")
                    if status == "error":
                        self._fail(f"{self._names([rank])} failed during {what}:\n{payload}")
                    replies[rank] = payload
                else:
                    rank = sentinels[ready]
                    if rank not in replies and not self._conns[rank].poll():
                        self._processes[rank].join(timeout=1)
                        code = self._processes[rank].exitcode
                        self._fail(f"{self._names([rank])} exited (code {code}) during {what}")
        return [replies[r] for r in range(len(self._conns))]

    def _names(self, ranks: list[int]) -> str:
        return ", ".join("server" if r == self.num_clients else f"client {r}" for r in ranks)

    def _fail(self, message: str) -> None:
        self._kill()
        raise PartyFailure(f"crypten multiprocess: {message}; all party processes were killed")

    def _aggregate(self, values: list[torch.Tensor], integer: bool, reveal_to: str) -> AggregationResult:
        num_clients = len(values)
        if reveal_to != "server":
            raise ProtocolError("reveal_to: crypten multiprocess opens sums to the server only; use "
                                "mode=inprocess for sums that only the clients open")
        check_fixed_point_range(values, self.precision_bits)  # before any party sees data
        if num_clients != self.num_clients or not self._processes:
            self.start(num_clients)
        shape = (values[0].numel(),)
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="privfgl-crypten-", dir=_SHM) as tmp:
            # Inputs go through files so that a stopped party can never block this process on a
            # full pipe; only short messages cross the pipes towards the parties.
            for rank, conn in enumerate(self._conns):
                path = None
                if rank < num_clients:
                    path = os.path.join(tmp, f"input-{rank}.npy")
                    np.save(path, values[rank].numpy())
                try:
                    conn.send(("sum", (shape, path)))
                except (BrokenPipeError, ConnectionResetError, OSError):
                    self._fail(f"{self._names([rank])} is not reachable")
            replies = self._collect("a secure sum")
        elapsed = time.perf_counter() - t0
        opened = replies[num_clients][0]
        total = decode_total(torch.from_numpy(opened), self.precision_bits, integer)
        protect = max(r[1] for r in replies[:num_clients])
        share_bytes = 8 * shape[0]
        # PRZS: no input shares are sent. At the reveal each client's summed share goes to the server
        # inside gloo's reduce (the bytes are booked here; their content stays in the party processes).
        transfers = [Transfer(client(k), SERVER, "reveal", "share", share_bytes) for k in range(num_clients)]
        return AggregationResult(
            total=total,
            transfers=transfers,
            num_clients=num_clients,
            opened_by=(SERVER,),
            phases={"protect": protect, "aggregate": elapsed - protect, "reveal": 0.0},
            error_bound=fixed_point_error_bound(num_clients, self.precision_bits, total, integer),
        )



