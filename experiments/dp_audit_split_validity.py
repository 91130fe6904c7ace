"""False positives of dp-audit's canary rows on FedGPL's split DP (issue #41; docs/dp-audit.md, "FedGPL split
messages: canary rows"): REAL audit runs of the correct mechanism, each with its own seed (run, noise and
canary coins), counting 95 % bounds above the accountant's ε. At most 5 % may exceed it.

    PRIVFGL_DATA=... python experiments/dp_audit_split_validity.py [--runs 40] [--canaries 3000] [--only m2,m4]

Setting: FedGPL on the synthetic sbm graph (3 task clients, 3 rounds, d = h = 16, batch 8), one row per
canary slot; Laplace ε = 1 per round on M1 (composed 3) and Gaussian σ = 1 on M3 (RDP over 3 rounds), audited
by the server; Laplace ε = 1 per round on M2 and Gaussian σ = 1 on M4, the server's downloads, audited by their
receiver client0 (which sees its own slots: --canaries of them, of K·--canaries inserted).
Prints one table: mechanism, runs, bounds above ε, median / max bound over ε, seconds.
"""
from __future__ import annotations

import argparse
import statistics
import time

from attacks.audit import prepare_attacks, run_attacks
from attacks.dp.dp_audit import DPAudit
from privfgl.experiment import config_for, run

SMALL = {"dim": 16, "hidden": 16, "max_per_class": 48, "pretrain_epochs": 1, "batch_size": 8}
CLIENTS = 3
MECHANISMS = {"laplace ε=1/round, M1": ("laplace:epsilon=1,clip=1,on=m1,mode=local,seed={seed}", "m1", "server"),
              "gaussian σ=1, M3": ("gaussian:sigma=1,clip=1,on=m3,mode=local,seed={seed}", "m3", "server"),
              "laplace ε=1/round, M2": ("laplace:epsilon=1,clip=1,on=m2,mode=local,seed={seed}", "m2", "client0"),
              "gaussian σ=1, M4": ("gaussian:sigma=1,clip=1,on=m4,mode=local,seed={seed}", "m4", "client0")}


def one_audit(dp: str, message: str, seed: int, canaries: int, adversary: str = "server") -> dict:
    """One real audit run (seed: the run's, the noise's and the canaries' coins): dp-audit's metrics from
    `adversary`'s view, which sees `canaries` slots (a client: its own of the K·canaries inserted)."""
    cfg = config_for({"method": "fedgpl", "dataset": "sbm", "partition": "tasks", "clients": CLIENTS, "rounds": 3,
                      "seed": seed, "dp": dp.format(seed=seed), "method_params": SMALL, "progress": False,
                      "transcript": "all", "threads": 1})
    inserted = canaries if adversary == "server" else CLIENTS * canaries
    attacks = [DPAudit(canaries=inserted, message=message, seed=seed)]
    _, setup = run(cfg, prepare=prepare_attacks(attacks, cfg.method))
    return run_attacks(setup, cfg, attacks, adversary)[0].metrics


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--canaries", type=int, default=3000)
    ap.add_argument("--only", default="m1,m3,m2,m4", help="the audited messages, comma-separated")
    args = ap.parse_args()
    print("| mechanism | runs | bounds > ε | median bound / ε | max bound / ε | one-run > ε | s |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for label, (dp, message, adversary) in MECHANISMS.items():
        if message not in args.only.split(","):
            continue
        t0 = time.perf_counter()
        found = [one_audit(dp, message, seed, args.canaries, adversary) for seed in range(args.runs)]
        ratios = [m["epsilon_lower_bound"] / m["epsilon_accountant"] for m in found]
        over = sum(m["caught"] for m in found)
        one_over = sum(m["one_run_epsilon"] > m["epsilon_accountant"] for m in found)
        print(f"| {label} | {len(found)} | {over} ({100 * over / len(found):.1f} %) | {statistics.median(ratios):.3f} "
              f"| {max(ratios):.3f} | {one_over} | {time.perf_counter() - t0:.0f} |", flush=True)


if __name__ == "__main__":
    main()
