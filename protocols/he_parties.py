"""ckks and bfv with the parties apart, each in its own process (clients on Ray actors:
privfgl.federation.ray): the key holder, an encrypting client, and the server (``tenseal_backend._Server``).

The key holder (client 0) builds the protocol object, and with it the keys, in its own process. It hands out
the public ``Encoding``: the encryption parameters, the public key and the grid every client encodes onto.
Each client encodes (``encode_input``) and encrypts (``tenseal_backend.Encryptor``) its own vector, and the
server adds the ciphertexts. The key holder decrypts the sum and puts it back on the grid (``finish``) before
anyone else sees it, exactly as ``CKKSProtocol`` and ``BFVProtocol`` do in one process.

One difference: in one process the protocol checks the *sum* of the plaintexts against the encoding's range
before encrypting. Apart, nobody holds that sum, so each client checks its own input against range / K,
which no sum of K inputs can leave (stricter than in one process: an input the in-process check accepts may be
refused here, with a one-line ProtocolError naming the bound). The symmetric presets ("sum") are refused:
there every client holds the secret key, which would have to travel from the key holder to the clients.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from protocols.base import ProtocolError
from protocols.tenseal_backend import BFVProtocol, CKKSProtocol, Encryptor


@dataclass(frozen=True)
class Encoding:
    """What every party of one sum's shape (K clients, integer or float) may know: public."""
    scheme: str  # "ckks" | "bfv"
    parameters: bytes  # the serialized encryption parameters (what the server gets at setup)
    public_key: bytes
    frac_bits: int
    limit: float  # each client's |x| <= limit (range / K)
    scale: float  # CKKS's encoding scale (0 for bfv)
    slots: int
    num_clients: int
    integer: bool
    error_bound: float  # the revealed sum's documented error against the sum of the inputs

    def encryptor(self) -> Encryptor:
        return Encryptor(self.scheme, self.parameters, self.public_key, False, self.scale, self.slots)


def encoding(protocol: CKKSProtocol | BFVProtocol, num_clients: int, integer: bool) -> Encoding:
    """The key holder's public encoding for a sum of ``num_clients`` inputs; ProtocolError where the parties
    apart cannot run the protocol (symmetric presets, ckks reveal=raw-unsafe, too many clients for bfv)."""
    if protocol.preset.symmetric:
        raise ProtocolError(f"preset: {protocol.name} {protocol.preset_name} is symmetric (every client holds the "
                            "secret key), not built with the clients apart; valid: preset=default")
    K = num_clients
    if isinstance(protocol, CKKSProtocol):
        if protocol.reveal != "grid":
            raise ProtocolError("reveal: ckks raw-unsafe is an audit of the in-process protocol; valid with the "
                                "clients apart: reveal=grid")
        f = protocol.grid_bits(K)
        return Encoding("ckks", protocol.server_setup_bytes, protocol.public_key_bytes, f, protocol.max_abs / K,
                        protocol.scale, protocol.slots, K, integer, K * 2.0 ** -(f + 1))
    if K > protocol.max_clients:
        raise ProtocolError(f"contributions: {K} clients exceed bfv {protocol.preset_name}'s noise limit of "
                            f"{protocol.max_clients} clients; use fewer clients per sum")
    f = 0 if integer else protocol.frac_bits
    return Encoding("bfv", protocol.server_setup_bytes, protocol.public_key_bytes, f,
                    protocol.max_plain / 2.0**f / K, 0.0, protocol.slots, K, integer,
                    0.0 if integer else K * 2.0 ** -(f + 1))


def encode_input(enc: Encoding, x: np.ndarray) -> np.ndarray:
    """A client's flat input (float64, or int64 when the sum is integer) on the public grid, ready to encrypt:
    ckks float64 multiples of 2^-f, bfv int64 multiples of 1 (x * 2^f rounded). ProtocolError when
    |x| > limit or x is not finite."""
    if not np.isfinite(x).all():
        raise ProtocolError("contributions: a client's contribution contains NaN or Inf; all values must be finite")
    if x.size and float(np.abs(x).max()) > enc.limit:
        raise ProtocolError(f"contributions: a client's contribution is outside the {enc.scheme} range |x| <= "
                            f"{enc.limit:.6g} (the encoding's range / {enc.num_clients} clients: with the clients "
                            "apart no party holds the sum to check it); scale the inputs down")
    scale = 2.0**enc.frac_bits
    if enc.scheme == "ckks":
        return np.round(x.astype(np.float64) * scale) / scale
    if enc.integer:
        return x.astype(np.int64)
    return np.round(x.astype(np.float64) * scale).astype(np.int64)


def finish(protocol: CKKSProtocol | BFVProtocol, enc: Encoding, sums: list[bytes], n: int) -> np.ndarray:
    """The key holder: the aggregate ciphertexts decrypted and put back on the grid (float64; int64 for an
    integer bfv sum), before anyone else sees the sum."""
    decoded = protocol._decrypt(sums, n)
    scale = 2.0**enc.frac_bits
    if enc.scheme == "ckks":
        return np.round(decoded.astype(np.float64) * scale) / scale
    summed = decoded.astype(np.int64)
    return summed if enc.integer else summed / scale
