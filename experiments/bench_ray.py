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


def timed(sweep, **how) -> tuple[float, float]:
    """(wall seconds of the sweep, this machine's mean 1-minute load average over it: other work on the
    machine moves the seconds)."""
    loads = [os.getloadavg()[0]]
    start = time.perf_counter()
    failures = run_sweep(sweep, progress=False, **how)
    loads.append(os.getloadavg()[0])
    if failures:
        raise SystemExit(f"failed runs: {failures}")
    return time.perf_counter() - start, sum(loads) / len(loads)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, default=REPO / "experiments" / "reproduce_opfgl.toml")
    ap.add_argument("--cells", action="append", help="only the cells whose label contains this (repeatable; "
                                                     "default: 'cora louvain+')")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--ray-first", action="store_true", help="the Ray sweep before the --jobs one")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    cells = args.cells or ["cora louvain+"]
    from ray.cluster_utils import Cluster
    with tempfile.TemporaryDirectory() as tmp:
        jobs = subset(args.config, Path(tmp) / "jobs", cells, seeds)
        on_ray = subset(args.config, Path(tmp) / "ray", cells, seeds)

        def with_jobs():
            os.environ["PRIVFGL_CACHE"] = str(Path(tmp) / "cache-jobs")  # each way computes its own partitions
            return timed(jobs, jobs=2)

        def with_ray():
            os.environ["PRIVFGL_CACHE"] = str(Path(tmp) / "cache-ray")
            start = time.perf_counter()
            cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
            try:
                cluster.add_node(num_cpus=1)
                cluster.wait_for_nodes()
                return time.perf_counter() - start, timed(on_ray, ray=cluster.address)
            finally:
                cluster.shutdown()
        if args.ray_first:
            cluster_s, (ray_s, ray_load) = with_ray()
            jobs_s, jobs_load = with_jobs()
        else:
            jobs_s, jobs_load = with_jobs()
            cluster_s, (ray_s, ray_load) = with_ray()
        records = {name: [json.loads(record_path(sweep.results, c, s).read_text()) for c, s in jobs.tasks]
                   for name, sweep in (("jobs", jobs), ("ray", on_ray))}
        differ = [(c.label, s, d) for (c, s), a, b in zip(jobs.tasks, records["jobs"], records["ray"])
                  for d in differences(a, b)]
        run_s = {name: sum(r["time"]["total_s"] for r in rs) for name, rs in records.items()}
    runs = len(jobs.tasks)
    print(f"{args.config.name}, cells {', '.join(c.label for c in jobs.cells)}; seeds {args.seeds}: {runs} runs "
          f"on {os.cpu_count()} cores, {'--ray' if args.ray_first else '--jobs 2'} first\n")
    print("| how | identical records | wall s | the runs' own s (sum of records' time.total_s) | load average |")
    print("|---|---|---|---|---|")
    print(f"| `--jobs 2` | (reference) | {jobs_s:.1f} | {run_s['jobs']:.1f} | {jobs_load:.1f} |")
    print(f"| `--ray` on a 2-node simulated cluster (1 CPU each) | {'yes' if not differ else 'no'} | {ray_s:.1f} | "
          f"{run_s['ray']:.1f} | {ray_load:.1f} |")
    print(f"\nthe cluster's start (not in the wall time above): {cluster_s:.1f} s")
    for label, seed, where in differ:
        print(f"differs: {label}, seed {seed}: {where}")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
