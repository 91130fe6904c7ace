"""Canary nodes for DP auditing (Jagielski et al. 2020; Nasr et al. 2023): out-of-distribution nodes the
auditor inserts into the clients' graphs before training, each a member (in the training mask) by
an independent fair coin, so the membership test needs no held-out nodes and its candidates are the
ones a model memorises most.

A canary is an isolated node (no edges: nothing else in the graph changes) with `words` features
drawn uniformly at random from the whole vocabulary (an unusual combination for a bag-of-words node)
and a label drawn uniformly at random (unrelated to its features). Canaries are in no validation or
test mask, so the run's accuracy is measured on the real nodes only (but the models did train on
the member canaries). The DP unit covers a canary: node-level DP-SGD protects one node and its
edges, client-level DP one client's whole data.

`run_with_canaries(cfg, data, per_client, seed)` is `privfgl.experiment.run` with the canaries
inserted between building the setup and running the method (the auditor's run, not a user's);
`setup.extras["canaries"]` keeps, auditor side only, which nodes are canaries and which are members.
`membership:candidates=canaries` then attacks exactly those nodes.
"""
from __future__ import annotations

import dataclasses
import time

import torch
from torch_geometric.data import Data


def insert_canaries(setup, per_client: int, seed: int = 0, words: int | None = None) -> dict:
    """Append `per_client` canaries to every client of `setup` (in place; the tracker is rebuilt).
    Returns and stores setup.extras["canaries"] = {"nodes": [m, 2] (client, local index), "member": [m]}."""
    from privfgl.evaluation import RoundTracker
    g = torch.Generator().manual_seed(seed)
    x_all = torch.cat([c.x for c in setup.clients])
    f = x_all.shape[1]
    if words is None:  # as many words as a typical node holds
        words = max(1, int(round(float((x_all > 0).sum(1).double().median()))))
    nodes, member = [], []
    next_id = max(int(c.global_id.max()) for c in setup.clients if c.num_nodes) + 1
    for k, c in enumerate(setup.clients):
        n, m = int(c.num_nodes), per_client
        x = torch.zeros(m, f, dtype=c.x.dtype)
        for i in range(m):
            x[i, torch.randperm(f, generator=g)[:words]] = 1.0
        y = torch.randint(setup.num_classes, (m,), generator=g, dtype=c.y.dtype)
        coins = torch.rand(m, generator=g) < 0.5
        fields = {"x": torch.cat([c.x, x]), "y": torch.cat([c.y, y]), "edge_index": c.edge_index,
                  "train_mask": torch.cat([c.train_mask, coins]),
                  "val_mask": torch.cat([c.val_mask, torch.zeros(m, dtype=torch.bool)]),
                  "test_mask": torch.cat([c.test_mask, torch.zeros(m, dtype=torch.bool)]),
                  "global_id": torch.cat([c.global_id, torch.arange(next_id, next_id + m)])}
        next_id += m
        extra = {key: c[key] for key in ("num_classes", "name") if key in c}
        setup.clients[k] = Data(**fields, **extra)
        nodes += [(k, n + i) for i in range(m)]
        member.append(coins)
    t = setup.tracker
    setup.tracker = RoundTracker(setup.clients, setup.num_classes, select=t.select, settings=t.settings,
                                 last_round=t.last_round)
    out = {"nodes": torch.tensor(nodes, dtype=torch.long).view(-1, 2), "member": torch.cat(member),
           "per_client": per_client, "words": words}
    setup.extras["canaries"] = out
    return out


def run_with_canaries(cfg, data, per_client: int, seed: int = 0):
    """privfgl.experiment.run with canaries inserted before the method runs: (record, setup)."""
    from privfgl.experiment import _versions, build_setup, seed_everything
    from privfgl.methods import METHODS
    from privfgl.results import make_record
    start = time.perf_counter()
    setup = build_setup(cfg, data)
    insert_canaries(setup, per_client, seed)
    seed_everything(cfg.seed)
    try:
        METHODS[cfg.method](setup)
    finally:
        setup.federation.protocol.close()
    config = {**dataclasses.asdict(cfg), "split": list(cfg.split), "evaluate": list(cfg.evaluate),
              "dataset_name": setup.extras["dataset_name"], "protocol_params": setup.extras["protocol_params"],
              "versions": _versions(), "canaries": {"per_client": per_client, "seed": seed}}
    return make_record(config, setup, time.perf_counter() - start), setup
