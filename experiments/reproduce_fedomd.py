"""FedOMD on Cora/CiteSeer, Louvain with M parties, 1%/20%/20% random per-client split, several seeds,
beside the paper's Table 4 (spec fedspray_fedomd.md B4). Writes one JSON record per run under
--records and a Markdown table to --out (rewritten after every run, so a long sweep can be read
while it runs).

    python experiments/reproduce_fedomd.py --out runs/fedomd.md                      # Cora+CiteSeer, M=3,5,7,9, 5 seeds
    python experiments/reproduce_fedomd.py --datasets cora --clients 3 --seeds 0 \\
        --protocols plain ckks crypten --rounds 100 --out runs/fedomd-protocols.md    # one setting per protocol
    python experiments/reproduce_fedomd.py --method-param beta=0 --out runs/fedomd-nocmd.md   # ablation: Ortho only
    python experiments/reproduce_fedomd.py --method-param select=val_loss --out runs/fedomd-vl.md   # [11]'s selection
    python experiments/reproduce_fedomd.py --method-param cmd_norm=l2 --method-param cmd_scale=none \\
        --out runs/fedomd-spec-cmd.md                                                  # the spec's CMD (collapses)
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch
from scipy.stats import ttest_ind_from_stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from privfgl.cli import _key_value  # noqa: E402
from privfgl.experiment import RunConfig, run  # noqa: E402
from privfgl.methods.fedomd.selection import SELECTION_TEXT  # noqa: E402
from privfgl.methods.fedomd.params import FedOMDParams  # noqa: E402
from privfgl.results import write_record  # noqa: E402

# Paper Table 4, FedOMD, accuracy % (std): (dataset, M) -> (mean, std)
PAPER = {("cora", 3): (54.35, 5.86), ("cora", 5): (50.10, 7.49), ("cora", 7): (41.90, 4.71), ("cora", 9): (38.19, 5.25),
         ("citeseer", 3): (53.08, 3.67), ("citeseer", 5): (39.38, 1.85), ("citeseer", 7): (40.46, 3.07),
         ("citeseer", 9): (35.67, 3.62)}


def one_run(dataset: str, clients: int, seed: int, protocol: str, rounds: int, method_params: dict,
            records: Path) -> dict:
    cfg = RunConfig(method="fedomd", dataset=dataset, partition="louvain", clients=clients, rounds=rounds,
                    split=(0.01, 0.2, 0.2), split_mode="random", protocol=protocol, seed=seed,
                    method_params=dict(method_params), progress=False, transcript="none")
    record, _ = run(cfg)
    tag = "-".join(f"{k}{v}" for k, v in sorted(method_params.items()))
    write_record(record, records / f"fedomd-{dataset}-M{clients}-{protocol}-s{seed}{'-' + tag if tag else ''}.json")
    m, cost = record["metrics"], record["cost"]
    return {"dataset": dataset, "M": clients, "seed": seed, "protocol": protocol, "acc": 100 * m["test_acc"],
            "acc_micro": 100 * m["test_acc_micro"], "best_round": m["best_round"], "rounds_run": m["rounds_run"],
            "bytes_per_client_round": sum(cost["bytes_up_per_client"]) / clients / max(m["rounds_run"], 1),
            "seconds": record["time"]["total_s"]}


def _mean_std(values: list[float]) -> str:
    if not values:
        return "-"
    std = statistics.pstdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.2f} ± {std:.2f}"


def welch_vs_paper(values: list[float], paper: tuple[float, float], n_paper: int = 5) -> tuple[float, float]:
    """(ours − paper, two-sided Welch p) for our runs against the paper's mean and std over n_paper runs
    (its std read as the sample std). p > 0.05: our mean is statistically consistent with the paper's."""
    if len(values) < 2:
        return statistics.mean(values) - paper[0], float("nan")
    res = ttest_ind_from_stats(statistics.mean(values), statistics.stdev(values), len(values),
                               paper[0], paper[1], n_paper, equal_var=False)
    return statistics.mean(values) - paper[0], float(res.pvalue)


def _vs_paper(values: list[float], paper: tuple[float, float] | None) -> str:
    if not paper or not values:
        return "- | -"
    delta, p = welch_vs_paper(values, paper)
    return f"{delta:+.2f} | {'-' if math.isnan(p) else f'{p:.2f}'}"  # one run: no test


def table(rows: list[dict], method_params: dict) -> str:
    lines = [f"# FedOMD reproduction (method params: {method_params or 'defaults'})", "",
             "Macro average over parties of the global model's test accuracy (%), at the round selected by "
             f"{SELECTION_TEXT[method_params.get('select', FedOMDParams.select)]}; mean ± population std over seeds. "
             "Louvain, 1%/20%/20% random per-client split.", "",
             "Δ = ours − paper; p = two-sided Welch t-test of our runs against the paper's mean ± std over its 5 runs "
             "(p > 0.05: consistent with the paper).", "",
             "| dataset | M | protocol | seeds | ours (macro) | ours (micro) | paper | Δ | p | rounds run "
             "| KB up / client / round | s / run |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    keys = sorted({(r["dataset"], r["M"], r["protocol"]) for r in rows})
    for ds, M, proto in keys:
        rs = [r for r in rows if (r["dataset"], r["M"], r["protocol"]) == (ds, M, proto)]
        paper = PAPER.get((ds, M))
        lines.append(f"| {ds} | {M} | {proto} | {','.join(str(r['seed']) for r in rs)} | {_mean_std([r['acc'] for r in rs])} "
                     f"| {_mean_std([r['acc_micro'] for r in rs])} | {f'{paper[0]:.2f} ± {paper[1]:.2f}' if paper else '-'} "
                     f"| {_vs_paper([r['acc'] for r in rs], paper)} | {statistics.mean(r['rounds_run'] for r in rs):.0f} "
                     f"| {statistics.mean(r['bytes_per_client_round'] for r in rs) / 1e3:.1f} "
                     f"| {statistics.mean(r['seconds'] for r in rs):.1f} |")
    lines += ["", "Per run:", "", "| dataset | M | protocol | seed | acc | micro | best round | rounds run | s |",
              "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['dataset']} | {r['M']} | {r['protocol']} | {r['seed']} | {r['acc']:.2f} | {r['acc_micro']:.2f} "
              f"| {r['best_round']} | {r['rounds_run']} | {r['seconds']:.1f} |" for r in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", nargs="+", default=["cora", "citeseer"])
    p.add_argument("--clients", nargs="+", type=int, default=[3, 5, 7, 9])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    p.add_argument("--protocols", nargs="+", default=["plain"])
    p.add_argument("--rounds", type=int, default=1000)
    p.add_argument("--method-param", type=_key_value, action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--out", default="runs/fedomd.md")
    p.add_argument("--records", default=None, help="folder for the run records (default: beside --out)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    warnings.simplefilter("ignore", UserWarning)
    method_params = dict(args.method_param)
    out = Path(args.out)
    records = Path(args.records) if args.records else out.with_suffix("")
    records.mkdir(parents=True, exist_ok=True)
    rows = []
    for ds in args.datasets:
        for M in args.clients:
            for seed in args.seeds:
                for proto in args.protocols:
                    start = time.perf_counter()
                    rows.append(one_run(ds, M, seed, proto, args.rounds, method_params, records))
                    print(json.dumps(rows[-1]), f"({time.perf_counter() - start:.1f} s)", flush=True)
                    out.write_text(table(rows, method_params))
    print(out.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
