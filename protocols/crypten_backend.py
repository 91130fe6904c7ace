"""`crypten` in-process: additive secret sharing over Z_2^64 with CrypTen's fixed-point encoding.

Parties: K clients (0..K-1) and the server (K), simulated in one process. Client k encodes its
tensor as int64 round(x * 2^p) (CrypTen's encoder via ``crypten_compat``), splits it into K+1
additive shares (K uniformly random int64 tensors and one correction share; arithmetic mod 2^64
by int64 wraparound), keeps one and sends one to every other party. Each party sums the shares it
holds; at the reveal the clients send their summed shares to the server, which opens the sum.

Encoding range: every value and every per-element sum must satisfy |x| <= 2^(62-p) (2^46 ~ 7e13
at p=16); outside it ProtocolError is raised (never a silent wrap).
Error bound: K * 2^-(p+1) (rounding each input to the 2^-p grid) + (|sum| + that) * 2^-53 (the
float64 decode); integer inputs are exact and come back as int64.
Bytes (n values): client k sends K shares of 8n bytes plus its summed share (8n) at the reveal,
and receives K-1 shares (8n each) from the other clients.
The share randomness is numpy's PCG64, seeded from the OS (128 bits) unless ``seed`` is given:
a faithful simulation of the protocol, not a hardened cryptographic implementation.

The multi-process mode (``crypten_multiprocess``) opens exactly the same ring sum, so both modes
return bitwise-equal totals for equal inputs.
"""

from __future__ import annotations

import secrets
import time

import numpy as np
import torch

from protocols import crypten_compat
from protocols.base import (
    FLOAT64_U,
    AggregationResult,
    Protocol,
    ProtocolError,
    check_range,
    float64_sum,
    max_abs_value,
)

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


def check_precision_bits(precision_bits: int) -> int:
    """Validate the fixed-point precision (0..48 fractional bits)."""
    if isinstance(precision_bits, bool) or not isinstance(precision_bits, int) or not 0 <= precision_bits <= 48:
        raise ProtocolError(f"precision_bits: expected an int in 0..48, got {precision_bits!r}")
    return precision_bits


def fixed_point_max_abs(precision_bits: int) -> float:
    """Largest |value| and |sum| the Z_2^64 fixed-point encoding accepts: 2^(62-p)."""
    return float(2 ** (62 - precision_bits))


def check_fixed_point_range(values: list[torch.Tensor], precision_bits: int) -> None:
    """Raise ProtocolError unless every value and every per-element sum fits the encoding."""
    floats = [x.to(torch.float64) for x in values]
    what = f"fixed-point (precision_bits={precision_bits})"
    check_range(floats, float64_sum(floats), fixed_point_max_abs(precision_bits), what)


def encode_checked(values: list[torch.Tensor], precision_bits: int) -> list[torch.Tensor]:
    """Range-check the inputs and their sum, then fixed-point encode each client's tensor."""
    check_fixed_point_range(values, precision_bits)
    return [crypten_compat.encode(x, precision_bits) for x in values]


def decode_total(ring_sum: torch.Tensor, precision_bits: int, integer: bool) -> torch.Tensor:
    """Decode the opened ring sum: int64 for integer inputs (exact), else float64."""
    if integer:
        return torch.from_numpy(ring_sum.numpy() >> precision_bits)  # exact: the sum is a multiple of 2^p
    return crypten_compat.decode(ring_sum, precision_bits)


def fixed_point_error_bound(num_clients: int, precision_bits: int, total: torch.Tensor, integer: bool) -> float:
    """K * 2^-(p+1) input rounding + float64 rounding of the decoded total (0 for integers)."""
    if integer:
        return 0.0
    rounding = num_clients * 2.0 ** -(precision_bits + 1)
    return rounding + (max_abs_value(total) + rounding) * FLOAT64_U


def secure_view(num_clients: int, share_bytes: int, total: torch.Tensor, reveal_bytes: int) -> list[dict]:
    """Server view of a share-based sum: one input share and one summed share per client."""
    view = [{"party": k, "kind": "share", "step": "input", "bytes": share_bytes} for k in range(num_clients)]
    view += [{"party": k, "kind": "share", "step": "reveal", "bytes": share_bytes} for k in range(num_clients)]
    view.append({"party": "reveal", "kind": "aggregate", "tensor": total.clone(), "bytes": reveal_bytes})
    return view


class CryptenProtocol(Protocol):
    """In-process additive secret sharing (see module docstring). precision_bits: fractional bits."""

    name = "crypten"

    def __init__(self, precision_bits: int = 16, seed: int | None = None):
        self.precision_bits = check_precision_bits(precision_bits)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ProtocolError(f"seed: expected an int or None, got {seed!r}")
        self._rng = np.random.Generator(np.random.PCG64(secrets.randbits(128) if seed is None else seed))

    def _aggregate(self, values: list[torch.Tensor], integer: bool) -> AggregationResult:
        num_clients = len(values)
        server = num_clients
        t0 = time.perf_counter()
        encoded = [x.numpy() for x in encode_checked(values, self.precision_bits)]
        n = encoded[0].size
        held = [np.zeros(n, dtype=np.int64) for _ in range(num_clients + 1)]
        protect = time.perf_counter() - t0
        aggregate = 0.0
        # numpy int64 arithmetic on arrays wraps modulo 2^64: exactly the ring Z_2^64.
        for k, x in enumerate(encoded):
            own = x.copy()
            for party in range(num_clients + 1):
                if party == k:
                    continue
                t1 = time.perf_counter()
                share = self._rng.integers(INT64_MIN, INT64_MAX, n, dtype=np.int64, endpoint=True)
                own -= share
                t2 = time.perf_counter()
                held[party] += share
                protect += t2 - t1
                aggregate += time.perf_counter() - t2
            t3 = time.perf_counter()
            held[k] += own
            aggregate += time.perf_counter() - t3
        t4 = time.perf_counter()
        ring_sum = held[server].copy()
        for k in range(num_clients):
            ring_sum += held[k]
        total = decode_total(torch.from_numpy(ring_sum), self.precision_bits, integer)
        reveal = time.perf_counter() - t4
        share_bytes = 8 * n
        return AggregationResult(
            total=total,
            server_view=secure_view(num_clients, share_bytes, total, 0),
            bytes_up=[(num_clients + 1) * share_bytes] * num_clients,
            bytes_down=[(num_clients - 1) * share_bytes] * num_clients,
            phases={"protect": protect, "aggregate": aggregate, "reveal": reveal},
            error_bound=fixed_point_error_bound(num_clients, self.precision_bits, total, integer),
        )
