"""Wall time per round of FedAvg: Cora (10 clients) and a synthetic 100k-node graph (10/100/1000 clients).

Both local-training engines run side by side in this one process, so their ratio is measured on
the same machine at the same time (`cpu_s`, the process's CPU time, is the contention-robust
number when other work shares the cores; run with OMP_NUM_THREADS=1 to compare it with wall time):
`looped` (one PyG model + Adam per client, the straightforward
way) and `stacked` (all clients at once over a block-diagonal graph; privfgl's default).

    python experiments/bench_runtime.py            # the full table
    python experiments/bench_runtime.py --quick    # Cora only, 20 rounds
"""
from __future__ import annotations

import argparse
import time

import torch

from privfgl.data import DatasetUnavailable, contextual_sbm, load_dataset
from privfgl.experiment import RunConfig, run


def bench(data, label: str, clients: int, rounds: int, engine: str, partition: str, data_root: str | None) -> dict:
    cfg = RunConfig(method="fedavg", dataset=label, partition=partition, clients=clients, rounds=rounds,
                    engine=engine, data_root=data_root, progress=False, transcript="none")
    start, cpu_start = time.perf_counter(), time.process_time()
    record, _ = run(cfg, data=data)
    total, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    phases = record["time"]["phases"]
    return {"graph": label, "clients": clients, "engine": engine, "rounds": rounds, "total_s": total, "cpu_s": cpu,
            "per_round_ms": 1000 * sum(v for k, v in phases.items()) / rounds,
            "train_ms": 1000 * phases.get("local_train", 0) / rounds,
            "agg_ms": 1000 * sum(phases.get(k, 0) for k in ("protect", "aggregate", "reveal")) / rounds,
            "eval_ms": 1000 * phases.get("evaluate", 0) / rounds,
            "setup_s": total - sum(phases.values()), "test_acc": record["metrics"]["test_acc"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="Cora only, 20 rounds")
    p.add_argument("--data-root", default=None)
    p.add_argument("--rounds", type=int, default=100, help="rounds on Cora")
    p.add_argument("--big-rounds", type=int, default=5, help="rounds on the 100k-node graph")
    args = p.parse_args()
    rounds = 20 if args.quick else args.rounds
    rows = []
    try:
        cora = load_dataset("cora", args.data_root, download=False)
        for engine in ("stacked", "looped"):
            run(RunConfig(clients=10, rounds=1, engine=engine, progress=False, data_root=args.data_root), data=cora)  # warm-up
            rows.append(bench(cora, "cora", 10, rounds, engine, "louvain", args.data_root))
    except DatasetUnavailable as e:
        print(f"Cora not available offline ({' '.join(str(e).split())[:120]}...); skipping it")
    if not args.quick:
        big = contextual_sbm(100_000, num_classes=10, num_features=128, homophily=0.8, avg_degree=5.0, seed=0,
                             name="sbm-100k")
        for clients in (10, 100, 1000):
            for engine in (("stacked", "looped") if clients <= 100 else ("stacked",)):
                rows.append(bench(big, "sbm-100k", clients, args.big_rounds, engine, "metis", args.data_root))
    cols = ["graph", "clients", "engine", "rounds", "total_s", "cpu_s", "per_round_ms", "train_ms", "agg_ms", "eval_ms",
            "setup_s", "test_acc"]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(" | ".join(cols))
    for r in rows:
        print(" | ".join(f"{r[c]:.3f}" if isinstance(r[c], float) else str(r[c]) for c in cols))
    by = {(r["graph"], r["clients"], r["engine"]): r for r in rows}
    for (g, k, e), r in by.items():
        if e == "stacked" and (g, k, "looped") in by:
            print(f"{g}, {k} clients: looped / stacked per-round time = "
                  f"{by[(g, k, 'looped')]['per_round_ms'] / r['per_round_ms']:.2f}x")


if __name__ == "__main__":
    main()
