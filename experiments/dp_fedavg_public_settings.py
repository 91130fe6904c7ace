"""DP-FedAvg's many-client settings chosen on PUBLIC graphs (Papernot & Steinke 2022: no search on the evaluated
runs): the stand-ins sbm-pubmed and sbm-cora drawn with graph seed 1 (the evaluated runs use the graphs of seed
0; a synthetic graph is public data), 1,000 clients, METIS, the sweep's split rule, hidden 16.

The rule, written down before any run (experiments/dp_fedavg_many_clients.toml repeats it):
  1. C = the median of the clients' round-0 update norms on the public graph (Andrew et al. 2021 aim the clip
     at the median), rounded up to one significant digit. Read from the server's view of one no-clip round.
  2. Server step: {η = 1, β = 0} or {η = 0.1, β = 0.9} (the same long-run step, the noise averaged over ~10
     rounds): whichever gives the higher validation accuracy on the public graph at ε = 8 (seed 0), one run each.
Nothing of the evaluated graphs is read. A later search of the training (width, rounds x local epochs, local
optimizer, dropout, server step η) on public sbm-pubmed, each candidate with its own median-rule C and σ calibrated
to ε = 8 over its rounds, selected by validation accuracy: `search` (the candidates: SEARCH; the table it printed
is in the config's comments). Its third batch, on public sbm-cora, tries a linear model (SGC) trained by one local
SGD step a round (experiments/dp_fedavg_sbm_cora_sgc.toml runs the chosen one).

    python experiments/dp_fedavg_public_settings.py norms            # step 1, both stand-ins
    python experiments/dp_fedavg_public_settings.py step --clip C --dataset sbm-pubmed   # step 2
    python experiments/dp_fedavg_public_settings.py search [--only 0,4]                  # the training search
    python experiments/dp_fedavg_public_settings.py signal   # the class signal in the round-0 mean update (a diagnosis)
    python experiments/dp_fedavg_public_settings.py search --dataset sbm-cora --only 11,12,13,14,15,16 [--epsilon 100000]
    python experiments/dp_fedavg_public_settings.py signal --dataset sbm-cora --model sgc --local-epochs 1 \\
        --optimizer sgd --lr 0.1 --dropout 0 --clip 3 --rounds 40 --at-round 0
"""
from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass

import torch

from privfgl.data import contextual_sbm, load_dataset
from privfgl.data.synthetic import SYNTHETIC_PRESETS, _sample_edges
from privfgl.experiment import RunConfig, run
from privfgl.federation import SERVER
from privfgl.privacy import noise_multiplier_for

PUBLIC_GRAPH_SEED = 1
SIGMA_EPS8 = 2.85400390625  # the smallest σ with ε(δ = 1e-5) ≤ 8 over 20 rounds at q = 1 (opacus RDP)
STEPS = ({"server_lr": 1.0, "server_momentum": 0.0}, {"server_lr": 0.1, "server_momentum": 0.9})


# Public stand-ins: the presets at graph seed 1, and a CSBM with CiteSeer's counts (PyG's CiteSeer: 3,327 nodes,
# 3,703 features, 6 classes, edge homophily 0.74, mean degree 2.74) for the CiteSeer cells, which have no preset.
CITESEER_LIKE = dict(num_nodes=3327, num_features=3703, num_classes=6, homophily=0.74, avg_degree=2.74)
# Each evaluated setting -> (the public graph, partition, clients, split mode) its C is measured on.
SETTINGS = {"sbm-pubmed": ("sbm-pubmed", "metis", 1000, "random"), "sbm-cora": ("sbm-cora", "metis", 1000, "random"),
            "cora": ("sbm-cora", "louvain", 10, "stratified"), "citeseer": ("citeseer-like", "louvain", 10, "stratified")}


def public_graph(name: str, graph_seed: int = PUBLIC_GRAPH_SEED):
    if name == "citeseer-like":
        return contextual_sbm(**CITESEER_LIKE, seed=graph_seed, name="sbm")
    return load_dataset(name, seed=graph_seed)


def config(setting: str, rounds: int, dp: str, transcript: str, optimizer: tuple[str, float] = ("adam", 0.01),
           hidden: int = 16, local_epochs: int = 3, model: str = "gcn", **method_params) -> RunConfig:
    graph, partition, clients, split_mode = SETTINGS[setting]
    return RunConfig(method="dp-fedavg", dataset="sbm" if graph == "citeseer-like" else graph, partition=partition,
                     clients=clients, split_mode=split_mode, rounds=rounds, local_epochs=local_epochs, hidden=hidden,
                     model=model,
                     evaluation="global_model", seed=0, dp=dp, progress=False, transcript=transcript,
                     optimizer=optimizer[0], lr=optimizer[1], method_params={"q": 1.0, "sampling_seed": 0, **method_params})


def round_up(x: float) -> float:
    """x rounded up to one significant digit."""
    scale = 10 ** math.floor(math.log10(x))
    return math.ceil(x / scale) * scale


def round_updates(dataset: str, graph, optimizer: tuple[str, float] = ("adam", 0.01), hidden: int = 16,
                  local_epochs: int = 3, dropout: float = 0.5, at_round: int = 0,
                  model: str = "gcn") -> list[dict[str, torch.Tensor]]:
    """Each client's update {parameter name: tensor} at round `at_round` (default 0) on `graph`, read from the
    server's view of a run without clipping or noise (σ = 1e-9, C = 1e9)."""
    cfg = config(dataset, at_round + 1, "gaussian:sigma=1e-9,clip=1e9,on=update,mode=central,seed=0", "all", optimizer,
                 hidden, local_epochs, model)
    cfg.dropout = dropout
    _, setup = run(cfg, data=graph)
    return [m.tensors for m in setup.federation.transcript.view(SERVER, name="model_update", round=at_round)]


def update_norms(dataset: str, graph, optimizer: tuple[str, float] = ("adam", 0.01), hidden: int = 16,
                 local_epochs: int = 3, dropout: float = 0.5, model: str = "gcn") -> tuple[torch.Tensor, torch.Tensor]:
    """(each client's round-0 update norm, shape [K]; the clients' mean update, shape [d]) on `graph`."""
    ups = round_updates(dataset, graph, optimizer, hidden, local_epochs, dropout, model=model)
    flat = torch.stack([torch.cat([v.double().reshape(-1) for v in u.values()]) for u in ups])
    return flat.norm(dim=1), flat.mean(0)


def class_means(name: str, graph, graph_seed: int) -> torch.Tensor:
    """[classes, F]: the stand-in's class means μ_c, redrawn as privfgl/data/synthetic.py's contextual_sbm draws them
    (its generator's order: labels, edges, means, noise); checked by regenerating the features exactly."""
    preset = SYNTHETIC_PRESETS[name]
    g = torch.Generator().manual_seed(graph_seed)
    y = torch.randperm(preset["num_nodes"], generator=g) % preset["num_classes"]
    _sample_edges(y, torch.full((preset["num_nodes"],), float(preset["homophily"])), preset["avg_degree"], g)
    means = torch.randn(preset["num_classes"], preset["num_features"], generator=g) / math.sqrt(preset["num_features"])
    x = preset.get("feature_signal", 1.0) * means[y] + torch.randn(preset["num_nodes"], preset["num_features"], generator=g)
    if not (torch.equal(y, graph.y) and torch.equal(x, graph.x)):
        raise RuntimeError(f"{name}: the redrawn features differ from the graph's; contextual_sbm's draw order changed")
    return means.double()


def signal(dataset: str, graph_seed: int = PUBLIC_GRAPH_SEED, hidden: int = 16, dropout: float = 0.5,
           at_round: int = 0, clip: float | None = None, optimizer: tuple[str, float] = ("adam", 0.01),
           local_epochs: int = 3, model: str = "gcn", rounds: int = 20) -> None:
    """The class signal in the mean update of round `at_round` (after that many noiseless rounds) against the
    ε = 8 noise, on the public stand-in: the first
    layer's mean update W [hidden, F] projected on the span of the class means (Q: an orthonormal basis [F, c]),
    ‖W Q‖, beside a random c-dimensional subspace's ‖W R‖ (the share any c directions would hold) and the noise
    the server adds there, σ·C/K per coordinate over hidden·c coordinates (C: `clip`, the run's, else the median
    rule's at that round; σ calibrated to ε = 8 over `rounds`). The training: `model` (gcn: W is its first layer;
    sgc: its one layer, [classes, F]), `local_epochs` of the local `optimizer` (name, lr) a round."""
    name = SETTINGS[dataset][0]
    graph = public_graph(name, graph_seed)
    basis, _ = torch.linalg.qr(class_means(name, graph, graph_seed).T)  # [F, c]
    t0 = time.time()
    ups = round_updates(dataset, graph, optimizer, hidden, local_epochs, dropout, at_round, model)
    first = next(k for k in ups[0] if k.endswith("weight"))  # the first layer's weight, [hidden, F]
    w = torch.stack([u[first].double() for u in ups]).mean(0)
    norms_ = torch.stack([torch.cat([v.double().reshape(-1) for v in u.values()]).norm() for u in ups])
    clip, k, c = clip or round_up(float(norms_.median())), len(ups), basis.shape[1]
    gen = torch.Generator().manual_seed(0)
    random = [float((w @ torch.linalg.qr(torch.randn(w.shape[1], c, generator=gen, dtype=torch.double))[0]).norm())
              for _ in range(20)]
    sigma = noise_multiplier_for(8.0, 1e-5, 1.0, rounds, "rdp")  # SIGMA_EPS8 at the sweep's T = 20
    noise = sigma * clip / k * math.sqrt(w.shape[0] * c)
    print(f"{dataset}: stand-in {name} (graph seed {graph_seed}), {k} clients, {model}"
          f"{'' if model == 'sgc' else f' hidden {hidden}'}, {local_epochs} local {optimizer[0]} epoch(s) at lr "
          f"{optimizer[1]:g}, round {at_round}, "
          f"first layer {first} {tuple(w.shape)}: mean update ‖W‖ = {float(w.norm()):.4f}; on the {c} class-mean "
          f"directions ‖W Q‖ = {float((w @ basis).norm()):.4f}; on {c} random directions "
          f"{sum(random) / len(random):.4f} (mean of 20); the ε = 8 noise there, σ·C/K·√({w.shape[0]}·{c}) = {noise:.4f} "
          f"(C = {clip:g}, σ = {sigma:.4f} for T = {rounds}) ({time.time() - t0:.0f} s)", flush=True)


def norms(dataset: str, graph_seed: int = PUBLIC_GRAPH_SEED, optimizer: tuple[str, float] = ("adam", 0.01),
          hidden: int = 16, dropout: float = 0.5) -> None:
    graph = public_graph(SETTINGS[dataset][0], graph_seed)
    t0 = time.time()
    n, mean = update_norms(dataset, graph, optimizer, hidden, dropout=dropout)
    q = torch.quantile(n, torch.tensor([0.1, 0.25, 0.5, 0.75, 0.9], dtype=n.dtype)).tolist()
    print(f"{dataset}: stand-in {SETTINGS[dataset]} (graph seed {graph_seed}), hidden {hidden}, dropout {dropout:g}, local {optimizer[0]} lr {optimizer[1]:g}, round-0 update norms: "
          f"quantiles 10/25/50/75/90 % = {', '.join(f'{v:.3f}' for v in q)}; max {float(n.max()):.3f}; "
          f"C = {round_up(q[2]):g}; the clients' mean update: norm {float(mean.norm()):.4f}, "
          f"against the ε = 8 noise on the mean, σ·C·√d/K = {SIGMA_EPS8 * round_up(q[2]) * mean.numel() ** 0.5 / len(n):.4f} "
          f"(d = {mean.numel()}) ({time.time() - t0:.0f} s)", flush=True)


@dataclass(frozen=True)
class Candidate:
    """One training setting of the public search: the backbone (privfgl.models: gcn, or sgc, one linear layer on
    the client's 2-hop propagated features, `hidden` unused) and the GCN's width, T rounds of E local epochs, the
    local optimizer and its lr, dropout, the server's step η, and the clip C (None: the median rule)."""
    model: str = "gcn"
    hidden: int = 64
    rounds: int = 20
    local_epochs: int = 3
    optimizer: str = "adam"
    lr: float = 0.01
    dropout: float = 0.5
    server_lr: float = 1.0
    clip: float | None = None

    def __str__(self) -> str:
        width = "sgc" if self.model == "sgc" else f"hidden {self.hidden}"
        clip = "" if self.clip is None else f", C = {self.clip:g} (not the rule's)"
        return (f"{width}, T = {self.rounds} x E = {self.local_epochs}, {self.optimizer} lr {self.lr:g}, "
                f"dropout {self.dropout:g}, η = {self.server_lr:g}{clip}")


# The search on public sbm-pubmed (graph seed 1), 1,000 clients, METIS, ε = 8, seed 0, each candidate with C by
# the median rule at its own width, epochs, optimizer and dropout; selection by validation accuracy. The first
# row is the follow-up cell's setting (hidden 64, C = 4: val_acc 0.588 when first run).
SEARCH = (
    Candidate(),
    Candidate(hidden=32),
    Candidate(rounds=10, local_epochs=6),
    Candidate(rounds=5, local_epochs=12),
    Candidate(dropout=0.0),
    Candidate(server_lr=2.0),
    Candidate(optimizer="sgd", lr=0.5),
    # second batch, after the first seven: the two levers that helped (dropout 0, η = 2) together, then more of each
    Candidate(dropout=0.0, server_lr=2.0),
    Candidate(hidden=128, dropout=0.0, server_lr=2.0),
    Candidate(rounds=40, dropout=0.0, server_lr=2.0),
    Candidate(dropout=0.0, server_lr=4.0),
    # third batch, on public sbm-cora (`--dataset sbm-cora --only 11,...`), where every GCN above stayed at chance:
    # a linear model (SGC) trained by one local SGD step a round (FedSGD: the update is lr x the gradient at the
    # global model, not local Adam's per-coordinate steps, which are as long on the features' noise coordinates
    # as on the class's), then the same with the GCN and with Adam, and T and lr varied
    Candidate(model="sgc", rounds=20, local_epochs=1, optimizer="sgd", lr=0.1, dropout=0.0),
    Candidate(model="sgc", rounds=40, local_epochs=1, optimizer="sgd", lr=0.1, dropout=0.0),
    Candidate(model="sgc", rounds=10, local_epochs=1, optimizer="sgd", lr=0.1, dropout=0.0),
    Candidate(model="sgc", rounds=20, local_epochs=1, optimizer="sgd", lr=0.5, dropout=0.0),
    Candidate(model="sgc", rounds=20, local_epochs=1, optimizer="adam", lr=0.01, dropout=0.0),
    Candidate(model="gcn", hidden=16, rounds=20, local_epochs=1, optimizer="sgd", lr=0.1, dropout=0.0),
    # fourth batch, on public sbm-cora (`--only 17,...`): ONE round (T = 1, σ = 0.638 at ε = 8). Its update at the
    # start is each client's label times its propagated features, so the noisy mean is a DP estimate of the
    # class means (a nearest-centroid classifier, the sufficient statistic of the CSBM's Gaussian classes).
    # η = 1000 makes that step outweigh SGC's random initialisation, which at η = 1 drowns it (val_acc 0.152). C
    # is searched too (free on the public graph): C at or below the smallest update norm (1.61) normalises
    # every client's update, so no client's label counts less than another's
    Candidate(model="sgc", rounds=1, local_epochs=1, optimizer="sgd", lr=0.1, dropout=0.0, server_lr=1000.0),
    Candidate(model="sgc", rounds=1, local_epochs=1, optimizer="sgd", lr=0.1, dropout=0.0, server_lr=1000.0, clip=1.0),
    Candidate(model="sgc", rounds=1, local_epochs=1, optimizer="sgd", lr=0.1, dropout=0.0, server_lr=1000.0, clip=0.5),
    Candidate(model="sgc", rounds=1, local_epochs=1, optimizer="sgd", lr=0.1, dropout=0.0, server_lr=1000.0, clip=2.0),
    Candidate(model="sgc", rounds=1, local_epochs=1, optimizer="sgd", lr=0.1, dropout=0.0, server_lr=100.0, clip=1.0),
    Candidate(model="sgc", rounds=5, local_epochs=1, optimizer="sgd", lr=0.1, dropout=0.0, server_lr=100.0, clip=1.0),
)


def search(dataset: str, candidates: list[Candidate], epsilon: float = 8.0) -> None:
    """Per candidate: C by the median rule (round-0 norms on the public graph) unless it names one, σ calibrated to ε over its T
    rounds (opacus RDP, δ = 1e-5, q = 1, as the sweep's target_epsilon), one run at seed 0: a table row with
    its validation accuracy (the selection metric; test accuracy is never printed)."""
    graph = public_graph(SETTINGS[dataset][0])
    print(f"{dataset} stand-in, graph seed {PUBLIC_GRAPH_SEED} (public), {SETTINGS[dataset][2]} clients, ε = {epsilon:g}, "
          "seed 0\n\n| setting | median norm | C | σ | val_acc | seconds |\n|---|---|---|---|---|---|", flush=True)
    for c in candidates:
        t0 = time.time()
        n, _ = update_norms(dataset, graph, (c.optimizer, c.lr), c.hidden, c.local_epochs, c.dropout, c.model)
        clip = round_up(float(n.median())) if c.clip is None else c.clip
        sigma = noise_multiplier_for(epsilon, 1e-5, 1.0, c.rounds, "rdp")
        cfg = config(dataset, c.rounds, f"gaussian:sigma={sigma!r},clip={clip:g},on=update,mode=central,seed=0", "none",
                     (c.optimizer, c.lr), c.hidden, c.local_epochs, c.model, server_lr=c.server_lr, server_momentum=0.0)
        cfg.dropout = c.dropout
        record, _ = run(cfg, data=graph)
        print(f"| {c} | {float(n.median()):.3f} | {clip:g} | {sigma:.4f} | {record['metrics']['val_acc']:.4f} | "
              f"{time.time() - t0:.0f} |", flush=True)


def step(dataset: str, clip: float, hidden: int = 16, steps: tuple[dict, ...] = STEPS) -> None:
    graph = public_graph(SETTINGS[dataset][0])
    for params in steps:
        t0 = time.time()
        record, _ = run(config(dataset, 20, f"gaussian:sigma={SIGMA_EPS8},clip={clip},on=update,mode=central,seed=0",
                               "none", hidden=hidden, **params), data=graph)
        s = record["metrics"]
        print(f"{dataset} (graph seed {PUBLIC_GRAPH_SEED}), hidden {hidden}, ε = 8, C = {clip:g}, {params}: val_acc "
              f"{s['val_acc']:.4f} (test {s['test_acc']:.4f}, not used) ({time.time() - t0:.0f} s)", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("stage", choices=("norms", "step", "search", "signal"))
    ap.add_argument("--dataset", action="append", choices=list(SETTINGS),
                    help="the evaluated setting (default: sbm-pubmed and sbm-cora)")
    ap.add_argument("--only", help="search: the candidates to run, as 0-based indices into SEARCH (e.g. 0,2)")
    ap.add_argument("--epsilon", type=float, default=8.0, help="search: the ε each candidate's σ is calibrated to "
                    "(default 8; 100000 gives the clipping-only ceiling)")
    ap.add_argument("--clip", type=float, help="step: the clip C from stage norms; signal: the run's C for the noise")
    ap.add_argument("--optimizer", default="adam", choices=("adam", "sgd"), help="norms, signal: the local optimizer (default adam)")
    ap.add_argument("--lr", type=float, default=0.01, help="norms, signal: its learning rate (default 0.01)")
    ap.add_argument("--dropout", type=float, default=0.5, help="norms, signal: the GCN's dropout (default 0.5)")
    ap.add_argument("--hidden", type=int, default=16, help="the GCN's width (default 16, the sweep's; another width "
                    "is a diagnosis after the runs: step then runs the chosen server step only)")
    ap.add_argument("--graph-seed", type=int, default=PUBLIC_GRAPH_SEED,
                    help="norms: the stand-in's graph seed (default 1, the public one; 0 is the evaluated graph: "
                         "for the diagnosis after the runs only, never for choosing)")
    ap.add_argument("--model", default="gcn", choices=("gcn", "sgc"), help="signal: the backbone (default gcn)")
    ap.add_argument("--local-epochs", type=int, default=3, help="signal: local epochs a round (default 3)")
    ap.add_argument("--rounds", type=int, default=20, help="signal: the run's T, for σ at ε = 8 (default 20)")
    ap.add_argument("--at-round", type=int, default=0, help="signal: the round whose updates are read, after that "
                    "many noiseless rounds (default 0)")
    args = ap.parse_args()
    for flag, value, low in (("--at-round", args.at_round, 0), ("--local-epochs", args.local_epochs, 1),
                             ("--rounds", args.rounds, 1)):
        if value < low:
            ap.error(f"{flag} {value}: valid: an integer >= {low}")
    if args.stage == "search":
        try:
            picked = [SEARCH[int(i)] for i in args.only.split(",")] if args.only else list(SEARCH)
        except (ValueError, IndexError):
            ap.error(f"--only {args.only}: valid: comma-separated indices 0-{len(SEARCH) - 1} into SEARCH")
        if not args.epsilon > 0:
            ap.error(f"--epsilon {args.epsilon:g}: valid: a number > 0")
        for dataset in args.dataset or ["sbm-pubmed"]:
            search(dataset, picked, args.epsilon)
        return
    for dataset in args.dataset or ["sbm-pubmed", "sbm-cora"]:
        if args.stage == "norms":
            norms(dataset, args.graph_seed, (args.optimizer, args.lr), args.hidden, args.dropout)
        elif args.stage == "signal":
            signal(dataset, args.graph_seed, args.hidden, args.dropout, args.at_round, args.clip,
                   (args.optimizer, args.lr), args.local_epochs, args.model, args.rounds)
        else:
            step(dataset, args.clip, args.hidden, STEPS if args.hidden == 16 else STEPS[:1])


if __name__ == "__main__":
    main()
