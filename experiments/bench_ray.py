"""`privfgl sweep --jobs 2` against `--ray` on a 2-node Ray cluster simulated on this machine
(ray.cluster_utils.Cluster, one CPU per node): the same sweep into two results folders, whether every
record is identical but for its timing keys (experiments/determinism.py's comparison), and wall seconds.
Prints a Markdown table (docs/cluster.md).

    PRIVFGL_DATA=... python experiments/bench_ray.py [--config experiments/reproduce_opfgl.toml]
                                                     [--cells "cora louvain+" ...] [--seeds 0,1,2]

The defaults are O-pFGL's reproduction sweep, its Cora Louvain+ cells: 3 cells x 3 seeds = 9 runs.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from experiments.determinism import differences  # noqa: E402
from privfgl.sweep import load_sweep, run_sweep  # noqa: E402
from privfgl.sweep.runner import record_path  # noqa: E402


def subset(config: Path, results: Path, cells: list[str], seeds: list[int]):
    """The sweep's cells whose label contains one of `cells`."""
    sweep = load_sweep(config, results=results, seeds=seeds, overrides={"download": False})
    chosen = tuple(c for c in sweep.cells if any(text in c.label for text in cells))
    if not chosen:
        raise SystemExit(f"--cells {cells!r}: no cell label of {config} contains one")
    return dataclasses.replace(sweep, cells=chosen)


def timed(sweep, **how) -> float:
    start = time.perf_counter()
    failures = run_sweep(sweep, progress=False, **how)
    if failures:
        raise SystemExit(f"failed runs: {failures}")
    return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, default=REPO / "experiments" / "reproduce_opfgl.toml")
    ap.add_argument("--cells", action="append", help="only the cells whose label contains this (repeatable; "
                                                     "default: 'cora louvain+')")
    ap.add_argument("--seeds", default="0,1,2")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    cells = args.cells or ["cora louvain+"]
    from ray.cluster_utils import Cluster
    with tempfile.TemporaryDirectory() as tmp:
        jobs = subset(args.config, Path(tmp) / "jobs", cells, seeds)
        on_ray = subset(args.config, Path(tmp) / "ray", cells, seeds)
        os.environ["PRIVFGL_CACHE"] = str(Path(tmp) / "cache-jobs")  # each way computes its own partitions
        jobs_s = timed(jobs, jobs=2)
        os.environ["PRIVFGL_CACHE"] = str(Path(tmp) / "cache-ray")
        start = time.perf_counter()
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
        try:
            cluster.add_node(num_cpus=1)
            cluster.wait_for_nodes()
            cluster_s = time.perf_counter() - start
            ray_s = timed(on_ray, ray=cluster.address)
        finally:
            cluster.shutdown()
        differ = [(c.label, s, d) for c, s in jobs.tasks
                  for d in differences(json.loads(record_path(jobs.results, c, s).read_text()),
                                       json.loads(record_path(on_ray.results, c, s).read_text()))]
    runs = len(jobs.tasks)
    print(f"{args.config.name}, cells {', '.join(c.label for c in jobs.cells)}; seeds {args.seeds}: {runs} runs; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores\n")
    print("| how | identical records | wall s | s per run |")
    print("|---|---|---|---|")
    print(f"| `--jobs 2` | (reference) | {jobs_s:.1f} | {jobs_s / runs:.1f} |")
    print(f"| `--ray` on a 2-node simulated cluster (1 CPU each) | {'yes' if not differ else 'no'} | {ray_s:.1f} | "
          f"{ray_s / runs:.1f} |")
    print(f"\nthe cluster's start (not in the wall time above): {cluster_s:.1f} s")
    for label, seed, where in differ:
        print(f"differs: {label}, seed {seed}: {where}")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
