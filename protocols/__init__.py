"""Secure-aggregation backends for privfgl: one interface, a stable entry point.

    secure_sum(name, contributions, **params) -> Tensor       the revealed sum
    get_protocol(name, **params).aggregate(contributions)    -> AggregationResult (sum, server
                                                                view, bytes, phase times, bound)

Backends (PROTOCOLS): ``plain`` (server sees every tensor), ``crypten`` (additive secret sharing
over Z_2^64; ``mode="inprocess"`` (default) or ``mode="multiprocess"``, one OS process per party),
``ckks`` and ``bfv`` (TenSEAL/SEAL homomorphic encryption; see ``protocols.tenseal_backend`` for
the presets, their security, bytes per value and error bounds), ``secagg`` (pairwise masking with
Shamir-shared seeds, Bonawitz et al. 2017 / SecAgg+; survives client dropout up to a threshold; see
``protocols.secagg``; ``mode="multiprocess"``: one OS process per party over torch.distributed,
``protocols.secagg.multiprocess``).

Weighted sums: pre-weight on the client side (client k passes w_k * x_k); divide after the reveal.
Integer inputs (counts) are summed exactly to int64 by plain, crypten, bfv and secagg; use bfv (preset
"sum": 8 bytes/value) for counts under HE. ``get_protocol("crypten", mode="multiprocess")``
returns a ``CryptenSession`` whose party processes live until ``close()`` (or process exit), so
one session serves every round; ``secure_sum`` closes what it builds.
Backends are imported lazily, so ``import protocols`` does not load CrypTen or SEAL.
"""

from __future__ import annotations

import importlib
import inspect

import torch

from protocols.base import AggregationResult, PartyFailure, Protocol, ProtocolError

PROTOCOLS: tuple[str, ...] = ("plain", "crypten", "ckks", "bfv", "secagg")
CRYPTEN_MODES: tuple[str, ...] = ("inprocess", "multiprocess")
SECAGG_MODES: tuple[str, ...] = ("inprocess", "multiprocess")

_BACKENDS: dict[tuple[str, str], tuple[str, str]] = {
    ("plain", ""): ("protocols.plain", "PlainProtocol"),
    ("crypten", "inprocess"): ("protocols.crypten_backend", "CryptenProtocol"),
    ("crypten", "multiprocess"): ("protocols.crypten_multiprocess", "CryptenSession"),
    ("ckks", ""): ("protocols.tenseal_backend", "CKKSProtocol"),
    ("bfv", ""): ("protocols.tenseal_backend", "BFVProtocol"),
    ("secagg", "inprocess"): ("protocols.secagg", "SecAggProtocol"),
    ("secagg", "multiprocess"): ("protocols.secagg.multiprocess", "SecAggSession"),
}


def get_protocol(name: str, **params) -> Protocol:
    """Build backend ``name`` with ``params``; unknown names or parameters raise ProtocolError."""
    cls, params = _backend(name, params)
    return cls(**params)


def check_protocol_params(name: str, params: dict) -> None:
    """ProtocolError for an unknown backend, mode or parameter name, without building the backend
    (no keys are made): what a sweep checks of every cell before its first run."""
    _backend(name, params)


def _backend(name: str, params: dict) -> tuple[type, dict]:
    """The backend class of ``name`` (and its mode) and the parameters it takes, checked by name."""
    params = dict(params)
    if name not in PROTOCOLS:
        raise ProtocolError(f"protocol: unknown backend {name!r}; valid: {', '.join(PROTOCOLS)}")
    mode = ""
    if name == "crypten":
        mode = params.pop("mode", "inprocess")
        if mode not in CRYPTEN_MODES:
            raise ProtocolError(f"mode: unknown crypten mode {mode!r}; valid: {', '.join(CRYPTEN_MODES)}")
    elif name == "secagg":
        mode = params.pop("mode", "inprocess")
        if mode not in SECAGG_MODES:
            raise ProtocolError(f"mode: unknown secagg mode {mode!r}; valid: {', '.join(SECAGG_MODES)}")
    module, cls_name = _BACKENDS[(name, mode)]
    cls = getattr(importlib.import_module(module), cls_name)
    signature = inspect.signature(cls.__init__).parameters.values()
    valid = [p.name for p in signature if p.name != "self" and p.kind is p.POSITIONAL_OR_KEYWORD]
    unknown = sorted(set(params) - set(valid))
    if unknown:
        extra = ["mode"] if name in ("crypten", "secagg") else []
        raise ProtocolError(
            f"{name}: unknown parameter(s) {', '.join(unknown)}; valid: {', '.join(extra + valid) or 'none'}"
        )
    return cls, params


def secure_sum(name: str, contributions: list[torch.Tensor], **params) -> torch.Tensor:
    """Revealed sum of ``contributions`` under backend ``name`` (same shape; float64 or int64)."""
    with get_protocol(name, **params) as protocol:
        return protocol.aggregate(contributions).total


__all__ = [
    "PROTOCOLS",
    "AggregationResult",
    "PartyFailure",
    "Protocol",
    "ProtocolError",
    "check_protocol_params",
    "get_protocol",
    "secure_sum",
]
