r"""What LapGraph's release keeps of each client's graph (auditor side: it reads the true graphs).

For each dataset, ε and variant (plain, rank 20, map: `select=map`), and noise seed: every client's release,
drawn exactly as the run with `--method-param seed=S` draws it (NoiseSource(S).for_client(k), the release
first), against its true graph: true edges |E|, released edges (T̃ unless map), true edges kept (recall =
kept/|E|), false edges (released − kept), and the share of released edges joining two nodes of the same label
(the true graph's share beside it).
Sums over the clients, mean over the seeds. Prints a Markdown table (docs/lapgraph.md).

    PRIVFGL_DATA=... python experiments/lapgraph_edges.py [--datasets cora,citeseer] [--seeds 0,1,2] \
        [--variants plain,rank20,map]
"""
from __future__ import annotations

import argparse

import numpy as np

from privfgl.experiment import RunConfig, build_setup
from privfgl.methods.lapgraph.params import resolve_params
from privfgl.methods.lapgraph.release import release, upper_entries
from privfgl.privacy.noise import NoiseSource

EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
VARIANTS = {"plain": {}, "rank20": {"rank": 20}, "map": {"select": "map"}}
LABELS = {"plain": "plain", "rank20": "rank 20", "map": "map"}


def same_label(edge_index, y) -> float:
    """Share of the edges [2, E] whose two ends have the same label."""
    return float((y[edge_index[0]] == y[edge_index[1]]).double().mean()) if edge_index.shape[1] else float("nan")


def measure(clients, epsilon: float, variant: dict, seed: int) -> dict:
    p = resolve_params({"epsilon": epsilon, "seed": seed, **variant})
    source = NoiseSource(seed)
    true = kept = released = 0
    homophily = []
    for k, c in enumerate(clients):
        n = int(c.num_nodes)
        out = release(c.edge_index, n, p, source.for_client(k))
        entries = upper_entries(c.edge_index, n)
        chosen = upper_entries(out.edge_index, n)
        true += int(entries.sum())
        released += out.edge_index.shape[1] // 2
        kept += int((entries * chosen).sum())
        homophily.append((out.edge_index.shape[1] // 2, same_label(out.edge_index, c.y)))
    weights = np.array([w for w, _ in homophily], dtype=float)
    shares = np.array([h if w else 0.0 for w, h in homophily])
    return {"true": true, "released": released, "kept": kept, "false": released - kept,
            "same_label": float((weights * shares).sum() / max(weights.sum(), 1))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", default="cora,citeseer")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--variants", default="plain,rank20", help=f"comma-separated, of {', '.join(VARIANTS)}")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    variants = args.variants.split(",")
    if not set(variants) <= set(VARIANTS):
        ap.error(f"--variants {args.variants!r}: valid: a comma-separated list of {', '.join(VARIANTS)}")
    print("| dataset | variant | ε | true edges | released edges | true kept (recall) | false edges | "
          "same-label share (true graph) |")
    print("|---|---|---|---|---|---|---|---|")
    for dataset in args.datasets.split(","):
        cfg = RunConfig(method="lapgraph", dataset=dataset, partition="louvain", clients=10, progress=False)
        clients = build_setup(cfg).clients
        true_share = float(np.average([same_label(c.edge_index, c.y) for c in clients],
                                      weights=[c.edge_index.shape[1] for c in clients]))
        for variant in variants:
            for eps in EPSILONS:
                rows = [measure(clients, eps, VARIANTS[variant], s) for s in seeds]
                mean = {key: float(np.mean([r[key] for r in rows])) for key in rows[0]}
                print(f"| {dataset} | {LABELS[variant]} | {eps:g} | {mean['true']:.0f} | "
                      f"{mean['released']:.0f} | {mean['kept']:.0f} ({mean['kept'] / mean['true']:.3f}) | "
                      f"{mean['false']:.0f} | {mean['same_label']:.3f} ({true_share:.3f}) |", flush=True)


if __name__ == "__main__":
    main()
