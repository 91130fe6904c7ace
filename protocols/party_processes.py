"""What the multi-process protocol sessions share (crypten_multiprocess.CryptenSession and
secagg.multiprocess.SecAggSession): a free local port for the rendezvous, and the shutdown of party
processes that talk to this process over pipes."""
from __future__ import annotations

import socket
import time


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PartyProcesses:
    """close(), _kill() and garbage-collection cleanup for a session holding `_processes`
    (multiprocessing processes), `_conns` (their pipe ends) and `num_clients`."""

    _processes: list
    _conns: list

    @property
    def party_pids(self) -> list[int]:
        """OS process ids of the party processes, in start order; empty when not started."""
        return [p.pid for p in self._processes]

    def _kill(self) -> None:
        """Kill every party process still running, reap them, close the pipes, forget them."""
        for proc in self._processes:
            if proc.is_alive():
                proc.kill()
        for proc in self._processes:
            proc.join(timeout=5)
        for conn in self._conns:
            conn.close()
        self._processes, self._conns, self.num_clients = [], [], 0

    def close(self) -> None:
        """Ask every party to leave, then kill whatever is still running."""
        for conn in self._conns:
            try:
                conn.send(("close", None))
            except (BrokenPipeError, ConnectionResetError, OSError):
                pass
        deadline = time.monotonic() + 5
        for proc in self._processes:
            proc.join(timeout=max(0.0, deadline - time.monotonic()))
        self._kill()

    def __del__(self) -> None:
        if getattr(self, "_processes", None):
            self._kill()
