"""FedAvg at scale with the clients on Ray actors: docs/scale.md's graph (`sbm-1m`: 1M nodes, 10 classes, 128
features), METIS, 100 clients, in process against `--engine ray` on a 2-node cluster simulated on this machine
(ray.cluster_utils.Cluster, one CPU per node; the clients on 2 actors of 50, one per node). Prints a Markdown
table: seconds per round (the rounds' phases / rounds), the run's wall seconds, peak RSS of each process
(the in-process run; the driver and each actor, with its node), and whether the metrics agree (docs/cluster.md).

    PRIVFGL_DATA=... python experiments/bench_ray_scale.py [--dataset sbm-1m] [--clients 100] [--rounds 3]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def per_round(record: dict, rounds: int) -> float:
    """Seconds per round: the run's phases (training, evaluation, the sum, broadcasts) over the rounds. Under
    --engine ray training is sent without waiting, so its seconds show in the next step that waits."""
    return sum(record["time"]["phases"].values()) / rounds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="sbm-1m")
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--actors", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--protocol", default="plain")
    args = ap.parse_args()
    common = ["--method", "fedavg", "--dataset", args.dataset, "--partition", "metis", "--clients", str(args.clients),
              "--rounds", str(args.rounds), "--protocol", args.protocol, "--threads", "1", "--no-progress",
              "--transcript", "none"]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "in-process.json"
        start = time.perf_counter()  # in its own process: its peak RSS is its own (RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-m", "privfgl.cli", "run", *common, "--out", str(out)], check=True,
                       capture_output=True, text=True, cwd=REPO)
        in_process_s = time.perf_counter() - start
        in_process_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        reference = json.loads(out.read_text())

        from ray.cluster_utils import Cluster
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
        try:
            cluster.add_node(num_cpus=1)
            cluster.wait_for_nodes()
            from privfgl.experiment import config_for, run
            start = time.perf_counter()
            record, _ = run(config_for({"method": "fedavg", "dataset": args.dataset, "partition": "metis",
                                        "clients": args.clients, "rounds": args.rounds, "protocol": args.protocol,
                                        "threads": 1, "progress": False, "transcript": "none", "engine": "ray",
                                        "ray_address": cluster.address,
                                        "clients_per_actor": -(-args.clients // args.actors)}))
            ray_s = time.perf_counter() - start
        finally:
            import ray
            ray.shutdown()
            cluster.shutdown()
    same = record["metrics"] == reference["metrics"]
    placed = record["ray"]
    print(f"FedAvg, {args.dataset} ({reference['config'].get('dataset_name')}), METIS, {args.clients} clients, "
          f"{args.rounds} rounds, {args.protocol}, 1 torch thread per process; {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.1f} at the end\n")
    print("| how | s / round | wall s | peak RSS MB | metrics = in-process |")
    print("|---|---|---|---|---|")
    print(f"| in process | {per_round(reference, args.rounds):.2f} | {in_process_s:.1f} | {in_process_rss:.0f} | "
          "(reference) |")
    rss = "; ".join(f"actor of clients {u['clients'][0]}-{u['clients'][-1]} on node {u['node'][:6]}: "
                    f"{u['peak_rss_mb']:.0f}" for u in placed["actor_usage"])
    print(f"| `--engine ray`, {placed['actors']} actors on {placed['nodes']} simulated nodes | "
          f"{per_round(record, args.rounds):.2f} | {ray_s:.1f} | driver {placed['driver_peak_rss_mb']:.0f}; {rss} | "
          f"{'yes' if same else 'no'} |")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
