"""The only module that imports CrypTen 0.4.1; it makes CrypTen work on torch 2.13 and fixes decode.

1. Import shim: CrypTen imports ``torch.onnx._internal.registration``, which torch 2.13 moved to
   ``torch.onnx._internal.torchscript_exporter.registration``; the old name is aliased in
   ``sys.modules`` before ``import crypten``.
2. Fixed-point encoding: CrypTen's ``FixedPointEncoder.encode`` truncates toward zero. ``encode``
   first rounds x to the nearest multiple of 2^-p (exact in float64), so CrypTen's encoder then
   returns round(x * 2^p) exactly and the per-value error is <= 2^-(p+1).
3. Fixed-point decoding: upstream ``FixedPointEncoder.decode`` returns some negative values
   exactly 1.0 too low (e.g. encode(-511.0546875) + encode(-1.9375) decodes to -513.99...).
   ``decode`` uses floor division plus an exact fractional part instead.
4. Multi-process parties: ``init_party``/``party_secure_sum``/``shutdown_party`` run real CrypTen
   (PRZS sharing over torch.distributed gloo) inside one party process.
5. Threaded parties: ``run_parties`` runs a CrypTen program (secret-shared arithmetic,
   comparisons, sqrt, reciprocal) among K+1 parties, one thread each, with per-thread RNG seeds
   and a recording communicator, so that every message a party sent is known (see below).
6. Randomness: CrypTen 0.4.1 seeds torch generators with 64-bit seeds, of which torch's CPU
   ``manual_seed`` keeps 32 bits, so a party that sees a masked value can search every seed. On
   import, every CrypTen binding of ``generate_random_ring_element`` and
   ``generate_kbit_random_tensor`` is replaced by a draw from a ``keystream.ChaChaStream`` (256-bit
   keys from os.urandom), and ``crypten._setup_prng`` by one that exchanges 32-byte keys as CrypTen
   exchanges its seeds (prev/next pairwise, global from rank 0). A torch.Generator reaching those
   functions raises ``RngError``, except in a run with ``rng="torch-32bit-unsafe"`` (the audit's
   negative control: CrypTen's own generators, optionally with the dealer's seed planted in a window).
"""

from __future__ import annotations

import copy
import importlib
import os
import pickle
import queue
import secrets
import sys
import threading
import time
import traceback
import warnings

import numpy as np
import torch

from protocols.keystream import KEY_BYTES, ChaChaStream

_OLD_REGISTRATION = "torch.onnx._internal.registration"
_NEW_REGISTRATION = "torch.onnx._internal.torchscript_exporter.registration"


def load_crypten():
    """Import and return the ``crypten`` module, applying the torch 2.13 import shim first."""
    if _OLD_REGISTRATION not in sys.modules:
        try:
            sys.modules[_OLD_REGISTRATION] = importlib.import_module(_NEW_REGISTRATION)
        except ImportError:  # an older torch that still has the original module
            pass
    # torch.cat/stack on CrypTen tensors go through CrypTen's (plain-method) __torch_function__, which
    # torch 2.x warns about on every call; the dispatch works.
    warnings.filterwarnings("ignore", message="Defining your `__torch_function__` as a plain method",
                            category=UserWarning)
    import crypten  # noqa: PLC0415 - the single place CrypTen is imported

    if not _RNG_ORIGINALS:
        _install_chacha_rng(crypten)
    return crypten


# --- 6. Randomness ------------------------------------------------------------------------------------

RNG_CHACHA = "chacha20"
RNG_UNSAFE = "torch-32bit-unsafe"
RNG_MODES = (RNG_CHACHA, RNG_UNSAFE)
_RNG_FUNCTIONS = ("generate_random_ring_element", "generate_kbit_random_tensor")
_RNG_ORIGINALS: dict = {}  # CrypTen's own functions, by name (kept for rng=torch-32bit-unsafe only)
_CPU = torch.device("cpu")
_torch_rng_allowed = False  # True only while a run_parties(rng=RNG_UNSAFE) runs


class RngError(RuntimeError):
    """CrypTen asked for randomness that is not a 256-bit ChaCha20 stream."""


def _shape(size) -> tuple[int, ...]:
    return tuple(int(n) for n in size) if isinstance(size, (tuple, list, torch.Size)) else (int(size),)


def _stream(generator, device):
    """The generator a CrypTen draw uses: its own, or this party's "local" one."""
    if device is not None and torch.device(device).type != "cpu":
        raise RngError(f"CrypTen randomness on {device}: only the CPU generators are keyed")
    if generator is None:
        generator = load_crypten().generators["local"][_CPU]
    if isinstance(generator, ChaChaStream) or (_torch_rng_allowed and isinstance(generator, torch.Generator)):
        return generator
    raise RngError(f"CrypTen drew from a {type(generator).__name__}, not a ChaCha20 stream")


def random_ring_element(size, ring_size=2**64, generator=None, **kwargs) -> torch.Tensor:
    """CrypTen's ``generate_random_ring_element``: uniform int64 over Z_2^64 of ``size``."""
    stream = _stream(generator, kwargs.get("device"))
    if isinstance(stream, torch.Generator):
        return _RNG_ORIGINALS["generate_random_ring_element"](size, ring_size, generator=stream, **kwargs)
    if ring_size != 2**64:
        raise RngError(f"ring_size {ring_size}: only Z_2^64 is drawn")
    return stream.ring(_shape(size))


def kbit_random_tensor(size, bitlength=None, generator=None, **kwargs) -> torch.Tensor:
    """CrypTen's ``generate_kbit_random_tensor``: uniform in [0, 2^bitlength), or Z_2^64 for 64 bits."""
    stream = _stream(generator, kwargs.get("device"))
    if isinstance(stream, torch.Generator):
        return _RNG_ORIGINALS["generate_kbit_random_tensor"](size, bitlength, generator=stream, **kwargs)
    if bitlength is None or bitlength == 64:
        return stream.ring(_shape(size))
    return stream.bits(_shape(size), bitlength)


_REPLACEMENTS = {"generate_random_ring_element": random_ring_element,
                 "generate_kbit_random_tensor": kbit_random_tensor}


def _key_tensor(key: bytes) -> torch.Tensor:
    return torch.from_numpy(np.frombuffer(key, dtype="<i8").astype(np.int64))


def _tensor_key(t: torch.Tensor) -> bytes:
    return t.numpy().astype("<i8").tobytes()


def setup_chacha_prng() -> None:
    """CrypTen's ``_setup_prng`` with 256-bit keys: a fresh "next" key goes to the next party and the
    previous party's arrives as "prev" (PRZS pairs), rank 0's "global" key is broadcast, "local" stays
    here; each becomes this party's ChaChaStream in ``crypten.generators`` (CPU only)."""
    crypten = load_crypten()
    comm = crypten.communicator.get()
    rank, world_size = comm.get_rank(), comm.get_world_size()
    next_key = _key_tensor(os.urandom(KEY_BYTES))
    prev_key = torch.zeros(KEY_BYTES // 8, dtype=torch.int64)
    if world_size >= 2:
        sent = comm.isend(next_key, (rank + 1) % world_size)
        received = comm.irecv(prev_key, src=(rank - 1) % world_size)
        sent.wait()
        received.wait()
    else:
        prev_key = next_key
    global_key = comm.broadcast(_key_tensor(os.urandom(KEY_BYTES)), 0)
    generators = crypten.generators
    for name in list(generators.keys()):
        generators[name].clear()
    generators["prev"][_CPU] = ChaChaStream(_tensor_key(prev_key))
    generators["next"][_CPU] = ChaChaStream(_tensor_key(next_key))
    generators["local"][_CPU] = ChaChaStream.fresh()
    generators["global"][_CPU] = ChaChaStream(_tensor_key(global_key))


def _install_chacha_rng(crypten) -> None:
    """Point every loaded CrypTen module's binding of the two rng functions, and crypten._setup_prng,
    at the ChaCha20 versions above (modules bind the names at import, so each binding is replaced)."""
    import crypten.common.rng as rng  # noqa: PLC0415

    for name in _RNG_FUNCTIONS:
        _RNG_ORIGINALS[name] = getattr(rng, name)
    _RNG_ORIGINALS["_setup_prng"] = crypten._setup_prng
    for module_name, module in list(sys.modules.items()):
        if module is None or not (module_name == "crypten" or module_name.startswith("crypten.")):
            continue
        for name in _RNG_FUNCTIONS:
            if getattr(module, name, None) is _RNG_ORIGINALS[name]:
                setattr(module, name, _REPLACEMENTS[name])
    crypten._setup_prng = setup_chacha_prng
    import crypten.mpc.provider.ttp_provider as ttp  # noqa: PLC0415

    ttp.TTPClient = _DealerClient


def torch_rng_bindings() -> list[str]:
    """The CrypTen modules that still bind one of CrypTen's own rng functions (empty once installed)."""
    load_crypten()
    return [f"{module_name}.{name}" for module_name, module in list(sys.modules.items())
            if module is not None and (module_name == "crypten" or module_name.startswith("crypten."))
            for name in _RNG_FUNCTIONS if getattr(module, name, None) is _RNG_ORIGINALS[name]]


def party_generator_keys() -> dict[str, bytes]:
    """This party's generator keys (call inside a run_parties program; for tests): "prev", "next",
    "local", "global" and, under dealer="party", "dealer" (the stream it shares with the dealer)."""
    generators = load_crypten().generators
    keys = {name: generators[name][_CPU].key for name in _GENERATOR_KEYS}
    client = getattr(_DealerClient._threads, "client", None)
    if client is not None:
        keys["dealer"] = client.stream.key
    return keys


def _setup_unsafe_prng(window: int | None) -> None:
    """CrypTen's own ``_setup_prng`` (torch generators, 32 effective seed bits); with ``window`` the
    dealer's (rank 0's) "local" seed is drawn below window instead, so an audit can find it fast."""
    crypten = load_crypten()
    _RNG_ORIGINALS["_setup_prng"]()
    if window is not None and crypten.communicator.get().get_rank() == 0:
        crypten.generators["local"][_CPU].manual_seed(secrets.randbelow(window))


def fixed_point_encoder(precision_bits: int):
    """CrypTen's ``FixedPointEncoder`` with scale 2^precision_bits."""
    load_crypten()
    from crypten.encoder import FixedPointEncoder  # noqa: PLC0415

    return FixedPointEncoder(precision_bits=precision_bits)


def encode(x: torch.Tensor, precision_bits: int) -> torch.Tensor:
    """Fixed-point encode: float64 or int64 tensor -> int64 round(x * 2^p) (CrypTen's encoder).

    The caller guarantees |x| * 2^p < 2^63.
    """
    encoder = fixed_point_encoder(precision_bits)
    if not x.is_floating_point():
        return encoder.encode(x.to(torch.int64))
    scale = float(1 << precision_bits)
    on_grid = np.round(x.to(torch.float64).numpy() * scale) / scale  # exact: scale is a power of two
    return encoder.encode(torch.from_numpy(on_grid))


def decode(v: torch.Tensor, precision_bits: int) -> torch.Tensor:
    """Fixed-point decode: int64 tensor v -> float64 v / 2^p (one rounding, at the final add)."""
    ring = v.numpy()
    whole = ring >> precision_bits  # arithmetic shift: floor division by 2^p
    frac = ring & ((1 << precision_bits) - 1)  # in [0, 2^p)
    return torch.from_numpy(whole.astype(np.float64) + frac.astype(np.float64) / float(1 << precision_bits))


def upstream_decode(v: torch.Tensor, precision_bits: int) -> torch.Tensor:
    """CrypTen's own (buggy) decode, kept so the tests can show what ``decode`` fixes."""
    return fixed_point_encoder(precision_bits).decode(v)


def init_party(rank: int, world_size: int, rendezvous: str) -> None:
    """Join the CrypTen party group as ``rank`` over gloo at ``rendezvous`` (tcp://host:port)."""
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        RENDEZVOUS=rendezvous,
        DISTRIBUTED_BACKEND="gloo",
    )
    load_crypten().init()


def party_secure_sum(
    encoded: torch.Tensor | None, shape: tuple[int, ...], num_clients: int, server: int
) -> torch.Tensor | None:
    """One party's part of a secure sum of int64 inputs held by ranks 0..num_clients-1.

    encoded: this party's int64 input if it is a client, else None. Every client input is shared
    by CrypTen (pseudo-random zero sharing, src=k, precision 0 so the int64 values are used
    as they are), the shares are summed locally and the ring sum is opened to ``server`` only.
    Returns the int64 sum mod 2^64 on the server, None elsewhere.
    """
    crypten = load_crypten()
    from crypten.mpc.primitives import ArithmeticSharedTensor  # noqa: PLC0415

    rank = crypten.communicator.get().get_rank()
    total = None
    for src in range(num_clients):
        data = encoded if rank == src else None
        share = ArithmeticSharedTensor(data, size=shape, src=src, precision=0)
        total = share if total is None else total + share
    opened = total.reveal(dst=server)
    return opened if rank == server else None


def shutdown_party() -> None:
    """Leave the CrypTen party group."""
    crypten = load_crypten()
    if crypten.is_initialized():
        crypten.uninit()


# --- 5. Threaded parties: a CrypTen computation among K+1 parties inside this process ---------------
#
# ``run_parties`` runs one CrypTen party per thread. CrypTen 0.4.1's own thread mode cannot be used
# as it is: its RNG generators (``crypten.generators``: the PRZS seeds shared with the previous and
# next party, the local and global seeds) are one module-level dict that every thread would
# overwrite, and its ``InProcessCommunicator`` mixes point-to-point and collective messages in one
# queue per party (a broadcast can overtake a seed). So, for the duration of one run:
# - ``crypten.generators`` is a per-thread mapping (each party draws its own 256-bit keys from
#   os.urandom and exchanges them as CrypTen does its seeds, over the wire below; section 6);
# - every party's communicator is a ``_WireCommunicator``: one FIFO queue per ordered pair of
#   parties, every collective written as point-to-point messages, and every message recorded
#   (sender rank, receiver rank, the step the sender is in, the int64 payload bytes). all_reduce
#   (every opening, e.g. Beaver's masked ε, δ) is booked as each party sending its share to every
#   other party; reduce(dst) as each party sending its share to dst.
# Only one threaded run at a time (a lock); CrypTen's configuration overrides hold for the run.

_RUN_LOCK = threading.Lock()
_GENERATOR_KEYS = ("prev", "next", "local", "global")


class PartyError(RuntimeError):
    """A party thread failed or a message did not arrive in time."""


class _ThreadGenerators:
    """Stands in for ``crypten.generators``: the same four dicts, one set per thread."""

    def __init__(self):
        self._local = threading.local()

    def _own(self) -> dict:
        if not hasattr(self._local, "generators"):
            self._local.generators = {key: {} for key in _GENERATOR_KEYS}
        return self._local.generators

    def __getitem__(self, key):
        return self._own()[key]

    def keys(self):
        return self._own().keys()


class _Wire:
    """The messages of one threaded run: a queue per (sender, receiver) and the log of every send.
    Endpoints: the world_size CrypTen parties, then the dealer (rank world_size) if there is one."""

    def __init__(self, world_size: int, timeout_s: float, endpoints: int | None = None):
        self.world_size = world_size
        self.timeout_s = timeout_s
        ends = range(endpoints or world_size)
        self.queues = {(a, b): queue.Queue() for a in ends for b in ends if a != b}
        self.log: list[tuple[str, int, int, bytes]] = []  # (step, sender, receiver, payload)
        self.lock = threading.Lock()
        self.steps = ["setup"] * len(ends)
        self.failed = threading.Event()
        self.barrier = threading.Barrier(world_size)

    def put(self, sender: int, receiver: int, payload) -> None:
        data = _payload_bytes(payload)
        with self.lock:
            self.log.append((self.steps[sender], sender, receiver, data))
        self.queues[(sender, receiver)].put(payload)

    def get(self, sender: int, receiver: int, timeout_s: float | None = None):
        """The next message from sender to receiver; PartyError after timeout_s (default: the run's)
        or as soon as any party failed."""
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        while True:
            if self.failed.is_set():
                raise PartyError("another party failed")
            try:
                return self.queues[(sender, receiver)].get(timeout=0.05)
            except queue.Empty:
                if time.monotonic() > deadline:
                    raise PartyError(f"party {receiver} waited {self.timeout_s if timeout_s is None else timeout_s:g}s "
                                     f"for party {sender}") from None


def _payload_bytes(payload) -> bytes:
    """What a message carries on the wire: little-endian int64 (or the tensor's dtype) bytes; a list
    (CrypTen's batched collectives) is the concatenation; other objects are pickled."""
    if isinstance(payload, (list, tuple)):
        return b"".join(_payload_bytes(p) for p in payload)
    if torch.is_tensor(payload):
        a = payload.detach().cpu().contiguous().numpy()
        return a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
    return pickle.dumps(payload)


def _copy(payload):
    if isinstance(payload, (list, tuple)):
        return [_copy(p) for p in payload]
    return payload.detach().clone() if torch.is_tensor(payload) else copy.deepcopy(payload)


def _reduce(items: list, op=None):
    """Sum of same-shape tensors (int64 wraps mod 2^64: the ring), or their XOR for op=BXOR (binary
    shares); elementwise over lists (batched)."""
    if isinstance(items[0], list):
        return [_reduce([item[i] for item in items], op) for i in range(len(items[0]))]
    if op is None or op == torch.distributed.ReduceOp.SUM:
        return torch.stack(items).sum(0)
    if op == torch.distributed.ReduceOp.BXOR:
        out = items[0].clone()
        for item in items[1:]:
            out ^= item
        return out
    raise NotImplementedError(f"reduce op {op}")


def _communicator_class():
    load_crypten()
    from crypten.communicator import Communicator  # noqa: PLC0415

    class _WireCommunicator(Communicator):
        """CrypTen's communicator interface over a ``_Wire`` (see above)."""

        BYTES_PER_ELEMENT = 8

        def __init__(self, rank: int, world_size: int, wire: _Wire):
            self.rank, self.world_size, self.wire = rank, world_size, wire
            self._name = f"rank{rank}"
            self.reset_communication_stats()

        def _others(self):
            return [r for r in range(self.world_size) if r != self.rank]

        def send(self, tensor, dst):
            self.wire.put(self.rank, dst, _copy(tensor))

        def recv(self, tensor, src=None):
            if src is None:
                raise NotImplementedError("recv needs a source party")
            return self.wire.get(src, self.rank)

        def isend(self, tensor, dst):
            self.send(tensor, dst)
            return _Done()

        def irecv(self, tensor, src=None):
            wire, rank = self.wire, self.rank

            class _Pending:
                def wait(self):
                    tensor.copy_(wire.get(src, rank))

                def is_completed(self):
                    return False

            return _Pending()

        def scatter(self, scatter_list, src, size=None, device=None):
            if self.rank == src:
                for r in self._others():
                    self.wire.put(self.rank, r, _copy(scatter_list[r]))
                return scatter_list[self.rank].clone()
            return self.wire.get(src, self.rank)

        def gather(self, tensor, dst):
            if self.rank != dst:
                self.wire.put(self.rank, dst, _copy(tensor))
                return [None]
            return [_copy(tensor) if r == dst else self.wire.get(r, dst) for r in range(self.world_size)]

        def all_gather(self, tensor):
            for r in self._others():
                self.wire.put(self.rank, r, _copy(tensor))
            return [_copy(tensor) if r == self.rank else self.wire.get(r, self.rank) for r in range(self.world_size)]

        def reduce(self, input, dst, op=None, batched=False):
            gathered = self.gather(input, dst)
            return _reduce(gathered, op) if self.rank == dst else None

        def all_reduce(self, input, op=None, batched=False):
            return _reduce(self.all_gather(input), op)

        def broadcast(self, input, src, group=None, batched=False):
            if self.rank == src:
                for r in self._others():
                    self.wire.put(self.rank, r, _copy(input))
                return input
            received = self.wire.get(src, self.rank)
            if batched:
                for target, value in zip(input, received):
                    target.copy_(value)
                return input
            input.copy_(received)
            return input

        def barrier(self):
            self.wire.barrier.wait(timeout=self.wire.timeout_s)

        def send_obj(self, obj, dst, group=None):
            self.wire.put(self.rank, dst, copy.deepcopy(obj))

        def recv_obj(self, src, group=None):
            return self.wire.get(src, self.rank)

        def broadcast_obj(self, obj, src, group=None):
            if self.rank == src:
                for r in self._others():
                    self.wire.put(self.rank, r, copy.deepcopy(obj))
                return obj
            return self.wire.get(src, self.rank)

        def get_world_size(self):
            return self.world_size

        def get_rank(self):
            return self.rank

        def set_name(self, name):
            self._name = name

        def get_name(self):
            return self._name

    return _WireCommunicator


class _Done:
    def wait(self):
        pass

    def is_completed(self):
        return True


class Party:
    """What a party's program sees: its rank, the world size, and the CrypTen operations that move
    data in or out of the secret-shared world. Everything in between is CrypTen's MPCTensor API."""

    def __init__(self, rank: int, world_size: int, wire: _Wire, precision_bits: int):
        self.rank, self.world_size, self._wire = rank, world_size, wire
        self.precision_bits = precision_bits

    @property
    def step(self) -> str:
        return self._wire.steps[self.rank]

    @step.setter
    def step(self, name: str) -> None:
        """Label the messages this party sends from now on (e.g. "compute", "reveal")."""
        self._wire.steps[self.rank] = name

    def share(self, tensor: torch.Tensor | None, src: int, shape: tuple[int, ...]):
        """Secret-share party src's float tensor (CrypTen PRZS: no message is sent); every other
        party passes None. The value is rounded to the 2^-p grid first (CrypTen's encoder truncates)."""
        crypten = load_crypten()
        if self.rank == src:
            scale = float(1 << self.precision_bits)
            data = torch.round(tensor.to(torch.float64) * scale) / scale
        else:
            data = torch.zeros(shape, dtype=torch.float64)
        return crypten.cryptensor(data, src=src, precision=self.precision_bits)

    def reveal(self, x, dst: int) -> torch.Tensor | None:
        """Open shared x to party dst only (every other party sends it its share): float64 on dst,
        None elsewhere (decoded with ``decode``, not CrypTen's)."""
        ring = x.reveal(dst=dst)
        if self.rank != dst:
            return None
        precision = x.encoder._precision_bits
        return decode(ring.reshape(-1), precision).reshape(ring.shape)


# --- 7. The dealer: a party of its own that deals the Beaver triples ------------------------------------
#
# Under CrypTen's default TFP provider rank 0 (client 0) draws the triples' masks a, b itself and every
# product opens x − a to all parties, so client 0 reads every multiplied value. With dealer="party" the
# run uses CrypTen's TTP provider instead (``TrustedThirdParty``: each party draws its shares of a, b, c
# from a generator it shares with the dealer; rank 0 asks the dealer for its share of c), with a dealer
# thread in place of CrypTen's TTP process: the dealer sends each party a fresh 32-byte key (its
# ChaChaStream of dealer randomness) and answers rank 0's requests with CrypTen's own TTPServer
# functions on copies of those streams. The dealer receives only the requests (sizes and operation
# names) and never a share of a value: it learns nothing, and only the dealer together with the server
# (or any party that sees an opening) can remove the masks.

DEALER_PARTY = "party"
DEALER_CLIENT0 = "client0"
DEALERS = (DEALER_PARTY, DEALER_CLIENT0)


class _DealerStream(ChaChaStream):
    """A ChaChaStream with the ``device`` attribute CrypTen's TTP code reads off a torch generator."""

    device = _CPU


class _DealerClient:
    """Stands in for CrypTen's ``TTPClient`` (installed on import): one per party thread, holding that
    party's dealer stream and its link to the dealer."""

    _threads = threading.local()

    def __init__(self, rank: int, wire: _Wire, dealer_rank: int):
        self.rank, self.wire, self.dealer_rank = rank, wire, dealer_rank
        self.stream = _DealerStream(_tensor_key(wire.get(dealer_rank, rank)))

    @classmethod
    def attach(cls, rank: int, wire: _Wire, dealer_rank: int) -> None:
        """Receive this party's dealer key (step "setup") and make it this thread's TTPClient."""
        cls._threads.client = cls(rank, wire, dealer_rank)

    @classmethod
    def get(cls) -> "_DealerClient":
        client = getattr(cls._threads, "client", None)
        if client is None:
            raise RngError("CrypTen's TTP provider outside a run_parties(dealer='party'): no dealer to ask")
        return client

    @staticmethod
    def _init() -> None:
        raise RngError("CrypTen's TTP process is not used: run_parties(dealer='party') has its own dealer")

    @staticmethod
    def uninit() -> None:
        pass

    def get_generator(self, device=None) -> _DealerStream:
        if device is not None and torch.device(device).type != "cpu":
            raise RngError(f"dealer randomness on {device}: only the CPU streams are keyed")
        return self.stream

    def ttp_request(self, func_name: str, device, *args, **kwargs) -> torch.Tensor:
        """Rank 0's share of a correlated value: ask the dealer (CrypTen's TTPClient.ttp_request)."""
        self.wire.put(self.rank, self.dealer_rank, (func_name, args, kwargs))
        return self.wire.get(self.dealer_rank, self.rank)


def _serve_as_dealer(wire: _Wire, world_size: int, dealer_rank: int) -> None:
    """The dealer thread: a fresh key to each party, then rank 0's requests until it sends None."""
    from crypten.mpc.provider.ttp_provider import TTPServer  # noqa: PLC0415

    keys = [os.urandom(KEY_BYTES) for _ in range(world_size)]
    for rank, key in enumerate(keys):
        wire.put(dealer_rank, rank, _key_tensor(key))
    wire.steps[dealer_rank] = "compute"
    server = object.__new__(TTPServer)  # its additive/square/binary/wraps/B2A functions, not its process loop
    server.generators, server.generators_cuda, server.device = [_DealerStream(k) for k in keys], [], None
    while (request := wire.get(0, dealer_rank, timeout_s=float("inf"))) is not None:  # ends when a party fails
        func_name, args, kwargs = request
        wire.put(dealer_rank, 0, getattr(server, func_name)(*args, **kwargs))


def run_parties(world_size: int, program, precision_bits: int = 16, config: dict | None = None,
                timeout_s: float = 120.0, rng: str = RNG_CHACHA, unsafe_seed_window: int | None = None,
                dealer: str = DEALER_PARTY) -> tuple[list, list[tuple[str, int, int, bytes]], list[dict]]:
    """Run ``program(party)`` as world_size CrypTen parties, one thread each, in this process.

    Returns (each rank's return value, the message log [(step, sender, receiver, payload bytes)],
    each rank's seconds per step). ``config``: CrypTen config overrides for the run (e.g.
    {"functions.sqrt_nr_iters": 12}); the encoder's precision is ``precision_bits``. A party that
    raises, or waits longer than timeout_s for a message, raises PartyError here.
    ``rng``: "chacha20" (default: section 6) or "torch-32bit-unsafe" (CrypTen's own torch generators;
    ``unsafe_seed_window`` plants rank 0's local seed below it): an audit's negative control only.
    ``dealer``: who deals the Beaver triples and other correlated randomness (section 7): "party", a
    dealer thread (rank world_size on the message log) that is none of the parties, or "client0"
    (CrypTen's TFP: rank 0 deals and can open every multiplied value)."""
    global _torch_rng_allowed
    if dealer not in DEALERS:
        raise ValueError(f"dealer: expected one of {', '.join(DEALERS)}, got {dealer!r}")
    if rng not in RNG_MODES:
        raise ValueError(f"rng: expected one of {', '.join(RNG_MODES)}, got {rng!r}")
    if unsafe_seed_window is not None and (rng != RNG_UNSAFE or not 1 <= unsafe_seed_window <= 2**32):
        raise ValueError(f"unsafe_seed_window: expected 1..2^32 with rng={RNG_UNSAFE}, got {unsafe_seed_window!r}")
    crypten = load_crypten()
    import crypten.communicator as comm  # noqa: PLC0415
    from crypten.communicator import InProcessCommunicator  # noqa: PLC0415

    wire_class = _communicator_class()
    with _RUN_LOCK:
        if comm.is_initialized():
            raise PartyError("run_parties: CrypTen is already initialised in this thread")
        dealer_rank = world_size if dealer == DEALER_PARTY else None
        wire = _Wire(world_size, timeout_s, world_size + (dealer_rank is not None))
        results: list = [None] * world_size
        errors: list = [None] * (world_size + 1)  # the last: the dealer's
        times: list[dict] = [{} for _ in range(world_size)]

        def body(rank: int) -> None:
            try:
                timed = _TimedParty(Party(rank, world_size, wire, precision_bits), times[rank])  # step "setup"
                InProcessCommunicator.tls.instance = wire_class(rank, world_size, wire)
                if rng == RNG_UNSAFE:
                    _setup_unsafe_prng(unsafe_seed_window)
                else:
                    crypten._setup_prng()  # keys from os.urandom, exchanged over the wire ("setup")
                if dealer_rank is not None:
                    _DealerClient.attach(rank, wire, dealer_rank)
                results[rank] = program(timed)
                if dealer_rank is not None and rank == 0:
                    wire.put(0, dealer_rank, None)  # no more requests
                timed.close()
            except BaseException:  # noqa: BLE001 - reported to the caller below
                errors[rank] = traceback.format_exc()
                wire.failed.set()
                wire.barrier.abort()

        def deal() -> None:
            try:
                _serve_as_dealer(wire, world_size, dealer_rank)
            except BaseException:  # noqa: BLE001 - reported to the caller below
                errors[world_size] = traceback.format_exc()
                wire.failed.set()
                wire.barrier.abort()

        saved_generators = crypten.generators
        overrides = {"encoder.precision_bits": precision_bits, **(config or {})}
        if dealer_rank is not None:
            overrides["mpc.provider"] = "TTP"  # CrypTen's TTP provider, its TTPClient the _DealerClient below
        try:
            crypten.generators = _ThreadGenerators()
            _torch_rng_allowed = rng == RNG_UNSAFE
            setattr(comm, "__use_threads", True)
            with crypten.cfg.temp_override(overrides):
                threads = [threading.Thread(target=body, args=(rank,), name=f"privfgl-crypten-party{rank}", daemon=True)
                           for rank in range(world_size)]
                if dealer_rank is not None:
                    threads.append(threading.Thread(target=deal, name="privfgl-crypten-dealer", daemon=True))
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
        finally:
            crypten.generators = saved_generators
            _torch_rng_allowed = False
            setattr(comm, "__use_threads", False)
            InProcessCommunicator.tls = threading.local()
        failed = [(rank, e) for rank, e in enumerate(errors) if e is not None]
        if failed:
            first = next(((r, e) for r, e in failed if "another party failed" not in e), failed[0])
            who = "the dealer" if first[0] == world_size else f"party {first[0]}"
            raise PartyError(f"crypten {who} failed:\n{first[1]}")
        return results, wire.log, times


class _TimedParty(Party):
    """A Party that also books wall seconds per step (the time between step changes)."""

    def __init__(self, party: Party, seconds: dict):
        super().__init__(party.rank, party.world_size, party._wire, party.precision_bits)
        self._seconds = seconds
        self._mark = time.perf_counter()

    def _book(self) -> None:
        now = time.perf_counter()
        self._seconds[self.step] = self._seconds.get(self.step, 0.0) + now - self._mark
        self._mark = now

    @Party.step.setter
    def step(self, name: str) -> None:
        self._book()
        self._wire.steps[self.rank] = name

    def close(self) -> None:
        self._book()


def at_least_powers_of_two(x, positions: list[int]):
    """Secure x >= 2^(j - p) for many j at once, p the fixed-point precision of x.

    x: a CrypTen MPCTensor (arithmetic, fixed point, ring value X = x·2^p). Returns an MPCTensor of
    shape [*x.shape, len(positions)] at x's fixed-point scale: 1.0 where 0 <= X and X >= 2^j, else 0.
    Cost: one A2B conversion of x (CrypTen's binary adder over the parties' shares, the expensive part
    with many parties), a prefix OR over the bits (6 rounds of binary AND) and one single-bit B2A per
    output, instead of one full CrypTen comparison (an A2B each) per threshold.
    The dealer's masks hide these bits as any comparison's (under dealer="client0", rank 0 can open them)."""
    load_crypten()
    from crypten.mpc.primitives import BinarySharedTensor, beaver  # noqa: PLC0415
    from crypten.mpc.primitives.converters import convert  # noqa: PLC0415
    from crypten.mpc.ptype import ptype as Ptype  # noqa: PLC0415

    if not positions or any(not 0 <= j <= 62 for j in positions):
        raise ValueError(f"positions: expected bit positions in 0..62, got {positions}")
    xb = convert(x._tensor, Ptype.binary)                     # XOR shares of the two's complement X
    nonneg = xb.rshift(63) & 1 ^ 1                             # 1 where X >= 0 (sign bit clear)
    z = xb & ((1 << 63) - 1)
    for s in (1, 2, 4, 8, 16, 32):                             # z bit j: some bit >= j of X is set
        z = z | z.rshift(s)
    bits = BinarySharedTensor.stack([z.rshift(j) & 1 for j in positions], dim=-1)
    bits = bits & BinarySharedTensor.stack([nonneg] * len(positions), dim=-1)
    arithmetic = beaver.B2A_single_bit(bits)                   # integer 0/1 shares
    out = x.shallow_copy()
    arithmetic.share = arithmetic.share * x.encoder.scale      # exact: 0/1 -> 0/2^p in the ring
    arithmetic.encoder = x.encoder
    out._tensor = arithmetic
    return out
