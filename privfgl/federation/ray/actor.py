"""A client actor: one Ray actor that hosts one client, or a group of clients trained with the stacked engine.

It loads the graph and keeps its own clients' subgraphs only. It holds their models and optimizer state and
their side of the protocol: secagg's key pairs, seeds, shares and masks; the ckks/bfv encryption key; and, on
client 0's actor, the ckks/bfv key holder's secret key. What leaves it is what the protocol sends (as bytes),
the public shapes of its messages, and evaluation counts for the experimenter's tracker.

The class is plain Python; privfgl.federation.ray.clients makes it a Ray actor (``ray.remote``), so that
this module loads without Ray.
"""
from __future__ import annotations

import os
import signal

import numpy as np
import torch

from privfgl.evaluation import ClientEvaluation
from privfgl.federation.runtime import flatten
from privfgl.federation.ray.wire import decode_tensors, encode_tensors
from protocols.secagg.protocol import _ANSWER  # round 4's answer header: kind (0: b, 1: s) || owner || x


class ClientHost:
    """Clients `members` (global indices) of the run `cfg` (a privfgl.experiment.RunConfig)."""

    def __init__(self, cfg, members: list[int], threads: int = 1, dp=None):
        """dp: (DPSpec, tolerated colluders) of the run's message DP, or None: this actor clips and noises
        its clients' DP messages itself, from its own OS-entropy noise source."""
        from privfgl.experiment import build_clients, seed_everything  # noqa: PLC0415
        torch.set_num_threads(threads)
        seed_everything(cfg.seed)
        built = build_clients(cfg)
        self.members = list(members)
        self.clients = {k: built.clients[k] for k in self.members}  # the others' subgraphs are dropped here
        del built.clients
        self.num_classes = built.num_classes
        self.public = {"num_nodes": built.num_nodes, "dataset_name": built.dataset_name,
                       "num_classes": built.num_classes,
                       "num_features": int(next(iter(self.clients.values())).num_features),
                       "node_counts": {k: int(c.num_nodes) for k, c in self.clients.items()},
                       "extras": {k: v for k, v in built.extras.items() if k in ("partition_file", "split_file")}}
        self.views = {k: ClientEvaluation(c, built.num_classes) for k, c in self.clients.items()}
        self.device = cfg.device
        self.trainers = None
        self.received = None  # the last global model received (the FedProx anchor)
        self.pending: dict[int, np.ndarray] = {}  # client -> its flat message of the sum in progress
        self.secagg_group = None
        self.keyring = None
        self.kill_at: dict[int, set[int]] = {}  # secagg round -> clients whose actor SIGKILLs itself there
        self.key_holder = None  # client 0's actor: the ckks/bfv protocol object, with the keys
        self.encryptors: dict = {}
        self.crypten_clients = cfg.clients
        self.states: dict[int, dict] = {k: {} for k in self.members}  # each client's state of a method's steps
        self.dp = None
        if dp is not None:
            from privfgl.privacy import MessageDP  # noqa: PLC0415
            spec, colluders = dp
            self.dp = MessageDP(spec, cfg.clients, colluders)

    def reset(self, cfg, members: list[int], threads: int = 1, dp=None) -> dict:
        """This actor, kept warm by an ActorPool, for another run: everything of the last run dropped (its
        clients' data, models, states, keys), then set up as a new actor would be. Returns ``describe()``."""
        self.close()
        self.__dict__.clear()
        self.__init__(cfg, members, threads, dp)
        return self.describe()

    def describe(self) -> dict:
        """What is public about these clients: sizes, the feature count, the dataset's name and size."""
        return self.public

    # --- training ------------------------------------------------------------------------------------
    def start_training(self, model_cfg, engine: str, init: dict, seeds: dict[int, int] | None) -> None:
        """init: client -> (header, bytes) of its initial parameters; seeds: client -> its dropout seed. A client
        whose step left a graph of its own in state["graph"] (LapGraph's released graph) trains on it."""
        from privfgl.training import make_trainers  # noqa: PLC0415
        params = [decode_tensors(*init[k]) for k in self.members]
        self.received = params[0]
        mine = [self.states[k].get("graph", self.clients[k]) for k in self.members]
        self.trainers = make_trainers(mine, model_cfg, params, engine, self.device,
                                      None if seeds is None else [seeds[k] for k in self.members])

    def set_params(self, header, data: bytes) -> None:
        self.received = decode_tensors(header, data)
        self.trainers.set_all_params(self.received)

    def train(self, epochs: int, prox_mu: float = 0.0) -> None:
        anchors = [self.received] * len(self.members) if prox_mu else None
        self.trainers.train(epochs, prox_mu=prox_mu, anchors=anchors)

    def tallies(self, with_loss: bool) -> dict[int, dict]:
        """Each client's evaluation counts (privfgl.evaluation.ClientEvaluation.tally)."""
        logits = self.trainers.predict()
        return {k: self.views[k].tally(out, with_loss) for k, out in zip(self.members, logits)}

    def make_upload(self, upload, name: str) -> tuple[list, bool]:
        """Each client's message `upload(k, its params, received, its data)`, kept for the sum that follows
        (``_keep``)."""
        return self._keep(name, [upload(k, self.trainers.get_params(i), self.received, self.clients[k])
                                 for i, k in enumerate(self.members)])

    def step_upload(self, step, args: tuple, name: str) -> tuple[list, bool]:
        """Each client's message step(k, its state, its data, *args) (a method's client step), kept for the
        sum that follows (``_keep``)."""
        return self._keep(name, [step(k, self.states[k], self.clients[k], *args) for k in self.members])

    def _keep(self, name: str, messages: list) -> tuple[list, bool]:
        """The clients' messages of sum `name`, clipped and noised here when the run's message DP protects
        `name` (unless its mode is central), flattened and kept for the sum that follows; returns their public
        layout (field names and shapes) and whether it is integer."""
        if self.dp is not None and self.dp.applies_to(name):
            messages = self.dp.protect(messages)
        self.pending, layouts = {}, []
        for k, message in zip(self.members, messages):
            flat, layout = flatten(message)
            self.pending[k] = flat.numpy()
            layouts.append(layout)
        if any(lay != layouts[0] for lay in layouts):
            raise ValueError("upload: the clients of one actor sent different fields")
        return layouts[0], self.pending[self.members[0]].dtype == np.int64

    # --- a method's client steps (privfgl.federation.client_steps) -------------------------------------
    def each(self, step, args: tuple) -> dict[int, object]:
        """Client -> step(k, its state, its data, *args); the result must be public (the step's contract)."""
        return {k: step(k, self.states[k], self.clients[k], *args) for k in self.members}

    def group(self, step, args: tuple) -> None:
        """step(its clients, their states, their data, *args): a group step over this actor's clients at once."""
        step(list(self.members), [self.states[k] for k in self.members], [self.clients[k] for k in self.members], *args)

    def each_tally(self, predict, args: tuple, with_loss: bool) -> dict[int, dict]:
        """Each client's evaluation counts of its logits predict(k, state, data, *args)."""
        return {k: self.views[k].tally(predict(k, self.states[k], self.clients[k], *args), with_loss)
                for k in self.members}

    def each_message(self, step, args: tuple) -> dict[int, tuple]:
        """Each client's clear message step(k, state, data, *args) as the bytes that cross (None: it sends
        nothing)."""
        out = {}
        for k in self.members:
            message = step(k, self.states[k], self.clients[k], *args)
            if message is not None:
                out[k] = encode_tensors(message)
        return out

    # --- plain ---------------------------------------------------------------------------------------
    def plain_upload(self, clients: list[int]) -> dict[int, bytes]:
        """The clients' messages as they cross in the clear: little-endian float64 (int64) bytes."""
        return {k: self.pending[k].astype(self.pending[k].dtype.newbyteorder("<"), copy=False).tobytes()
                for k in clients}

    # --- secagg --------------------------------------------------------------------------------------
    def secagg_begin(self, members, grid, index: dict[int, int], session_keys: bool,
                     kill_at: dict[int, list[int]]) -> None:
        """A new sum: `members` (protocol index, neighbours, holders, t) of this actor's clients; index:
        protocol index -> client; session_keys: keep the c key pairs across sums (secagg keys="session")."""
        from protocols.secagg.client import ClientGroup, KeyRing  # noqa: PLC0415
        if session_keys and self.keyring is None:
            self.keyring = KeyRing()
        self.secagg_group = ClientGroup(members, self.keyring if session_keys else None)
        self.grid, self.index = grid, dict(index)
        self.kill_at = {int(r): set(who) for r, who in kill_at.items()}

    def secagg(self, step: int, requests: dict) -> dict:
        """Round `step` (1-4) of the sum for the clients in `requests` (protocol index -> request):
        protocol index -> (its message as bytes, seconds)."""
        if any(self.index[u] in self.kill_at.get(step, ()) for u in requests):
            os.kill(os.getpid(), signal.SIGKILL)  # fault injection: this actor dies here, as a device would
        group = self.secagg_group
        if step == 1:
            return group.advertise(list(requests))
        if step == 2:
            return group.share(requests)
        if step == 3:
            inputs = {u: self.pending[self.index[u]] for u in requests}
            outputs = {u: np.empty(inputs[u].size, dtype=self.grid.dtype) for u in requests}
            done = group.mask(requests, self.grid, inputs, outputs)
            return {u: (y.tobytes(), s) for u, (y, s) in done.items()}
        done = group.unmask(requests)
        return {v: (tuple(_ANSWER.pack(kind, u, x) + share for kind, which in ((0, "b"), (1, "s"))
                          for u, (x, share) in sorted(answer[which].items())), s)
                for v, (answer, s) in done.items()}

    # --- ckks / bfv ----------------------------------------------------------------------------------
    def he_setup(self, name: str, params: dict, num_clients: int, integer: bool):
        """Client 0's actor, the key holder: the protocol object (its keys made here, once per run) and the
        public encoding of a sum of `num_clients` inputs (protocols.he_parties.Encoding)."""
        import protocols  # noqa: PLC0415
        from protocols import he_parties  # noqa: PLC0415
        if self.key_holder is None:
            self.key_holder = protocols.get_protocol(name, **params)
        return he_parties.encoding(self.key_holder, num_clients, integer)

    def he_encrypt(self, enc, clients: list[int]) -> dict[int, list[bytes]]:
        """The clients' messages on the grid, encrypted under the key holder's public key."""
        from protocols import he_parties  # noqa: PLC0415
        key = (enc.parameters, enc.public_key, enc.scale, enc.slots)
        if key not in self.encryptors:
            self.encryptors = {key: enc.encryptor()}
        encryptor = self.encryptors[key]
        return {k: encryptor.encrypt(he_parties.encode_input(enc, self.pending[k])) for k in clients}

    def he_decrypt(self, enc, sums: list[bytes], n: int) -> bytes:
        """The key holder: the sum decrypted, back on the grid, as the 8-byte values it sends on."""
        from protocols import he_parties  # noqa: PLC0415
        total = he_parties.finish(self.key_holder, enc, sums, n)
        return total.astype(total.dtype.newbyteorder("<"), copy=False).tobytes()

    # --- crypten ---------------------------------------------------------------------------------------
    def crypten_rendezvous(self) -> str:
        """Client 0's actor hosts the parties' torch.distributed rendezvous (rank 0): tcp://its node:port."""
        import socket  # noqa: PLC0415

        import ray  # noqa: PLC0415
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        return f"tcp://{ray.util.get_node_ip_address()}:{port}"

    def crypten_join(self, world_size: int, rendezvous: str) -> None:
        """This actor's client (rank = its index) joins the CrypTen party group (gloo), once per run."""
        from protocols import crypten_compat  # noqa: PLC0415
        crypten_compat.init_party(self.members[0], world_size, rendezvous)

    def crypten_sum(self, n: int, precision_bits: int, limit: float) -> float:
        """Its part of one secure sum: the client's message fixed-point encoded, shared by PRZS, the shares
        summed and opened to the server's party only. Returns the seconds it took to encode."""
        from protocols import crypten_compat  # noqa: PLC0415
        from protocols.base import ProtocolError  # noqa: PLC0415
        x = self.pending[self.members[0]]
        if x.size and float(np.abs(x).max()) > limit:
            raise ProtocolError(f"contributions: a client's contribution is outside the crypten fixed-point range "
                                f"|x| <= {limit:.6g} (the encoding's range / K: no party holds the sum to check it)")
        import time  # noqa: PLC0415
        t0 = time.perf_counter()
        encoded = crypten_compat.encode(torch.from_numpy(x), precision_bits)
        seconds = time.perf_counter() - t0
        crypten_compat.party_secure_sum(encoded, (n,), self.crypten_clients, server=self.crypten_clients)
        return seconds

    def usage(self) -> dict:
        """Where this actor ran and its process's peak resident memory (MB)."""
        import resource  # noqa: PLC0415

        import ray  # noqa: PLC0415
        return {"node": ray.get_runtime_context().get_node_id()[:12], "clients": self.members,
                "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}

    def close(self) -> None:
        if getattr(self, "key_holder", None) is not None:
            self.key_holder.close()


class ServerParty:
    """The server's CrypTen party (rank K) as its own actor on the driver's node, as secagg's and crypten's
    multi-process modes give the server its own process: it opens the ring sum, which it hands the driver
    (the server's steps) as bytes."""

    def join(self, world_size: int, rendezvous: str) -> None:
        from protocols import crypten_compat  # noqa: PLC0415
        torch.set_num_threads(1)
        self.clients = world_size - 1
        crypten_compat.init_party(self.clients, world_size, rendezvous)

    def sum(self, n: int) -> bytes:
        from protocols import crypten_compat  # noqa: PLC0415
        opened = crypten_compat.party_secure_sum(None, (n,), self.clients, server=self.clients).numpy()
        return opened.astype(opened.dtype.newbyteorder("<"), copy=False).tobytes()
