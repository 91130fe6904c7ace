"""The cryptographic primitives of `secagg`, all from the `cryptography` package (OpenSSL).

- Key agreement: X25519. Each client makes two key pairs: c (encrypts the Shamir shares sent
  through the server; fresh per sum, or per session with ``keys="session"``) and s (seeds the
  pairwise masks; always fresh per sum). The s key pair is derived
  from a fresh 16-byte seed (os.urandom) through HKDF, so that the seed, not the 32-byte key, is
  what gets Shamir-shared (``shamir``: a 128-bit seed fits its prime field); the seed has the 128
  bits of security of every other primitive here.
- Key derivation: HKDF-SHA256 with a distinct ``info`` label per use and the pair's indices:
  16-byte PRG keys (``PRG_KEY_BYTES``: pairwise and self masks), 32-byte keys for the share
  encryption (ChaCha20-Poly1305 takes no other) and for the s key pair's private key.
- PRG: AES-128-CTR keystream (zero IV: every key is used for one expansion only), read as the
  ring's little-endian uint32/uint64 elements. AES-128 (AES-256 until issue #18): every mask
  key comes out of HKDF from a 128-bit secret (a 16-byte seed, or an X25519 agreement, ~128-bit
  security), so a 32-byte key derived the same way adds no security over a 16-byte one, and
  OpenSSL expands AES-128-CTR faster (`openssl speed -evp aes-128-ctr -bytes 16384` here:
  7.1-7.5 GB/s against 5.6-6.2 GB/s for aes-256-ctr; one 369 KB mask through `cryptography`:
  69 us against 80 us). ``expand``/``add_prg`` refuse any other key length, so no caller can
  fall back to AES-256 by passing a 32-byte key. ``add_prg`` writes the keystream into a reused
  per-thread buffer (``update_into``) and adds it to the vector in place: the same elements as
  ``expand``, without allocating a fresh vector per mask; ``add_prgs`` does several masks with
  one buffer look-up (a client's self mask and its pairwise masks).
- Share encryption: ChaCha20-Poly1305 (AEAD) keyed by the pair's c agreement, a fresh random
  nonce, and as associated data the (sender, receiver) indices and the sum's ``context`` (the two
  clients' s public keys, fresh per sum), so the server that forwards a share can neither read nor
  alter nor re-address it, nor replay one from an earlier sum (which matters when the c key pairs
  live for a session: ``client.KeyRing``).
- Commitment to the self-mask seed b: SHA-256 over a label, the client's index and b (b is 128
  uniform bits: the hash reveals nothing usable; it lets the server check a reconstruction).
"""
from __future__ import annotations

import functools
import hashlib
import os
import struct
import threading

import numpy as np
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

LABEL = b"privfgl-secagg-v1"
SEED_BYTES = 16
PRG_KEY_BYTES = 16  # AES-128-CTR
PUBLIC_KEY_BYTES = 32
NONCE_BYTES = 12
HEADER = struct.Struct("<II")  # (sender, receiver) of an encrypted share
_ZERO_IV = bytes(16)
_RAW = (serialization.Encoding.Raw, serialization.PublicFormat.Raw)
_SHA256 = hashes.SHA256()
_BLOCK = 16  # AES block: update_into wants that much room beyond the data
_local = threading.local()  # the per-thread keystream buffer of add_prg


class ShareAuthError(Exception):
    """An encrypted share failed authentication (modified, truncated or re-addressed)."""


_PREFIX = LABEL + b"/"
_KEY_BYTES = {b"pair-mask": PRG_KEY_BYTES, b"share-encryption": 32}  # per use of a pair's agreement


def hkdf(ikm: bytes, info: bytes, length: int = 32) -> bytes:
    return HKDF(algorithm=_SHA256, length=length, salt=None, info=_PREFIX + info).derive(ikm)


def fresh_seed() -> bytes:
    """16 bytes from the OS CSPRNG (never from the run seed)."""
    return os.urandom(SEED_BYTES)


def new_keypair() -> tuple[X25519PrivateKey, bytes]:
    """A fresh X25519 key pair (OS randomness) and its raw 32-byte public key."""
    private = X25519PrivateKey.generate()
    return private, private.public_key().public_bytes(*_RAW)


def keypair_from_seed(seed: bytes) -> tuple[X25519PrivateKey, bytes]:
    """The X25519 key pair derived from a 16-byte seed (the s pair: its seed is Shamir-shared)."""
    private = X25519PrivateKey.from_private_bytes(hkdf(seed, b"mask-key-pair"))
    return private, private.public_key().public_bytes(*_RAW)


def agree(private: X25519PrivateKey, peer_public: bytes) -> bytes:
    """The raw X25519 shared secret with a peer's 32-byte public key."""
    return private.exchange(X25519PublicKey.from_public_bytes(peer_public))


def pair_key(shared: bytes, use: bytes, u: int, v: int) -> bytes:
    """The key of the unordered pair {u, v} for ``use``: b"pair-mask" (16 bytes, the PRG's AES-128
    key) or b"share-encryption" (32 bytes, ChaCha20-Poly1305)."""
    return hkdf(shared, use + HEADER.pack(min(u, v), max(u, v)), _KEY_BYTES[use])


def self_mask_key(seed: bytes) -> bytes:
    """The 16-byte PRG key of a client's self mask, from its self-mask seed b."""
    return hkdf(seed, b"self-mask", PRG_KEY_BYTES)


def _encryptor(key: bytes):
    if len(key) != PRG_KEY_BYTES:
        raise ValueError(f"PRG key of {len(key)} bytes; the PRG is AES-128-CTR ({PRG_KEY_BYTES}-byte keys)")
    return Cipher(algorithms.AES(key), modes.CTR(_ZERO_IV)).encryptor()


def expand(key: bytes, size: int, dtype: type) -> np.ndarray:
    """PRG: ``size`` ring elements of ``dtype`` from the AES-128-CTR keystream of the 16-byte ``key``."""
    stream = _encryptor(key).update(_zeros(size * np.dtype(dtype).itemsize))  # CTR: finalize() adds nothing
    return np.frombuffer(stream, dtype=np.dtype(dtype).newbyteorder("<"))


def add_prg(y: np.ndarray, key: bytes, subtract: bool = False) -> np.ndarray:
    """y += expand(key, y.size, y.dtype) (or -=), in place in the ring (y's dtype wraps), without
    allocating the mask: the keystream goes into this thread's reused buffer. Returns y."""
    return add_prgs(y, ((key, subtract),))


def add_prgs(y: np.ndarray, masks) -> np.ndarray:
    """``add_prg(y, key, subtract)`` for each (key, subtract) of ``masks``, in order. Returns y."""
    nbytes = y.nbytes
    buf = getattr(_local, "buf", None)
    if buf is None or len(buf) < nbytes + _BLOCK:
        buf = _local.buf = bytearray(nbytes + _BLOCK)
    zeros = _zeros(nbytes)
    mask = np.frombuffer(buf, dtype=_little_endian(y.dtype), count=y.size)
    for key, subtract in masks:
        _encryptor(key).update_into(zeros, buf)
        if subtract:
            np.subtract(y, mask, out=y)
        else:
            np.add(y, mask, out=y)
    return y


@functools.lru_cache(maxsize=8)
def _little_endian(dtype: np.dtype) -> np.dtype:
    return dtype.newbyteorder("<")


@functools.lru_cache(maxsize=4)
def _zeros(nbytes: int) -> bytes:
    return bytes(nbytes)


def seal(key: bytes, sender: int, receiver: int, plaintext: bytes, context: bytes = b"") -> bytes:
    """Encrypted share from ``sender`` to ``receiver``: header || nonce || ChaCha20-Poly1305 ciphertext.
    ``context`` is authenticated, not sent: the receiver must know it (the sum's fresh public keys)."""
    header = HEADER.pack(sender, receiver)
    nonce = os.urandom(NONCE_BYTES)
    return header + nonce + ChaCha20Poly1305(key).encrypt(nonce, plaintext, header + context)


def open_sealed(key: bytes, blob: bytes, sender: int, receiver: int, context: bytes = b"") -> bytes:
    """Decrypt a share sealed by ``sender`` for ``receiver`` under ``context``; ShareAuthError if it does
    not authenticate (modified, re-addressed, or sealed under another context: another sum's)."""
    header = HEADER.pack(sender, receiver)
    start = HEADER.size + NONCE_BYTES
    if len(blob) <= start or blob[:HEADER.size] != header:
        raise ShareAuthError("wrong header")
    try:
        return ChaCha20Poly1305(key).decrypt(blob[HEADER.size:start], blob[start:], header + context)
    except InvalidTag:
        raise ShareAuthError("authentication tag mismatch") from None


def commitment(u: int, seed: bytes) -> bytes:
    """SHA-256 commitment of client u to its self-mask seed."""
    return hashlib.sha256(LABEL + b"/self-mask-commitment" + struct.pack("<I", u) + seed).digest()
