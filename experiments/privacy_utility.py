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
and `dp_epsilon=ε, dp_clip=B, dp_degree=D` (privfgl/methods/opfgl_dp.py: rows clipped to B,
degree bound D, one Gaussian release of (n, S1, S2), distributed noise under `--opfgl-protocol`
ckks). Non-private O-pFGL under the same protocol is its reference. Its record has one
evaluation (the personalised models after stage 2), reported as both accuracies.

    python experiments/privacy_utility.py                      # → runs/privacy_utility.{csv,png}
    python experiments/privacy_utility.py --methods dp-opfgl --epsilons 1,4,16 --out runs/privacy_utility_opfgl
    python experiments/privacy_utility.py --epsilons 8 --seeds 0 --rounds 10   # a quick look

Writes one CSV row per run (test accuracy at the best-validation round, as the record reports it,
and at the last round) and a PNG (mean last-round test accuracy vs ε, log x axis; one line per
method and evaluation mode; dashed: the references). The PNG is drawn by experiments/png_canvas.py (a small zlib PNG writer), so no
plotting library is needed.
"""
from __future__ import annotations

import argparse
import csv
import math
import statistics
import time
from pathlib import Path

from png_canvas import Canvas
from privfgl.experiment import RunConfig, run
from privfgl.methods.opfgl_params import PRESET_PARTITION_SEED
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


COLORS = [(31, 119, 180), (214, 39, 40), (44, 160, 44), (148, 103, 189), (255, 127, 14), (23, 190, 207)]


def plot(rows: list[dict], path: Path) -> None:
    """Mean last-round test accuracy vs ε (log x); x ticks are the ε values, y ticks every 0.1."""
    w, h, left, bottom, top, right = 640, 420, 60, 50, 20, 20
    c = Canvas(w, h)
    dp = [r for r in rows if r["target_epsilon"] is not None]
    eps = sorted({r["target_epsilon"] for r in dp})
    lx = [math.log10(e) for e in eps]
    x0, x1 = (min(lx) - 0.2, max(lx) + 0.2) if lx else (0, 1)
    X = lambda e: round(left + (math.log10(e) - x0) / (x1 - x0) * (w - left - right))
    Y = lambda a: round(h - bottom - a * (h - bottom - top))
    c.line(left, h - bottom, w - right, h - bottom, (0, 0, 0))
    c.line(left, h - bottom, left, top, (0, 0, 0))
    for t in range(11):
        c.line(left - 4, Y(t / 10), left, Y(t / 10), (0, 0, 0))
        c.text(left - 32, Y(t / 10) - 5, f"{t / 10:.1f}")
    for e in eps:
        c.line(X(e), h - bottom, X(e), h - bottom + 4, (0, 0, 0))
        c.text(X(e) - 6, h - bottom + 10, f"{e:g}")
    series = sorted({(r["method"], r["evaluation"]) for r in dp})
    for i, key in enumerate(series):
        pts = [(X(e), Y(statistics.mean(r["test_acc_last"] for r in dp if (r["method"], r["evaluation"]) == key
                                         and r["target_epsilon"] == e))) for e in eps]
        for (a, b), (p, q) in zip(pts, pts[1:]):
            c.line(a, b, p, q, COLORS[i % len(COLORS)], r=1)
        for p in pts:
            c.dot(*p, COLORS[i % len(COLORS)], r=3)
    refs = sorted({(r["method"], r["evaluation"]) for r in rows if r["target_epsilon"] is None})
    for j, key in enumerate(refs):
        acc = statistics.mean(r["test_acc_last"] for r in rows if (r["method"], r["evaluation"]) == key
                              and r["target_epsilon"] is None)
        c.line(left, Y(acc), w - right, Y(acc), COLORS[(len(series) + j) % len(COLORS)], dashed=True)
    path.write_bytes(c.png())


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
    args = p.parse_args()
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
    print(f"written: {out.with_suffix('.csv')}, {out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
