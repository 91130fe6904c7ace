"""Why one dp-audit run does not catch FedGPL's pre-fix split step (clean head/prompt steps between minibatches,
accounted as disjoint releases: `split_dp_composition=parallel-unsafe`, the old default) from the server's view
(issue #41; docs/dp-audit.md, "FedGPL split messages: canary rows").

A canary ROW (attacks/dp/split_audit.py) enters no update, so it cannot show the flaw. What can is a canary
SAMPLE (attacks/dp/split_audit.CanarySamples: one per client and round in its first minibatch, after the
prompt, loss weight = its coin) whose clean step moves the head and so every later M3 row of the round. This
script replays the same seeded run twice, every canary in and every canary out, with noise σ = 1e-4 on M3,
and measures per client and round, in units of the clip C (L2, clip 1) over the round's later M3 rows:
- `total`: Σ_i |d_i|, d_i a later row's change (what the sensitivity audit calls measured; accounted: 1);
- `shift`: |mean_i d_i|, the part common to all rows, the most any fixed direction can average up;
- `per row`: mean_i |d_i|.
Then the cap of a one-run bound with G = K·R canary games (one per client and round), each perfectly
separated: the per-round bound `per_step_bound` gives with every guess right.

    PRIVFGL_DATA=... python experiments/dp_audit_split_influence.py [--clients 3] [--rounds 2] [--scale 10000]
"""
from __future__ import annotations

import argparse

import numpy as np
import torch

from attacks.dp.estimators import per_step_bound
from attacks.dp.split_audit import CanarySamples
from attacks.view import adversary_view
from privfgl.experiment import config_for, run

SMALL = {"dim": 16, "hidden": 16, "max_per_class": 48, "pretrain_epochs": 1, "batch_size": 8}


def later_rows(composition: str, coin: bool, clients: int, rounds: int, scale: float) -> dict:
    """(round, client) -> the server's received M3 rows after the first minibatch [n, h], every canary `coin`."""
    cfg = config_for({"method": "fedgpl", "dataset": "sbm", "partition": "tasks", "clients": clients, "rounds": rounds,
                      "dp": "gaussian:sigma=0.0001,clip=1,on=m3,mode=local,seed=3", "progress": False,
                      "method_params": {**SMALL, "split_dp_composition": composition}, "transcript": "all",
                      "threads": 1})

    def insert(setup) -> None:
        direction = setup.extras["population_features"].mean(0)  # the public features' mean row
        canaries = CanarySamples(clients, setup.num_classes, scale, 0, rounds, direction)
        canaries.coins[:] = coin
        setup.extras["split_canaries"] = canaries
    _, setup = run(cfg, prepare=[insert])
    view = adversary_view(setup.federation.transcript, "server")
    return {(r, k): torch.cat([m.tensors["grad"].double() for m in view.find("embedding_grads", r, f"client{k}")[1:]])
            for r in range(rounds) for k in range(clients)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--scale", type=float, default=1e4)
    args = ap.parse_args()
    print("| composition | later rows per client and round | total Σ|d_i| / C | shift |mean d| / C | per row / C |")
    print("| --- | --- | --- | --- | --- |")
    for composition in ("released", "parallel-unsafe"):
        a, b = (later_rows(composition, coin, args.clients, args.rounds, args.scale) for coin in (True, False))
        d = [a[key] - b[key] for key in a]
        total = [float(x.norm(dim=1).sum()) for x in d]
        shift = [float(x.mean(0).norm()) for x in d]
        per_row = [float(x.norm(dim=1).mean()) for x in d]
        print(f"| {composition} | {np.mean([len(x) for x in d]):.0f} | {np.mean(total):.2f} (max {max(total):.2f}) | "
              f"{np.mean(shift):.3f} | {np.mean(per_row):.3f} |", flush=True)
    for games in (args.clients * args.rounds, 27, 450):
        half = games // 2
        best = per_step_bound(np.ones(half), np.zeros(games - half), 0.5, 1, 1e-5, "pure")
        mu = per_step_bound(np.ones(half), np.zeros(games - half), 0.5, 1, 1e-5, "gaussian")
        print(f"{games} games, every guess right: per-round ε ≥ {best.step_lower:.2f} (pure claim), "
              f"μ ≥ {mu.step_lower:.2f} (Gaussian claim)")


if __name__ == "__main__":
    main()
