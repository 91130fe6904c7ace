r"""FedAvg on Cora under each secure-aggregation protocol, side by side with plain, in one process.

Prints, per protocol: the 1-minute load average before it ran, test accuracy and its difference to
plain on the same seed, wall time and its ratio to plain, the CPU time of the process and of the
worker processes it waited for (secagg ``workers``, stopped at the end of the run) and its ratio
(steadier than wall time on a shared machine; with several torch threads it counts every core), the
protocol's own phases (protect / aggregate / reveal), upload bytes per client per round, and upload
bytes per value of the model.

    python experiments/secure_fedavg.py                       # 100 rounds, seed 0, all protocols
    python experiments/secure_fedavg.py --rounds 10 --protocols plain crypten "ckks preset=sum"
    python experiments/secure_fedavg.py --sbm-nodes 100000 --clients 1000 --rounds 3 \
        --protocols plain "secagg graph=kregular"             # the SecAgg+ graph at scale
    python experiments/secure_fedavg.py --protocols plain secagg "secagg workers=2" plain   # issue #18
    python experiments/secure_fedavg.py --protocols plain secagg "secagg workers=2 offline=true" plain
                                                              # #18: the workers prepare the next sum

--sbm-nodes N replaces Cora (Louvain) by the synthetic graph of experiments/bench_scale.py: a
contextual SBM of N nodes (10 classes, 128 features, homophily 0.8, average degree 5, seed 0),
METIS into the clients.

Before the timed runs every protocol runs once untimed for one round (`--no-warmup`: not), so that the
first timed run does not alone pay the process's one-time costs (the partition's cache, imports, PyG's
templates): without it the first plain row ran 0.2-1.5 s slower than the next ones, which flattered
every ratio against it.

--repeats N runs the protocol list N times over, one cycle after the other (interleaved: the machine's
drift hits every protocol alike), prints every run, then per protocol the median (min-max) of its wall
time and of its ratio to the plain rows of the same cycle (paired: the ratio of each run to its own
cycle's plain mean), and of the CPU ratio:

    OMP_NUM_THREADS=1 python experiments/secure_fedavg.py --repeats 5 --protocols plain secagg \
        "secagg keys=session" "secagg workers=2 offline=true" "secagg workers=2 offline=true keys=session"
                                                              # issue #18's <= 1.5x, as paired medians
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from privfgl.data import contextual_sbm, load_dataset
from privfgl.experiment import RunConfig, run

DEFAULT_PROTOCOLS = ["plain", "crypten", "ckks", "ckks preset=sum", "bfv preset=sum"]


def parse_protocol(text: str) -> tuple[str, dict]:
    """'ckks preset=sum' -> ("ckks", {"preset": "sum"})."""
    name, *pairs = text.split()
    params = {}
    for pair in pairs:
        key, value = pair.split("=", 1)
        try:
            params[key] = json.loads(value)
        except json.JSONDecodeError:
            params[key] = value
    return name, params


def _children_cpu() -> float:
    """CPU seconds of the child processes this process has waited for (secagg's workers, once closed)."""
    t = os.times()
    return t.children_user + t.children_system


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--clients", type=int, default=10)
    p.add_argument("--data-root", default=None)
    p.add_argument("--sbm-nodes", type=int, default=None,
                   help="use a contextual SBM of this many nodes (METIS partition) instead of Cora (Louvain)")
    p.add_argument("--protocols", nargs="+", default=DEFAULT_PROTOCOLS,
                   help='protocols with params, e.g. plain crypten "ckks preset=sum"')
    p.add_argument("--repeats", type=int, default=1,
                   help="run the protocol list this many times, interleaved, and print paired medians")
    p.add_argument("--no-warmup", dest="warmup", action="store_false",
                   help="time the first run of each protocol too (by default one untimed round of each comes first)")
    args = p.parse_args()
    if args.repeats < 1:
        p.error(f"--repeats: expected an int >= 1, got {args.repeats}")
    if args.sbm_nodes:
        dataset, partition = f"sbm-{args.sbm_nodes}", "metis"
        data = contextual_sbm(args.sbm_nodes, num_classes=10, num_features=128, homophily=0.8, avg_degree=5.0,
                              seed=0, name=dataset)
    else:
        dataset, partition = "cora", "louvain"
        data = load_dataset("cora", args.data_root, download=False)
    if args.warmup:
        for text in dict.fromkeys(args.protocols):
            _timed_run(text, -1, dataset, partition, data, args, rounds=1)
    rows = []
    for cycle in range(args.repeats):
        for text in args.protocols:
            rows.append(_timed_run(text, cycle, dataset, partition, data, args))
    plains = [r for r in rows if r["protocol"] == "plain"]
    plain = plains[0] if plains else rows[0]  # the first plain row
    plain_wall = sum(r["wall_s"] for r in plains or [plain]) / len(plains or [plain])
    cycle_plain = {c: statistics.fmean(r["wall_s"] for r in plains if r["cycle"] == c)
                   for c in {r["cycle"] for r in plains}}
    cycle_plain_cpu = {c: statistics.fmean(r["cpu_s"] for r in plains if r["cycle"] == c)
                       for c in {r["cycle"] for r in plains}}
    cols = ["cycle", "protocol", "load", "test_acc", "d_acc", "wall_s", "x_plain", "x_plain_mean", "cpu_s",
            "x_plain_cpu", "protect_s", "aggregate_s", "reveal_s", "up_MB_per_client_round", "up_B_per_value"]
    print(f"{dataset}, {partition}, {args.clients} clients, {args.rounds} rounds, seed {args.seed}")
    print(" | ".join(cols))
    for r in rows:
        r["d_acc"] = r["test_acc"] - plain["test_acc"]
        r["x_plain"] = r["wall_s"] / plain["wall_s"]
        r["x_plain_mean"] = r["wall_s"] / plain_wall  # against the mean of the plain rows (drift on a shared machine)
        r["x_plain_cpu"] = r["cpu_s"] / plain["cpu_s"]
        # plain uploads float64 (8 B per value): its bytes give the values per upload
        r["up_B_per_value"] = (8 * r["up_MB_per_client_round"] / plain["up_MB_per_client_round"] if plains
                               else float("nan"))
        print(" | ".join(f"{r[c]:.4f}" if isinstance(r[c], float) else str(r[c]) for c in cols))
    if args.repeats > 1 and plains:
        print(f"\nper protocol over {args.repeats} interleaved cycles: median (min-max); the ratios are paired, "
              "each run against the plain rows of its own cycle")
        print("protocol | runs | wall_s | x_plain (paired) | x_plain_cpu (paired) | test_acc")
        for text in dict.fromkeys(args.protocols):
            mine = [r for r in rows if r["protocol"] == text]
            ratios = [r["wall_s"] / cycle_plain[r["cycle"]] for r in mine]
            cpu = [r["cpu_s"] / cycle_plain_cpu[r["cycle"]] for r in mine]
            print(" | ".join([text, str(len(mine)), _spread([r["wall_s"] for r in mine]), _spread(ratios),
                              _spread(cpu), _spread([r["test_acc"] for r in mine])]))


def _spread(values: list[float]) -> str:
    """'median (min-max)' of values."""
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def _timed_run(text: str, cycle: int, dataset: str, partition: str, data, args, rounds: int | None = None) -> dict:
    """One FedAvg run under the protocol `text` (args.rounds rounds unless `rounds`), timed from outside
    (wall and CPU, workers included)."""
    name, params = parse_protocol(text)
    rounds = rounds or args.rounds
    cfg = RunConfig(method="fedavg", dataset=dataset, partition=partition, clients=args.clients,
                    rounds=rounds, seed=args.seed, protocol=name, protocol_params=params,
                    data_root=args.data_root, progress=False, transcript="none")
    load = os.getloadavg()[0]
    start, cpu_start, children_start = time.perf_counter(), time.process_time(), _children_cpu()
    record, _ = run(cfg, data=data)
    wall = time.perf_counter() - start
    cpu = time.process_time() - cpu_start + _children_cpu() - children_start
    phases = record["time"]["phases"]
    return {"cycle": cycle, "protocol": text, "load": load, "test_acc": record["metrics"]["test_acc"],
            "wall_s": wall, "cpu_s": cpu, "protect_s": phases.get("protect", 0.0),
            "aggregate_s": phases.get("aggregate", 0.0), "reveal_s": phases.get("reveal", 0.0),
            "up_MB_per_client_round": record["cost"]["bytes_up"] / args.clients / rounds / 1e6}

if __name__ == "__main__":
    main()
