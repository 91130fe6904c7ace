"""Who the minority nodes are: node homophily of majority and minority nodes per client.

FedSpray's claim is about minority nodes (label != the client's majority training class) with low
homophily (its Table 1: PubMed minority nodes average 0.17-0.70, majority 0.83-0.98). This prints,
for a partition and split, the mean node homophily (FedSpray Eq. 1, within the client's graph,
nodes with at least one neighbour) of majority and minority nodes, the share of minority nodes, and
how the minority *test* nodes fall into the bins RoundTracker scores (`minority_by_homophily`):
h < 0.5, h >= 0.5, no neighbour. Means over clients are pooled over nodes; then mean over seeds.

    python experiments/minority_homophily.py                      # Cora, CiteSeer; Louvain+, 10 clients
    python experiments/minority_homophily.py --datasets sbm-pubmed --partition louvain --clients 7
"""
from __future__ import annotations

import argparse
import statistics

from privfgl.evaluation import HOMOPHILY_BINS, homophily_bins, majority_training_class
from privfgl.experiment import RunConfig, build_setup
from privfgl.metrics import node_homophily

# FedSpray Table 1 (PubMed, 7 clients): mean over clients of the per-client averages.
PAPER_PUBMED = {"majority": (0.91 + 0.97 + 0.92 + 0.98 + 0.95 + 0.84 + 0.83) / 7,
                "minority": (0.33 + 0.24 + 0.17 + 0.48 + 0.41 + 0.47 + 0.70) / 7}


def profile(dataset: str, partition: str, clients: int, split: tuple, seed: int) -> dict:
    """Pooled over the clients of one partition: mean homophily of majority / minority nodes, the
    minority share of all nodes, and the number of minority test nodes per homophily bin."""
    setup = build_setup(RunConfig(method="local", dataset=dataset, partition=partition, clients=clients,
                                  split=split, seed=seed, progress=False))
    h_major, h_minor, n_minor, n_nodes = [], [], 0, 0
    bins = dict.fromkeys(HOMOPHILY_BINS, 0)
    for c in setup.clients:
        h = node_homophily(c.y, c.edge_index, int(c.num_nodes))
        minor = c.y != majority_training_class(c, setup.num_classes)
        h_major += h[~minor & ~h.isnan()].tolist()
        h_minor += h[minor & ~h.isnan()].tolist()
        n_minor, n_nodes = n_minor + int(minor.sum()), n_nodes + int(c.num_nodes)
        test_bins = homophily_bins(c)[minor & c.test_mask]
        for code, name in enumerate(HOMOPHILY_BINS):
            bins[name] += int((test_bins == code).sum())
    return {"majority": statistics.fmean(h_major), "minority": statistics.fmean(h_minor),
            "minority_share": n_minor / n_nodes, **bins}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", nargs="+", default=["cora", "citeseer"])
    ap.add_argument("--partition", default="louvain+")
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--split", default="0.4,0.3,0.3")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    args = ap.parse_args()
    split = tuple(float(v) for v in args.split.split(","))

    print(f"{args.partition}, {args.clients} clients, split {args.split}, seeds {' '.join(map(str, args.seeds))} "
          "(mean over seeds)\n")
    print("| dataset | homophily, majority nodes | homophily, minority nodes | minority share of nodes "
          "| minority test nodes per run: h < 0.5 / h ≥ 0.5 / isolated |")
    print("|---|---|---|---|---|")
    for dataset in args.datasets:
        rows = [profile(dataset, args.partition, args.clients, split, seed) for seed in args.seeds]
        mean = {k: statistics.fmean(r[k] for r in rows) for k in rows[0]}
        print(f"| {dataset} | {mean['majority']:.3f} | {mean['minority']:.3f} | {mean['minority_share']:.3f} "
              f"| {mean['low']:.0f} / {mean['high']:.0f} / {mean['isolated']:.0f} |")
    print(f"| PubMed (FedSpray Table 1, Louvain, 7 clients) | {PAPER_PUBMED['majority']:.3f} "
          f"| {PAPER_PUBMED['minority']:.3f} | — | — |")


if __name__ == "__main__":
    main()
