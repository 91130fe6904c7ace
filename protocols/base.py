"""Shared types for secure-aggregation backends: the result record, the errors, input checks.

A protocol sums K client contributions (tensors of one shape) and reveals only the sum to the
server. Weighted sums are done by client-side pre-weighting: each client multiplies its own
tensor by its weight before calling ``aggregate``; divisions happen after the reveal.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np
import torch

# Unit roundoff of float64.
FLOAT64_U = 2.0**-53


class ProtocolError(ValueError):
    """A bad input or parameter; the message names the input and what would be valid."""


class PartyFailure(ProtocolError, RuntimeError):
    """A party process died, hung or failed; raised within the protocol's timeout."""


@dataclass
class AggregationResult:
    """What one secure sum produced and cost.

    total:       revealed sum, same shape as the inputs; float64, or int64 when the inputs are
                 integer and the backend sums them exactly (plain, crypten, bfv; ckks stays float64).
    server_view: one dict per message the server received. plain: {"party": k, "kind":
                 "plaintext", "tensor", "bytes"}; secure backends only opaque blobs {"party": k,
                 "kind": "ciphertext"|"share", "bytes", "step": "input"|"reveal"} (ckks/bfv add
                 "ciphertexts", the count); all end with {"party": "reveal", "kind": "aggregate",
                 "tensor": total, "bytes"}.
    bytes_up:    bytes each client sent, per client.
    bytes_down:  bytes each client received inside the protocol, per client.
    phases:      seconds: "protect" (encode/encrypt/share), "aggregate" (server), "reveal".
    error_bound: documented max abs error of ``total`` vs the exact sum of these inputs.
    """

    total: torch.Tensor
    server_view: list[dict] = field(repr=False)
    bytes_up: list[int]
    bytes_down: list[int]
    phases: dict[str, float]
    error_bound: float


class Protocol(ABC):
    """A secure-sum backend. Subclasses implement ``_aggregate`` on checked inputs."""

    name: str

    def aggregate(self, contributions: list[torch.Tensor]) -> AggregationResult:
        """Sum ``contributions`` (K tensors of one shape) and reveal the sum to the server."""
        values, integer = check_contributions(contributions)
        shape = contributions[0].shape
        result = self._aggregate([x.reshape(-1) for x in values], integer)
        result.total = result.total.reshape(shape)
        for entry in result.server_view:
            if entry["party"] == "reveal":
                entry["tensor"] = result.total.clone()
        return result

    @abstractmethod
    def _aggregate(self, values: list[torch.Tensor], integer: bool) -> AggregationResult:
        """values: K flat (1-D) CPU tensors, int64 if ``integer`` else float64, finite, same length.

        Returns the flat total; ``aggregate`` restores the shape (also in the reveal view entry).
        """

    def close(self) -> None:
        """Release processes or keys held by the protocol (no-op for in-process backends)."""

    def __enter__(self) -> "Protocol":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def check_contributions(contributions: list[torch.Tensor]) -> tuple[list[torch.Tensor], bool]:
    """Validate client inputs; return them as CPU float64 (or int64) tensors and whether integer.

    Raises ProtocolError for: not a non-empty list of tensors, bool/complex dtypes, mixed integer
    and floating inputs, shape mismatch, empty tensors, NaN or Inf.
    """
    if not isinstance(contributions, (list, tuple)) or len(contributions) == 0:
        raise ProtocolError(
            "contributions: expected a non-empty list of tensors (one per client), "
            f"got {type(contributions).__name__}"
            + (" of length 0" if isinstance(contributions, (list, tuple)) else "")
        )
    first = contributions[0]
    for k, x in enumerate(contributions):
        if not isinstance(x, torch.Tensor):
            raise ProtocolError(f"contributions[{k}]: expected a torch.Tensor, got {type(x).__name__}")
        if x.dtype == torch.bool or x.is_complex():
            raise ProtocolError(
                f"contributions[{k}]: dtype {x.dtype} is not supported; use a floating or integer dtype"
            )
        if x.shape != first.shape:
            raise ProtocolError(
                f"contributions[{k}] has shape {tuple(x.shape)} but contributions[0] has shape "
                f"{tuple(first.shape)}; all clients must send the same shape"
            )
    if first.numel() == 0:
        raise ProtocolError(f"contributions: tensors of shape {tuple(first.shape)} hold no values")
    kinds = {x.is_floating_point() for x in contributions}
    if len(kinds) > 1:
        raise ProtocolError(
            "contributions: mixes floating and integer dtypes "
            f"({sorted({str(x.dtype) for x in contributions})}); cast all clients to one kind"
        )
    integer = not first.is_floating_point()
    values = []
    for k, x in enumerate(contributions):
        x = x.detach().cpu()
        if integer:
            values.append(x.to(torch.int64))
            continue
        x = x.to(torch.float64)
        finite = np.isfinite(x.numpy())
        if not finite.all():
            raise ProtocolError(
                f"contributions[{k}] contains NaN or Inf ({int((~finite).sum())} non-finite values); "
                "all values must be finite"
            )
        values.append(x)
    return values, integer


def check_range(values: list[torch.Tensor], total: torch.Tensor, max_abs: float, what: str) -> None:
    """Raise ProtocolError unless every |value| and every |per-element sum| is <= max_abs.

    values: the K client tensors, total: their sum (float64 is fine: callers keep a margin below
    the encoding's true limit), what: the encoding, for the message.
    """
    for k, x in enumerate(values):
        m = max_abs_value(x)
        if m > max_abs:
            raise ProtocolError(
                f"contributions[{k}] has |value| up to {m:.6g}, outside the {what} range "
                f"|x| <= {max_abs:.6g}; scale the inputs down or choose a wider encoding"
            )
    m = max_abs_value(total)
    if m > max_abs:
        raise ProtocolError(
            f"contributions: the sum reaches |sum| = {m:.6g}, outside the {what} range "
            f"|sum| <= {max_abs:.6g}; scale the inputs down or choose a wider encoding"
        )


def max_abs_value(x: torch.Tensor) -> float:
    """max |x| over all elements, as a float (numpy: avoids torch's thread start-up per call)."""
    return float(np.abs(x.numpy()).max())


def float64_sum(values: list[torch.Tensor]) -> torch.Tensor:
    """Left-to-right float64 sum of the K tensors (the reference used by ``plain``)."""
    total = values[0].to(torch.float64).numpy().copy()
    for x in values[1:]:
        total += x.numpy()
    return torch.from_numpy(total)


def recursive_sum_bound(values: list[torch.Tensor]) -> float:
    """Error bound of a left-to-right float64 sum: gamma_{K-1} * max_elem sum_k |x_k|."""
    k = len(values)
    if k == 1:
        return 0.0
    abs_sum = np.abs(values[0].numpy())
    for x in values[1:]:
        abs_sum += np.abs(x.numpy())
    gamma = (k - 1) * FLOAT64_U / (1 - (k - 1) * FLOAT64_U)
    return gamma * float(abs_sum.max()) * (1 + 2 * FLOAT64_U)


def tensor_bytes(x: torch.Tensor) -> int:
    """Bytes of a dense tensor: numel x element size."""
    return x.numel() * x.element_size()


def checked_int64_sum(values: list[torch.Tensor], what: str) -> torch.Tensor:
    """Exact int64 sum; raises ProtocolError instead of wrapping on overflow."""
    total = values[0].numpy().copy()
    for x in values[1:]:
        x = x.numpy()
        new = total + x  # numpy int64 arrays wrap; the wrap is detected below
        # Two's-complement overflow: both operands share a sign that the result lacks.
        if (((total ^ new) & (x ^ new)) < 0).any():
            raise ProtocolError(
                f"contributions: the {what} sum overflows int64 (|sum| >= 2^63); "
                "scale the inputs down"
            )
        total = new
    return torch.from_numpy(total)

