"""Privacy–utility on Cora, louvain+, 10 clients: test accuracy vs ε for DP-FedAvg (client-level DP)
and DP O-pFGL (node-level DP on its one statistics upload).

DP-FedAvg: for every target ε, σ is the smallest noise multiplier (opacus' RDP search) with
ε(δ) ≤ target for `rounds` releases at client sampling rate q; DP-FedAvg then runs with
`--dp gaussian:sigma=σ,clip=C,on=update,mode=central` and the run record's ε is reported (it is
privfgl's accountant, recomputed from the releases actually made). Non-private FedAvg (ε = inf)
and Local (nothing shared) are the references. Every setting runs for each seed and each
evaluation mode (local_model: a client's model after its local training, the default;
global_model: the DP global model itself).

DP O-pFGL: the `cora-louvain+` preset with partition seed 42 (as experiments/reproduce_opfgl.py)
and `dp_epsilon=ε, dp_clip=B, dp_degree=D` (privfgl/methods/opfgl/dp.py: rows clipped to B,
degree bound D, one Gaussian release of (n, S1, S2), distributed noise under `--opfgl-protocol`
ckks). Non-private O-pFGL under the same protocol is its reference. Its record has one
evaluation (the personalised models after stage 2), reported as both accuracies.

    python experiments/privacy_utility.py                      # → runs/privacy_utility.{csv,png}
    python experiments/privacy_utility.py --methods dp-opfgl --epsilons 1,4,16 --out runs/privacy_utility_opfgl
    python experiments/privacy_utility.py --epsilons 8 --seeds 0 --rounds 10   # a quick look
    python experiments/privacy_utility.py --from-csv runs/privacy_utility.csv  # redraw the PNG and table only

Writes one CSV row per run (test accuracy at the best-validation round, as the record reports it,
and at the last round) and a PNG (privfgl/plots.py, matplotlib: last-round test accuracy vs target ε,
log x axis, mean ± std over seeds as error bars; one line per method and evaluation mode; dashed: the
references, with their std as a band).
"""
from __future__ import annotations

import argparse
import csv
import math
import statistics
import time
from pathlib import Path

from privfgl.experiment import RunConfig, run
from privfgl.methods.opfgl.params import PRESET_PARTITION_SEED
from privfgl.plots import Reference, Series, line_plot, mean_std_by, read_csv, tick_label
from privfgl.privacy import noise_multiplier_for

FIELDS = ["method", "evaluation", "target_epsilon", "epsilon", "delta", "sigma", "clip", "degree", "q", "rounds",
          "seed", "test_acc", "best_round", "test_acc_last", "test_f1_macro", "seconds"]
METHOD_CHOICES = ("dp-fedavg", "dp-opfgl")


def one_run(args, method: str, evaluation: str, seed: int, sigma: float | None = None) -> dict:
    # Seeded noise and coins (seed = the run's seed): reproducible curves; ε then holds only against an
    # adversary who does not know the seed (the record's seed_warning). q < 1 runs under crypten, where the
    # sample is hidden in the sum, so ε keeps its amplification by sampling (under plain it is accounted at q = 1).
    dp = f"gaussian:sigma={sigma!r},clip={args.clip!r},on=update,mode=central,seed={seed}" if sigma else None
    cfg = RunConfig(method=method, dataset="cora", partition="louvain+", clients=10, rounds=args.rounds,
                    seed=seed, evaluation=evaluation, dp=dp, data_root=args.data_root, download=not args.offline,
                    method_params={"q": args.q, "sampling_seed": seed} if method == "dp-fedavg" else {},
                    protocol="crypten" if method == "dp-fedavg" and args.q < 1 else "plain", progress=False,
                    transcript="none")
    start = time.perf_counter()
    record, _ = run(cfg)
    return {"method": method, "evaluation": evaluation, "epsilon": record["privacy"]["epsilon"],
            "delta": record["privacy"]["delta"], "sigma": sigma, "clip": args.clip if sigma else None,
            "q": args.q if sigma else None, "rounds": args.rounds, "seed": seed,
            "test_acc": record["metrics"]["test_acc"], "best_round": record["metrics"]["best_round"],
            "test_acc_last": record["metrics"]["last"]["test_acc"], "test_f1_macro": record["metrics"]["test_f1_macro"],
            "seconds": round(time.perf_counter() - start, 1)}


def opfgl_run(args, seed: int, epsilon: float | None = None) -> dict:
    """One O-pFGL run (cora-louvain+ preset); node-level DP at `epsilon` (None: non-private)."""
    dp = {"dp_epsilon": epsilon, "dp_clip": args.opfgl_clip, "dp_degree": args.opfgl_degree,
          "dp_delta": args.delta, "dp_seed": str(seed)} if epsilon else {}  # seeded: reproducible curves
    cfg = RunConfig(method="opfgl", dataset="cora", partition="louvain+", clients=10, rounds=1, seed=seed,
                    partition_seed=PRESET_PARTITION_SEED, protocol=args.opfgl_protocol, data_root=args.data_root,
                    download=not args.offline, method_params={"preset": "cora-louvain+", **dp}, progress=False,
                    transcript="none")
    start = time.perf_counter()
    record, _ = run(cfg)
    m, privacy = record["metrics"], record["privacy"]
    return {"method": "dp-opfgl" if epsilon else "opfgl", "evaluation": "local_model", "target_epsilon": epsilon,
            "epsilon": privacy["epsilon"], "delta": privacy["delta"],
            "sigma": privacy["dp"]["sigma"] if epsilon else None, "clip": args.opfgl_clip if epsilon else None,
            "degree": args.opfgl_degree if epsilon else None, "q": None, "rounds": 1, "seed": seed,
            "test_acc": m["test_acc"], "best_round": m["best_round"], "test_acc_last": m["test_acc"],
            "test_f1_macro": m["test_f1_macro"], "seconds": round(time.perf_counter() - start, 1)}


def sweep_opfgl(args) -> list[dict]:
    rows = []
    for epsilon in [*args.epsilons, None]:
        for seed in args.seeds:
            rows.append(opfgl_run(args, seed, epsilon))
            print(rows[-1], flush=True)
    return rows


def sweep(args) -> list[dict]:
    rows = sweep_opfgl(args) if "dp-opfgl" in args.methods else []
    if "dp-fedavg" not in args.methods:
        return rows
    for target in args.epsilons:
        sigma = noise_multiplier_for(target, args.delta, args.q, args.rounds)
        for evaluation in args.evaluations:
            for seed in args.seeds:
                rows.append({**one_run(args, "dp-fedavg", evaluation, seed, sigma), "target_epsilon": target})
                print(rows[-1], flush=True)
    for method in ("fedavg", "local"):
        for evaluation in (args.evaluations if method == "fedavg" else ["local_model"]):
            for seed in args.seeds:
                rows.append({**one_run(args, method, evaluation, seed), "target_epsilon": None})
                print(rows[-1], flush=True)
    return rows


def plot(rows: list[dict], path: Path) -> None:
    """Last-round test accuracy vs target ε (log x; ticks at the ε values), mean ± std over seeds; one
    line per (method, evaluation); the non-private references as dashed lines with a ± std band."""
    dp = [r for r in rows if r["target_epsilon"] is not None]
    lines = mean_std_by(dp, x="target_epsilon", y="test_acc_last", by=["method", "evaluation"])
    series = [Series(f"{method} ({evaluation})", *zip(*points))  # points: (ε, mean, std)
              for (method, evaluation), points in sorted(lines.items())]
    refs = mean_std_by([r for r in rows if r["target_epsilon"] is None], x="target_epsilon", y="test_acc_last",
                       by=["method", "evaluation"])
    references = [Reference(f"{method} ({evaluation}), no DP" if method != "local" else "local (nothing shared)",
                            y=points[0][1], yerr=points[0][2], color=f"C{len(series) + j}")
                  for j, ((method, evaluation), points) in enumerate(sorted(refs.items()))]
    delta = next((r["delta"] for r in dp if r["delta"] is not None), None)
    seeds = len({r["seed"] for r in rows})
    line_plot(series, path, references=references, logx=True, xticks=sorted({r["target_epsilon"] for r in dp}),
              xlabel=f"target ε (δ = {tick_label(delta) if delta else '-'}; log scale)",
              ylabel="test accuracy, last round (fraction)",
              title=f"Cora louvain+, 10 clients: accuracy vs ε (mean ± std over {seeds} seed{'s' * (seeds > 1)})")


def summary(rows: list[dict]) -> None:
    """Prints test accuracy (best-validation and last round), mean ± std over seeds, per setting."""
    print("\nmethod      evaluation    target_eps  epsilon   test_acc (best-val round)  test_acc (last round)"
          "   (mean ± std over seeds)")
    keys = sorted({(r["method"], r["evaluation"], r["target_epsilon"] or math.inf) for r in rows})
    for method, evaluation, target in keys:
        sel = [r for r in rows if (r["method"], r["evaluation"], r["target_epsilon"] or math.inf)
               == (method, evaluation, target)]
        ms = lambda key: (statistics.mean(r[key] for r in sel),
                          statistics.stdev(r[key] for r in sel) if len(sel) > 1 else 0.0)
        eps = sel[0]["epsilon"]
        print(f"{method:<11} {evaluation:<13} {'-' if eps is None else target:<11} "
              f"{'-' if eps is None else round(eps, 3):<9} {'%.4f ± %.4f' % ms('test_acc'):<26} "
              f"{'%.4f ± %.4f' % ms('test_acc_last')}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--methods", type=lambda s: s.split(","), default=list(METHOD_CHOICES),
                   help=f"comma-separated subset of {','.join(METHOD_CHOICES)}")
    p.add_argument("--epsilons", type=lambda s: [float(x) for x in s.split(",")], default=[1.0, 4.0, 8.0, 16.0])
    p.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[0, 1, 2])
    p.add_argument("--evaluations", type=lambda s: s.split(","), default=["local_model", "global_model"])
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--clip", type=float, default=0.5, help="L2 bound C on each client's model delta")
    p.add_argument("--q", type=float, default=1.0, help="client sampling rate")
    p.add_argument("--delta", type=float, default=1e-5)
    p.add_argument("--opfgl-clip", type=float, default=5.0, help="DP O-pFGL: L2 bound B on x^prop rows "
                   "(about the median row norm on Cora)")
    p.add_argument("--opfgl-degree", type=int, default=3, help="DP O-pFGL: degree bound D (Cora's median degree)")
    p.add_argument("--opfgl-protocol", default="ckks", help="DP O-pFGL's protocol (distributed noise needs a "
                   "secure one)")
    p.add_argument("--data-root")
    p.add_argument("--offline", action="store_true")
    p.add_argument("--out", default="runs/privacy_utility", help="path prefix of the .csv and .png")
    p.add_argument("--from-csv", help="only redraw OUT.png (and print the table) from this CSV (no runs)")
    args = p.parse_args()
    if args.from_csv:
        rows = read_csv(Path(args.from_csv))
        plot(rows, Path(args.out).with_suffix(".png"))
        summary(rows)
        print(f"written: {Path(args.out).with_suffix('.png')}")
        return
    unknown = sorted(set(args.methods) - set(METHOD_CHOICES))
    if unknown:
        p.error(f"unknown --methods {','.join(unknown)}; valid: {','.join(METHOD_CHOICES)}")
    rows = sweep(args)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.with_suffix(".csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    plot(rows, out.with_suffix(".png"))
    summary(rows)
    print(f"written: {out.with_suffix('.csv')}, {out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
