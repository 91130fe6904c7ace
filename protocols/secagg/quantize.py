"""The public fixed-point grid of `secagg`: real inputs -> Z_{2^b} and the sum back.

A float input x with |x| <= clip_range becomes q = round(x * 2^f) (f = ``frac_bits``), stored as a
b-bit two's-complement ring element (numpy uint32 or uint64: ring addition is the dtype's own
wrap-around). The server's unmasked sum is read back as a signed integer and divided by 2^f.
That read-back is exact only while |sum q| < 2^(b-1): f is chosen (``frac_bits="auto"``) or checked
so that K clients at the range's edge cannot reach it, K * (clip_range * 2^f + 1) <= 2^(b-1) - 1,
and so that |sum q| <= 2^53 (the float64 read-back is exact). A client whose input leaves the range
raises ProtocolError: nothing ever wraps silently. Integer inputs (counts) use f = 0 and are summed
exactly to int64; their range is |x| <= (2^(b-1) - 1) // K, the most a sum of K can hold.
This module imports torch only to return the decoded sum (``decode``): the clients' side (``encode``,
on numpy arrays too) runs in the secagg worker processes, which never load torch (``client``).
Error bound of the revealed float sum against the exact sum of the inputs: K * 2^-(f+1) (each
client's rounding), a public number; 0 for integers.
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass

import numpy as np

from protocols.base import ProtocolError

BITS = (32, 64)
MAX_FRAC_BITS = 52
_UINT = {32: np.uint32, 64: np.uint64}
_INT = {32: np.int32, 64: np.int64}
_local = threading.local()


@dataclass(frozen=True)
class Grid:
    """The grid of one sum: ring width ``bits``, fractional bits ``frac_bits`` (0 for integers),
    the per-client range |x| <= ``limit`` and the number of summands ``num_clients``."""

    bits: int
    frac_bits: int
    limit: float  # an int for integer grids
    num_clients: int
    integer: bool

    @property
    def dtype(self) -> type:
        """The ring's numpy dtype (uint32 or uint64)."""
        return _UINT[self.bits]

    @property
    def error_bound(self) -> float:
        """Max abs error of the revealed sum of ``num_clients`` inputs: K * 2^-(f+1); 0 for integers."""
        return 0.0 if self.integer else self.num_clients * 2.0 ** -(self.frac_bits + 1)

    def encode(self, x, out: np.ndarray | None = None) -> np.ndarray:
        """A client's flat input (a torch tensor or a numpy array: float64, or int64 for integer grids) ->
        its ring elements: a fresh array, or written into ``out`` (ring dtype, x's size; returned).
        Raises ProtocolError outside |x| <= limit."""
        a = x if isinstance(x, np.ndarray) else x.numpy()
        # Integers: exact Python ints (np.abs(int64 min) overflows to a negative value). Floats (finite,
        # checked by Protocol.aggregate): max |x| = max(-min, max), without an |x| temporary, read off the
        # scaled copy (exact: a power of two; x is read once, the min and max passes read the copy while it is
        # in cache), unless that overflowed.
        if self.integer:
            scaled = a  # |q| <= limit < 2^(b-1): exact
            m = max(-int(a.min()), int(a.max()))
        else:
            scale = 2.0**self.frac_bits
            scaled = np.multiply(a, scale, out=_scratch(a.size))
            m = max(-float(scaled.min()), float(scaled.max())) / scale  # inf if |x| * 2^f overflowed: out of range
        if m > self.limit:
            what = "integer range" if self.integer else f"clip range (clip_range={self.limit:g})"
            raise ProtocolError(
                f"contributions: a client's contribution is outside the secagg {what} |x| <= {self.limit:.6g} "
                f"for {self.num_clients} clients on a {self.bits}-bit ring; scale the inputs down, raise "
                "clip_range or use bits=64"
            )
        if out is None:
            out = np.empty(a.size, dtype=self.dtype)
        signed = out.view(_INT[self.bits])  # the two's-complement elements
        if self.integer:
            np.copyto(signed, scaled, casting="unsafe")
        else:
            np.rint(scaled, out=signed, casting="unsafe")  # |q| < 2^(b-1): exact, no wrap; rounded and cast in one pass
        return out

    def decode(self, total: np.ndarray):
        """The unmasked ring sum -> a torch tensor: int64 (integers) or float64 on the grid."""
        import torch  # noqa: PLC0415 (the clients' side, in the workers, never needs it)

        signed = total.view(_INT[self.bits])
        if self.integer:
            return torch.from_numpy(signed.astype(np.int64))
        # int -> float64 is exact (|sum| <= 2^53) and so is the power-of-two scaling: sum / 2^f.
        return torch.from_numpy(np.multiply(signed, 2.0**-self.frac_bits, dtype=np.float64))


def _scratch(size: int) -> np.ndarray:
    """This thread's reused float64 buffer of ``size`` elements (encode's intermediate)."""
    buf = getattr(_local, "buf", None)
    if buf is None or buf.size < size:
        buf = _local.buf = np.empty(size, dtype=np.float64)
    return buf[:size]


def make_grid(bits: int, clip_range: float, frac_bits: int | str, num_clients: int, integer: bool) -> Grid:
    """The grid for K = ``num_clients`` summands; ProtocolError when no grid (or not the asked one) fits."""
    half = 2 ** (bits - 1) - 1  # largest |sum| the signed read-back holds
    if integer:
        return Grid(bits, 0, half // num_clients, num_clients, True)  # an int: compared exactly
    # Largest f with K * (clip_range * 2^f + 1) <= half and K * (clip_range * 2^f + 1) <= 2^53.
    cap = min(half, 2**53)
    room = cap / num_clients - 1
    finest = min(MAX_FRAC_BITS, math.floor(math.log2(room / clip_range))) if room > clip_range else -1
    while finest >= 0 and num_clients * (clip_range * 2.0**finest + 1) > cap:
        finest -= 1
    if finest < 0:
        raise ProtocolError(
            f"contributions: {num_clients} clients with clip_range={clip_range:g} do not fit a {bits}-bit ring "
            "even on an integer grid; lower clip_range or use bits=64"
        )
    if frac_bits == "auto":
        f = finest
    elif frac_bits > finest:
        raise ProtocolError(
            f"frac_bits: {frac_bits} is too fine for {num_clients} clients with clip_range={clip_range:g} on a "
            f"{bits}-bit ring (their sum could wrap); valid: frac_bits <= {finest} (or 'auto')"
        )
    else:
        f = frac_bits
    return Grid(bits, f, float(clip_range), num_clients, False)
