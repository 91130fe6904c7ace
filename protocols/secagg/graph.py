"""The public communication graph of `secagg`: who masks with whom and who holds whose shares.

"complete" (Bonawitz et al., CCS 2017): every pair of clients shares a pairwise mask and every
client holds a share of every client's seeds (m = K holders each). "kregular" (SecAgg+, Bell et
al., CCS 2020): a k-regular graph, the Harary (circulant) graph on a public random ring order:
client at ring position p is joined to the k/2 positions on either side (odd k with even K adds
the antipodal position). Each client masks only with its k neighbours and shares its seeds with
its closed neighbourhood (m = k + 1 holders), so per-client work and bytes grow with k, not K.
The ring order is a public permutation drawn from ``graph_seed`` (the graph need not be secret:
Bell et al.'s analysis assumes a random graph, not a hidden one).

Defaults: degree k = 2 * ceil(log2 K) (SecAgg+'s O(log K); capped at K - 1, where the graph is
complete); threshold t = floor(2m/3) + 1 (more than two thirds of a client's share holders).
"""
from __future__ import annotations

import math

import numpy as np

GRAPHS = ("complete", "kregular")


def default_degree(num_clients: int) -> int:
    return min(num_clients - 1, 2 * math.ceil(math.log2(max(num_clients, 2))))


def default_threshold(holders: int) -> int:
    return min(holders, 2 * holders // 3 + 1)


def neighbours(graph: str, num_clients: int, degree: int | None, graph_seed: int) -> list[frozenset[int]]:
    """The open neighbourhood of each client (a client is never its own neighbour)."""
    n = num_clients
    if graph == "complete" or degree is not None and degree >= n - 1 or n <= 2:
        return [frozenset(range(n)) - {u} for u in range(n)]
    k = default_degree(n) if degree is None else degree
    if k % 2 and n % 2:
        k += 1  # no k-regular graph has odd k and odd K: the next even degree
    order = np.random.default_rng(graph_seed).permutation(n)  # public ring order
    position = np.empty(n, dtype=np.int64)
    position[order] = np.arange(n)
    out = []
    for u in range(n):
        p = int(position[u])
        near = {int(order[(p + d) % n]) for d in range(1, k // 2 + 1)}
        near |= {int(order[(p - d) % n]) for d in range(1, k // 2 + 1)}
        if k % 2:
            near.add(int(order[(p + n // 2) % n]))
        out.append(frozenset(near))
    return out
