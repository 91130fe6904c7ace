"""The same jobs on the CPU and on a GPU (issue #21): whole-process and in-run time, accuracy, GPU memory.

Each run is a fresh process (this script with --one), timed from outside, so start-up, CUDA's own
initialisation and exit count; inside it the run's record gives the in-run time (`time.total_s`:
data, partition, the method's phases, evaluation), the method's phases alone (the rounds: what the
device runs) and the test accuracy, and torch gives the GPU's peak memory.
The runs are interleaved (one of every device, then the next seed), so slow phases of the machine
hit every device alike; each job runs once untimed first (partition cache and file cache warm).

    python experiments/bench_device.py                                   # fedavg, opfgl x cpu, cuda x seeds 0-2
    python experiments/bench_device.py --devices cpu --jobs fedavg       # without a GPU
    python experiments/bench_device.py --doc docs/gpu.md                 # also write the table there

Jobs: fedavg = FedAvg, Cora, Louvain, 10 clients, 100 rounds (issue #21's job); opfgl = O-pFGL,
Cora, Louvain, 10 clients, its defaults (one round). Both with `--threads` torch CPU threads
(default: torch's own, i.e. every core) on either device.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

from privfgl.doc_block import write_block

JOBS = {"fedavg": {"method": "fedavg", "dataset": "cora", "partition": "louvain", "clients": 10, "rounds": 100},
        "opfgl": {"method": "opfgl", "dataset": "cora", "partition": "louvain", "clients": 10}}
TAG = "bench_device"  # the page's block this script rewrites (privfgl.doc_block)


def one(job: str, device: str, seed: int, threads: int | None) -> dict:
    """One run in this process; returns its row (times in s, memory in MB)."""
    import torch

    from privfgl.experiment import config_for, run

    cfg = config_for({**JOBS[job], "seed": seed, "device": device, "threads": threads, "progress": False,
                      "transcript": "none"})
    record, _ = run(cfg)
    phases = record["time"]["phases"]
    row = {"job": job, "device": device, "seed": seed, "in_run_s": record["time"]["total_s"],
           "method_s": round(sum(phases.values()), 3),
           "test_acc": record["metrics"]["test_acc"], "threads": record["config"]["threads"],
           "phases": {name: round(t, 2) for name, t in sorted(phases.items(), key=lambda kv: -kv[1])[:6]}}
    if device.startswith("cuda"):
        row["gpu"] = torch.cuda.get_device_name(device)
        row["gpu_peak_mb"] = round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
    return row


def timed(job: str, device: str, seed: int, threads: int | None) -> dict:
    cmd = [sys.executable, __file__, "--one", job, device, str(seed)] + (["--threads", str(threads)] if threads else [])
    start = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if out.returncode != 0:
        return {"job": job, "device": device, "seed": seed,
                "error": (out.stderr.strip().splitlines() or ["failed"])[-1][:200]}
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "process_s": round(wall, 3)}


def _median(rows: list[dict], key: str) -> str:
    values = [r[key] for r in rows if key in r]
    if not values:
        return "—"
    return f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})"


def table(rows: list[dict], jobs: list[str], devices: list[str]) -> str:
    lines = ["| job | device | runs | whole process, s: median (min–max) | in-run `time.total_s`, s | "
             "of it: the method's phases, s | test acc (per seed) | GPU peak memory, MB | "
             "× CPU, whole process | × CPU, in-run |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for job in jobs:
        base = [r for r in rows if r["job"] == job and r["device"] == "cpu" and "error" not in r]
        for device in devices:
            mine = [r for r in rows if r["job"] == job and r["device"] == device]
            ok = [r for r in mine if "error" not in r]
            if not ok:
                lines.append(f"| {job} | {device} | {len(mine)} | {mine[0]['error'] if mine else '—'} |" + " |" * 6)
                continue
            accs = ", ".join(f"{r['test_acc']:.4f}" for r in sorted(ok, key=lambda r: r["seed"]))
            name = f"{device} ({ok[0]['gpu']})" if "gpu" in ok[0] else device
            ratio = lambda key: (f"{statistics.median(r[key] for r in ok) / statistics.median(r[key] for r in base):.2f}"
                                 if base and device != "cpu" else "—")
            lines.append(f"| {job} | {name} | {len(ok)} | {_median(ok, 'process_s')} | {_median(ok, 'in_run_s')} | "
                         f"{_median(ok, 'method_s')} | {accs} | {_median(ok, 'gpu_peak_mb')} | {ratio('process_s')} | "
                         f"{ratio('in_run_s')} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", nargs="+", default=list(JOBS), choices=list(JOBS))
    p.add_argument("--devices", nargs="+", default=["cpu", "cuda"])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads per run (default: torch's own)")
    p.add_argument("--doc", help=f"also write the table (and the command) to this Markdown file (its {TAG} block)")
    p.add_argument("--one", nargs=3, metavar=("JOB", "DEVICE", "SEED"), help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.one:
        print(json.dumps(one(a.one[0], a.one[1], int(a.one[2]), a.threads)), flush=True)
        return
    for job in a.jobs:  # untimed warm-up (the partition cache and the file cache are the devices' alike)
        row = timed(job, a.devices[0], a.seeds[0], a.threads)
        print(json.dumps({"warm-up": True, **row}), flush=True)
    rows = []
    for seed in a.seeds:
        for job in a.jobs:
            for device in a.devices:
                row = timed(job, device, seed, a.threads)
                rows.append(row)
                print(json.dumps(row), flush=True)
    text = table(rows, a.jobs, a.devices)
    cpu = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    import torch
    versions = f"torch {torch.__version__}" + (f", CUDA {torch.version.cuda}" if torch.version.cuda else "")
    command = "python experiments/bench_device.py " + " ".join(sys.argv[1:])
    block = (f"Made by `{command}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: {cpu}; {versions}; "
             f"torch CPU threads per run: {rows[0].get('threads', 'default') if rows else '—'}.\n\n{text}\n")
    print(block)
    if a.doc:
        write_block(a.doc, TAG, block, "GPU: `--device cuda`")


if __name__ == "__main__":
    main()
