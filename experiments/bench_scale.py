"""FedAvg at scale: a contextual SBM of N nodes, METIS into K clients, a few rounds, per protocol.

Each (N, K, protocol) runs in its own process (so its peak RSS is its own) and prints one JSON row;
the driver prints a Markdown table: seconds to build the graph, partition and split it (setup),
seconds per round (the run's phases: local training, protection, aggregation, evaluation),
upload MB per client per round, peak RSS, and test accuracy.

    python experiments/bench_scale.py                                   # N 1e5, 1e6 x K 10, 100, 1000
    python experiments/bench_scale.py --nodes 100000 --clients 10 100 --protocols plain
    python experiments/bench_scale.py --doc docs/scale.md               # also write the table there
    python experiments/bench_scale.py --device cuda --doc docs/gpu.md   # on a GPU (its own block of the page)

The graph: `contextual_sbm(N, 10 classes, 128 features, homophily 0.8, average degree 5, seed 0)`;
FedAvg defaults otherwise (2-layer GCN, hidden 64, 3 local epochs), `--rounds` rounds, one thread
per run unless `--threads`. secagg runs the SecAgg+ graph (`graph=kregular`).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from privfgl.doc_block import write_block

# secagg64: a 64-bit ring and a wider range, for clients whose pre-weighted uploads (n_k·w_k) pass the
# default clip_range of 4096 (1M nodes over 10 clients: |n_k·w_k| up to ≈ 2e4; the default raises).
PROTOCOLS = {"plain": ("plain", {}), "secagg": ("secagg", {"graph": "kregular"}),
             "secagg64": ("secagg", {"graph": "kregular", "bits": 64, "clip_range": 2 ** 20})}


def one(nodes: int, clients: int, protocol: str, rounds: int, threads: int, allocator: str,
        device: str = "cpu") -> dict:
    """One run in this process; returns its row."""
    import resource

    import privfgl.methods.fedavg as fedavg
    from privfgl.data import contextual_sbm
    from privfgl.experiment import RunConfig, run

    # The rounds' CPU time (user + system: the kernel's page faults show in the latter), read around
    # FedAvg's round loop so that the graph, METIS and the split do not count; CPU time moves less
    # than wall time when other jobs share the cores.
    usage = {}
    rounds_loop = fedavg.run_rounds

    def counted_rounds(*args, **kwargs):
        usage["before"] = resource.getrusage(resource.RUSAGE_SELF)
        try:
            return rounds_loop(*args, **kwargs)
        finally:
            usage["after"] = resource.getrusage(resource.RUSAGE_SELF)

    fedavg.run_rounds = counted_rounds

    # Round boundaries (wall, user + system, system) so that the first round, which grows the heap to
    # its size (page faults, at 1M nodes several seconds of system time), is reported apart from the
    # steady rounds after it.
    from privfgl.methods.base import Setup
    marks = []
    rounds_of = Setup.rounds

    def marked_rounds(self, desc):
        for r in rounds_of(self, desc):
            marks.append(_clock())
            yield r
        marks.append(_clock())

    Setup.rounds = marked_rounds

    start = time.perf_counter()
    data = contextual_sbm(nodes, num_classes=10, num_features=128, homophily=0.8, avg_degree=5.0, seed=0,
                          name=f"sbm-{nodes}")
    graph_s = time.perf_counter() - start
    name, params = PROTOCOLS[protocol]
    cfg = RunConfig(method="fedavg", dataset=f"sbm-{nodes}", partition="metis", clients=clients, rounds=rounds,
                    protocol=name, protocol_params=dict(params), threads=threads,
                    progress=False, transcript="none", evaluation="local_model", allocator=allocator,
                    device=device)
    record, _ = run(cfg, data=data)
    phases = record["time"]["phases"]
    per_round = sum(phases.values()) / rounds
    cost = record["cost"]
    before, after = usage["before"], usage["after"]
    sys_s = after.ru_stime - before.ru_stime
    cpu_s = after.ru_utime - before.ru_utime + sys_s
    steady = {}
    if len(marks) >= 3:  # rounds after the first
        (w1, c1, s1), (w2, c2, s2) = marks[1], marks[-1]
        n = len(marks) - 2
        steady = {"first_round_s": round(marks[1][0] - marks[0][0], 2), "steady_round_s": round((w2 - w1) / n, 2),
                  "steady_cpu_round_s": round((c2 - c1) / n, 2), "steady_sys_round_s": round((s2 - s1) / n, 2)}
    return {"nodes": nodes, "clients": clients, "protocol": protocol, "rounds": rounds, **steady,
            "allocator": record["config"]["allocator_used"],
            "cpu_round_s": round(cpu_s / rounds, 2), "sys_round_s": round(sys_s / rounds, 2),
            "graph_s": round(graph_s, 2), "setup_s": round(record["time"]["total_s"] - sum(phases.values()), 2),
            "round_s": round(per_round, 2), "train_s": round(phases.get("local_train", 0.0) / rounds, 2),
            "protocol_s": round(sum(phases.get(k, 0.0) for k in ("protect", "aggregate", "reveal")) / rounds, 3),
            "mb_up_client_round": round(cost["bytes_up"] / clients / rounds / 1e6, 3),
            "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2, 2),
            **({"gpu_peak_gb": round(__import__("torch").cuda.max_memory_allocated(device) / 2**30, 2)}
               if device.startswith("cuda") else {}),
            "test_acc": round(record["metrics"]["test_acc"], 4)}


def _clock() -> tuple[float, float, float]:
    """(wall s, CPU s: user + system, system s) of this process now."""
    import resource
    u = resource.getrusage(resource.RUSAGE_SELF)
    return time.perf_counter(), u.ru_utime + u.ru_stime, u.ru_stime


def table(rows: list[dict]) -> str:
    gpu = any("gpu_peak_gb" in r for r in rows)  # a GPU run: its peak GPU memory beside the process's RSS
    head = ("| nodes | clients | protocol | allocator | graph s | setup s (partition, split) | s / round | "
            "of it: training | protocol | CPU s / round (of it: system) | MB up / client / round | peak RSS GB | "
            + ("GPU peak GB | " if gpu else "")
            + "test acc | first round s | s / round after it | CPU s / round after it (system) |")
    columns = 16 + gpu
    lines = [head, "|" + "---|" * columns]
    for r in rows:
        if "error" in r:
            error = r["error"].replace("|", "")  # a value's |x| would break the table
            lines.append(f"| {r['nodes']:,} | {r['clients']} | {r['protocol']} | {error} |" + " |" * (columns - 4))
            continue
        lines.append(f"| {r['nodes']:,} | {r['clients']} | {r['protocol']} | {r['allocator']} | {r['graph_s']} | "
                     f"{r['setup_s']} | {r['round_s']} | {r['train_s']} | {r['protocol_s']} | "
                     f"{r['cpu_round_s']} ({r['sys_round_s']}) | {r['mb_up_client_round']} | {r['peak_rss_gb']} | "
                     + (f"{r.get('gpu_peak_gb', '—')} | " if gpu else "")
                     + f"{r['test_acc']} | {r.get('first_round_s', '—')} | {r.get('steady_round_s', '—')} | "
                     f"{r.get('steady_cpu_round_s', '—')} ({r.get('steady_sys_round_s', '—')}) |")
    return "\n".join(lines)


def _gpu_name(device: str) -> str:
    import torch
    return torch.cuda.get_device_name(device) if torch.cuda.is_available() else "no CUDA device"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, nargs="+", default=[100_000, 1_000_000])
    p.add_argument("--clients", type=int, nargs="+", default=[10, 100, 1000])
    p.add_argument("--protocols", nargs="+", default=["plain", "secagg"], choices=list(PROTOCOLS))
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                   help="environment of the runs, e.g. MALLOC_MMAP_MAX_=0 (glibc: keep large buffers mapped)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--allocator", default="auto", choices=["auto", "keep", "system"],
                   help="privfgl.allocator: auto (default) keeps freed memory past glibc's mmap ceiling (1M nodes)")
    p.add_argument("--timeout", type=int, default=900, help="seconds per run before it is reported as a timeout")
    p.add_argument("--device", default="cpu", help="cpu (default), cuda or cuda:N: where the runs train")
    p.add_argument("--doc", help="also write the table (and the command) to this Markdown file (a block of its "
                                 "own per device)")
    p.add_argument("--one", nargs=3, metavar=("N", "K", "PROTOCOL"), help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.one:
        print(json.dumps(one(int(a.one[0]), int(a.one[1]), a.one[2], a.rounds, a.threads, a.allocator, a.device)),
              flush=True)
        return
    rows = []
    for nodes in a.nodes:
        for clients in a.clients:
            for protocol in a.protocols:
                cmd = [sys.executable, __file__, "--one", str(nodes), str(clients), protocol, "--rounds",
                       str(a.rounds), "--threads", str(a.threads), "--allocator", a.allocator, "--device", a.device]
                try:
                    env = {**os.environ, **dict(kv.split("=", 1) for kv in a.env)}
                    out = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout, env=env)
                    last = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""
                    row = json.loads(last) if out.returncode == 0 and last.startswith("{") else {
                        "nodes": nodes, "clients": clients, "protocol": protocol,
                        "error": " ".join((out.stderr.strip().splitlines() or ["failed"])[-1:])[:120]}
                except subprocess.TimeoutExpired:
                    row = {"nodes": nodes, "clients": clients, "protocol": protocol,
                           "error": f"over {a.timeout} s"}
                rows.append(row)
                print(json.dumps(row), flush=True)
    text = table(rows)
    print(text)
    if a.doc:  # the block between <!-- bench_scale --> markers of the page (the page's prose stays)
        command = "python experiments/bench_scale.py " + " ".join(sys.argv[1:])
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        where = (f"{os.cpu_count()}-core CPU" if a.device == "cpu" else
                 f"{a.device}: {_gpu_name(a.device)}, beside a {os.cpu_count()}-core CPU")
        block = (f"Made by `{command}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} ({where}, "
                 f"{a.threads} torch thread(s) per run, {a.rounds} rounds per run; load average at the end {load})."
                 f"\n\n{text}\n")
        write_block(a.doc, "bench_scale" if a.device == "cpu" else f"bench_scale {a.device}", block, "FedAvg at scale")


if __name__ == "__main__":
    main()
