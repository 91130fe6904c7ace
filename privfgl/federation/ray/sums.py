"""The server's side of a sum whose inputs are on the client actors: plain, secagg, ckks and bfv.

Each returns the protocol's AggregationResult over the `present` clients in protocol order (client i of
the result is client present[i]; the runtime renames them), built from the bytes the actors sent, and
counts those bytes per link in ``ActorClients.wire``. Under plain the server also gets each client's
message in the clear (what plain shows it).
"""
from __future__ import annotations

import time

import numpy as np
import torch

from privfgl.federation.messages import SERVER, client_name
from privfgl.federation.ray.clients import RemoteUploads
from protocols.base import AggregationResult, PartyFailure, ProtocolError, Transfer, client

REMOTE_PROTOCOLS = ("plain", "secagg", "ckks", "bfv", "crypten")


def remote_sum(protocol, uploads: RemoteUploads, present: list[int], reveal_to: str):
    """(AggregationResult over `present`, client -> its message in the clear under plain, else None)."""
    if protocol.name == "plain":
        return _plain(protocol, uploads, present, reveal_to)
    if protocol.name == "secagg":
        return _secagg(protocol, uploads, present, reveal_to), None
    if protocol.name in ("ckks", "bfv"):
        return _he(protocol, uploads, present, reveal_to), None
    if protocol.name == "crypten":
        return _crypten(protocol, uploads, present, reveal_to), None
    raise ProtocolError(f"--engine ray: protocol {protocol.name!r} is not built with the clients on actors; valid: "
                        f"{', '.join(REMOTE_PROTOCOLS)}")


def _count(clients, sender: str, receiver: str, blobs) -> None:
    clients.wire[(sender, receiver)] += sum(len(b) for b in blobs)


def _plain(protocol, uploads: RemoteUploads, present: list[int], reveal_to: str):
    clients = uploads.clients
    got: dict[int, bytes] = {}
    for answer in clients.gather("plain_upload", clients.actors_for(present),
                                 per_actor=lambda a: (clients.actors_for(present)[a],)).values():
        got.update(answer)
    sent = [k for k in present if k in got]
    if not sent:
        raise PartyFailure("--engine ray: no client of the sum is left")
    dtype = np.dtype("<i8") if uploads.integer else np.dtype("<f8")
    tensors = {}
    for k in sent:
        _count(clients, client_name(k), SERVER, [got[k]])
        tensors[k] = torch.from_numpy(np.frombuffer(got[k], dtype=dtype).astype(dtype.newbyteorder("="), copy=True))
    result = protocol.aggregate([tensors[k] for k in sent], reveal_to=reveal_to)
    _survivors(result, present, sent)
    from privfgl.federation.runtime import unflatten  # noqa: PLC0415
    return result, {k: unflatten(t, uploads.layout) for k, t in tensors.items()}


def _survivors(result: AggregationResult, present: list[int], sent: list[int], rename: bool = True) -> None:
    """A sum run over the clients that sent (`sent` ⊆ `present`): the others reported dropped at their input,
    and with `rename` its parties (numbered over `sent`) renamed into `present`'s protocol order."""
    if sent == present:
        return
    position = {k: i for i, k in enumerate(present)}
    if rename:
        names = {client(i): client(position[k]) for i, k in enumerate(sent)}
        for t in result.transfers:
            t.sender, t.receiver = names.get(t.sender, t.sender), names.get(t.receiver, t.receiver)
        result.opened_by = tuple(names.get(p, p) for p in result.opened_by)
    result.details = {**result.details, "survivors": [position[k] for k in sent],
                      "dropped": {client(position[k]): "input" for k in present if k not in sent}}
    result.num_clients = len(present)


class _ActorParties:
    """secagg's clients' side (as ClientGroup's four rounds) run on the actors: protocol index u is client
    present[u]. A client whose actor died does not answer: it has dropped at that round."""

    def __init__(self, uploads: RemoteUploads, present: list[int], members, grid, session_keys: bool,
                 kill_at: dict):
        self.clients = uploads.clients
        self.present = present
        self.grid = grid
        by_actor: dict[int, list] = {}
        for m in members:
            k = present[m[0]]
            if k not in self.clients.dead:
                by_actor.setdefault(self.clients.actor_of[k], []).append(m)
        self.clients.gather("secagg_begin", list(by_actor), per_actor=lambda a: (
            by_actor[a], grid, {m[0]: present[m[0]] for m in by_actor[a]}, session_keys, kill_at))
        self.advertise = lambda live: self._step(1, dict.fromkeys(live))
        self.share = lambda requests: self._step(2, requests)
        self.mask = lambda inboxes: self._step(3, inboxes)

    def _step(self, step: int, requests: dict) -> dict:
        clients, by_actor = self.clients, {}
        for u, request in requests.items():
            k = self.present[u]
            if k not in clients.dead:
                by_actor.setdefault(clients.actor_of[k], {})[u] = request
        out = {}
        for answers in clients.gather("secagg", list(by_actor), per_actor=lambda a: (step, by_actor[a])).values():
            out.update(answers)
        for u, (message, _) in out.items():
            sender = client_name(self.present[u])
            if step == 1:
                _count(clients, sender, SERVER, [message])
            elif step == 2:
                _count(clients, sender, SERVER, [message[0], *message[1].values()])
            elif step == 3:
                _count(clients, sender, SERVER, [message])
            else:
                _count(clients, sender, SERVER, message)
        if step == 3:
            return {u: (np.frombuffer(y, dtype=self.grid.dtype).copy(), s) for u, (y, s) in out.items()}
        if step == 4:
            return {v: (_answers(blobs), s) for v, (blobs, s) in out.items()}
        return out

    def unmask(self, requests: dict) -> dict:
        return self._step(4, requests)


def _answers(blobs) -> dict:
    """Round 4's packed answers back into {"b": {owner: (x, share)}, "s": {...}}."""
    from protocols.secagg.protocol import _ANSWER  # noqa: PLC0415
    out = {"b": {}, "s": {}}
    for blob in blobs:
        kind, owner, x = _ANSWER.unpack(blob[:_ANSWER.size])
        out["b" if kind == 0 else "s"][owner] = (x, blob[_ANSWER.size:])
    return out


def _secagg(protocol, uploads: RemoteUploads, present: list[int], reveal_to: str) -> AggregationResult:
    kill_at = {r: list(who) for r, who in getattr(protocol, "ray_kill_at", {}).items()}

    def parties(members, grid):
        return _ActorParties(uploads, present, members, grid, protocol.keys == "session", kill_at)

    result = protocol.aggregate_remote(parties, len(present), uploads.n, uploads.integer, reveal_to)
    protocol.ray_kill_at = {}  # a fault injected once: the actors it named are gone
    return result


def _he(protocol, uploads: RemoteUploads, present: list[int], reveal_to: str) -> AggregationResult:
    """ckks/bfv: the key holder is client 0's actor; `protocol` is the driver's keyless stand-in
    (``RemoteHE``), which holds the server's side only."""
    clients = uploads.clients
    if present[0] != 0 or 0 in clients.dead:
        raise PartyFailure(f"--engine ray: {protocol.name}'s key holder, client 0, is gone (its actor died or it is "
                           "left out of the sum); no other party can decrypt")
    K, n = len(present), uploads.n
    holder = clients.actor_of[0]
    enc = clients.gather("he_setup", [holder], protocol.name, protocol.params, K, uploads.integer).get(holder)
    if enc is None:
        raise PartyFailure(f"--engine ray: {protocol.name}'s key holder, client 0, died")
    transfers = protocol.setup_transfers(enc, present)
    named = lambda party: client_name(present[int(party[len("client"):])]) if party != SERVER else party
    for t in transfers:
        _count(clients, named(t.sender), named(t.receiver), t.blobs)
    t0 = time.perf_counter()
    by_actor = clients.actors_for(present)
    got: dict[int, list[bytes]] = {}
    for answer in clients.gather("he_encrypt", list(by_actor), per_actor=lambda a: (enc, by_actor[a])).values():
        got.update(answer)
    sent = [k for k in present if k in got]
    for k in sent:
        _count(clients, client_name(k), SERVER, got[k])
    if 0 not in got:
        raise PartyFailure(f"--engine ray: {protocol.name}'s key holder, client 0, died")
    t1 = time.perf_counter()
    sums = protocol.server_add(enc, [got[k] for k in sent])
    t2 = time.perf_counter()
    answer = clients.gather("he_decrypt", [holder], enc, sums, n).get(holder)
    if answer is None:
        raise PartyFailure(f"--engine ray: {protocol.name}'s key holder, client 0, died before it decrypted the sum")
    _count(clients, client_name(0), SERVER, [answer])
    dtype = np.dtype("<i8") if uploads.integer and protocol.name == "bfv" else np.dtype("<f8")
    total = torch.from_numpy(np.frombuffer(answer, dtype=dtype).astype(dtype.newbyteorder("="), copy=True))
    t3 = time.perf_counter()
    position = {k: i for i, k in enumerate(present)}
    for k in sent:
        transfers.append(Transfer(client(position[k]), SERVER, "input", "ciphertext", sum(map(len, got[k])),
                                  tuple(got[k])))
    transfers.append(Transfer(SERVER, client(0), "aggregate", "ciphertext", sum(map(len, sums)), tuple(sums)))
    openers = (SERVER,) if reveal_to == "server" else tuple(client(i) for i in range(K))
    for receiver in openers:
        if receiver != client(0):
            transfers.append(Transfer(client(0), receiver, "reveal", "aggregate", len(answer), tensor=total.clone()))
    details = {"frac_bits": enc.frac_bits, "key_holder": "client 0's actor"}
    if protocol.name == "ckks":
        details = {"reveal": "grid", **details}
    result = AggregationResult(total=total, transfers=transfers, num_clients=K,
                               opened_by=tuple(dict.fromkeys((client(0),) + openers)),
                               phases={"protect": t1 - t0, "aggregate": t2 - t1, "reveal": t3 - t2},
                               error_bound=enc.error_bound * len(sent) / K,  # the rounding of each input summed
                               server_context=enc.parameters, details=details)
    _survivors(result, present, sent, rename=False)  # its transfers are already in present's order
    return result


class RemoteHE:
    """The driver's ckks/bfv object under --engine ray: the protocol's name and parameters (for the key
    holder, who builds the real protocol object and keys in its own actor) and the server's side: a SEAL
    context from the received parameters and an Evaluator (tenseal_backend._Server). It holds no key."""

    keep_payloads = True

    def __init__(self, name: str, params: dict):
        import protocols  # noqa: PLC0415
        protocols.check_protocol_params(name, params)
        self.name, self.params = name, {k: v for k, v in params.items() if k != "workers"}
        self.reveal = params.get("reveal", "grid")  # ckks (the record's trust block reads it)
        self._server = None
        self._setup_sent_to: set[str] = set()

    def setup_transfers(self, enc, present: list[int]) -> list[Transfer]:
        """The public setup, once per party: the parameters to the server, the public key to each client."""
        transfers = []
        if SERVER not in self._setup_sent_to:
            transfers.append(Transfer(client(0), SERVER, "setup", "parameters", len(enc.parameters), (enc.parameters,)))
            self._setup_sent_to.add(SERVER)
        for i, k in enumerate(present[1:], start=1):
            if client_name(k) not in self._setup_sent_to:
                transfers.append(Transfer(client(0), client(i), "setup", "public_key", len(enc.public_key),
                                          (enc.public_key,)))
                self._setup_sent_to.add(client_name(k))
        return transfers

    def server_add(self, enc, uploads: list[list[bytes]]) -> list[bytes]:
        from protocols.tenseal_backend import _Server  # noqa: PLC0415
        if self._server is None or self._server_parameters != enc.parameters:
            self._server, self._server_parameters = _Server(enc.parameters), enc.parameters
        return self._server.add(uploads)

    def aggregate(self, *args, **kwargs):
        raise RuntimeError("--engine ray: the driver holds no ckks/bfv key; sums run through privfgl.federation.ray")

    def close(self) -> None:
        self._server = None


def _crypten(protocol: "RemoteCrypten", uploads: RemoteUploads, present: list[int], reveal_to: str) -> AggregationResult:
    """CrypTen with every client's party on its actor (rank k) and the server's party on its own actor (rank K),
    over torch.distributed (gloo) between the actors: PRZS sharing, local sums, the ring sum opened to the
    server's party only (as crypten mode=multiprocess). No dropout: a missing party ends the run."""
    from protocols.crypten_backend import decode_total, fixed_point_error_bound, fixed_point_max_abs  # noqa: PLC0415
    clients, K = uploads.clients, uploads.clients.num_clients
    if reveal_to != "server":
        raise ProtocolError("reveal_to: crypten with the clients on actors opens sums to the server only")
    if present != list(range(K)):
        gone = sorted(set(range(K)) - set(present))
        raise PartyFailure(f"--engine ray: crypten needs every client's party; clients {gone} are gone or left out "
                           "(secagg survives dropout)")
    protocol.join(clients)
    n = uploads.n
    t0 = time.perf_counter()
    limit = fixed_point_max_abs(protocol.precision_bits) / K
    parties = {a: clients.actors[a].crypten_sum.remote(n, protocol.precision_bits, limit)
               for a in range(len(clients.actors))}
    opened_ref = protocol.server.sum.remote(n)
    ray = clients.ray
    refs = list(parties.values()) + [opened_ref]
    _, pending = ray.wait(refs, num_returns=len(refs), timeout=clients.timeout_s)
    if pending:
        raise PartyFailure(f"--engine ray: a crypten party sent no answer within {clients.timeout_s:g} s")
    try:
        protect = max(ray.get(list(parties.values())))
        opened = ray.get(opened_ref)
    except ray.exceptions.RayActorError:
        raise PartyFailure("--engine ray: a crypten party's actor died; crypten has no dropout (secagg has)") from None
    elapsed = time.perf_counter() - t0
    ring = torch.from_numpy(np.frombuffer(opened, dtype="<i8").astype(np.int64))
    total = decode_total(ring, protocol.precision_bits, uploads.integer)
    # The summed shares travel inside gloo between the parties' actors; their bytes are booked as crypten's
    # multi-process mode books them (8 per value per client), not counted on the wire by the driver.
    transfers = [Transfer(client(k), SERVER, "reveal", "share", 8 * n) for k in range(K)]
    return AggregationResult(total=total, transfers=transfers, num_clients=K, opened_by=(SERVER,),
                             phases={"protect": protect, "aggregate": elapsed - protect, "reveal": 0.0},
                             error_bound=fixed_point_error_bound(K, protocol.precision_bits, total, uploads.integer),
                             details={"parties": "ray actors over gloo"})


class RemoteCrypten:
    """The driver's crypten object under --engine ray: the fixed-point setting, and the parties (each client's
    actor, rank k; the server's own actor, rank K, on the driver's node) joined once per run."""

    name = "crypten"
    keep_payloads = True

    def __init__(self, params: dict):
        from protocols.crypten_backend import check_precision_bits  # noqa: PLC0415
        unknown = sorted(set(params) - {"precision_bits", "mode"})
        if unknown:
            raise ProtocolError(f"crypten: parameter(s) {', '.join(unknown)} not built with the clients on Ray actors; "
                                "valid: precision_bits")
        self.precision_bits = check_precision_bits(params.get("precision_bits", 16))
        self.server = None

    def join(self, clients) -> None:
        if self.server is not None:
            return
        ray = clients.ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: PLC0415
        from privfgl.federation.ray.actor import ServerParty  # noqa: PLC0415
        here = ray.get_runtime_context().get_node_id()
        self.server = ray.remote(num_cpus=0, max_restarts=0, scheduling_strategy=NodeAffinitySchedulingStrategy(
            here, soft=False))(ServerParty).remote()
        world = clients.num_clients + 1
        rendezvous = ray.get(clients.actors[clients.actor_of[0]].crypten_rendezvous.remote(),
                             timeout=clients.timeout_s)
        refs = [clients.actors[a].crypten_join.remote(world, rendezvous) for a in range(len(clients.actors))]
        refs.append(self.server.join.remote(world, rendezvous))
        _, pending = ray.wait(refs, num_returns=len(refs), timeout=clients.timeout_s)
        if pending:
            raise PartyFailure(f"--engine ray: the crypten parties did not all join at {rendezvous} within "
                               f"{clients.timeout_s:g} s")
        ray.get(refs)

    def aggregate(self, *args, **kwargs):
        raise RuntimeError("--engine ray: crypten's parties are the actors; sums run through privfgl.federation.ray")

    def close(self) -> None:
        if self.server is not None:
            import ray  # noqa: PLC0415
            ray.kill(self.server)
            self.server = None
