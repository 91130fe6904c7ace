"""LapGraph (Wu, Yang, Pan, Yuan, "LinkTeller: Recovering Private Edges from Graph Neural Networks via
Influence Analysis", IEEE S&P 2022): edge-level DP by a Laplace-noised adjacency, released once per client.

    params.py   --method-param settings (epsilon, count_share, rank, seed, max_nodes)
    release.py  the mechanism on one client's graph: noisy upper triangle, noisy edge count, optional
                rank-k truncation, top-T̃ selection
    run.py      the federation: each client's release, then FedAvg on the released graphs
"""
