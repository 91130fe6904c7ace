"""`--engine ray` against in-process: FedAvg, Cora, Louvain, 10 clients, R rounds, under plain and secagg,
with the clients on 1, 2 and 10 actors of a local Ray (one per run, started before its clock). Prints a
Markdown table: wall seconds of the run (actors' start and data loading included), its ratio to in-process
(and in process with the looped engine, each client's model trained alone: the per-round floor of one client
per actor), the start (wall minus the rounds' phases), seconds per round from the records' phases, MB up, the test
accuracy and whether the metrics equal in-process's (docs/cluster.md). Each actor count runs twice: cold (new
actors) and warm (the same actors again, from an ActorPool: the run resets them, and skips their start).

    PRIVFGL_DATA=... python experiments/bench_ray_engine.py [--rounds 100] [--actors 1,2,10]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from privfgl.experiment import config_for, run  # noqa: E402

BASE = dict(method="fedavg", dataset="cora", partition="louvain", clients=10, progress=False, threads=1,
            download=False, transcript="none")


def timed(settings: dict, pool=None) -> tuple[float, dict]:
    start = time.perf_counter()
    record, _ = run(config_for(settings), ray_pool=pool)
    return time.perf_counter() - start, record


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--actors", default="1,2,10", help="actor counts (each a divisor of 10)")
    ap.add_argument("--protocols", default="plain,secagg")
    args = ap.parse_args()
    from privfgl.sweep.ray_tasks import LOCAL, connect
    connect(LOCAL)
    import ray

    from privfgl.federation.ray.clients import ActorPool
    rows, differ = [], []
    for protocol in args.protocols.split(","):
        settings = {**BASE, "rounds": args.rounds, "protocol": protocol}
        wall, reference = timed(settings)
        rows.append((protocol, "in-process", wall, 1.0, reference))
        # the floor for one client per actor: each client's model trained alone, in one process
        wall_looped, looped = timed({**settings, "engine": "looped"})
        rows.append((protocol, "in-process, looped", wall_looped, wall_looped / wall, looped))
        for actors in [int(a) for a in args.actors.split(",")]:
            pool = ActorPool()  # empty: the first run starts its actors (Ray: this driver's, joined above)
            for start in ("cold", "warm"):  # new actors, then the same ones again from the pool
                wall_ray, record = timed({**settings, "engine": "ray", "clients_per_actor": 10 // actors}, pool)
                rows.append((protocol, f"ray, {actors} actor{'s' * (actors > 1)}, {start}", wall_ray,
                             wall_ray / wall, record))
                if record["metrics"] != reference["metrics"]:
                    differ.append((protocol, actors))
            pool.close()
    ray.shutdown()
    print(f"FedAvg, Cora, Louvain, 10 clients, {args.rounds} rounds, 1 torch thread per process, on "
          f"{os.cpu_count()} cores (load average {os.getloadavg()[0]:.1f} at the end)\n")
    print("| protocol | clients | wall s | × in-process | of it: start s | s per round (all phases) | MB up | "
          "test acc | metrics = in-process |")
    print("|---|---|---|---|---|---|---|---|---|")
    for protocol, how, wall, ratio, record in rows:
        rounds_s = sum(record["time"]["phases"].values())  # training waits show in the later steps
        if how.startswith("in-process"):
            same = "(reference)" if how == "in-process" else "(other kernels)"
        else:
            same = "no" if (protocol, int(how.split()[1])) in differ else "yes"
        print(f"| {protocol} | {how} | {wall:.1f} | {ratio:.2f} | {wall - rounds_s:.1f} | {rounds_s / args.rounds:.3f} | "
              f"{record['cost']['bytes_up'] / 1e6:.1f} | {record['metrics']['test_acc']:.4f} | {same} |")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
