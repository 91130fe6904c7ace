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
"""

from __future__ import annotations

import importlib
import os
import sys

import numpy as np
import torch

_OLD_REGISTRATION = "torch.onnx._internal.registration"
_NEW_REGISTRATION = "torch.onnx._internal.torchscript_exporter.registration"


def load_crypten():
    """Import and return the ``crypten`` module, applying the torch 2.13 import shim first."""
    if _OLD_REGISTRATION not in sys.modules:
        try:
            sys.modules[_OLD_REGISTRATION] = importlib.import_module(_NEW_REGISTRATION)
        except ImportError:  # an older torch that still has the original module
            pass
    import crypten  # noqa: PLC0415 - the single place CrypTen is imported

    return crypten


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
