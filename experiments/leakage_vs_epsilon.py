"""Leakage vs ε: accuracy and attack scores on the same runs as local DP noise grows.

DP-FedAvg on Cora (louvain, 10 clients) with `--dp gaussian:sigma=σ,clip=C,on=update,mode=local`:
every client clips its model delta to C and adds N(0, (σC)²) before upload, so the honest-but-curious
server's view holds only noised per-client uploads. The same runs are then audited:
`gradient-inversion` (dictionary variant, graph-free; on noised uploads it reads the noise level
off the update and groups gradient rows up to it) on one client's round-0 update, and
`label-inference` on every client's. σ = 0 is non-private FedAvg (the reference, ε = inf).
Threat model of the audit (attacks/gradient_inversion.py): local SGD without dropout, public lr.

    python experiments/leakage_vs_epsilon.py                 # → runs/leakage_vs_epsilon.{csv,png}
    python experiments/leakage_vs_epsilon.py --sigmas 0,0.01 --rounds 5   # a quick look
    python experiments/leakage_vs_epsilon.py --from-csv runs/leakage_vs_epsilon.csv   # redraw the PNG only

CSV: one row per σ. PNG (privfgl/plots.py, matplotlib): scores in [0, 1] against ε (log x; no DP at
"∞"); solid: test accuracy, gradient-inversion per-feature AUC, label-inference cosine similarity;
dashed: the attacks' baselines (gradient inversion: as many marginal-drawn rows matched the same way,
and the same rows with their words shuffled; label inference: the uniform prediction). One seed, so
no error bars.
"""
from __future__ import annotations

import argparse
import csv
import math
import statistics
from pathlib import Path

from attacks import parse_attack, run_attacks
from privfgl.experiment import RunConfig, run
from privfgl.plots import Series, line_plot, read_csv, tick_label

FIELDS = ["sigma", "clip", "epsilon", "delta", "test_acc", "gi_auc_per_feature", "gi_baseline_auc_per_feature",
          "gi_permuted_auc_per_feature", "gi_recovered_rows", "gi_auc", "gi_baseline_auc",
          "li_js", "li_cosine", "li_uniform_js", "li_uniform_cosine"]


def one_run(args, sigma: float) -> dict:
    # seeded noise (the run's seed): reproducible; the attacks here do not use the seed
    dp = f"gaussian:sigma={sigma!r},clip={args.clip!r},on=update,mode=local,seed={args.seed}" if sigma else None
    cfg = RunConfig(method="dp-fedavg" if sigma else "fedavg", dataset="cora", partition="louvain", clients=10,
                    rounds=args.rounds, local_epochs=1, optimizer="sgd", lr=args.lr, dropout=0.0, dp=dp,
                    seed=args.seed, data_root=args.data_root, download=not args.offline, transcript="all",
                    progress=False)
    record, setup = run(cfg)
    attacks = [parse_attack(f"gradient-inversion:variant=dictionary,clients={args.client}"), parse_attack("label-inference")]
    findings = [f for f in run_attacks(setup, cfg, attacks) if not f.target.startswith("aggregate")]
    gi = next(f for f in findings if f.name == "gradient-inversion")
    li = [f for f in findings if f.name == "label-inference"]
    mean = lambda key, fs, block="metrics": statistics.fmean(getattr(f, block)[key] for f in fs)
    return {"sigma": sigma, "clip": args.clip if sigma else None, "epsilon": record["privacy"]["epsilon"],
            "delta": record["privacy"]["delta"], "test_acc": record["metrics"]["test_acc"],
            "gi_auc_per_feature": gi.metrics.get("auc_per_feature"),
            "gi_baseline_auc_per_feature": gi.baseline.get("auc_per_feature"),
            "gi_permuted_auc_per_feature": gi.baseline.get("words_permuted", {}).get("auc_per_feature"),
            "gi_recovered_rows": gi.metrics.get("recovered_rows"), "gi_auc": gi.metrics.get("auc"),
            "gi_baseline_auc": gi.baseline.get("auc"), "li_js": mean("js", li), "li_cosine": mean("cosine", li),
            "li_uniform_js": mean("uniform_js", li, "baseline"), "li_uniform_cosine": mean("uniform_cosine", li, "baseline")}


SERIES = [  # (CSV column, legend label, colour, line style)
    ("test_acc", "test accuracy", "tab:blue", "-"),
    ("gi_auc_per_feature", "gradient inversion, client 0: per-feature AUC", "tab:red", "-"),
    ("gi_baseline_auc_per_feature", "  its baseline: marginal sample", "tab:red", "--"),
    ("gi_permuted_auc_per_feature", "  its baseline: words permuted", "dimgray", "--"),
    ("li_cosine", "label inference: cosine (mean of clients)", "tab:green", "-"),
    ("li_uniform_cosine", "  its baseline: uniform", "tab:green", "--"),
]


def plot(rows: list[dict], path: Path) -> None:
    """Accuracy and attack scores vs ε (log x, no DP at ∞); see the module docstring."""
    rows = sorted(rows, key=lambda r: math.inf if r["epsilon"] is None else r["epsilon"])
    eps = [math.inf if r["epsilon"] is None else r["epsilon"] for r in rows]
    series = [Series(label, eps, [r[key] for r in rows], color=colour, linestyle=style,
                     marker="o" if style == "-" else "")
              for key, label, colour, style in SERIES]
    delta = next((r["delta"] for r in rows if r["delta"] is not None), None)
    clip = next((r["clip"] for r in rows if r["clip"] is not None), None)
    line_plot(series, path, logx=True, ylim=(0, 1.02), xticks=eps, legend_loc="lower left",
              xlabel=f"ε (local Gaussian DP on every upload, δ = {tick_label(delta) if delta else '-'}; log scale)",
              ylabel="score (fraction, 0–1)",
              title=f"DP-FedAvg, Cora louvain, 10 clients (clip {clip:g}): leakage vs ε" if clip else
              "DP-FedAvg, Cora louvain, 10 clients: leakage vs ε")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sigmas", default="0,0.0001,0.001,0.01,0.1,1", help="noise multipliers (0 = no DP)")
    p.add_argument("--clip", type=float, default=1.0, help="L2 bound C on every client's delta")
    p.add_argument("--lr", type=float, default=0.5, help="local SGD learning rate")
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--client", type=int, default=0, help="the gradient-inversion target")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-root")
    p.add_argument("--offline", action="store_true")
    p.add_argument("--out", default="runs/leakage_vs_epsilon", help="path prefix of the .csv and .png")
    p.add_argument("--from-csv", help="only redraw OUT.png from this CSV (no runs)")
    args = p.parse_args()
    if args.from_csv:
        plot(read_csv(Path(args.from_csv)), Path(args.out).with_suffix(".png"))
        print(f"wrote {Path(args.out).with_suffix('.png')}")
        return
    rows = []
    for sigma in [float(s) for s in args.sigmas.split(",")]:
        rows.append(one_run(args, sigma))
        r = rows[-1]
        print(f"sigma={sigma:g} eps={r['epsilon']} acc={r['test_acc']:.3f} gi_auc_pf={r['gi_auc_per_feature']} "
              f"(marginal sample {r['gi_baseline_auc_per_feature']}, words permuted {r['gi_permuted_auc_per_feature']}) "
              f"li_js={r['li_js']:.3f} (uniform {r['li_uniform_js']:.3f})", flush=True)
    rows.sort(key=lambda r: -(r["epsilon"] if r["epsilon"] is not None else math.inf))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.with_suffix(".csv"), "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    plot(rows, out.with_suffix(".png"))
    print(f"wrote {out.with_suffix('.csv')} and {out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
