"""A ChaCha20 keystream as a random generator: a 256-bit key and a stream position.

Every random element of the secret-sharing backends comes from one of these: the shares of
``crypten_backend``'s sums and, installed by ``crypten_compat``, every ring element, k-bit element,
PRZS mask and Beaver triple CrypTen draws. The cipher is the `cryptography` package's ChaCha20
(RFC 7539 block function, 256-bit key); each key is used for one stream only, so the all-zero
nonce is safe. Two streams under different keys are computationally independent; one under the
same key is the same stream (that is how two parties share a PRZS generator).
"""
from __future__ import annotations

import os

import numpy as np
import torch
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

KEY_BYTES = 32  # 256-bit keys, fresh from os.urandom


class ChaChaStream:
    """Uniform draws from the ChaCha20 keystream under ``key`` (32 bytes). ``position``: the bytes
    drawn so far (8 per int64 element)."""

    def __init__(self, key: bytes):
        if not isinstance(key, bytes) or len(key) != KEY_BYTES:
            raise ValueError(f"key: expected {KEY_BYTES} bytes, got {len(key) if isinstance(key, bytes) else key!r}")
        self.key = key
        self.position = 0
        self._encryptor = Cipher(algorithms.ChaCha20(key, bytes(16)), mode=None).encryptor()

    @classmethod
    def fresh(cls) -> "ChaChaStream":
        """A stream under a new key from os.urandom (256 bits of OS entropy)."""
        return cls(os.urandom(KEY_BYTES))

    def ring_numpy(self, n: int) -> np.ndarray:
        """n uniform elements of Z_2^64 as int64 [n] (the next 8n keystream bytes, little-endian)."""
        data = self._encryptor.update(bytes(8 * n))
        self.position += 8 * n
        return np.frombuffer(data, dtype="<i8").astype(np.int64)  # a writable copy

    def ring(self, shape: tuple[int, ...]) -> torch.Tensor:
        """Uniform elements of Z_2^64 as an int64 tensor of ``shape``."""
        n = int(np.prod(shape, dtype=np.int64))
        return torch.from_numpy(self.ring_numpy(n)).reshape(shape)

    def bits(self, shape: tuple[int, ...], bitlength: int) -> torch.Tensor:
        """Uniform integers in [0, 2^bitlength) (1 <= bitlength <= 63) as int64 of ``shape``: the low
        bits of ring elements."""
        if not 1 <= bitlength <= 63:
            raise ValueError(f"bitlength: expected 1..63, got {bitlength}")
        return self.ring(shape) & ((1 << bitlength) - 1)
