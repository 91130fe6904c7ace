"""Canary nodes for DP auditing (Jagielski et al. 2020; Nasr et al. 2023): out-of-distribution nodes the
auditor inserts into the clients' graphs before training, each a member (in the training mask) by
an independent fair coin, so the membership test needs no held-out nodes and its candidates are the
ones a model memorises most. A run option: `privfgl run|audit --canaries N [--canary-seed S]`, the
RunConfig keys `canaries` / `canary_seed` (a --config file, a sweep cell); privfgl.experiment.build_setup
inserts them after the splits and before the method runs. There is no other way in.

A canary is an isolated node (no edges: nothing else in the graph changes) with `words` features
drawn uniformly at random from the whole vocabulary (an unusual combination for a bag-of-words node)
and a label drawn uniformly at random (unrelated to its features). Canaries are in no validation or
test mask, so the run's accuracy is measured on the real nodes only (but the models did train on
the member canaries, and they count among a client's training labels). The DP unit covers a canary:
node-level DP-SGD protects one node and its edges, client-level DP one client's whole data.

`setup.extras["canaries"]` keeps, auditor side only, which nodes are canaries and which are members;
the run record's `canaries` block says how many were inserted, never which trained.
`membership:candidates=canaries` then attacks exactly those nodes.
"""
from __future__ import annotations

import torch
from torch_geometric.data import Data

EVALUATION_NOTE = "in no validation or test mask: accuracy is on the real nodes only"


def insert_canaries(clients: list[Data], num_classes: int, per_client: int, seed: int = 0,
                    words: int | None = None) -> tuple[list[Data], dict]:
    """`clients` with `per_client` canaries appended to each (new Data objects, split masks extended),
    and the auditor's record of them: {"nodes": [m, 2] (client, local index), "member": [m] bool,
    "per_client", "words", "seed"}. Deterministic per seed; touches no global RNG."""
    g = torch.Generator().manual_seed(seed)
    x_all = torch.cat([c.x for c in clients])
    f = x_all.shape[1]
    if words is None:  # as many words as a typical node holds
        words = max(1, int(round(float((x_all > 0).sum(1).double().median()))))
    nodes, member, out = [], [], []
    next_id = max(int(c.global_id.max()) for c in clients if c.num_nodes) + 1
    for k, c in enumerate(clients):
        n, m = int(c.num_nodes), per_client
        x = torch.zeros(m, f, dtype=c.x.dtype)
        for i in range(m):
            x[i, torch.randperm(f, generator=g)[:words]] = 1.0
        y = torch.randint(num_classes, (m,), generator=g, dtype=c.y.dtype)
        coins = torch.rand(m, generator=g) < 0.5
        fields = {"x": torch.cat([c.x, x]), "y": torch.cat([c.y, y]), "edge_index": c.edge_index,
                  "train_mask": torch.cat([c.train_mask, coins]),
                  "val_mask": torch.cat([c.val_mask, torch.zeros(m, dtype=torch.bool)]),
                  "test_mask": torch.cat([c.test_mask, torch.zeros(m, dtype=torch.bool)]),
                  "global_id": torch.cat([c.global_id, torch.arange(next_id, next_id + m)])}
        next_id += m
        extra = {key: c[key] for key in c.keys() if key not in fields}
        node_level = [key for key, v in extra.items() if torch.is_tensor(v) and v.dim() and v.shape[0] == n]
        if node_level:  # a per-node attribute this function does not know how to extend
            raise ValueError(f"canaries: client {k} has per-node attribute(s) {', '.join(node_level)}")
        out.append(Data(**fields, **extra))
        nodes += [(k, n + i) for i in range(m)]
        member.append(coins)
    info = {"nodes": torch.tensor(nodes, dtype=torch.long).view(-1, 2), "member": torch.cat(member),
            "per_client": per_client, "words": words, "seed": seed}
    return out, info


def record_block(info: dict) -> dict:
    """What the run record says about the canaries: how many, how drawn, and that no accuracy counts
    them; never which of them trained (that stays in setup.extras, auditor side)."""
    return {"per_client": info["per_client"], "inserted": int(info["nodes"].shape[0]), "seed": info["seed"],
            "words": info["words"], "evaluation": EVALUATION_NOTE}
