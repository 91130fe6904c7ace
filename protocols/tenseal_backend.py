"""`ckks` and `bfv`: homomorphic-encryption sums with SEAL, through TenSEAL 0.3.18's ``sealapi``.

Roles. Client 0 is the key holder: it generates the secret key when the protocol is built. The
server receives only the serialized encryption parameters (no key of any kind: adding ciphertexts
needs none, so there are no Galois/relinearisation keys anywhere), loads them into its own
SEALContext and adds the clients' ciphertexts; it cannot decrypt. The aggregate ciphertext goes
back to the key holder, which decrypts and sends the plaintext total to the server.
Trust assumption: clients share the secret key (symmetric presets) or the key holder alone holds
it and the other clients encrypt with its public key (asymmetric presets); the server and any
client do not collude (a colluding client could decrypt another client's upload).

Packing. A contribution is flattened into one vector and packed densely into ceil(n / slots)
ciphertexts (slots = N for BFV, N/2 for CKKS); only the last one is partly empty.

Presets (all 128-bit classical security by the HE standard table, which SEAL enforces:
N=4096 needs total coeff modulus <= 109 bits, N=8192 <= 218 bits). Bytes/value is the upload
len(serialized ciphertexts)/n measured for n = 20 full ciphertexts (SEAL's default compression);
"seeded" uploads are symmetric encryptions that SEAL stores as (c0, seed of c1), half size. The
aggregate sent back to the key holder is a full ciphertext ("down").

  preset        N     coeff bits (scale)  encryption        up B/value  down B/value  error bound
  ckks default  8192  60,40,40,60 (2^40)  asymmetric        80.9        80.9          K*(B_fresh+N/2)/2^40 + fp
  ckks sum      4096  60,49       (2^40)  symmetric seeded  16.1        32.1          K*(21N+N/2)/2^40 + fp
  bfv default   8192  43,43,44,44,44      asymmetric        52.8        52.8          K*2^-(f+1), ints exact
  bfv sum       4096  60,49               symmetric seeded   8.05       16.0          K*2^-(f+1), ints exact

  Public-key presets also send the key holder's public key to the other clients once (465 KB
  ckks default, 542 KB bfv default); the server's setup message is the parameters (< 100 bytes).
  CKKS: B_fresh = 8*sqrt(2)*s*N + 6*s*sqrt(N) + 16*s*sqrt(h*N) (s = 3.2, h = 2N/3; the CKKS
  paper's high-probability bound for public-key encryption); symmetric encryption noise is at
  most 21 per coefficient (SEAL's centred binomial noise), so at most 21N per slot, a worst-case
  bound. N/2 bounds the encoding's rounding; fp = 2^-45 * (sum_k max|x_k| + max|sum|) covers the
  float64 FFTs of encode/decode. Inputs and sums must satisfy |x| <= max_abs (2^20 default,
  2^16 sum), which keeps every coefficient far below the data modulus.
  BFV: values are quantised to round(x * 2^f) (f = frac_bits, default 24; integers use f=0 and
  are exact) with plain modulus t = 1099511480321 (a 40-bit prime, t = 1 mod 16384 for
  batching): every quantised value and sum must satisfy |q| <= (t-1)/2, i.e. |x| <= ~2^39 / 2^f
  (32768 at f = 24). Decryption is exact while the summed noise stays below q/(2t); with SEAL's
  noise bounded by 21 per coefficient this caps the client count at ``max_clients``
  (about 24,000 for bfv sum; astronomically many for bfv default). More clients raise.

The ``sum`` presets are the sum-only levers: smallest modulus chain that holds the precision,
symmetric seeded encryption, no evaluation keys. ``bfv sum`` meets <= 16 bytes/value with error
<= 1e-6 on sums of unit-scale values for K <= 33 clients (K * 2^-25 <= 1e-6).
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import time
import weakref
from dataclasses import dataclass

import numpy as np
import torch

from protocols.base import (
    AggregationResult,
    Protocol,
    ProtocolError,
    check_range,
    float64_sum,
    max_abs_value,
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
    "default": Preset(8192, (60, 40, 40, 60), symmetric=False, scale_bits=40, max_abs=2.0**20),
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


class _HEProtocol(Protocol):
    """Shared flow of ckks and bfv: keys at construction, encrypt, server add, key holder decrypt."""

    scheme: str
    presets: dict[str, Preset]

    def __init__(self, preset: str):
        if preset not in self.presets:
            raise ProtocolError(f"preset: unknown {self.name} preset {preset!r}; valid: {', '.join(self.presets)}")
        sa = _sealapi()
        self.preset_name = preset
        self.preset = p = self.presets[preset]
        t0 = time.perf_counter()
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
        self.setup_seconds = time.perf_counter() - t0
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
        sa = _sealapi()
        blobs = []
        for start in range(0, flat.size, self.slots):
            plain = sa.Plaintext()
            self._encode(flat[start : start + self.slots].tolist(), plain)
            if self.preset.symmetric:
                blobs.append(self._serializer.dump(self._encryptor.encrypt_symmetric(plain)))
            else:
                ct = sa.Ciphertext()
                self._encryptor.encrypt(plain, ct)
                blobs.append(self._serializer.dump(ct))
        return blobs

    def _decrypt(self, sums: list[bytes], n: int) -> np.ndarray:
        """Key holder: aggregate ciphertexts -> the first n decoded slot values."""
        sa = _sealapi()
        parts = []
        for blob in sums:
            plain = sa.Plaintext()
            self._decryptor.decrypt(self._serializer.load_ciphertext(self._context, blob), plain)
            parts.append(np.asarray(self._decode(plain)))
        return np.concatenate(parts)[:n]

    def _run(self, flats: list[np.ndarray], n: int) -> tuple[np.ndarray, AggregationResult]:
        """Encrypt every client's vector, add at the server, decrypt at the key holder."""
        t0 = time.perf_counter()
        uploads = [self._encrypt(flat) for flat in flats]
        t1 = time.perf_counter()
        sums = self.server.add(uploads)
        t2 = time.perf_counter()
        opened = self._decrypt(sums, n)
        t3 = time.perf_counter()
        num_clients = len(flats)
        up = [sum(len(b) for b in blobs) for blobs in uploads]
        view = [
            {"party": k, "kind": "ciphertext", "step": "input", "bytes": up[k], "ciphertexts": len(uploads[k])}
            for k in range(num_clients)
        ]
        reveal_bytes = 8 * n  # the key holder uploads the plaintext total (8-byte values)
        up[0] += reveal_bytes
        down = [sum(len(b) for b in sums)] + [0] * (num_clients - 1)
        result = AggregationResult(
            total=torch.empty(0),
            server_view=view,
            bytes_up=up,
            bytes_down=down,
            phases={"protect": t1 - t0, "aggregate": t2 - t1, "reveal": t3 - t2},
            error_bound=0.0,
        )
        return opened, result

    def _finish(self, result: AggregationResult, total: torch.Tensor, bound: float) -> AggregationResult:
        result.total = total
        result.error_bound = bound
        result.server_view.append(
            {"party": "reveal", "kind": "aggregate", "tensor": total.clone(), "bytes": 8 * total.numel()}
        )
        return result


class CKKSProtocol(_HEProtocol):
    """Approximate sums of real tensors with CKKS. preset: "default" or "sum"."""

    name = "ckks"
    scheme = "ckks"
    presets = CKKS_PRESETS

    def __init__(self, preset: str = "default"):
        super().__init__(preset)
        self._encoder = _sealapi().CKKSEncoder(self._context)
        self.scale = 2.0**self.preset.scale_bits

    def _encode(self, values: list[float], plain) -> None:
        self._encoder.encode(values, self.scale, plain)

    def _decode(self, plain) -> list[float]:
        return self._encoder.decode_double(plain)

    def fresh_noise_per_slot(self) -> float:
        """Bound on one fresh ciphertext's error in a slot, in units of the scale (see docstring)."""
        n = self.preset.poly_modulus_degree
        if self.preset.symmetric:
            noise = NOISE_MAX * n
        else:
            h = 2 * n / 3
            noise = 8 * math.sqrt(2) * NOISE_SIGMA * n + 6 * NOISE_SIGMA * math.sqrt(n) + 16 * NOISE_SIGMA * math.sqrt(h * n)
        return (noise + n / 2) / self.scale

    def _aggregate(self, values: list[torch.Tensor], integer: bool) -> AggregationResult:
        floats = [x.to(torch.float64) for x in values]
        exact = float64_sum(floats)
        check_range(floats, exact, self.preset.max_abs, f"ckks {self.preset_name} preset")
        n = floats[0].numel()
        opened, result = self._run([x.numpy() for x in floats], n)
        total = torch.from_numpy(opened.astype(np.float64))
        fp = 2.0**-45 * (sum(max_abs_value(x) for x in floats) + max_abs_value(exact))
        return self._finish(result, total, len(values) * self.fresh_noise_per_slot() + fp)


class BFVProtocol(_HEProtocol):
    """Exact integer sums, or fixed-point float sums, with BFV.

    preset: "default" or "sum"; frac_bits: fractional bits for float inputs (0..30, default 24);
    integer inputs are always encoded exactly (frac_bits 0) and summed to int64.
    """

    name = "bfv"
    scheme = "bfv"
    presets = BFV_PRESETS

    def __init__(self, preset: str = "default", frac_bits: int = 24):
        if isinstance(frac_bits, bool) or not isinstance(frac_bits, int) or not 0 <= frac_bits <= 30:
            raise ProtocolError(f"frac_bits: expected an int in 0..30, got {frac_bits!r}")
        super().__init__(preset)
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

    def _aggregate(self, values: list[torch.Tensor], integer: bool) -> AggregationResult:
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
        opened, result = self._run([q.numpy() for q in quantised], n)
        summed = torch.from_numpy(opened.astype(np.int64))
        if integer:
            return self._finish(result, summed, 0.0)
        total = torch.from_numpy(summed.numpy() / 2.0**f)  # exact: |sum| < 2^40
        return self._finish(result, total, num_clients * 2.0 ** -(f + 1))
