r"""FedSpray beside FedAvg and Local: overall and minority accuracy, bytes, wall time.

Real datasets (the issue's setting): Cora and CiteSeer, Louvain+, 10 clients, 100 rounds, split
40/30/30 per client and class (FedSpray's), seeds 0-4 (the paper's 5 runs; the partition and split
follow the seed).
Synthetic STAND-INS shaped like the paper's datasets (PubMed, WikiCS and Physics are not available
offline): `sbm-pubmed` (7 clients), `sbm-wikics` (12), `sbm-physics` (12), Louvain, as the paper's
client counts; every output row names them "stand-in", and the paper's Table 2 (GCN) numbers are
printed beside them for context only (a contextual SBM is not the real graph).

Accuracy is the paper's metric: pooled ("micro") test accuracy over all clients' test nodes, at the
selected round; minority accuracy is over test nodes whose label is not their client's majority
training class; it is also split by the node's homophily in its client's graph (FedSpray Eq. 1:
h < 0.5, h >= 0.5, no neighbour; the paper's claim is about the low-homophily minority nodes).
FedSpray selects the round by pooled validation loss (the authors' code), FedAvg
and Local by node-weighted validation accuracy (privfgl's default).

    python experiments/reproduce_fedspray.py --out runs/fedspray.md
    python experiments/reproduce_fedspray.py --datasets cora --seeds 0 --variants fedspray \
        --protocols plain ckks crypten --out runs/fedspray-protocols.md
    python experiments/reproduce_fedspray.py --datasets sbm-pubmed sbm-wikics --seeds 0 --variants fedspray fedavg local \
        --out runs/fedspray-standins.md
    python experiments/reproduce_fedspray.py --datasets sbm-physics --rounds 50 --seeds 0 --variants fedspray fedavg local \
        --out runs/fedspray-physics.md   # 34,493 x 8,415 dense features: ~50 rounds fit a 2-core CPU
    python experiments/reproduce_fedspray.py --datasets sbm-pubmed-clients --variants fedspray fedspray-code \
        fedavg fedavg-matched local fedavg-global fedavg-matched-global [--feature-signal 1.0] \
        --out runs/fedspray-pubmed-clients.md   # the paper's 7 PubMed clients planted (partition "planted")

Variants: fedspray (paper defaults), fedspray-code (the authors' code choices: `preset=code`),
fedspray-l1 (paper defaults with the code's λ1 = 1), fedspray-valacc (paper defaults, round selected
by weighted validation accuracy as FedAvg's), fedavg (privfgl defaults: lr 0.01, dropout
0.5, weight decay 5e-4, 3 local epochs), fedavg-matched (FedSpray's GNN settings: lr 0.003, no
dropout or weight decay, 5 local epochs), local (privfgl defaults); FedAvg is scored, as every
privfgl baseline, on each client's model right after its local training (`--evaluation
local_model`, OpenFGL's convention): fedavg-global and fedavg-matched-global score the aggregated
global model instead (`--evaluation global_model`, plain FedAvg).
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from privfgl.data import load_dataset
from privfgl.evaluation import HOMOPHILY_BINS
from privfgl.experiment import RunConfig, run

STANDIN_CLIENTS = {"sbm-pubmed": 7, "sbm-wikics": 12, "sbm-physics": 12, "sbm-pubmed-clients": 7}
STANDIN_PAPER = {"sbm-pubmed": "PubMed", "sbm-wikics": "WikiCS", "sbm-physics": "Physics",
                 "sbm-pubmed-clients": "PubMed"}
PLANTED = {"sbm-pubmed-clients"}  # stand-ins whose clients are planted (partition "planted"), not Louvain
# Paper Table 2, GCN backbone, overall / minority accuracy in % (spec A4); context for the stand-ins only.
PAPER_GCN = {
    "PubMed": {"local": (87.49, 51.00), "fedavg": (87.06, 55.77), "fedspray": (87.71, 62.12)},
    "WikiCS": {"local": (81.43, 41.36), "fedavg": (80.53, 35.48), "fedspray": (81.51, 47.43)},
    "Physics": {"local": (94.62, 72.75), "fedavg": (94.13, 66.45), "fedspray": (95.59, 80.98)},
}
VARIANTS = {
    "fedspray": dict(method="fedspray"),
    "fedspray-code": dict(method="fedspray", method_params={"preset": "code"}),
    "fedspray-l1": dict(method="fedspray", method_params={"lambda1": 1.0}),
    "fedspray-valacc": dict(method="fedspray", method_params={"selection": "val_acc"}),
    "fedavg": dict(method="fedavg"),
    "fedavg-matched": dict(method="fedavg", lr=0.003, local_epochs=5, dropout=0.0, weight_decay=0.0),
    "fedavg-global": dict(method="fedavg", evaluation="global_model"),
    "fedavg-matched-global": dict(method="fedavg", lr=0.003, local_epochs=5, dropout=0.0, weight_decay=0.0,
                                  evaluation="global_model"),
    "local": dict(method="local"),
}


def config(variant: str, dataset: str, seed: int, protocol: str, args) -> RunConfig:
    common = dict(dataset=dataset, partition=partition_of(dataset, args),
                  clients=STANDIN_CLIENTS.get(dataset, args.clients), rounds=args.rounds, split=(0.4, 0.3, 0.3),
                  seed=seed, protocol=protocol, data_root=args.data_root, progress=False, transcript="none",
                  model=args.model)
    spec = dict(VARIANTS[variant])
    if spec["method"] == "fedspray" and args.method_param:  # extra FedSpray settings (e.g. a λ1 sweep)
        spec["method_params"] = {**spec.get("method_params", {}), **dict(kv.split("=", 1) for kv in args.method_param)}
    return RunConfig(**{**common, **spec})


def partition_of(dataset: str, args) -> str:
    if dataset in PLANTED:
        return "planted"
    return "louvain" if dataset in STANDIN_CLIENTS else args.partition


def load_standin(dataset: str, args):
    """The stand-in graph with --feature-signal applied (None: `run` loads it by name); seed 0, as `run`
    generates a synthetic dataset."""
    if args.feature_signal is None or dataset not in STANDIN_CLIENTS:
        return None
    return load_dataset(dataset, seed=0, feature_signal=args.feature_signal)


def variant_name(variant: str, args) -> str:
    """The row label: the variant, plus any extra FedSpray settings."""
    if VARIANTS[variant]["method"] == "fedspray" and args.method_param:
        return f"{variant} [{', '.join(args.method_param)}]"
    return variant


def pct(values: list[float]) -> str:
    values = [100 * v for v in values]
    std = statistics.pstdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):.2f} ± {std:.2f}"


def by_homophily(res: list[dict]) -> str:
    """Minority accuracy per homophily bin, mean over runs, with the mean number of test nodes."""
    cells = []
    for name in HOMOPHILY_BINS:
        accs = [r["minority_by_homophily"][name]["acc"] for r in res if r["minority_by_homophily"][name]["n"]]
        n = statistics.fmean(r["minority_by_homophily"][name]["n"] for r in res)
        cells.append(f"{pct(accs) if accs else '—'} [{n:.0f}]")
    return " / ".join(cells)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", nargs="+", default=["cora", "citeseer"])
    ap.add_argument("--partition", default="louvain+", help="for the real datasets (stand-ins use louvain)")
    ap.add_argument("--clients", type=int, default=10, help="for the real datasets (stand-ins: the paper's counts)")
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--model", default="gcn", choices=["gcn", "sage", "sgc"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    ap.add_argument("--variants", nargs="+", default=["fedspray", "fedspray-code", "fedavg", "fedavg-matched", "local"],
                    choices=list(VARIANTS))
    ap.add_argument("--protocols", nargs="+", default=["plain"])
    ap.add_argument("--method-param", action="append", default=[], metavar="KEY=VALUE",
                    help="extra FedSpray setting for the fedspray* variants (repeatable), e.g. lambda1=2")
    ap.add_argument("--feature-signal", type=float, default=None,
                    help="stand-ins only: the class-mean norm of the features (default: the preset's)")
    ap.add_argument("--data-root", default=None)
    ap.add_argument("--out", default="runs/fedspray.md", help="Markdown table")
    ap.add_argument("--json", default=None, help="also write every run's summary here")
    args = ap.parse_args()
    torch.set_num_threads(1)

    rows, runs = [], []
    for dataset in args.datasets:
        standin = dataset in STANDIN_CLIENTS
        data = load_standin(dataset, args)
        for variant in args.variants:
            for protocol in args.protocols:
                res = []
                for seed in args.seeds:
                    cfg = config(variant, dataset, seed, protocol, args)
                    start = time.perf_counter()
                    record, _ = run(cfg, data=data)
                    m, cost = record["metrics"], record["cost"]
                    res.append({"dataset": dataset, "standin": standin, "variant": variant_name(variant, args),
                                "protocol": protocol, "seed": seed, "val_acc": m["val_acc"],
                                "acc_micro": m["test_acc_micro"], "acc_weighted": m["test_acc"],
                                "minority": m["minority_acc"], "minority_macro": m["minority_acc_macro"],
                                "acc_macro": m["test_acc_macro"], "best_round": m["best_round"],
                                "minority_by_homophily": m["minority_by_homophily"],
                                "bytes_up_per_client_round": statistics.fmean(cost["bytes_up_per_client"]) / args.rounds,
                                "seconds": time.perf_counter() - start})
                    print(json.dumps(res[-1]), flush=True)
                runs += res
                name = f"{dataset} (stand-in for {STANDIN_PAPER[dataset]})" if standin else dataset
                if standin and args.feature_signal is not None:
                    name += f", feature_signal={args.feature_signal}"
                part = partition_of(dataset, args)
                rows.append([name, part, str(STANDIN_CLIENTS.get(dataset, args.clients)), variant_name(variant, args), protocol,
                             pct([r["acc_micro"] for r in res]), pct([r["minority"] for r in res]),
                             pct([r["acc_macro"] for r in res]), pct([r["minority_macro"] for r in res]),
                             by_homophily(res),
                             pct([r["acc_weighted"] for r in res]), pct([r["val_acc"] for r in res]), str(len(res)),
                             f"{statistics.fmean(r['bytes_up_per_client_round'] for r in res) / 1e6:.3f}",
                             f"{statistics.fmean(r['seconds'] for r in res):.1f}"])
    lines = [f"FedSpray reproduction ({args.model}, {args.rounds} rounds, split 40/30/30; accuracy % mean ± "
             "population std over seeds " + ", ".join(map(str, args.seeds)) + "). STAND-IN rows are synthetic "
             "contextual-SBM graphs, not the real datasets.", "",
             "| dataset | partition | clients | variant | protocol | acc (micro) | minority acc | acc (macro over clients) "
             "| minority acc (macro) | minority acc by homophily h < 0.5 / h ≥ 0.5 / isolated [test nodes per run] "
             "| acc (node-weighted) | val acc (node-weighted) | seeds | MB up / client / round | s / run |",
             "|" + "---|" * 15]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    standins = [d for d in args.datasets if d in STANDIN_CLIENTS]
    if standins:
        lines += ["", "Paper Table 2 (GCN; real datasets, 300 rounds, 5 runs), overall / minority %, for context "
                  "beside the stand-ins only:", "", "| paper dataset | Local | FedAvg | FedSpray |", "|---|---|---|---|"]
        for d in standins:
            p = PAPER_GCN[STANDIN_PAPER[d]]
            lines.append(f"| {STANDIN_PAPER[d]} | " + " | ".join(f"{p[m][0]:.2f} / {p[m][1]:.2f}"
                                                                  for m in ("local", "fedavg", "fedspray")) + " |")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()
