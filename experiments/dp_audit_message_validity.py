"""False positives of dp-audit's canary contributions (message DP) and canary nodes (O-pFGL's DP statistics):
R real audit runs per mechanism on the correct code, each with its own run seed, DP noise seed and canary
seed; the share of 95 % `epsilon_lower_bound`s above the accountant's ε (at most 5 % expected). Prints a table.

Runs (synthetic sbm graph, 10 clients, from the server's view):
- FedAvg, `--dp gaussian:...,on=update,mode=distributed` under secagg (the server + 6 colluders who remove
  their shares), 4 rounds, σ from the accountant for ε, 15,000 canary contributions;
- FedAvg, `--dp laplace:epsilon=ε/4,...,mode=local` under plain, 4 rounds, 6,000 canary contributions;
- O-pFGL, `dp_epsilon=ε,dp_clip=1,dp_degree=4,dp_mode=distributed` under secagg, one release, 640 canary
  nodes (sbm's C·f' cells).

    PRIVFGL_DATA=... .venv/bin/python experiments/dp_audit_message_validity.py [--runs 40] [--epsilon 4]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from attacks.audit import prepare_attacks, run_attacks
from attacks.dp.dp_audit import DPAudit
from privfgl.experiment import config_for, run
from privfgl.privacy import noise_multiplier_for

ROUNDS = 4


def mechanisms(epsilon: float) -> dict[str, tuple[dict, int]]:
    """name -> (run options with {seed} for the DP noise seed, canaries)."""
    sigma = noise_multiplier_for(epsilon, 1e-5, 1.0, ROUNDS, "rdp")
    fedavg = {"method": "fedavg", "rounds": ROUNDS, "hidden": 256, "local_epochs": 1}
    return {
        "FedAvg message DP, Gaussian, distributed (secagg)": (
            {**fedavg, "protocol": "secagg",
             "dp": f"gaussian:sigma={sigma:.6f},clip=0.5,delta=1e-5,seed={{seed}},on=update,mode=distributed"}, 15000),
        "FedAvg message DP, Laplace, local (plain)": (
            {**fedavg, "protocol": "plain",
             "dp": f"laplace:epsilon={epsilon / ROUNDS},clip=0.5,seed={{seed}},on=update,mode=local"}, 6000),
        "O-pFGL DP statistics, distributed (secagg)": (
            {"method": "opfgl", "protocol": "secagg",
             "method_params": {"dp_epsilon": epsilon, "dp_clip": 1.0, "dp_degree": 4, "dp_seed": "{seed}",
                               "dp_mode": "distributed", "condense_iters": 1, "max_iters": 1}}, 640),
    }


def fill(options: dict, seed: int) -> dict:
    """The options with {seed} replaced in the DP spec and the method params."""
    out = dict(options)
    if "dp" in out:
        out["dp"] = out["dp"].replace("{seed}", str(1000 + seed))
    if "method_params" in out:
        out["method_params"] = {k: (v.replace("{seed}", str(1000 + seed)) if isinstance(v, str) else v)
                                for k, v in out["method_params"].items()}
    return out


def one_audit(options: dict, canaries: int, seed: int) -> dict:
    cfg = config_for({"dataset": "sbm", "clients": 10, "seed": seed, "progress": False, "transcript": "all",
                      "threads": 1, **fill(options, seed)})
    attacks = [DPAudit(canaries=canaries, seed=seed)]
    _, setup = run(cfg, prepare=prepare_attacks(attacks, cfg.method))
    return run_attacks(setup, cfg, attacks, "server")[0].metrics


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--epsilon", type=float, default=4.0)
    args = ap.parse_args()
    print("| mechanism | accountant ε | runs | bound > ε | mean bound | max bound | mean bound / ε | s/run |")
    print("|---|---|---|---|---|---|---|---|")
    for name, (options, canaries) in mechanisms(args.epsilon).items():
        start = time.perf_counter()
        found = [one_audit(options, canaries, s) for s in range(args.runs)]
        seconds = (time.perf_counter() - start) / args.runs
        bound = np.array([f["epsilon_lower_bound"] for f in found])
        acc = np.array([f["epsilon_accountant"] for f in found])
        over = bound > acc
        print(f"| {name} | {acc.mean():.3f} | {args.runs} | {int(over.sum())} ({over.mean():.1%}) | {bound.mean():.3f} | "
              f"{bound.max():.3f} | {(bound / acc).mean():.2f} | {seconds:.1f} |", flush=True)


if __name__ == "__main__":
    main()
