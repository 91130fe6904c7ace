"""How many clients of sbm-cora's shape does DP-FedAvg at ε = 8 need to come within 5 points of FedAvg? A diagnosis
of issue #44's client-level target (docs/privacy-utility.md), run after the target was missed on sbm-cora.

On sbm-cora at 1,000 clients (METIS) a client holds 2.7 nodes and exactly one labelled node, so "many clients"
is also "few labels". This script keeps everything of the sweep's one-round cells (experiments/
dp_fedavg_sbm_cora_sgc.toml: SGC, T = 1, C = 1, σ for the target ε, the split, METIS) and of the stand-in's shape
(1,433 features, 7 classes, homophily 0.81, mean degree 3.9, feature_signal 1), and multiplies the graph's nodes
and the clients together by `--scale` m: 2,708·m nodes in 1,000·m clients, so each client still holds about 2.7
nodes and one labelled node, and the labelled nodes grow m-fold. Scale 1 is the evaluated sbm-cora itself (graph
seed 0) and reproduces the sweep's rows. Nothing is chosen from these runs.

Each run's test accuracy is also split by where a test node sits (`group`): clients whose test nodes are all within
SGC's two hops of the client's labelled node (in the client's subgraph) and share its class ("linked, same class"),
the same but of another class ("linked, other class"), and clients none of whose test nodes is within two hops
("unlinked"); other clients are left out of the split. A linked test node's propagated features hold the labelled
node's feature noise, so a model that memorised the labelled node gives its label there, right on "same class" and
wrong on "other class"; an unlinked node can only be read through what the classes share.

    python experiments/dp_fedavg_labelled_clients.py --scale 1 2 4 10 [--seeds 0 1 2] [--runs dp ceiling fedavg]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from privfgl.data import contextual_sbm  # noqa: E402
from privfgl.data.synthetic import SYNTHETIC_PRESETS  # noqa: E402
from privfgl.experiment import RunConfig, run  # noqa: E402
from privfgl.sweep.config import Cell, load_sweep  # noqa: E402
from privfgl.sweep.runner import run_config  # noqa: E402
from torch_geometric.utils import k_hop_subgraph  # noqa: E402

SWEEP = Path(__file__).resolve().parent / "dp_fedavg_sbm_cora_sgc.toml"
# run kind -> (the sweep's [[cells]] name, its target ε; None: a cell without DP)
SWEEP_CELLS = {"dp": ("DP-FedAvg, SGC, one round (T = 1, C = 1)", 8),
               "ceiling": ("DP-FedAvg, SGC, one round (T = 1, C = 1)", 100000),
               "fedavg": ("FedAvg, no DP, SGC, one SGD step", None)}
NAMES = {"dp": "DP-FedAvg, ε = 8", "ceiling": "DP-FedAvg, ε = 1e5 (clipping only)", "fedavg": "FedAvg, no DP"}
BASE_CLIENTS = 1000
EVALUATED_GRAPH_SEED = 0


def scaled_graph(scale: int):
    """sbm-cora's preset with `scale` times its nodes, drawn with the evaluated graph seed (scale 1: sbm-cora)."""
    preset = dict(SYNTHETIC_PRESETS["sbm-cora"])
    preset["num_nodes"] *= scale
    return contextual_sbm(**preset, seed=EVALUATED_GRAPH_SEED, name="sbm-cora")


def scaled_config(kind: str, scale: int, seed: int) -> RunConfig:
    """The sweep's 1,000-client cell of `kind` (SWEEP_CELLS) at `seed`, with 1,000·`scale` clients, σ calibrated
    as the sweep does."""
    name, target = SWEEP_CELLS[kind]
    cell = next(c for c in load_sweep(SWEEP).cells if c.name == name and c.options["clients"] == BASE_CLIENTS
                and c.options.get("target_epsilon") == target)
    options = {**cell.options, "clients": BASE_CLIENTS * scale}
    return run_config(Cell(cell.label, options), seed, threads=None, progress=False)[0]


GROUPS = ("linked, same class", "linked, other class", "unlinked")


def group(client, hops: int = 2) -> str | None:
    """The GROUPS entry of `client` (a subgraph with masks): every test node within `hops` of a training node and
    all of one class, which is the training nodes' one class ("same") or not ("other"); no test node within
    `hops` ("unlinked"); None for any other client."""
    train = client.train_mask.nonzero().flatten()
    reach = k_hop_subgraph(train, hops, client.edge_index, num_nodes=client.num_nodes)[0] if train.numel() else train
    reached, tests = int(client.test_mask[reach].sum()), int(client.test_mask.sum())
    if reached == 0:
        return GROUPS[2]
    train_classes, test_classes = set(client.y[train].tolist()), set(client.y[client.test_mask].tolist())
    if reached < tests or len(train_classes) != 1 or len(test_classes) != 1:
        return None
    return GROUPS[0] if train_classes == test_classes else GROUPS[1]


def split_accuracy(per_client: list[dict], clients: list) -> dict[str, tuple[int, int]]:
    """{GROUPS entry: (correct, test nodes)} summed over its clients (per_client: the record's, in client order)."""
    totals = {name: [0, 0] for name in GROUPS}
    for row, client in zip(per_client, clients):
        name = group(client)
        if name is not None:
            totals[name][0] += row["test_correct"]
            totals[name][1] += row["n_test"]
    return {name: (c, n) for name, (c, n) in totals.items()}


def evaluate(scales: list[int], seeds: list[int], kinds: list[str]) -> None:
    """One table row per (scale, run kind): test accuracy per seed, its mean ± std, and each group's accuracy
    (mean over the seeds)."""
    print("| nodes | clients | labelled nodes | run | test accuracy per seed | mean ± std | "
          + " | ".join(GROUPS) + " | seconds |\n|" + "---|" * (7 + len(GROUPS)), flush=True)
    for scale in scales:
        graph = scaled_graph(scale)
        for kind in kinds:
            accuracies, t0, labelled, groups = [], time.time(), 0, {name: [] for name in GROUPS}
            for seed in seeds:
                record, setup = run(scaled_config(kind, scale, seed), data=graph)
                accuracies.append(record["metrics"]["test_acc"])
                labelled = sum(int(client.train_mask.sum()) for client in setup.clients)
                for name, (correct, n) in split_accuracy(record["metrics"]["per_client"], setup.clients).items():
                    groups[name].append((correct / n if n else float("nan"), n))
            spread = statistics.stdev(accuracies) if len(accuracies) > 1 else 0.0
            split = " | ".join(f"{statistics.mean(a for a, _ in groups[name]):.3f} ({groups[name][-1][1]:,} test nodes at "
                               f"seed {seeds[-1]})" for name in GROUPS)
            print(f"| {graph.num_nodes:,} | {BASE_CLIENTS * scale:,} | {labelled:,} | {NAMES[kind]} | "
                  f"{' / '.join(f'{a:.4f}' for a in accuracies)} | {statistics.mean(accuracies):.3f} ± {spread:.3f} | "
                  f"{split} | {time.time() - t0:.0f} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scale", type=int, nargs="+", default=[1, 2, 4, 10],
                    help="multiples of sbm-cora's 2,708 nodes and of 1,000 clients (default 1 2 4 10)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--runs", nargs="+", choices=list(SWEEP_CELLS), default=list(SWEEP_CELLS))
    args = ap.parse_args()
    bad = [s for s in args.scale if s < 1]
    if bad:
        ap.error(f"--scale {bad[0]}: valid: integers >= 1")
    evaluate(args.scale, args.seeds, args.runs)


if __name__ == "__main__":
    main()
