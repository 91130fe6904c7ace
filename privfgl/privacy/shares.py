"""Distributed DP's noise shares, sized against the clients that collude with the server.

In mode=distributed each of the K clients adds its own share of the Gaussian noise to its upload,
and the secure protocol reveals only the sum. A client knows its own share, so a server that colludes
with c clients subtracts their c shares from the revealed sum; what protects the honest clients is
the other K − c shares alone. Each share therefore carries the variance fraction 1/(K − c) of
(σ·clip)²: any K − c shares sum to the full N(0, (σ·clip)²), and the stated ε holds against the
server with up to c colluders. The price: the revealed sum carries K/(K − c) × the calibrated
variance (c = 0 gives the 1/K shares, which hold against the server alone).

c defaults to the coalition the protocol tolerates (privacy/trust.py: tolerated_colluders), so that
the stated ε holds wherever the protocol's own guarantee does; a smaller c (`colluders=N`) trades
noise for a weaker assumption, which the record then states with ε against the tolerated coalition.
"""
from __future__ import annotations

import math
from typing import Callable

from privfgl.privacy.spec import DPSpecError


def sized_colluders(requested: int | None, tolerated: int, num_clients: int) -> int:
    """c: `requested` (the spec's colluders=N), or `tolerated` when None; DPSpecError unless 0 <= c < K."""
    c = tolerated if requested is None else requested
    if not 0 <= c < num_clients:
        raise DPSpecError(f"--dp colluders={c}: must be in 0..{num_clients - 1} (fewer than the {num_clients} "
                          "clients, so that one honest noise share is left)")
    return c


def share_fraction(num_clients: int, colluders: int) -> float:
    """The variance fraction of (σ·clip)² in each client's share: 1/(K − c)."""
    return 1.0 / (num_clients - colluders)


def remaining_multiplier(num_clients: int, sized_for: int, removed: int) -> float:
    """The noise multiplier (in units of σ) left on the revealed sum once `removed` clients' shares,
    each of fraction 1/(K − sized_for), are subtracted: sqrt((K − removed)/(K − sized_for))."""
    return math.sqrt((num_clients - removed) / (num_clients - sized_for))


def distributed_report(num_clients: int, colluders: int, tolerated: int,
                       epsilon_at: Callable[[float], float]) -> dict:
    """The record's dp.distributed block. `epsilon_at(m)`: ε of the run's releases with every noise
    multiplier scaled by m. `epsilon_against`: ε against the server alone, against the server with the
    c colluders the shares are sized for, and (when different) with the protocol's tolerated coalition."""
    K, c = num_clients, colluders
    against = {"server": epsilon_at(remaining_multiplier(K, c, 0))}
    for n in sorted({c, tolerated} - {0}):
        against[f"server+{n} clients"] = epsilon_at(remaining_multiplier(K, c, n))
    out = {"colluders": c, "colluders_tolerated_by_protocol": tolerated, "honest_shares": K - c,
           "share_variance_fraction": share_fraction(K, c), "sum_variance_factor": K / (K - c),
           "epsilon_against": against,
           "cost": f"the revealed sum carries {K / (K - c):.4g} x the calibrated noise variance (K/(K - c)) so that "
                   f"any {K - c} honest shares carry all of it"}
    if c < tolerated:
        out["warning"] = (f"UNSAFE against the protocol's own collusion bound: the shares are sized for {c} colluding "
                          f"clients, but the protocol tolerates {tolerated}; the server with {tolerated} of them "
                          f"removes their shares and faces ε = {against[f'server+{tolerated} clients']:.4g}, not the "
                          f"recorded ε")
    return out
