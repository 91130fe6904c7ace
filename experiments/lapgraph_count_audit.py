"""dp-audit of LapGraph's noisy edge count (ε_count = count_share·ε), which its one-run canary-pair audit does
not reach: N independent releases of one public graph, each with the auditor's canary edge in or out.

Public graph: G(n = 100, p = 1/2) drawn from numpy's PCG64 at --graph-seed (m = 4,950 upper-triangle entries,
about 2,475 edges, so rounding and clipping to [0, m] seldom bind even at ε_count = 0.005); the canary edge is
its first non-edge. Release d runs privfgl/methods/lapgraph/release.py on the graph, plus the canary edge when
coin d is in (fair_coins, --canary-seed), with its own noise source: OS entropy by default (the mechanism's
default, independent draws), or the generator of --noise-seed for draw d (reproducible). The adversary reads the
number of edges each release publishes; attacks/dp/lapgraph_count_audit.py scores them.

    python experiments/lapgraph_count_audit.py [--releases 100000] [--epsilons 0.5,1,2,4,8,16] [--noise-seed 0] [--family 24]
"""
from __future__ import annotations

import argparse

import numpy as np
import torch
from tqdm.auto import tqdm

from attacks.dp.canary_clients import fair_coins
from attacks.dp.lapgraph_count_audit import count_audit
from privfgl.methods.lapgraph.params import resolve_params
from privfgl.methods.lapgraph.release import release
from privfgl.privacy.noise import NoiseSource

NODES = 100


def public_graph(seed: int, n: int = NODES) -> tuple[torch.Tensor, tuple[int, int]]:
    """(edge_index [2, E] of G(n, 1/2), one direction per edge; the canary pair (u, v), its first non-edge)."""
    rows, cols = np.triu_indices(n, 1)
    keep = np.random.default_rng(seed).random(rows.size) < 0.5
    first_out = int(np.flatnonzero(~keep)[0])
    return torch.from_numpy(np.stack([rows[keep], cols[keep]])), (int(rows[first_out]), int(cols[first_out]))


def released_counts(epsilon: float, coins: np.ndarray, graph_seed: int = 0, noise_seed: int | None = None,
                    count_share: float = 0.01, progress: bool = True) -> np.ndarray:
    """[N] int: the number of edges release d publishes, d = 0..N−1, with the canary edge when coins[d]."""
    edge_index, (u, v) = public_graph(graph_seed)
    with_canary = torch.cat([edge_index, torch.tensor([[u], [v]])], dim=1)
    params = resolve_params({"epsilon": epsilon, "count_share": count_share})
    noise = NoiseSource(None, secure=True) if noise_seed is None else NoiseSource(noise_seed)
    out = np.empty(len(coins), dtype=np.int64)
    for d in tqdm(range(len(coins)), desc=f"ε={epsilon:g}", unit="release", leave=False, disable=not progress):
        graph = with_canary if coins[d] else edge_index
        out[d] = release(graph, NODES, params, noise.for_client(d)).edge_index.shape[1] // 2
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--releases", type=int, default=100_000)
    ap.add_argument("--epsilons", default="0.5,1,2,4,8,16")
    ap.add_argument("--graph-seed", type=int, default=0)
    ap.add_argument("--canary-seed", type=int, default=0)
    ap.add_argument("--noise-seed", type=int, default=None, help="reproducible noise (default: OS entropy)")
    ap.add_argument("--family", type=int, default=1, help="the audits read as one test (default 1: off)")
    args = ap.parse_args()
    if args.releases < 4:
        ap.error(f"--releases {args.releases}: valid: an integer >= 4")
    if args.family < 1:
        ap.error(f"--family {args.family}: valid: an integer >= 1")
    family = args.family > 1
    torch.set_num_threads(1)
    coins = fair_coins(args.canary_seed, args.releases)
    print("| ε | ε_count | releases | k each way | correct / guesses | valid 95 % bound | bound / ε_count | bound > ε_count |"
          + (f" family of {args.family}: bound | > ε_count |" if family else ""))
    print("|---|---|---|---|---|---|---|---|" + ("---|---|" if family else ""))
    for eps in (float(e) for e in args.epsilons.split(",")):
        counts = released_counts(eps, coins, args.graph_seed, args.noise_seed)
        m = count_audit(counts, coins, resolve_params({"epsilon": eps}).epsilon_count, family=args.family)
        print(f"| {eps:g} | {m['epsilon_count']:g} | {m['releases']} | {m['one_run_k']} | {m['one_run_correct']} | "
              f"{m['epsilon_lower_bound']:.4f} | {m['bound_over_accountant']:.3f} | {m['caught']} |"
              + (f" {m['epsilon_lower_bound_family']:.4f} | {m['caught_family']} |" if family else ""), flush=True)


if __name__ == "__main__":
    main()
