"""A `secagg` worker process (``workers`` > 1): it acts for a share of the clients, as their own devices
would, and runs their side of the four rounds (``client.ClientGroup``) on the requests the Protocol's
process sends it (``pool.WorkerPool``). The clients' secrets (key pairs, seeds, Shamir shares, the
pairwise keys) are made here and never leave this process; what goes back is what each client sends
in the protocol (its public keys, commitment and sealed shares, its masked vector, its round-4 shares)
and the seconds each client took.

Started as ``python protocols/secagg/worker.py FD NICE`` (FD: its end of a Unix socket pair with the
parent, a ``multiprocessing.connection.Connection``; NICE: added to its niceness first): a fresh interpreter that loads ``client``,
``crypto``, ``shamir`` and ``quantize`` only. It never imports torch (``protocols/__init__.py`` and
``protocols.base`` do: 2.4 s of CPU per process here, against 0.25 s for this worker's start): the
packages ``protocols`` and ``protocols.secagg`` are loaded as bare namespaces, without their
``__init__``, and ``protocols.base`` as a stand-in that holds what these modules use of it
(``ProtocolError``, ``client``). A client's ProtocolError goes back as (client, message); the parent
raises it as ``protocols.base.ProtocolError`` with the same message.

The round-3 vectors do not cross the socket: the parent writes each client's float64 (int64) input
into a shared buffer (a memfd, passed over the socket once and again when it must grow) and the
client encodes and masks it into its row of the buffer's ring part, where the server reads y.

Messages (pickled): parent -> worker (seq, op, payload), worker -> parent (seq, status, payload) with
status "ok" | "refused" ((client, message)) | "error" (a traceback: a bug, not a protocol outcome).
ops: "buffer" (size; the fd follows), "advertise" (the sum's members, grid, buffer layout, the live
clients and whether the c key pairs are the session's: a fresh ClientGroup per sum, with this
worker's ``KeyRing`` under ``keys="session"``: it lives as long as the worker), "share", "mask",
"unmask", "stop"; and the offline phase (``offline=True``): "prep_advertise", "prep_share", "prep_mask" run rounds 1-2 and the inputs-free part
of round 3 of the NEXT sum on a separate ClientGroup (the prepared session), "mask_prepared" makes it the
sum's group and adds each client's input to its prepared mask; "advertise" (a sum that does not use the
preparation) discards it, so a prepared session is used for one sum at most. The worker exits on
"stop" or when the parent's end closes (the parent's exit, even a killed one); it ignores SIGINT
(the parent handles Ctrl-C and stops it).
"""
from __future__ import annotations

import os
import signal
import sys
import traceback
import types

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class ProtocolError(ValueError):
    """The worker's stand-in for ``protocols.base.ProtocolError`` (the parent re-raises the message as that)."""


def client(k: int) -> str:
    """The party name of client k, as ``protocols.base.client`` names it."""
    return f"client{k}"


def _load():
    """Import the client side of secagg without ``protocols/__init__.py`` and ``protocols.base`` (torch)."""
    for name in ("protocols", "protocols.secagg"):
        package = types.ModuleType(name)
        package.__path__ = [os.path.join(ROOT, *name.split("."))]
        sys.modules.setdefault(name, package)
    base = types.ModuleType("protocols.base")
    base.ProtocolError, base.client = ProtocolError, client
    sys.modules.setdefault("protocols.base", base)
    from protocols.secagg import quantize  # noqa: F401, PLC0415 (the Grid of each sum is unpickled here)
    from protocols.secagg.client import ClientGroup, KeyRing  # noqa: PLC0415

    return ClientGroup, KeyRing


def serve(fd: int) -> None:
    import mmap  # noqa: PLC0415
    import socket  # noqa: PLC0415
    from multiprocessing.connection import Connection  # noqa: PLC0415

    import numpy as np  # noqa: PLC0415

    ClientGroup, KeyRing = _load()
    keyring = KeyRing()  # the c key pairs of this worker's clients under keys="session"
    sock = socket.socket(fileno=os.dup(fd))  # the same socket, for the buffer's fd (SCM_RIGHTS)
    conn = Connection(fd)
    conn.send((0, "ready", (os.getpid(), "torch" in sys.modules)))
    buffer, group, grid, inputs, outputs = None, None, None, None, None
    prep = None  # the prepared session (offline phase): a ClientGroup after rounds 1-2 and its masks
    while True:
        try:
            seq, op, payload = conn.recv()
        except (EOFError, OSError):
            return  # the parent is gone
        if op == "stop":
            return
        try:
            if op == "buffer":
                _, fds, _, _ = socket.recv_fds(sock, 1, 1)
                inputs = outputs = None
                buffer = mmap.mmap(fds[0], payload)
                os.close(fds[0])
                reply = {}
            elif op == "advertise":
                members, grid, (shape, in_dtype, out_dtype, out_offset), live, session = payload
                group, prep = ClientGroup(members, keyring if session else None), None
                inputs = np.ndarray(shape, in_dtype, buffer=buffer, offset=0) if buffer is not None else None
                outputs = np.ndarray(shape, out_dtype, buffer=buffer, offset=out_offset) if buffer is not None else None
                reply = group.advertise(live)
            elif op == "prep_advertise":
                members, live, session = payload
                prep = ClientGroup(members, keyring if session else None)
                reply = prep.advertise(live)
            elif op == "prep_share":
                reply = prep.share(payload)
            elif op == "prep_mask":
                inboxes, n, dtype = payload
                reply = prep.premask(inboxes, n, np.dtype(dtype))
            elif op == "mask_prepared":
                grid, (shape, in_dtype, out_dtype, out_offset), live = payload
                group, prep = prep, None
                inputs = np.ndarray(shape, in_dtype, buffer=buffer, offset=0)
                outputs = np.ndarray(shape, out_dtype, buffer=buffer, offset=out_offset)
                reply = {u: (None, seconds) for u, (_, seconds) in group.mask_prepared(live, grid, inputs,
                                                                                       outputs).items()}
            elif op == "share":
                reply = group.share(payload)
            elif op == "mask":
                reply = {u: (None, seconds) for u, (_, seconds) in group.mask(payload, grid, inputs, outputs).items()}
            elif op == "unmask":
                reply = group.unmask(payload)
            else:
                raise ValueError(f"unknown request {op!r}")
            conn.send((seq, "ok", reply))
        except ProtocolError as e:
            who = prep if op.startswith("prep_") else group
            conn.send((seq, "refused", (who.current if who is not None else None, str(e))))
        except Exception:  # noqa: BLE001 (a bug: the parent raises it as a PartyFailure with this traceback)
            conn.send((seq, "error", traceback.format_exc()))


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.path[0] = ROOT  # not this file's folder (its modules are loaded as protocols.secagg.*)
    os.nice(int(sys.argv[2]))  # the pool's choice: > 0 with offline=true (the preparation yields to the trainer)
    try:
        serve(int(sys.argv[1]))
    except (EOFError, OSError):  # the parent closed its end (stopped the pool, or exited) while this one worked
        pass
