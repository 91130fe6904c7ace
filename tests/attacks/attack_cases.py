"""Shared cases for the attack tests: a small synthetic bag-of-words graph and a FedAvg config on it."""
from __future__ import annotations

import torch
from torch_geometric.data import Data
from torch_geometric.utils import to_undirected


def bag_of_words_graph(num_nodes: int = 150, num_features: int = 300, num_classes: int = 4, words: int = 10,
                       seed: int = 0) -> Data:
    """Binary sparse features (each node draws `words` words, mostly from its class's vocabulary),
    homophilous edges (3 same-class + 1 random neighbour per node). Deterministic per seed."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(num_classes, (num_nodes,), generator=g)
    vocab = torch.rand(num_classes, num_features, generator=g) ** 4 + 0.01
    x = torch.zeros(num_nodes, num_features)
    for i in range(num_nodes):
        x[i, torch.multinomial(vocab[y[i]], words, generator=g)] = 1.0
    src, dst = [], []
    for i in range(num_nodes):
        same = (y == y[i]).nonzero().view(-1)
        for j in same[torch.randint(len(same), (3,), generator=g)].tolist() + [int(torch.randint(num_nodes, (1,), generator=g))]:
            if j != i:
                src.append(i)
                dst.append(j)
    data = Data(x=x, y=y, edge_index=to_undirected(torch.tensor([src, dst])))
    data.num_classes = num_classes
    data.name = "bow"
    return data


DEFAULT_TRAINING = dict(optimizer="adam", local_epochs=3, dropout=0.5)  # privfgl's defaults


def fedavg_config(**kw):
    from privfgl.experiment import RunConfig
    settings = dict(method="fedavg", dataset="bow", partition="louvain", clients=3, rounds=1, local_epochs=1,
                    optimizer="sgd", dropout=0.0, hidden=32, transcript="all", progress=False)
    settings.update(kw)
    return RunConfig(**settings)


def overfitted_config(**kw):
    """Cora, Louvain, 5 clients, 30 rounds x 3 epochs without weight decay or dropout: the models fit
    their training nodes (members' loss drops) and their posteriors carry the graph."""
    from privfgl.experiment import RunConfig
    settings = dict(method="fedavg", dataset="cora", partition="louvain", clients=5, rounds=30, local_epochs=3,
                    weight_decay=0.0, dropout=0.0, hidden=128, transcript="last", progress=False, download=False)
    settings.update(kw)
    return RunConfig(**settings)


def by_target(setup, cfg, spec: str) -> dict:
    """The findings of one attack spec on a run, by target."""
    from attacks import parse_attack, run_attacks
    return {f.target: f for f in run_attacks(setup, cfg, [parse_attack(spec)])}
