"""Cost of dp-audit on DP-FedAvg: the same run (Cora, Louvain, 10 clients, 20 rounds, clip 0.5, σ for
ε = 8) without and with the audit (canary clients + attack), wall seconds side by side, in-process.

    PRIVFGL_DATA=... .venv/bin/python experiments/bench_dp_audit.py [--canaries 10000] [--repeats 2]
"""
from __future__ import annotations

import argparse
import time

from attacks.audit import prepare_attacks, run_attacks
from attacks.dp.dp_audit import DPAudit
from privfgl.experiment import config_for, run

DP = "gaussian:sigma=2.85400390625,clip=0.5,delta=1e-5,on=update,mode=central"


def timed(canaries: int | None) -> float:
    cfg = config_for({"method": "dp-fedavg", "dataset": "cora", "partition": "louvain", "clients": 10, "rounds": 20,
                      "dp": DP, "progress": False, "transcript": "all", "threads": 1})
    start = time.perf_counter()
    attacks = [DPAudit(canaries=canaries)] if canaries else []
    _, setup = run(cfg, prepare=prepare_attacks(attacks, cfg.method))
    if attacks:
        run_attacks(setup, cfg, attacks)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--canaries", type=int, default=10000)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    timed(None)  # warm: dataset, partition cache
    plain = min(timed(None) for _ in range(args.repeats))
    audited = min(timed(args.canaries) for _ in range(args.repeats))
    print("| run | canaries | seconds (best of %d) | × plain |" % args.repeats)
    print("|---|---|---|---|")
    print(f"| dp-fedavg | 0 | {plain:.2f} | 1.00 |")
    print(f"| dp-fedavg + dp-audit | {args.canaries} | {audited:.2f} | {audited / plain:.2f} |")


if __name__ == "__main__":
    main()
