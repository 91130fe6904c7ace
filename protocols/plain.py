"""`plain`: the insecure baseline. Clients upload their tensors; the server sums them in float64.

The server sees every client's tensor. Float inputs are summed left to right in float64
(error bound gamma_{K-1} * max_elem sum_k |x_k|, about (K-1) * 2^-53 relative; a sum that
overflows float64 raises ProtocolError); integer inputs are summed exactly in int64 (an overflow
raises ProtocolError, it never wraps). With ``reveal_to="clients"`` the server still computes the
sum (it holds every input) and sends it to every client.
"""

from __future__ import annotations

import time

import torch

from protocols.base import (
    SERVER,
    AggregationResult,
    Protocol,
    Transfer,
    checked_int64_sum,
    client,
    float64_sum,
    recursive_sum_bound,
    tensor_bytes,
)


class PlainProtocol(Protocol):
    """Sum in the clear; client k's upload is its tensor as given (numel x element size bytes)."""

    name = "plain"

    def aggregate(self, contributions: list[torch.Tensor], reveal_to: str = "server") -> AggregationResult:
        result = super().aggregate(contributions, reveal_to)
        # The server saw each tensor in the dtype the client sent: record it and its bytes as sent.
        for k, x in enumerate(contributions):
            sent = x.detach().cpu().clone()
            upload = result.transfers[k]
            upload.tensor, upload.nbytes = sent, tensor_bytes(sent)
        for t in result.transfers[len(contributions):]:
            t.tensor = result.total.clone()
        return result

    def _aggregate(self, values: list[torch.Tensor], integer: bool, reveal_to: str) -> AggregationResult:
        t0 = time.perf_counter()
        if integer:
            total = checked_int64_sum(values, "integer")
            bound = 0.0
        else:
            total = float64_sum(values)
            bound = recursive_sum_bound(values)
        t1 = time.perf_counter()
        # `aggregate` puts each client's tensor as it was sent into its upload.
        transfers = [Transfer(client(k), SERVER, "input", "plaintext", tensor_bytes(x)) for k, x in enumerate(values)]
        if reveal_to == "clients":
            transfers += [Transfer(SERVER, client(k), "reveal", "aggregate", tensor_bytes(total))
                          for k in range(len(values))]
        opened = (SERVER,) + (tuple(client(k) for k in range(len(values))) if reveal_to == "clients" else ())
        return AggregationResult(
            total=total,
            transfers=transfers,
            num_clients=len(values),
            opened_by=opened,
            phases={"protect": 0.0, "aggregate": t1 - t0, "reveal": 0.0},
            error_bound=bound,
        )
