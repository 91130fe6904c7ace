"""The in-process federation runtime: parties exchange messages only through it.

A method is written as client steps and server steps. Whatever crosses between them goes through
`Federation`: `broadcast` (server -> every client), `upload` (one client -> server, plaintext,
e.g. split-learning messages), and `aggregate` (every client -> a sum revealed by the selected
secure-aggregation protocol). The runtime counts bytes, times phases and records each party's
view in the transcript.

Participation. A sum holds the inputs of the clients that took part in it: a protocol with dropout
(secagg) reports its survivors (`AggregationResult.survivors`), and the runtime's own participation
mask (`Federation.absent`, any protocol) leaves clients out of a round before the protocol starts,
as if they had dropped before sending anything. `Federation.survivors(round, name)` names the
clients in each revealed sum; methods weight by what the survivors contributed (counts summed in
the same message, or the survivors' count), never by K. `cost()["participation"]` records every
sum that missed a client.
"""
from __future__ import annotations

import torch

from privfgl.federation.channel import Channel
from privfgl.federation.messages import SERVER, Message, client_name, payload_nbytes
from privfgl.federation.timers import PhaseTimer
from privfgl.federation.transcript import Transcript

Tensors = dict[str, torch.Tensor]


def flatten(tensors: Tensors) -> tuple[torch.Tensor, list[tuple[str, torch.Size]]]:
    """Concatenate named tensors (sorted by name) into one vector: int64 when every field is an
    integer tensor (counts: exact under bfv), else float64. Returns it and the layout."""
    layout = [(n, tensors[n].shape) for n in sorted(tensors)]
    integer = bool(layout) and all(not tensors[n].is_floating_point() for n, _ in layout)
    dtype = torch.int64 if integer else torch.float64
    flat = torch.cat([tensors[n].detach().reshape(-1).to(dtype).cpu() for n, _ in layout]) \
        if layout else torch.zeros(0, dtype=dtype)
    return flat, layout


def participation_mask(absent) -> dict | None:
    """A participation mask checked: None, a callable (round, name) -> client indices, or a mapping
    {round: [client indices]} whose key "*" applies to every round (rounds may be strings: JSON)."""
    if absent is None or callable(absent):
        return absent
    if not isinstance(absent, dict):
        raise ValueError(f"absent: expected a mapping round -> client indices (key '*': every round) or a "
                         f"callable (round, name) -> client indices, got {absent!r}")
    out = {}
    for r, who in absent.items():
        if r != "*":
            try:
                key, r = r, int(r)
            except (TypeError, ValueError):
                key, r = r, -1
            if r < 0:
                raise ValueError(f"absent: round keys must be integers >= 0 or '*', got {key!r}")
        if isinstance(who, int):
            who = [who]
        if not isinstance(who, (list, tuple, set, frozenset)) or not all(
                isinstance(k, int) and not isinstance(k, bool) and k >= 0 for k in who):
            raise ValueError(f"absent: round {r}: expected a list of client indices, got {who!r}")
        out[r] = frozenset(who)
    return out


def _rename_clients(result, present: list[int], num_clients: int) -> None:
    """A protocol run over the present clients only (its indices 0..len(present)-1): its transfers,
    openers and survivors renamed to the federation's client indices, in place."""
    names = {client_name(i): client_name(k) for i, k in enumerate(present)}
    for t in result.transfers:
        t.sender, t.receiver = names.get(t.sender, t.sender), names.get(t.receiver, t.receiver)
    result.opened_by = tuple(names.get(p, p) for p in result.opened_by)
    survivors = [present[i] for i in result.survivors]
    result.details = dict(result.details)
    if "dropped" in result.details:
        result.details["dropped"] = {names.get(c, c): r for c, r in result.details["dropped"].items()}
    result.details["survivors"] = survivors
    result.details["absent"] = sorted(set(range(num_clients)) - set(present))
    result.num_clients = num_clients


def unflatten(flat: torch.Tensor, layout: list[tuple[str, torch.Size]]) -> Tensors:
    out, i = {}, 0
    for name, shape in layout:
        n = shape.numel()
        out[name] = flat[i:i + n].reshape(shape)
        i += n
    return out


class Federation:
    """Routes messages between the server and `num_clients` clients.

    protocol: an object with `name` and `aggregate(list[Tensor], reveal_to) -> AggregationResult`
    (see the `protocols` package). A secure protocol reveals the sum, and only the sum, to the
    server (or to the clients only): under HE the key-holding client decrypts the aggregate
    ciphertext and sends the sum on. Every message the protocol sent is delivered on the channel
    with its real sender and receiver and its bytes (serialized ciphertexts, shares), so each
    party's transcript view is exactly what it received.
    """

    def __init__(self, num_clients: int, protocol, transcript: Transcript | None = None, dp=None, absent=None):
        if num_clients < 1:
            raise ValueError(f"num_clients must be >= 1, got {num_clients}")
        self.num_clients = num_clients
        self.protocol = protocol
        self.dp = dp  # privfgl.privacy.MessageDP or None: DP on the aggregations of one message
        self.transcript = transcript or Transcript()
        self.channel = Channel(self.transcript)
        self.timer = PhaseTimer()
        self.clients = [client_name(k) for k in range(num_clients)]
        self.error_bounds: dict[str, float] = {}  # message name -> largest documented error of its revealed sums
        # Auditor-only ground truth, never part of any party's view: (round, name) -> {"uploads": the flat
        # tensors the clients gave the protocol, "protocol": the protocol object (its keys score HE attacks)}.
        # Kept like the transcript's payloads (all rounds, the last round, or none).
        self.audit_log: dict[tuple[int, str], dict] = {}
        # The runtime's participation mask: {round: [clients]} ("*": every round) or (round, name) -> clients
        # left out of that round's sums (any protocol); see participation_mask.
        self.absent = absent
        # (round, name) -> the clients whose input is in that revealed sum (survivors), for every sum.
        self.participation: dict[tuple[int, str], list[int]] = {}
        # An auditor's canary clients (attacks/dp/canary_clients.py) or None: parties without data whose
        # clipped inputs join the sum of `canaries.message` as the protocol's sum of K + N inputs would hold
        # them (they send no protocol messages: bytes, timings and survivors are the K clients').
        self.canaries = None

    @property
    def absent(self):
        return self._absent

    @absent.setter
    def absent(self, value) -> None:
        self._absent = participation_mask(value)

    def absent_in(self, round: int, name: str) -> frozenset[int]:
        """The clients the participation mask leaves out of this sum (checked against K)."""
        mask = self._absent
        if mask is None:
            return frozenset()
        who = frozenset(mask(round, name)) if callable(mask) else mask.get(round, frozenset()) | mask.get("*", frozenset())
        bad = sorted(k for k in who if not 0 <= k < self.num_clients)
        if bad:
            raise ValueError(f"absent: client index {bad[0]} is out of range for {self.num_clients} clients")
        return who

    def survivors(self, round: int | None, name: str) -> list[int]:
        """The clients whose input is in the sum `name` revealed in `round` (all K without dropout);
        round None: the latest sum of `name`."""
        if round is None:
            round = next((r for r, n in reversed(self.participation) if n == name), None)
        if (round, name) not in self.participation:
            raise KeyError(f"no sum {name!r} was revealed in round {round}")
        return list(self.participation[(round, name)])

    def broadcast(self, round: int, name: str, tensors: Tensors) -> Tensors:
        """Server sends the same plaintext tensors to every client; returns what they receive."""
        nbytes = payload_nbytes(tensors)
        for c in self.clients:
            self.channel.deliver(Message(round, name, SERVER, c, "plaintext", nbytes, tensors))
        return tensors

    def upload(self, round: int, k: int, name: str, tensors: Tensors) -> Tensors:
        """Client k sends plaintext tensors to the server (visible to it as they are)."""
        self.channel.deliver(Message(round, name, client_name(k), SERVER, "plaintext", payload_nbytes(tensors), tensors))
        return tensors

    def send(self, round: int, k: int, name: str, tensors: Tensors) -> Tensors:
        """Server sends plaintext tensors to client k alone (e.g. a split model's activations)."""
        self.channel.deliver(Message(round, name, SERVER, client_name(k), "plaintext", payload_nbytes(tensors), tensors))
        return tensors

    def aggregate(self, round: int, name: str, contributions: list[Tensors], protocol=None,
                  sample_rate: float = 1.0, reveal_to: str = "server") -> Tensors:
        """Sum of the clients' named tensors, computed by the protocol (the federation's, or
        `protocol` for this one sum, e.g. BFV for integer counts beside CKKS for floats) and
        opened to `reveal_to`: "server" (default) or "clients" (the server never learns the sum).
        Weighted sums: pre-weight on the client side. Returns the revealed sums (float64) with
        the contributions' shapes (int64 when every field is integer, else float64).
        When `self.dp` applies to `name`, each client's upload is clipped (and noised, unless the
        DP mode is central) before the protocol and the release is accounted; `sample_rate` is
        the probability that a client's update was included (others send zeros), for accounting."""
        if getattr(contributions, "remote", False):  # the inputs are on the clients' Ray actors
            return self._aggregate_remote(round, name, contributions, protocol, sample_rate, reveal_to)
        if len(contributions) != self.num_clients:
            raise ValueError(f"aggregate {name!r}: expected {self.num_clients} contributions, got {len(contributions)}")
        dp = self.dp if self.dp is not None and self.dp.applies_to(name) else None
        if dp is not None:
            with self.timer.phase("dp_protect"):
                contributions = dp.protect(contributions)
        flats, layout = zip(*(flatten(c) for c in contributions))
        for k, lay in enumerate(layout):
            if lay != layout[0]:
                raise ValueError(f"aggregate {name!r}: client {k} sent fields {lay}, client 0 sent {layout[0]}")
        protocol = protocol or self.protocol
        protocol.keep_payloads = self.transcript.keep != "none"  # no copies of payloads nobody keeps
        self._log_for_audit(round, name, flats, protocol)
        absent = self.absent_in(round, name)
        if absent:  # the mask: those clients send nothing; the protocol runs over the others
            present = [k for k in range(self.num_clients) if k not in absent]
            if not present:
                raise ValueError(f"aggregate {name!r} in round {round}: the participation mask leaves out every "
                                 "client; no sum to reveal")
            result = protocol.aggregate([flats[k] for k in present], reveal_to=reveal_to)
            _rename_clients(result, present, self.num_clients)
        else:
            result = protocol.aggregate(list(flats), reveal_to=reveal_to)
        return self._reveal(round, name, result, layout[0], contributions, dp, sample_rate)

    def _reveal(self, round: int, name: str, result, layout, contributions, dp, sample_rate: float) -> Tensors:
        """What every sum does once the protocol revealed it: note who took part, its error bound and phase
        seconds; add the auditor's canaries; book its messages on the channel; account (and, in central
        mode, noise) the DP release. Returns the released sum with the contributions' fields."""
        self.participation[(round, name)] = result.survivors
        if dp is not None:
            dp.note_participation(round, name, len(result.survivors))
        self.error_bounds[name] = max(self.error_bounds.get(name, 0.0), float(result.error_bound))
        for phase, seconds in result.phases.items():
            self.timer.add(phase, seconds)
        total = unflatten(result.total, layout)
        if self.canaries is not None and self.canaries.message == name:
            total = unflatten(flatten(total)[0] + self.canaries.contribution(round, dp, result.total.numel()), layout)
        self._record_aggregation(round, name, contributions, result, total)
        if dp is not None:
            with self.timer.phase("dp_reveal"):
                total = dp.reveal(total, sample_rate)
        return total

    def _aggregate_remote(self, round: int, name: str, uploads, protocol, sample_rate: float,
                          reveal_to: str) -> Tensors:
        """`aggregate` of inputs that stay on the client actors until the protocol sends them
        (privfgl.federation.ray): the clients the mask leaves out, and those whose actor died, send nothing.
        Under message DP each actor clips (and, but in central mode, noises) its clients' messages; the
        release is accounted (and, in central mode, noised) here."""
        from privfgl.federation.ray.sums import remote_sum  # noqa: PLC0415
        dp = self.dp if self.dp is not None and self.dp.applies_to(name) else None
        uploads.prepare(name)
        protocol = protocol or self.protocol
        protocol.keep_payloads = self.transcript.keep != "none"
        left_out = self.absent_in(round, name) | uploads.dead
        present = [k for k in range(self.num_clients) if k not in left_out]
        if not present:
            raise ValueError(f"aggregate {name!r} in round {round}: no client is left to send an input")
        result, plaintexts = remote_sum(protocol, uploads, present, reveal_to)
        if len(present) < self.num_clients:
            _rename_clients(result, present, self.num_clients)
        return self._reveal(round, name, result, uploads.layout, plaintexts, dp, sample_rate)

    def compute(self, round: int, name: str, contributions: list[Tensors], function, reveal_to: dict,
                options: dict | None = None) -> Tensors:
        """A function of the clients' summed tensors computed on secret shares, only its outputs opened.

        Every client secret-shares its named tensors through the federation's protocol (which must
        offer `compute`: crypten), the parties sum the shares, `function` maps the shared sums
        ({field: shared tensor with the contributions' shape}) to shared outputs ({output: shared
        tensor}, written with the protocol's shared-tensor operations), and each output is opened
        only to reveal_to[output]: "server", "clients" or a list of client indices. `options`: the
        protocol's settings for this computation (crypten: CrypTen config overrides). Every message
        goes on the channel like an aggregation's (labels name:setup, name:input, name:compute,
        name:reveal; the payloads as blobs), and each party that opened an output observes it as
        name:output. Returns the opened outputs (float64)."""
        if len(contributions) != self.num_clients:
            raise ValueError(f"compute {name!r}: expected {self.num_clients} contributions, got {len(contributions)}")
        if self.dp is not None and self.dp.applies_to(name):
            raise ValueError(f"compute {name!r}: message DP on a computed message is not built")
        absent = self.absent_in(round, name)
        if absent:
            raise ValueError(f"compute {name!r} in round {round}: the participation mask leaves out "
                             f"{', '.join(client_name(k) for k in sorted(absent))}; a computation on secret shares "
                             "needs every client (dropout is built for aggregate only)")
        compute = getattr(self.protocol, "compute", None)
        if compute is None:
            raise ValueError(f"compute {name!r}: protocol {self.protocol.name!r} cannot compute on secret shares; "
                             "valid: --protocol crypten (mode=inprocess)")
        flats, layout = zip(*(flatten(c) for c in contributions))
        for k, lay in enumerate(layout):
            if lay != layout[0]:
                raise ValueError(f"compute {name!r}: client {k} sent fields {lay}, client 0 sent {layout[0]}")
        self._log_for_audit(round, name, flats, self.protocol)

        def on_sums(shared):
            fields, i = {}, 0
            for field_name, shape in layout[0]:
                n = shape.numel()
                fields[field_name] = shared[i:i + n].reshape(tuple(shape))
                i += n
            return function(fields)

        result = compute([f.to(torch.float64) for f in flats], on_sums, reveal_to, options)
        for phase, seconds in result.phases.items():
            self.timer.add(phase, seconds)
        self._deliver(round, name, result.transfers)
        for output, parties in result.opened_to.items():
            for party in parties:
                self.channel.observe(party, Message(round, f"{name}:{output}", party, party, "aggregate", 0,
                                                    {output: result.outputs[output]}))
        return dict(result.outputs)

    def _deliver(self, round: int, name: str, transfers, contributions: list[Tensors] | None = None,
                 total: Tensors | None = None) -> None:
        """Put every protocol message on the channel with its real sender, receiver and bytes."""
        clients = {c: k for k, c in enumerate(self.clients)}
        for t in transfers:
            label = name if t.step == "input" else f"{name}:{t.step}"
            tensors = None
            if t.kind == "plaintext" and t.sender in clients and contributions is not None:
                tensors = contributions[clients[t.sender]]  # the named fields as the client sent them
            elif t.tensor is not None and total is not None:
                tensors = dict(total)  # a revealed sum; the view keeps its own dict
            self.channel.deliver(Message(round, label, t.sender, t.receiver, t.kind, int(t.nbytes), tensors,
                                         tuple(t.blobs) or None))

    def _log_for_audit(self, round: int, name: str, flats, protocol) -> None:
        keep = self.transcript.keep
        if keep == "none":
            return
        if keep == "last":
            for key in [k for k in self.audit_log if k[0] < round]:
                del self.audit_log[key]
        self.audit_log[(round, name)] = {"uploads": list(flats), "protocol": protocol}

    def _record_aggregation(self, round: int, name: str, contributions: list[Tensors], result, total: Tensors) -> None:
        """Put every protocol message on the channel with its real sender and receiver, then record
        what the server holds on its own (its public context) and who opened the sum."""
        self._deliver(round, name, result.transfers, contributions, total)
        if result.server_context is not None:
            self.channel.observe(SERVER, Message(round, name + ":context", SERVER, SERVER, "parameters", 0, None,
                                                 (result.server_context,)))
        # The opened sum, observed by each party that opens it (methods may pop fields from the dict they get back).
        for party in result.opened_by:
            self.channel.observe(party, Message(round, name + ":sum", party, party, "aggregate", 0, dict(total)))

    def cost(self) -> dict:
        """Bytes sent by clients (up: to the server and to other clients) and by the server (down), per
        party and in total, and per directed link ("client0->server": bytes)."""
        up = sum(self.channel.sent[c] for c in self.clients)
        return {
            "bytes_up": int(up),
            "bytes_down": int(self.channel.sent[SERVER]),
            "bytes_up_per_client": [int(self.channel.sent[c]) for c in self.clients],
            "messages": self.channel.messages,
            "by_link": {f"{a}->{b}": int(n) for (a, b), n in sorted(self.channel.links.items())},
            "participation": self.participation_summary(),
        }

    def participation_summary(self) -> dict:
        """Per-round participation: how many sums were revealed, how many client inputs they missed, and
        for every sum that missed one, its round, message, survivors and the clients left out."""
        everyone = list(range(self.num_clients))
        partial = [{"round": r, "message": name, "survivors": survivors,
                    "dropped": sorted(set(everyone) - set(survivors))}
                   for (r, name), survivors in self.participation.items() if survivors != everyone]
        return {"sums": len(self.participation), "dropped_inputs": sum(len(p["dropped"]) for p in partial),
                "partial_sums": partial}
