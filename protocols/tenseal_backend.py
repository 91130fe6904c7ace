"""`ckks` and `bfv`: homomorphic-encryption sums with SEAL, through TenSEAL 0.3.18's ``sealapi``.

Roles and messages (each a `Transfer` with its serialized bytes). Client 0 is the key holder: it
generates the keys when the protocol is built. Setup, once: the encryption parameters go to the
server (no key of any kind: adding ciphertexts needs none, so there are no Galois/relinearisation
keys anywhere) and, for public-key presets, the public key to the other clients. Per sum: every
client uploads its ciphertexts ("input"); the server loads the parameters into its own SEALContext,
adds the ciphertexts and sends the aggregate to the key holder ("aggregate"); the key holder
decrypts, decodes and sends the total to the server ("reveal"), or to every client under
reveal_to="clients". The server's view is the parameters, every upload, the aggregate it computed
and the revealed total (`privfgl --save-view` writes them as SEAL blobs).
Trust assumption: the server and the key holder do not collude (under the symmetric `sum` presets
every client holds the secret key, so the server must not collude with any client).

CKKS reveal (issue #15). CKKS decryption is approximate: the decoded total is sum + e, and e is a
known linear function of the secret key given the aggregate ciphertext, which the server holds.
Revealing the raw decoding lets the server solve for the key and decrypt every upload (Li and
Micciancio, EUROCRYPT 2021; `privfgl audit --attack he-key-recovery`). So by default
(reveal="grid") the clients round their inputs onto the public grid 2^-f, and the key holder rounds
the decoding back onto it: the sum of grid values is itself on the grid, and while |e| is below half
a step the rounding returns it exactly, a function of the inputs' sum alone that carries nothing of
e. f is the finest grid whose half step exceeds the decryption bound for the run's K (`grid_bits`;
`frac_bits=` fixes it, and a grid too fine for K raises ProtocolError). The revealed error is then
the clients' rounding, at most K*2^-(f+1). Noise flooding (the other known fix, OpenFHE's
NOISE_FLOODING_DECRYPT: the key holder adds noise of std about 2^(s/2) times the bound on e, for a
statistical security of s bits; Li, Micciancio, Schultz and Sorrell, CRYPTO 2022) was not chosen:
it hides e only statistically and per a budget of decryptions, and at s = 40 its std, with e
bounded at K = 10 by 5.6e-12 (default, scale 2^60) and 3.0e-8 (sum, scale 2^40), is 5.9e-6 and
3.1e-2, against the grid's worst case 4.8e-6 and 6.0e-7. The grid is exact and costs no accuracy
beyond its own rounding.
reveal="raw-unsafe" keeps the old behaviour (scale 2^40, raw decoding) for audits only.

Packing. A contribution is flattened into one vector and packed densely into ceil(n / slots)
ciphertexts (slots = N for BFV, N/2 for CKKS); only the last one is partly empty.

Presets (all 128-bit classical security by the HE standard table, which SEAL enforces:
N=4096 needs total coeff modulus <= 109 bits, N=8192 <= 218 bits). Bytes/value is the upload
len(serialized ciphertexts)/n measured for n = 20 full ciphertexts (SEAL's default compression);
"seeded" uploads are symmetric encryptions that SEAL stores as (c0, seed of c1), half size. The
aggregate sent back to the key holder is a full ciphertext ("down"). The error bound is that of the
revealed sum against the float inputs; for CKKS, K = 3 / 10 clients: grid f = 21 / 20 (default),
24 / 23 (sum); the raw decoding's bound, before hardening, was 1.8e-6 / 5.9e-6 (default) and
9e-9 / 3e-8 (sum); measured grid errors 7.0e-7 / 3.3e-6 (default), 8.6e-8 / 4.3e-7 (sum).

  preset        N     coeff bits (scale)  encryption        up B/value  down B/value  error bound (K=3 / 10)
  ckks default  8192  60,40,40,60 (2^60)  asymmetric        80.9        80.9          K*2^-(f+1): 7.2e-7 / 4.8e-6
  ckks sum      4096  60,49       (2^40)  symmetric seeded  16.1        32.1          K*2^-(f+1): 8.9e-8 / 6.0e-7
  bfv default   8192  43,43,44,44,44      asymmetric        52.8        52.8          K*2^-(f+1), ints exact
  bfv sum       4096  60,49               symmetric seeded   8.05       16.0          K*2^-(f+1), ints exact

  Public-key presets also send the key holder's public key to the other clients once (465 KB
  ckks default, 542 KB bfv default); the server's setup message is the parameters (< 100 bytes).
  CKKS decryption bound (`decryption_bound`): K * (B_fresh + N/2) / scale + fp, where B_fresh is
  the CKKS paper's high-probability bound on a fresh error in one slot: 8*sqrt(2)*s*N + 6*s*sqrt(N)
  + 16*s*sqrt(h*N) for public-key encryption (s = 3.2, h = 2N/3), 6*s*sqrt(N) for symmetric
  encryption (the slot's real part is sub-Gaussian with variance proxy N*s^2/2, so it exceeds the
  bound with probability <= 2*exp(-36) ~ 5e-16 per slot). N/2 bounds the encoding's rounding;
  fp = 2^-45 * (K + 1) * max_abs covers the float64 FFTs of encode/decode. Inputs and sums must
  satisfy |x| <= max_abs (2^20 default, 2^16 sum; a method may lower it, FedOMD uses 2^16), which
  keeps every coefficient far below the data modulus. At scale 2^60 (default) fp dominates.
  BFV: values are quantised to round(x * 2^f) (f = frac_bits, default 24; integers use f=0 and
  are exact) with plain modulus t = 1099511480321 (a 40-bit prime, t = 1 mod 16384 for
  batching): every quantised value and sum must satisfy |q| <= (t-1)/2, i.e. |x| <= ~2^39 / 2^f
  (32768 at f = 24). Decryption is exact while the summed noise stays below q/(2t); with SEAL's
  noise bounded by 21 per coefficient this caps the client count at ``max_clients``
  (about 24,000 for bfv sum; astronomically many for bfv default). More clients raise. BFV reveals
  the exact sum of the quantised values, so it carries no decryption noise (he-key-recovery on BFV
  finds no key).

The ``sum`` presets are the sum-only levers: smallest modulus chain that holds the precision,
symmetric seeded encryption, no evaluation keys. ``bfv sum`` meets <= 16 bytes/value with error
<= 1e-6 on sums of unit-scale values for K <= 33 clients (K * 2^-25 <= 1e-6).
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import shutil
import tempfile
import time
import weakref
from dataclasses import dataclass

import numpy as np
import torch

from protocols.base import (
    SERVER,
    AggregationResult,
    Protocol,
    ProtocolError,
    Transfer,
    check_range,
    client,
    float64_sum,
    max_abs_value,
    opened_by,
)

BFV_PLAIN_MODULUS = 1099511480321  # prime, < 2^40, = 1 mod 16384 (batching for N <= 8192)
NOISE_MAX = 21  # SEAL's centred binomial noise lies in [-21, 21]
NOISE_SIGMA = 3.2


@dataclass(frozen=True)
class Preset:
    """SEAL parameters of one preset (see the module docstring for security and costs)."""

    poly_modulus_degree: int
    coeff_mod_bit_sizes: tuple[int, ...]
    symmetric: bool
    scale_bits: int = 0  # CKKS only
    max_abs: float = 0.0  # CKKS only: limit on |x| and |sum|
    plain_modulus: int = 0  # BFV only


CKKS_PRESETS: dict[str, Preset] = {
    "default": Preset(8192, (60, 40, 40, 60), symmetric=False, scale_bits=60, max_abs=2.0**20),
    "sum": Preset(4096, (60, 49), symmetric=True, scale_bits=40, max_abs=2.0**16),
}
BFV_PRESETS: dict[str, Preset] = {
    "default": Preset(8192, (43, 43, 44, 44, 44), symmetric=False, plain_modulus=BFV_PLAIN_MODULUS),
    "sum": Preset(4096, (60, 49), symmetric=True, plain_modulus=BFV_PLAIN_MODULUS),
}


def _sealapi():
    import tenseal.sealapi as sealapi  # noqa: PLC0415 - loaded only when an HE backend is built

    return sealapi


class _Serializer:
    """SEAL objects <-> bytes. TenSEAL's sealapi only saves to and loads from paths, so this goes
    through one file in a private temporary directory (in /dev/shm when available)."""

    def __init__(self):
        root = "/dev/shm" if os.path.isdir("/dev/shm") else None
        self._dir = tempfile.mkdtemp(prefix="privfgl-he-", dir=root)
        self._path = os.path.join(self._dir, "blob")
        weakref.finalize(self, shutil.rmtree, self._dir, True)

    def dump(self, obj) -> bytes:
        obj.save(self._path)
        with open(self._path, "rb") as f:
            return f.read()

    def _write(self, blob: bytes) -> str:
        with open(self._path, "wb") as f:
            f.write(blob)
        return self._path

    def load_parameters(self, blob: bytes):
        sa = _sealapi()
        parms = sa.EncryptionParameters(sa.SCHEME_TYPE.NONE)  # load() sets the real scheme
        parms.load(self._write(blob))
        return parms

    def load_ciphertext(self, context, blob: bytes):
        ct = _sealapi().Ciphertext()
        ct.load(context, self._write(blob))
        return ct


def _context(parms):
    sa = _sealapi()
    context = sa.SEALContext(parms, True, sa.SEC_LEVEL_TYPE.TC128)
    if not context.parameters_set():
        raise ProtocolError(f"preset: SEAL rejected the parameters: {context.parameters_error_message()}")
    return context


class _Server:
    """The server's side: a SEALContext built from the received parameter bytes, and an Evaluator.

    It never holds a secret key, a decryptor or a key generator.
    """

    def __init__(self, parameter_bytes: bytes):
        self.serializer = _Serializer()
        self.context = _context(self.serializer.load_parameters(parameter_bytes))
        self.evaluator = _sealapi().Evaluator(self.context)

    def add(self, uploads: list[list[bytes]]) -> list[bytes]:
        """uploads[k][i]: client k's i-th ciphertext -> the serialized chunk-wise sums."""
        sums = []
        for i in range(len(uploads[0])):
            acc = self.serializer.load_ciphertext(self.context, uploads[0][i])
            for blobs in uploads[1:]:
                self.evaluator.add_inplace(acc, self.serializer.load_ciphertext(self.context, blobs[i]))
            sums.append(self.serializer.dump(acc))
        return sums


def _encrypt_chunks(flat: np.ndarray, slots: int, encode, encryptor, symmetric: bool, serializer) -> list[bytes]:
    """One client's flat vector -> serialized ciphertexts, one per chunk of ``slots`` values."""
    sa = _sealapi()
    blobs = []
    for start in range(0, flat.size, slots):
        plain = sa.Plaintext()
        encode(flat[start : start + slots].tolist(), plain)
        if symmetric:
            blobs.append(serializer.dump(encryptor.encrypt_symmetric(plain)))
        else:
            ct = sa.Ciphertext()
            encryptor.encrypt(plain, ct)
            blobs.append(serializer.dump(ct))
    return blobs


class Encryptor:
    """What an encrypting client holds: the parameters, the encryption key (the public key; under the
    symmetric presets the secret key, which every client holds there) and SEAL's own fresh randomness.
    ``encrypt(flat)``: one client's encoded vector -> its serialized ciphertexts, one per chunk of
    ``slots`` values."""

    def __init__(self, scheme: str, parameter_bytes: bytes, key_bytes: bytes, symmetric: bool, scale: float,
                 slots: int):
        sa = _sealapi()
        self.serializer = _Serializer()
        self.context = _context(self.serializer.load_parameters(parameter_bytes))
        key = sa.SecretKey() if symmetric else sa.PublicKey()
        key.load(self.context, self.serializer._write(key_bytes))
        if scheme == "ckks":
            encoder = sa.CKKSEncoder(self.context)

            def encode(values, plain):
                encoder.encode(values, scale, plain)
        else:
            encoder = sa.BatchEncoder(self.context)
            encode = encoder.encode
        self.encode, self.encryptor = encode, sa.Encryptor(self.context, key)
        self.symmetric, self.slots = symmetric, slots

    def encrypt(self, flat: np.ndarray) -> list[bytes]:
        return _encrypt_chunks(flat, self.slots, self.encode, self.encryptor, self.symmetric, self.serializer)


_WORKER: dict = {}  # in an encryption worker process: its Encryptor


def _worker_init(scheme: str, parameter_bytes: bytes, key_bytes: bytes, symmetric: bool, scale: float,
                 slots: int) -> None:
    """An encryption worker (``workers`` > 1) acts for some of the clients: it holds what they hold
    (an ``Encryptor``)."""
    _WORKER["encryptor"] = Encryptor(scheme, parameter_bytes, key_bytes, symmetric, scale, slots)


def _worker_encrypt(flat: np.ndarray) -> tuple[str, list[int]]:
    """Encrypt one client's vector; the ciphertexts come back through a file (in /dev/shm when
    available: one copy, not a pickle through the pipe), as (path, their lengths)."""
    encryptor = _WORKER["encryptor"]
    blobs = encryptor.encrypt(flat)
    fd, path = tempfile.mkstemp(prefix="privfgl-he-upload-", dir=encryptor.serializer._dir)
    with os.fdopen(fd, "wb") as f:
        for blob in blobs:
            f.write(blob)
    return path, [len(blob) for blob in blobs]


def _read_upload(path: str, lengths: list[int]) -> list[bytes]:
    with open(path, "rb") as f:
        data = f.read()
    os.unlink(path)
    view, out, start = memoryview(data), [], 0
    for length in lengths:
        out.append(bytes(view[start:start + length]))
        start += length
    return out


def _check_workers(workers) -> int:
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ProtocolError(f"workers: expected an int >= 1 (processes that encrypt the clients' uploads), "
                            f"got {workers!r}")
    return workers


class _HEProtocol(Protocol):
    """Shared flow of ckks and bfv: keys at construction, encrypt, server add, key holder decrypt.

    workers: processes that encrypt the clients' uploads in parallel (default 1: in this process).
    With workers > 1 a pool of spawned processes, started on the first sum and kept until
    ``close()``, encrypts disjoint sets of clients; each worker holds the parameters and the
    encryption key only (the public key; the secret key under the symmetric presets, which every
    client holds there). The ciphertexts, the server's view and the bounds are unchanged.
    """

    scheme: str
    presets: dict[str, Preset]

    def __init__(self, preset: str, workers: int = 1):
        if preset not in self.presets:
            raise ProtocolError(f"preset: unknown {self.name} preset {preset!r}; valid: {', '.join(self.presets)}")
        self.workers = _check_workers(workers)
        self._pool = None
        sa = _sealapi()
        self.preset_name = preset
        self.preset = p = self.presets[preset]
        scheme = sa.SCHEME_TYPE.CKKS if self.scheme == "ckks" else sa.SCHEME_TYPE.BFV
        parms = sa.EncryptionParameters(scheme)
        parms.set_poly_modulus_degree(p.poly_modulus_degree)
        parms.set_coeff_modulus(sa.CoeffModulus.Create(p.poly_modulus_degree, list(p.coeff_mod_bit_sizes)))
        if self.scheme == "bfv":
            parms.set_plain_modulus(p.plain_modulus)
        self._serializer = _Serializer()
        # Key holder (client 0).
        self._context = _context(parms)
        keygen = sa.KeyGenerator(self._context)
        self._secret_key = keygen.secret_key()
        self._decryptor = sa.Decryptor(self._context, self._secret_key)
        if p.symmetric:
            self._encryptor = sa.Encryptor(self._context, self._secret_key)
            self.public_key_bytes = b""
        else:
            public_key = sa.PublicKey()
            keygen.create_public_key(public_key)
            self._encryptor = sa.Encryptor(self._context, public_key)
            self.public_key_bytes = self._serializer.dump(public_key)
        # What the server receives at setup: the parameters only.
        self.server_setup_bytes = self._serializer.dump(parms)
        self.server = _Server(self.server_setup_bytes)
        self._setup_sent_to: set[str] = set()  # parties that already received the public setup
        # Data-level modulus: all primes but the special (last) one.
        primes = [m.value() for m in parms.coeff_modulus()]
        self.data_modulus = math.prod(primes[:-1]) if len(primes) > 1 else primes[0]

    @property
    def slots(self) -> int:
        """Values per ciphertext."""
        n = self.preset.poly_modulus_degree
        return n if self.scheme == "bfv" else n // 2

    def _encrypt(self, flat: np.ndarray) -> list[bytes]:
        """One client's flat vector -> serialized ciphertexts, one per chunk of ``slots`` values."""
        return _encrypt_chunks(flat, self.slots, self._encode, self._encryptor, self.preset.symmetric,
                               self._serializer)

    def _encrypt_all(self, flats: list[np.ndarray]) -> list[list[bytes]]:
        """Every client's upload: in this process, or split over the worker pool (``workers`` > 1)."""
        if self.workers == 1 or len(flats) == 1:
            return [self._encrypt(flat) for flat in flats]
        if self._pool is None:
            from concurrent.futures import ProcessPoolExecutor  # noqa: PLC0415

            key = self._secret_key if self.preset.symmetric else None
            key_bytes = self._serializer.dump(key) if key is not None else self.public_key_bytes
            self._pool = ProcessPoolExecutor(
                self.workers, mp_context=mp.get_context("spawn"), initializer=_worker_init,
                initargs=(self.scheme, self.server_setup_bytes, key_bytes, self.preset.symmetric,
                          getattr(self, "scale", 0.0), self.slots))
        chunk = math.ceil(len(flats) / self.workers)
        return [_read_upload(path, lengths) for path, lengths in self._pool.map(_worker_encrypt, flats, chunksize=chunk)]

    def close(self) -> None:
        """Stop the encryption workers, if any (a later sum starts them again)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def _decrypt(self, sums: list[bytes], n: int) -> np.ndarray:
        """Key holder: aggregate ciphertexts -> the first n decoded slot values."""
        sa = _sealapi()
        parts = []
        for blob in sums:
            plain = sa.Plaintext()
            self._decryptor.decrypt(self._serializer.load_ciphertext(self._context, blob), plain)
            parts.append(np.asarray(self._decode(plain)))
        return np.concatenate(parts)[:n]

    def _setup_transfers(self, num_clients: int) -> list[Transfer]:
        """The public setup, sent once per party on first use: the encryption parameters to the
        server, and (public-key presets) the key holder's public key to the other clients."""
        transfers = []
        if SERVER not in self._setup_sent_to:
            blob = self.server_setup_bytes
            transfers.append(Transfer(client(0), SERVER, "setup", "parameters", len(blob), (blob,)))
            self._setup_sent_to.add(SERVER)
        for k in range(1, num_clients):
            if self.public_key_bytes and client(k) not in self._setup_sent_to:
                blob = self.public_key_bytes
                transfers.append(Transfer(client(0), client(k), "setup", "public_key", len(blob), (blob,)))
                self._setup_sent_to.add(client(k))
        return transfers

    def _run(self, flats: list[np.ndarray], n: int, reveal_to: str,
             finish) -> AggregationResult:
        """Encrypt every client's vector, add at the server, decrypt at the key holder (client 0),
        which applies ``finish(decoded) -> (total tensor, error bound)`` and sends the total on."""
        num_clients = len(flats)
        transfers = self._setup_transfers(num_clients)
        t0 = time.perf_counter()
        uploads = self._encrypt_all(flats)
        t1 = time.perf_counter()
        sums = self.server.add(uploads)
        t2 = time.perf_counter()
        total, bound = finish(self._decrypt(sums, n))
        t3 = time.perf_counter()
        for k, blobs in enumerate(uploads):
            transfers.append(Transfer(client(k), SERVER, "input", "ciphertext", sum(map(len, blobs)), tuple(blobs)))
        transfers.append(Transfer(SERVER, client(0), "aggregate", "ciphertext", sum(map(len, sums)), tuple(sums)))
        openers = opened_by(reveal_to, num_clients)
        for receiver in openers:  # the key holder sends the decrypted total (8-byte values) on
            if receiver != client(0):
                transfers.append(Transfer(client(0), receiver, "reveal", "aggregate", 8 * n, tensor=total.clone()))
        return AggregationResult(
            total=total,
            transfers=transfers,
            num_clients=num_clients,
            opened_by=tuple(dict.fromkeys((client(0),) + openers)),
            phases={"protect": t1 - t0, "aggregate": t2 - t1, "reveal": t3 - t2},
            error_bound=bound,
            server_context=self.server_setup_bytes,
        )


CKKS_REVEALS = ("grid", "raw-unsafe")
RAW_SCALE_BITS = 40  # raw-unsafe reproduces the protocol before hardening: scale 2^40, raw decoded reveal
MAX_GRID_BITS = 32  # |x| <= 2^20 on a 2^-32 grid stays exact in float64 (2^52 < 2^53)


class CKKSProtocol(_HEProtocol):
    """Sums of real tensors with CKKS. preset: "default" or "sum".

    reveal: "grid" (default): clients round their inputs onto the public grid 2^-frac_bits, and the
            key holder rounds the decrypted sum back onto it before anyone else sees it; this is
            exact (the sum of the grid values, bit for bit) because the decryption error bound is
            below half a grid step (checked; ProtocolError otherwise), so the revealed value
            carries nothing of the decryption noise. "raw-unsafe": the key holder reveals the raw
            decoded decryption — with the aggregate ciphertext, the server can then solve for the
            secret key (Li-Micciancio 2021; ``privfgl audit --attack he-key-recovery``). Audit only.
    frac_bits: the grid's fractional bits, "auto" (default: the finest grid whose half step
            exceeds the decryption error bound for the run's client count) or an int 0..32.
    max_abs: the public range |x|, |sum| <= max_abs of every input and sum (default: the preset's,
            its largest); a smaller range shrinks the float64 encode/decode term of the bound and so
            allows a finer grid (inputs outside it raise ProtocolError).
    workers: processes that encrypt the clients' uploads in parallel (default 1; see _HEProtocol).
    """

    name = "ckks"
    scheme = "ckks"
    presets = CKKS_PRESETS

    def __init__(self, preset: str = "default", reveal: str = "grid", frac_bits: int | str = "auto",
                 max_abs: float | None = None, workers: int = 1):
        if reveal not in CKKS_REVEALS:
            raise ProtocolError(f"reveal: unknown ckks reveal mode {reveal!r}; valid: {', '.join(CKKS_REVEALS)} "
                                "(raw-unsafe leaks the secret key to the server: audits only)")
        if frac_bits != "auto" and (isinstance(frac_bits, bool) or not isinstance(frac_bits, int)
                                    or not 0 <= frac_bits <= MAX_GRID_BITS):
            raise ProtocolError(f"frac_bits: expected 'auto' or an int in 0..{MAX_GRID_BITS}, got {frac_bits!r}")
        super().__init__(preset, workers)
        limit = self.preset.max_abs
        if max_abs is not None and (isinstance(max_abs, bool) or not isinstance(max_abs, (int, float))
                                    or not 0 < max_abs <= limit):
            raise ProtocolError(f"max_abs: expected a number in (0, {limit:g}] for ckks {preset}, got {max_abs!r}")
        self.max_abs = float(limit if max_abs is None else max_abs)
        self.reveal = reveal
        self.frac_bits = frac_bits
        self._encoder = _sealapi().CKKSEncoder(self._context)
        self.scale = 2.0 ** (self.preset.scale_bits if reveal == "grid" else RAW_SCALE_BITS)

    def _encode(self, values: list[float], plain) -> None:
        self._encoder.encode(values, self.scale, plain)

    def _decode(self, plain) -> list[float]:
        return self._encoder.decode_double(plain)

    def fresh_noise_per_slot(self) -> float:
        """High-probability bound on one fresh ciphertext's error in a slot, in units of the scale
        (the CKKS paper's bounds; see the module docstring)."""
        n = self.preset.poly_modulus_degree
        if self.preset.symmetric:
            noise = 6 * NOISE_SIGMA * math.sqrt(n)
        else:
            h = 2 * n / 3
            noise = 8 * math.sqrt(2) * NOISE_SIGMA * n + 6 * NOISE_SIGMA * math.sqrt(n) + 16 * NOISE_SIGMA * math.sqrt(h * n)
        return (noise + n / 2) / self.scale

    def decryption_bound(self, num_clients: int) -> float:
        """Public bound on |decrypted - encrypted| per slot for a sum of K fresh ciphertexts of
        values in range: K fresh noises + the float64 FFTs of encode/decode (|x|, |sum| <= max_abs)."""
        fp = 2.0**-45 * (num_clients + 1) * self.max_abs
        return num_clients * self.fresh_noise_per_slot() + fp

    def grid_bits(self, num_clients: int) -> int:
        """The grid's fractional bits for K clients: ``frac_bits``, or the finest grid whose half
        step 2^-(f+1) exceeds the decryption bound ("auto"). Raises ProtocolError if none does."""
        bound = self.decryption_bound(num_clients)
        finest = min(MAX_GRID_BITS, math.floor(-math.log2(bound)) - 1)
        while finest >= 0 and 2.0 ** -(finest + 1) <= bound:
            finest -= 1
        if finest < 0:
            raise ProtocolError(f"contributions: {num_clients} clients push the ckks {self.preset_name} decryption "
                                f"error bound to {bound:.3g}, not below half of any grid step; use fewer clients")
        if self.frac_bits == "auto":
            return finest
        if self.frac_bits > finest:
            raise ProtocolError(
                f"frac_bits: the ckks {self.preset_name} decryption error bound for {num_clients} clients is "
                f"{bound:.3g}, not below half the grid step 2^-{self.frac_bits + 1}, so the key holder could not "
                f"round the sum back onto the grid; valid: frac_bits <= {finest} (or 'auto')"
            )
        return self.frac_bits

    def _aggregate(self, values: list[torch.Tensor], integer: bool, reveal_to: str) -> AggregationResult:
        floats = [x.to(torch.float64) for x in values]
        exact = float64_sum(floats)
        check_range(floats, exact, self.max_abs, f"ckks {self.preset_name} (max_abs={self.max_abs:g})")
        n = floats[0].numel()
        num_clients = len(floats)
        if self.reveal == "raw-unsafe":
            fp = 2.0**-45 * (sum(max_abs_value(x) for x in floats) + max_abs_value(exact))

            def finish(decoded: np.ndarray):
                return (torch.from_numpy(decoded.astype(np.float64)),
                        num_clients * self.fresh_noise_per_slot() + fp)

            result = self._run([x.numpy() for x in floats], n, reveal_to, finish)
            result.details = {"reveal": "raw-unsafe"}
            return result
        f = self.grid_bits(num_clients)
        scale = 2.0**f
        grid = [np.round(x.numpy() * scale) / scale for x in floats]  # client side: exact in float64
        # The revealed total is the exact sum of the grid values; its error against the inputs is
        # the clients' rounding, at most 2^-(f+1) each (a public bound: nothing data-dependent).
        rounding = num_clients * 2.0 ** -(f + 1)

        def finish(decoded: np.ndarray):  # key holder: back onto the grid before anyone sees it
            return torch.from_numpy(np.round(decoded.astype(np.float64) * scale) / scale), rounding

        result = self._run(grid, n, reveal_to, finish)
        result.details = {"reveal": "grid", "frac_bits": f, "decryption_bound": self.decryption_bound(num_clients)}
        return result


class BFVProtocol(_HEProtocol):
    """Exact integer sums, or fixed-point float sums, with BFV.

    preset: "default" or "sum"; frac_bits: fractional bits for float inputs (0..30, default 24);
    workers: processes that encrypt the clients' uploads in parallel (default 1; see _HEProtocol);
    integer inputs are always encoded exactly (frac_bits 0) and summed to int64.
    """

    name = "bfv"
    scheme = "bfv"
    presets = BFV_PRESETS

    def __init__(self, preset: str = "default", frac_bits: int = 24, workers: int = 1):
        if isinstance(frac_bits, bool) or not isinstance(frac_bits, int) or not 0 <= frac_bits <= 30:
            raise ProtocolError(f"frac_bits: expected an int in 0..30, got {frac_bits!r}")
        super().__init__(preset, workers)
        self.frac_bits = frac_bits
        self._encoder = _sealapi().BatchEncoder(self._context)
        t = self.preset.plain_modulus
        self.max_plain = (t - 1) // 2
        per_client = NOISE_MAX + 0.5 if self.preset.symmetric else NOISE_MAX * (2 * self.preset.poly_modulus_degree + 1) + 0.5
        self.max_clients = int((self.data_modulus / (2 * t) - 1) // per_client)

    def _encode(self, values: list[int], plain) -> None:
        self._encoder.encode(values, plain)

    def _decode(self, plain) -> list[int]:
        return self._encoder.decode_int64(plain)

    def _aggregate(self, values: list[torch.Tensor], integer: bool, reveal_to: str) -> AggregationResult:
        num_clients = len(values)
        if num_clients > self.max_clients:
            raise ProtocolError(
                f"contributions: {num_clients} clients exceed bfv {self.preset_name}'s noise limit "
                f"of {self.max_clients} clients; use fewer clients per sum"
            )
        f = 0 if integer else self.frac_bits
        limit = self.max_plain / 2.0**f
        floats = [x.to(torch.float64) for x in values]
        what = f"bfv {self.preset_name} (frac_bits={f}) plain"
        check_range(floats, float64_sum(floats), limit, what)
        quantised = values if integer else [torch.from_numpy(np.round(x.numpy() * 2.0**f).astype(np.int64)) for x in floats]
        exact = quantised[0].numpy().copy()
        for q in quantised[1:]:
            exact += q.numpy()  # each |q| <= ~2^39 after the check above and K < 2^23: no overflow
        # Exact re-check: rounding can push a sum that was just inside the limit outside it.
        if np.abs(exact).max() > self.max_plain:
            raise ProtocolError(
                f"contributions: the quantised sum leaves the {what} range |sum| <= {limit:.6g}"
            )
        n = quantised[0].numel()

        def finish(decoded: np.ndarray):  # exact integer sum; floats back from the 2^-f grid
            summed = torch.from_numpy(decoded.astype(np.int64))
            if integer:
                return summed, 0.0
            return torch.from_numpy(summed.numpy() / 2.0**f), num_clients * 2.0 ** -(f + 1)  # exact: |sum| < 2^40

        result = self._run([q.numpy() for q in quantised], n, reveal_to, finish)
        result.details = {"frac_bits": f}
        return result
