"""Edge recovery from one client's upload (`--attack edge-recovery`, docs/attacks-graph.md): Cora,
Louvain, round 0, plain, seed 0; prints one row per setting (mean and range over the attacked
clients) and, with --per-client, one row per client.

    PRIVFGL_DATA=... OMP_NUM_THREADS=1 python experiments/edge_recovery.py [--settings NAME,...] [--per-client]

Settings (name: run flags; attack params; clients):
- default-k20: privfgl's default training (Adam, 3 local epochs, dropout 0.5), K = 20, clients with
  <= 30 training nodes (the first `--max-clients`); the supports' and the features' ranking, no fit
- default-k10: the same at K = 10
- default-k20-fit: the same, then 200 iterations of gradient matching from that ranking
- default-k20-nosupport / sgd1-k20-nosupport: without the supports (`support=0`; the fit from the
  features alone, as before the supports)
- sgd1-k20: one full-batch SGD step (--optimizer sgd --local-epochs 1 --dropout 0 --lr 0.5), K = 20
- sgd1-h256-k20: the same with --hidden 256 (more hidden units than nodes near the training nodes:
  GRAIN's span condition holds and the exact part runs)
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

from attacks import parse_attack, run_attacks
from privfgl.data import load_dataset
from privfgl.experiment import RunConfig, run

SGD1 = dict(optimizer="sgd", local_epochs=1, dropout=0.0, lr=0.5)
SETTINGS = {
    "default-k20": (dict(clients=20), ""),
    "default-k10": (dict(clients=10), ""),
    "sgd1-k20": (dict(clients=20, **SGD1), ""),
    "sgd1-h256-k20": (dict(clients=20, hidden=256, **SGD1), ""),
    "default-k20-fit": (dict(clients=20), "iters=200"),
    "default-k20-nosupport": (dict(clients=20), "support=0,iters=200"),
    "sgd1-k20-nosupport": (dict(clients=20, **SGD1), "support=0"),
    "default-k20-prior0": (dict(clients=20), "prior=0"),
    "sgd1-k20-prior0": (dict(clients=20, **SGD1), "prior=0"),
    "sgd1-h256-k20-prior0": (dict(clients=20, hidden=256, **SGD1), "prior=0"),
}


def fmt(values: list[float]) -> str:
    v = np.array(values, dtype=float)
    return f"{np.nanmean(v):.3f} ({np.nanmin(v):.3f}–{np.nanmax(v):.3f})" if v.size else "-"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--settings", default="default-k20,default-k10,sgd1-k20,sgd1-h256-k20")
    ap.add_argument("--max-clients", type=int, default=8)
    ap.add_argument("--max-train", type=int, default=30, help="attack clients with at most this many training nodes (K = 20)")
    ap.add_argument("--iters", default="auto", help="the attack's iters (auto: no fit under Adam when the supports apply)")
    ap.add_argument("--per-client", action="store_true")
    args = ap.parse_args()
    data = load_dataset("cora", root=os.environ.get("PRIVFGL_DATA"), download=False)
    rows = []
    for name in args.settings.split(","):
        flags, params = SETTINGS[name]
        cfg = RunConfig(method="fedavg", dataset="cora", partition="louvain", rounds=1, transcript="all",
                        progress=False, download=False, seed=0, **flags)
        _, setup = run(cfg, data=data)
        small = [k for k, c in enumerate(setup.clients)
                 if flags["clients"] != 20 or int(c.train_mask.sum()) <= args.max_train][:args.max_clients]
        if flags["clients"] == 10:
            small = small[:max(args.max_clients // 2, 1)]
        spec = f"edge-recovery:iters={args.iters},clients={'+'.join(map(str, small))}" + (f",{params}" if params else "")
        start = time.perf_counter()
        found = run_attacks(setup, cfg, [parse_attack(spec)])
        took = time.perf_counter() - start
        m = [f.metrics for f in found]
        b = [f.baseline for f in found]
        secs = [f.details["seconds"] for f in found]
        if args.per_client:
            for f in found:
                print(f"{name}  {f.target}: nodes {f.metrics['nodes']} train {f.metrics['training_nodes']} "
                      f"edges {f.metrics['edges']}  auc {f.metrics['auc']:.3f} ap {f.metrics['ap']:.3f} "
                      f"dm_auc {f.metrics['dm_auc']:.3f} | feat auc {f.baseline['auc_aux']:.3f} ap {f.baseline['ap_aux']:.3f} "
                      f"dm {f.baseline['dm_auc_aux']:.3f} | degree auc {f.baseline['auc_degree']:.3f} "
                      f"| exact {f.metrics.get('exact_centres', '-')}/{f.metrics.get('exact_precision', '-')} "
                      f"| {f.details['seconds']:.1f} s", flush=True)
        exact = [x.get("exact_precision") for x in m if x.get("exact_applicable")]
        rows.append((name, spec, len(found), fmt([x["training_nodes"] for x in m]), fmt([x["auc"] for x in m]),
                     fmt([x["ap"] for x in m]), fmt([x["dm_auc"] for x in m]), fmt([x["auc_aux"] for x in b]),
                     fmt([x["ap_aux"] for x in b]), fmt([x["dm_auc_aux"] for x in b]), fmt([x["auc_degree"] for x in b]),
                     fmt([x["ap"] for x in b]),
                     (f"{np.mean([x['exact_centres'] for x in m if x.get('exact_applicable')]):.1f} centres, precision "
                      f"{fmt(exact)}, recall {fmt([x['exact_recall'] for x in m if x.get('exact_applicable')])}")
                     if exact else "n/a", fmt(secs), took))
        print(f"# {name} done in {took:.0f} s", flush=True)
    head = ("setting", "attack", "clients", "train nodes", "AUC", "AP", "dm AUC", "feat AUC", "feat AP", "feat dm AUC",
            "degree AUC", "random AP", "exact part", "s / client")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        print("| " + " | ".join(str(v) for v in r[:-1]) + " |")


if __name__ == "__main__":
    main()
