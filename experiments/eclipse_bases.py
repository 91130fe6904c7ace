"""Does Eclipse's release (noise on the rank-k singular values only) protect one edge? Measured on Cora's
Louvain clients.

Eclipse (Tang, Niu, Avestimehr, Annavaram, PETS 2024, "Edge Private Graph Neural Networks with Singular
Value Perturbation") takes the rank-k SVD A ≈ U_k diag(s) V_kᵀ of a graph's adjacency, adds Gaussian noise
to the k singular values (L2 sensitivity √2 for one undirected edge: by Mirsky's inequality
||s(A) − s(A')||₂ ≤ ||A − A'||_F = √2) and releases R = U_k diag(s + noise) V_kᵀ (then its top entries as
edges). U_k and V_k are computed from the private A and get no noise.

Per tested edge e of a client's graph (A with e, A' = A without e) this script measures:
  - the singular-value change ||s_k(A) − s_k(A')||₂ (the claimed sensitivity: at most √2);
  - the basis change ||P_k(A) − P_k(A')||_F, P_k = U_k U_kᵀ the projector onto the top-k left singular space;
  - a distinguisher from the release alone: R is drawn from A or from A' (a fair coin, σ calibrated to
    ε = 1, δ = 1e-5 for the one Gaussian release), the guess is the graph whose top-k space leaves the smaller
    residual ||(I − P_k) R||_F. Any (ε, δ)-DP release caps a fair-coin guess's accuracy at
    e^ε/(1 + e^ε) + δ (0.731 at ε = 1).

    python experiments/eclipse_bases.py [--clients 10] [--edges 50] [--draws 20] [--rank 20] [--epsilon 1]
"""
from __future__ import annotations

import argparse
import math
import os

import torch

from privfgl.data import client_subgraphs, load_dataset, partition_nodes
from privfgl.privacy.accounting import noise_multiplier_for
from privfgl.privacy.noise import NoiseSource


def dense_adjacency(edge_index: torch.Tensor, n: int) -> torch.Tensor:
    """Symmetric 0/1 adjacency [n, n] (float64) without self loops."""
    a = torch.zeros(n, n, dtype=torch.float64)
    a[edge_index[0], edge_index[1]] = 1.0
    a = ((a + a.T) > 0).double()
    a.fill_diagonal_(0.0)
    return a


def top_k(a: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(U_k [n, k], s_k [k], V_kᵀ [k, n]) of the SVD."""
    u, s, vh = torch.linalg.svd(a)
    return u[:, :k], s[:k], vh[:k]


def release(u: torch.Tensor, s: torch.Tensor, vh: torch.Tensor, std: float, source: NoiseSource) -> torch.Tensor:
    """Eclipse's release: U_k diag(max(s + N(0, std²), 0)) V_kᵀ."""
    noisy = (s + source.gaussian(s.shape, std).double()).clamp(min=0.0)
    return u @ torch.diag(noisy) @ vh


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--edges", type=int, default=50, help="edges tested per client")
    ap.add_argument("--draws", type=int, default=20, help="releases per world and edge")
    ap.add_argument("--rank", type=int, default=20)
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--delta", type=float, default=1e-5)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    data = load_dataset("cora", root=os.environ.get("PRIVFGL_DATA"))
    parts = partition_nodes(data, "louvain", args.clients, seed=args.seed, cache_dir=os.environ.get("PRIVFGL_CACHE"))
    sigma = noise_multiplier_for(args.epsilon, args.delta, 1.0, 1, "rdp")
    std = sigma * math.sqrt(2.0)
    source = NoiseSource(seed=args.seed)
    g = torch.Generator().manual_seed(args.seed)
    cap = math.exp(args.epsilon) / (1 + math.exp(args.epsilon)) + args.delta
    print(f"rank {args.rank}, ε = {args.epsilon}, δ = {args.delta}: σ = {sigma:.3f}, noise std on each singular "
          f"value = σ·√2 = {std:.3f}; an (ε, δ)-DP release caps a fair-coin guess at {cap:.3f}")
    print("client  nodes  edges  tested  max|Δs|  min‖ΔP‖  median‖ΔP‖  guess accuracy")
    totals = [0, 0]
    for k, sub in enumerate(client_subgraphs(data, parts)):
        n = int(sub.num_nodes)
        a = dense_adjacency(sub.edge_index, n)
        upper = torch.nonzero(torch.triu(a, 1))
        if n <= args.rank or len(upper) == 0:
            continue
        pick = upper[torch.randperm(len(upper), generator=g)[:args.edges]]
        u, s, vh = top_k(a, args.rank)
        p = u @ u.T
        ds, dp, right, guesses = [], [], 0, 0
        for i, j in pick.tolist():
            b = a.clone()
            b[i, j] = b[j, i] = 0.0
            ub, sb, vhb = top_k(b, args.rank)
            pb = ub @ ub.T
            ds.append(float(torch.linalg.norm(s - sb)))
            dp.append(float(torch.linalg.norm(p - pb)))
            eye = torch.eye(n, dtype=torch.float64)
            for world, (uu, ss, vv) in enumerate(((u, s, vh), (ub, sb, vhb))):
                for _ in range(args.draws):
                    r = release(uu, ss, vv, std, source)
                    guess = 0 if torch.linalg.norm((eye - p) @ r) <= torch.linalg.norm((eye - pb) @ r) else 1
                    right += guess == world
                    guesses += 1
        totals[0] += right
        totals[1] += guesses
        dp_sorted = sorted(dp)
        print(f"{k:>6}  {n:>5}  {len(upper):>5}  {len(pick):>6}  {max(ds):7.4f}  {dp_sorted[0]:7.4f}  "
              f"{dp_sorted[len(dp) // 2]:10.4f}  {right / guesses:.3f} ({right}/{guesses})")
    print(f"all clients: guess accuracy {totals[0] / totals[1]:.3f} ({totals[0]}/{totals[1]}) against the DP cap "
          f"{cap:.3f}")


if __name__ == "__main__":
    main()
