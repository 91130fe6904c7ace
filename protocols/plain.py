"""`plain`: the insecure baseline. Clients upload their tensors; the server sums them in float64.

The server sees every client's tensor. Float inputs are summed left to right in float64
(error bound gamma_{K-1} * max_elem sum_k |x_k|, about (K-1) * 2^-53 relative); integer inputs
are summed exactly in int64 (an overflow raises ProtocolError, it never wraps).
"""

from __future__ import annotations

import time

import torch

from protocols.base import (
    AggregationResult,
    Protocol,
    checked_int64_sum,
    float64_sum,
    recursive_sum_bound,
    tensor_bytes,
)


class PlainProtocol(Protocol):
    """Sum in the clear; bytes_up[k] = numel x element size of client k's tensor as given."""

    name = "plain"

    def aggregate(self, contributions: list[torch.Tensor]) -> AggregationResult:
        result = super().aggregate(contributions)
        # The server saw each tensor in the dtype the client sent: record it and its bytes as sent.
        for k, x in enumerate(contributions):
            sent = x.detach().cpu().clone()
            result.server_view[k].update(tensor=sent, bytes=tensor_bytes(sent))
            result.bytes_up[k] = tensor_bytes(sent)
        return result

    def _aggregate(self, values: list[torch.Tensor], integer: bool) -> AggregationResult:
        t0 = time.perf_counter()
        if integer:
            total = checked_int64_sum(values, "integer")
            bound = 0.0
        else:
            total = float64_sum(values)
            bound = recursive_sum_bound(values)
        t1 = time.perf_counter()
        # `aggregate` adds each client's tensor as it was sent (one copy, not two).
        view = [{"party": k, "kind": "plaintext", "bytes": tensor_bytes(x)} for k, x in enumerate(values)]
        view.append({"party": "reveal", "kind": "aggregate", "tensor": total.clone(), "bytes": 0})
        return AggregationResult(
            total=total,
            server_view=view,
            bytes_up=[tensor_bytes(x) for x in values],
            bytes_down=[0] * len(values),
            phases={"protect": 0.0, "aggregate": t1 - t0, "reveal": 0.0},
            error_bound=bound,
        )
