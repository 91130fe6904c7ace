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

CSV: one row per σ. PNG (experiments/png_canvas.py, no plotting library): x = the runs ordered by falling ε
(left: no DP), y in [0, 1]; blue: test accuracy, red: gradient-inversion per-feature AUC (its
baselines, as many marginal-drawn rows matched the same way: dashed light grey; the same rows with
their words shuffled: dashed dark grey), green: label-inference
cosine similarity (its uniform baseline: dashed green).
"""
from __future__ import annotations

import argparse
import csv
import math
import statistics
from pathlib import Path

from attacks import parse_attack, run_attacks
from png_canvas import Canvas
from privfgl.experiment import RunConfig, run

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


def plot(rows: list[dict], path: Path, width: int = 480, height: int = 320, margin: int = 30) -> None:
    """Series in [0, 1] against the runs' order (falling ε); see the module docstring for colours."""
    canvas = Canvas(width, height)

    def to_xy(i: int, v: float) -> tuple[int, int]:
        span = max(len(rows) - 1, 1)
        return margin + round(i * (width - 2 * margin) / span), height - margin - round(v * (height - 2 * margin))

    def line(points: list[tuple[int, int]], colour, dashed: bool = False) -> None:
        for (x0, y0), (x1, y1) in zip(points, points[1:]):
            canvas.line(x0, y0, x1, y1, colour, dashed)
        for x, y in points:
            canvas.dot(x, y, colour, r=2)

    axis = (0, 0, 0)
    line([to_xy(0, 0.0), to_xy(len(rows) - 1, 0.0)], axis)
    line([to_xy(0, 0.0), to_xy(0, 1.0)], axis)
    for v in (0.25, 0.5, 0.75, 1.0):
        line([to_xy(0, v), to_xy(len(rows) - 1, v)], (225, 225, 225), dashed=True)
    series = [("test_acc", (31, 119, 180), False), ("gi_auc_per_feature", (214, 39, 40), False),
              ("gi_baseline_auc_per_feature", (150, 150, 150), True),
              ("gi_permuted_auc_per_feature", (90, 90, 90), True),
              ("li_cosine", (44, 160, 44), False), ("li_uniform_cosine", (44, 160, 44), True)]
    for key, colour, dashed in series:
        pts = [to_xy(i, r[key]) for i, r in enumerate(rows) if r[key] is not None and not math.isnan(r[key])]
        line(pts, colour, dashed)
    path.write_bytes(canvas.png())


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
    args = p.parse_args()
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
