"""Membership inference and the empirical ε lower bound against the accountant's ε, and link stealing
(docs/attacks-membership.md; issue #20).

Grid: method × target ε on Cora, Louvain, 10 clients, default training (Adam, 3 local epochs, dropout
0.5, hidden 64), `--rounds` rounds. Per cell: σ calibrated by the run's own accountant (RDP) to the
target ε at δ = 1e-5 (ε = ∞: σ = 1e-6, i.e. clipping without noise), the run's accountant ε, the
membership attacks on the final global model — loss threshold (Yeom) and shadow models — with the
empirical lower bound at 95 % (threshold picked on one half of the candidates, Clopper–Pearson on
the other; and the Bonferroni maximum over 50 thresholds), the largest bound the candidates could
certify at all, the loss attack's mean AUC on the clients' own final uploads (covered by ε or not:
`clients_covered`), and the final global model's test accuracy (evaluation=global_model, last round).
- dp-fedavg: client-level DP, central Gaussian noise on the sum of clipped deltas (clip 1, q = 1,
  plain protocol), one release per round;
- dp-sgd: node-level DP-SGD (degree bound 3, clip 1) on every client, federated (rounds × local
  epochs releases).
Then plain FedAvg (same training) for link stealing: edge AUC/AP of the global model's and each
client's model's posteriors on every client's graph, beside the random and feature-similarity
baselines, and the wall time of each attack per target. With `--canaries N` every run gets N canary
nodes per client (the run option `canaries`, privfgl.data.canaries: isolated, random words, random label,
a member by a fair coin) and the membership columns are about the canaries instead of the real nodes.
The method × ε table alone is also one sweep: `privfgl sweep experiments/membership_audit.toml`.

    OMP_NUM_THREADS=1 python experiments/membership_audit.py --rounds 20 [--methods dp-fedavg] [--canaries 20]
"""
from __future__ import annotations

import argparse
import csv
import math
import statistics
import time
import warnings

from attacks import parse_attack, run_attacks
from privfgl.data import load_dataset
from privfgl.experiment import RunConfig, run
from privfgl.privacy.accounting import noise_multiplier_for

warnings.filterwarnings("ignore", message="Optimal order is the smallest alpha")  # σ ≈ 0 rows (ε = ∞)
DELTA = 1e-5


def base_config(args, **kw) -> RunConfig:
    settings = dict(dataset="cora", partition="louvain", clients=args.clients, rounds=args.rounds, transcript="all",
                    evaluation="global_model", progress=False, data_root=args.data_root, download=False, seed=args.seed,
                    canaries=args.canaries)  # the canaries' draw: the run's seed
    settings.update(kw)
    return RunConfig(**settings)


def sigma_for(eps: float, releases: int) -> float:
    return 1e-6 if math.isinf(eps) else noise_multiplier_for(eps, DELTA, 1.0, releases)


def config_for(args, method: str, eps: float) -> tuple[RunConfig, float]:
    if method == "dp-fedavg":
        sigma = sigma_for(eps, args.rounds)
        return base_config(args, method=method, dp=f"gaussian:sigma={sigma:.6g},clip=1.0,on=update,mode=central"), sigma
    sigma = sigma_for(eps, args.rounds * 3)
    return base_config(args, method=method, method_params={"sigma": float(f"{sigma:.6g}"), "clip": 1.0}), sigma


def membership_row(args, data, method: str, eps: float) -> dict:
    cfg, sigma = config_for(args, method, eps)
    start = time.perf_counter()
    record, setup = run(cfg, data=data)
    train_s = time.perf_counter() - start
    cand = ",candidates=canaries" if args.canaries else ""
    loss = {f.target: f for f in run_attacks(setup, cfg, [parse_attack("membership:" + cand.lstrip(","))])}
    shadow = run_attacks(setup, cfg, [parse_attack(f"membership:variant=shadow,target=global,shadows={args.shadows}"
                                                   + cand)])[0]
    g = loss["global"].metrics
    clients = [f.metrics for t, f in loss.items() if t != "global" and "auc" in f.metrics]
    return {"method": method, "target_eps": eps, "sigma": sigma, "accountant_eps": record["privacy"]["epsilon"],
            "eps_lb": g["epsilon_lb"], "eps_lb_bonferroni": g["epsilon_lb_bonferroni"],
            "eps_lb_shadow": shadow.metrics["epsilon_lb"], "eps_ceiling": g["epsilon_lb_ceiling"],
            "auc_loss": g["auc"], "tpr_at_fpr_0.01": g["tpr_at_fpr_0.01"], "auc_shadow": shadow.metrics["auc"],
            "client_auc_loss": statistics.mean(c["auc"] for c in clients) if clients else math.nan,
            "clients_covered": clients[0]["dp_covers"] if clients else None,
            "test_acc": record["metrics"]["last"]["test_acc"], "members": g["members"], "train_s": round(train_s, 1),
            "loss_s": loss["global"].details["seconds"], "shadow_s": shadow.details["seconds"]}


def link_rows(args, data) -> list[dict]:
    cfg = base_config(args, method="fedavg", transcript="last", canaries=0)
    record, setup = run(cfg, data=data)
    print(f"\nplain fedavg, {args.rounds} rounds: test_acc {record['metrics']['test_acc']:.4f}")
    rows, timing = [], {}
    for spec in ("link-stealing", "link-stealing:query=features"):
        start = time.perf_counter()
        found = run_attacks(setup, cfg, [parse_attack(spec)])
        timing[spec] = {"total_per_target_s": (time.perf_counter() - start) / len(found)}
        for f in found:
            rows.append({"attack": spec, "target": f.target, "auc": f.metrics["auc"], "ap": f.metrics["ap"],
                         "cosine_auc": f.metrics["cosine_auc"], "random_auc": f.baseline["auc"],
                         "random_ap": f.baseline["ap"], "feature_auc": f.baseline["auc_aux"],
                         "feature_ap": f.baseline["ap_aux"], "edges": f.metrics["edges"],
                         "seconds": f.details["seconds"]})
    for spec in ("membership", f"membership:variant=shadow,shadows={args.shadows}"):
        start = time.perf_counter()
        found = run_attacks(setup, cfg, [parse_attack(spec)])
        timing[spec] = {"total_per_target_s": (time.perf_counter() - start) / len(found)}
        for f in found:
            timing[spec][f.target] = (f.details["seconds"], f.metrics["auc"])
    return rows, timing


def fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if math.isinf(v):
            return "∞"
        return f"{v:.3g}" if abs(v) >= 1e4 else f"{v:.3f}"
    return str(v)


def markdown(rows: list[dict], cols: list[str]) -> str:
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(fmt(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--clients", type=int, default=10)
    p.add_argument("--methods", default="dp-fedavg,dp-sgd")
    p.add_argument("--epsilons", default="inf,32,8,2,0.5")
    p.add_argument("--shadows", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-root", default=None)
    p.add_argument("--csv", default=None, help="also write the membership grid here")
    p.add_argument("--no-links", action="store_true")
    p.add_argument("--canaries", type=int, default=0,
                   help="insert N canaries per client (privfgl.data.canaries) and attack those instead of the real nodes")
    args = p.parse_args()
    data = load_dataset("cora", args.data_root, download=False)
    rows = []
    for method in args.methods.split(","):
        for eps in (float(e) for e in args.epsilons.split(",")):
            rows.append(membership_row(args, data, method, eps))
            print({k: fmt(v) for k, v in rows[-1].items()}, flush=True)
    cols = ["method", "target_eps", "sigma", "accountant_eps", "eps_lb", "eps_lb_bonferroni", "eps_lb_shadow",
            "eps_ceiling", "auc_loss", "auc_shadow", "tpr_at_fpr_0.01", "client_auc_loss", "clients_covered",
            "test_acc"]
    print(f"\nCora, Louvain, {args.clients} clients, {args.rounds} rounds, seed {args.seed}; bounds at 95 %, δ = {DELTA}; "
          f"candidates: {f'{args.canaries} canaries per client' if args.canaries else 'the real nodes'}")
    print(markdown(rows, cols))
    print("\ntimes (s):")
    print(markdown(rows, ["method", "target_eps", "train_s", "loss_s", "shadow_s", "members"]))
    if args.csv:
        with open(args.csv, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    if args.no_links:
        return
    links, timing = link_rows(args, data)
    print(markdown(links, ["attack", "target", "auc", "ap", "cosine_auc", "random_auc", "random_ap", "feature_auc",
                           "feature_ap", "edges", "seconds"]))
    print("\nwall time per target (s): attack() alone [global, per client mean / max], and everything per target "
          "(aux, attack, score)")
    for spec, per in timing.items():
        total = per.pop("total_per_target_s")
        if spec.startswith("membership"):
            secs = [s for t, (s, _) in per.items() if t != "global"]
            print(f"{spec}: global {per['global'][0]:.3f} (AUC {per['global'][1]:.3f}); clients {statistics.mean(secs):.3f}"
                  f" / {max(secs):.3f} (AUC mean {statistics.mean(a for t, (_, a) in per.items() if t != 'global'):.3f});"
                  f" all steps {total:.3f} per target")
        else:
            print(f"{spec}: all steps {total:.3f} per target (attack() alone: see the seconds column)")


if __name__ == "__main__":
    main()
