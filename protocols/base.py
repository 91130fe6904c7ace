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
INT64_MAX = 2**63 - 1
_UNSIGNED_WIDE = (torch.uint64,)  # unsigned dtypes whose values can exceed int64


class ProtocolError(ValueError):
    """A bad input or parameter; the message names the input and what would be valid."""


class PartyFailure(ProtocolError, RuntimeError):
    """A party process died, hung or failed; raised within the protocol's timeout."""


SERVER = "server"
REVEAL_TO = ("server", "clients")


def client(k: int) -> str:
    """The party name of client k ("client0", "client1", ...), as the runtime names it."""
    return f"client{k}"


@dataclass
class Transfer:
    """One message a protocol sent, as it crossed the wire.

    sender, receiver: party names ("client3", "server").
    step:   "setup" (public parameters or key, first use), "input" (a client's protected upload),
            "share" (a secret share between clients), "aggregate" (HE: the server's sum ciphertexts
            to the key holder), "reveal" (opening traffic: summed shares, or the decrypted sum).
    kind:   "plaintext", "ciphertext", "share", "parameters", "public_key" or "aggregate" (a sum).
    nbytes: bytes on the wire.
    blobs:  the serialized objects themselves (SEAL ciphertexts/keys/parameters, little-endian
            int64 share vectors), so that an auditor can attack exactly what was received.
    tensor: the plaintext payload (plain uploads, a revealed sum), else None.
    """

    sender: str
    receiver: str
    step: str
    kind: str
    nbytes: int
    blobs: tuple[bytes, ...] = ()
    tensor: torch.Tensor | None = field(default=None, repr=False)


@dataclass
class AggregationResult:
    """What one secure sum produced, sent and cost.

    total:          revealed sum, same shape as the inputs; float64, or int64 when the inputs are
                    integer and the backend sums them exactly (plain, crypten, bfv).
    transfers:      every message of the protocol with its real sender and receiver, in order.
    num_clients:    K.
    opened_by:      the parties that learn ``total`` (the server, or the clients only).
    phases:         seconds: "protect" (encode/encrypt/share), "aggregate" (server), "reveal".
    error_bound:    documented max abs error of ``total`` vs the exact sum of these inputs.
    server_context: what the server holds besides the messages (HE: its serialized public
                    encryption parameters), or None.
    details:        backend facts worth recording (e.g. the CKKS reveal mode and grid).
    """

    total: torch.Tensor
    transfers: list[Transfer] = field(repr=False)
    num_clients: int
    opened_by: tuple[str, ...]
    phases: dict[str, float]
    error_bound: float
    server_context: bytes | None = field(default=None, repr=False)
    details: dict = field(default_factory=dict)

    @property
    def survivors(self) -> list[int]:
        """The clients whose input is in ``total``, in client order: all K unless the backend reports a
        dropout (``details["survivors"]``: secagg). Methods weight by these, never by K."""
        survivors = self.details.get("survivors")
        return list(range(self.num_clients)) if survivors is None else [int(k) for k in survivors]

    def received(self, party: str) -> list[Transfer]:
        """The transfers ``party`` received, in order (the server's view: ``received("server")``)."""
        return [t for t in self.transfers if t.receiver == party]

    @property
    def bytes_up(self) -> list[int]:
        """Bytes each client sent (to the server and to other clients), per client."""
        return [sum(t.nbytes for t in self.transfers if t.sender == client(k)) for k in range(self.num_clients)]

    @property
    def bytes_down(self) -> list[int]:
        """Bytes each client received inside the protocol, per client."""
        return [sum(t.nbytes for t in self.transfers if t.receiver == client(k)) for k in range(self.num_clients)]


@dataclass
class ComputeResult:
    """What one secure computation on the clients' summed inputs produced, sent and cost
    (``CryptenProtocol.compute``).

    outputs:     output name -> its opened value (float64), as the parties in ``opened_to`` hold it.
    opened_to:   output name -> the parties that opened it (no other party learns it).
    transfers:   every message, one Transfer per (sender, receiver, step), in the order of each
                 pair's first message; ``blobs`` holds that pair's message payloads in order.
                 Steps: "setup" (the parties' PRZS and dealer keys), "input" (sharing the inputs),
                 "compute" (e.g. Beaver openings, comparisons), "reveal" (opening the outputs).
    num_clients: K (the parties are the K clients and the server; under dealer="party" also the dealer).
    phases:      wall seconds per step ("setup", "protect" = sharing the inputs, "compute", "reveal").
    details:     backend facts (e.g. the message count, the CrypTen configuration used).
    """

    outputs: dict[str, torch.Tensor]
    opened_to: dict[str, tuple[str, ...]]
    transfers: list[Transfer] = field(repr=False)
    num_clients: int
    phases: dict[str, float]
    details: dict = field(default_factory=dict)


class Protocol(ABC):
    """A secure-sum backend. Subclasses implement ``_aggregate`` on checked inputs."""

    name: str
    # False when the caller keeps no message payloads (a transcript that keeps "none"): a backend may
    # then leave its bulk blobs out of the transfers it returns (their ``nbytes`` stay as sent).
    keep_payloads: bool = True

    def aggregate(self, contributions: list[torch.Tensor], reveal_to: str = "server") -> AggregationResult:
        """Sum ``contributions`` (K tensors of one shape) and open the sum to ``reveal_to``:
        "server" (default) or "clients" (every client opens it; the server never learns it)."""
        if reveal_to not in REVEAL_TO:
            raise ProtocolError(f"reveal_to: expected one of {', '.join(REVEAL_TO)}, got {reveal_to!r}")
        values, integer = check_contributions(contributions)
        shape = contributions[0].shape
        result = self._aggregate([x.reshape(-1) for x in values], integer, reveal_to)
        result.total = result.total.reshape(shape)
        return result

    @abstractmethod
    def _aggregate(self, values: list[torch.Tensor], integer: bool, reveal_to: str) -> AggregationResult:
        """values: K flat (1-D) CPU tensors, int64 if ``integer`` else float64, finite, same length.

        Returns the flat total; ``aggregate`` restores the shape.
        """

    def close(self) -> None:
        """Release processes or keys held by the protocol (no-op for in-process backends)."""

    def __enter__(self) -> "Protocol":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def opened_by(reveal_to: str, num_clients: int) -> tuple[str, ...]:
    """The parties that learn the sum when it is opened to ``reveal_to``."""
    return (SERVER,) if reveal_to == "server" else tuple(client(k) for k in range(num_clients))


def array_bytes(x: np.ndarray | torch.Tensor) -> bytes:
    """A numeric vector as it is sent: little-endian bytes of its elements."""
    a = x.numpy() if isinstance(x, torch.Tensor) else x
    return a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()


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
    for x in contributions:
        x = x.detach().cpu()
        if integer:
            if x.dtype in _UNSIGNED_WIDE and int(x.numpy().max()) > INT64_MAX:  # would wrap to negative int64
                raise ProtocolError(
                    f"contributions: a client's {x.dtype} contribution has values >= 2^63, outside the int64 "
                    "range of the integer sum; scale the inputs down"
                )
            values.append(x.to(torch.int64))
            continue
        x = x.to(torch.float64)
        finite = np.isfinite(x.numpy())
        if not finite.all():
            raise ProtocolError("contributions: a client's contribution contains NaN or Inf; all values must be finite")
        values.append(x)
    return values, integer


def check_range(values: list[torch.Tensor], total: torch.Tensor, max_abs: float, what: str) -> None:
    """Raise ProtocolError unless every |value| and every |per-element sum| is <= max_abs.

    values: the K client tensors, total: their sum (float64 is fine: callers keep a margin below
    the encoding's true limit), what: the encoding, for the message. The message names the valid
    range only: neither which client nor how far out (a client's max |x| is not the server's to learn).
    """
    if any(max_abs_value(x) > max_abs for x in values):
        raise ProtocolError(
            f"contributions: a client's contribution is outside the {what} range |x| <= {max_abs:.6g}; "
            "scale the inputs down or choose a wider encoding"
        )
    if max_abs_value(total) > max_abs:
        raise ProtocolError(
            f"contributions: their sum is outside the {what} range |sum| <= {max_abs:.6g}; scale the inputs "
            "down or choose a wider encoding"
        )


def max_abs_value(x: torch.Tensor) -> float:
    """max |x| over all elements, as a float (numpy: avoids torch's thread start-up per call)."""
    return float(np.abs(x.numpy()).max())


def float64_sum(values: list[torch.Tensor]) -> torch.Tensor:
    """Left-to-right float64 sum of the K tensors (the reference used by ``plain``).

    Raises ProtocolError when the sum overflows float64 (never returns inf for finite inputs)."""
    total = values[0].to(torch.float64).numpy().copy()
    with np.errstate(over="ignore"):
        for x in values[1:]:
            total += x.numpy()
    if not np.isfinite(total).all():
        raise ProtocolError(
            f"contributions: the float64 sum overflows (|sum| > {np.finfo(np.float64).max:.3g}); scale the inputs down"
        )
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

