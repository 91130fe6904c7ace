"""GraphCL pretraining of the FedGPL server trunk (spec B.2, B.10 item 12), after You et al., "Graph
Contrastive Learning with Augmentations" (NeurIPS 2020) and its use in ProG / the FedGPL code.

Recipe. Each epoch shuffles the graphs into minibatches. For every graph of a minibatch, each of its two
views draws one augmentation uniformly from `config.augmentations`:

* "drop_node": drop exactly int(n * aug_ratio) nodes, chosen uniformly, with their edges (relabelled).
* "drop_edge": drop each undirected edge (both directions together) with probability aug_ratio
  (edge removal only; GraphCL's perturbation also adds random edges, ProG's only removes them).
  Assumes edge_index lists both directions of each edge, as the trunk does.
* "mask_attr": replace the feature rows of exactly int(n * aug_ratio) nodes, chosen uniformly, by the
  graph's mean feature row (ProG's node masking; GraphCL uses Gaussian noise or a mask token).
* "subgraph": keep n - int(n * aug_ratio) nodes grown from a random start node by random breadth-first
  expansion (each step adds a random part of the frontier); stops early if the component is smaller.

Both views go through the trunk (mean-pooled) and a projection head Linear-ReLU-Linear (hidden ->
hidden -> hidden); the loss is GraphCL's NT-Xent (see `nt_xent`). Adam, no weight decay. A minibatch
of a single graph has no negatives and is skipped. All randomness comes from torch's global generator,
seeded inside `torch.random.fork_rng`, so a run is deterministic per seed on CPU and leaves the
caller's generator state untouched."""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.data import Batch, Data
from torch_geometric.utils import dropout_edge, subgraph
from tqdm.auto import tqdm

from privfgl.methods.fedgpl.trunk import Trunk

AUGMENTATIONS = ("drop_node", "drop_edge", "mask_attr", "subgraph")


@dataclass(frozen=True)
class PretrainConfig:
    """GraphCL settings. aug_ratio is the fraction of nodes / edges / feature rows an augmentation
    touches; hidden and dropout are the Trunk's."""
    epochs: int = 50
    max_graphs: int = 512    # a seeded random subset of the pool (GraphCL on all ~3,900 Cora graphs: ~17 s/epoch)
    batch_size: int = 64
    lr: float = 1e-3
    temperature: float = 0.2
    aug_ratio: float = 0.2
    augmentations: tuple[str, ...] = ("drop_node", "drop_edge", "mask_attr")
    hidden: int = 100
    dropout: float = 0.5


def nt_xent(z1: torch.Tensor, z2: torch.Tensor, temperature: float) -> torch.Tensor:
    """GraphCL's NT-Xent (its Eq. 3 and code): z1, z2 [B, d] (B >= 2), row i of both from graph i.
    With s = cosine similarity / temperature, the loss is the mean over i of
    -log(exp(s(z1_i, z2_i)) / sum_{j != i} exp(s(z1_i, z2_j))): cross-view negatives only, the positive
    left out of the denominator (so the value can be negative). Returns a scalar."""
    sim = F.normalize(z1, dim=1) @ F.normalize(z2, dim=1).t() / temperature
    positive = sim.diagonal()
    negatives = sim.masked_fill(torch.eye(sim.size(0), dtype=torch.bool, device=sim.device), float("-inf"))
    return (torch.logsumexp(negatives, dim=1) - positive).mean()


def augment(graph: Data, name: str, ratio: float) -> Data:
    """One GraphCL view of `graph` (x [n, d], edge_index [2, e]) under augmentation `name` (see the
    module docstring); returns a new Data with only x and edge_index. Uses torch's global generator."""
    x, edge_index = graph.x, graph.edge_index
    n = x.size(0)
    if name == "drop_node":
        keep = torch.randperm(n)[: n - int(n * ratio)].sort().values
        return _induced(x, edge_index, keep)
    if name == "drop_edge":
        kept, _ = dropout_edge(edge_index, p=ratio, force_undirected=True)
        return Data(x=x, edge_index=kept)
    if name == "mask_attr":
        masked = x.clone()
        masked[torch.randperm(n)[: int(n * ratio)]] = x.mean(dim=0)
        return Data(x=masked, edge_index=edge_index)
    if name == "subgraph":
        return _induced(x, edge_index, _grown_subset(edge_index, n, n - int(n * ratio)))
    raise ValueError(f"unknown augmentation {name!r}; expected one of {AUGMENTATIONS}")


def _induced(x: torch.Tensor, edge_index: torch.Tensor, keep: torch.Tensor) -> Data:
    """The subgraph induced by the sorted node ids `keep`, relabelled 0..len(keep)-1."""
    kept, _ = subgraph(keep, edge_index, relabel_nodes=True, num_nodes=x.size(0))
    return Data(x=x[keep], edge_index=kept)


def _grown_subset(edge_index: torch.Tensor, n: int, size: int) -> torch.Tensor:
    """Sorted ids of up to `size` nodes grown from a random node by adding random frontier nodes."""
    inside = torch.zeros(n, dtype=torch.bool)
    inside[torch.randint(n, (1,))] = True
    while int(inside.sum()) < size:
        frontier = torch.zeros(n, dtype=torch.bool)
        frontier[edge_index[1, inside[edge_index[0]]]] = True
        candidates = (frontier & ~inside).nonzero().view(-1)
        if candidates.numel() == 0:
            break
        need = size - int(inside.sum())
        inside[candidates[torch.randperm(candidates.numel())[:need]]] = True
    return inside.nonzero().view(-1)


def pretrain_graphcl(graphs: list[Data], in_dim: int, config: PretrainConfig = PretrainConfig(), seed: int = 0,
                     progress: bool = False) -> tuple[dict[str, torch.Tensor], list[float]]:
    """Train a Trunk with GraphCL on `graphs` (at most config.max_graphs of them, a seeded subset; each Data with x [n_i, in_dim], edge_index); returns the
    trunk's state_dict and the mean loss per epoch. Deterministic per seed on CPU. Progress bar (tqdm,
    already a dependency) when progress=True."""
    unknown = set(config.augmentations) - set(AUGMENTATIONS)
    if unknown or not config.augmentations:
        raise ValueError(f"augmentations must be a non-empty subset of {AUGMENTATIONS}, got {config.augmentations}")
    if len(graphs) < 2:
        raise ValueError(f"GraphCL needs at least 2 graphs (negatives), got {len(graphs)}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if len(graphs) > config.max_graphs:
            graphs = [graphs[i] for i in torch.randperm(len(graphs))[:config.max_graphs].sort().values.tolist()]
        trunk = Trunk(in_dim, config.hidden, config.dropout)
        head = nn.Sequential(nn.Linear(config.hidden, config.hidden), nn.ReLU(),
                             nn.Linear(config.hidden, config.hidden))
        optimizer = torch.optim.Adam([*trunk.parameters(), *head.parameters()], lr=config.lr)
        trunk.train()
        head.train()
        losses = []
        bar = tqdm(range(config.epochs), desc="GraphCL", unit="epoch", disable=not progress, leave=False)
        for _ in bar:
            batch_losses = []
            order = torch.randperm(len(graphs)).tolist()
            for start in range(0, len(order), config.batch_size):
                members = [graphs[i] for i in order[start:start + config.batch_size]]
                if len(members) < 2:
                    continue
                z1 = head(_encode(trunk, _views(members, config)))
                z2 = head(_encode(trunk, _views(members, config)))
                loss = nt_xent(z1, z2, config.temperature)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                batch_losses.append(loss.item())
            losses.append(sum(batch_losses) / len(batch_losses))
            bar.set_postfix(loss=f"{losses[-1]:.4f}")
    return {k: v.detach().clone() for k, v in trunk.state_dict().items()}, losses


def _views(members: list[Data], config: PretrainConfig) -> Batch:
    """One augmented view of each graph, the augmentation drawn per graph, batched."""
    choice = torch.randint(len(config.augmentations), (len(members),)).tolist()
    return Batch.from_data_list([augment(g, config.augmentations[c], config.aug_ratio)
                                 for g, c in zip(members, choice)])


def _encode(trunk: Trunk, batch: Batch) -> torch.Tensor:
    return trunk(batch.x, batch.edge_index, batch.batch, batch.num_graphs)


def default_cache_dir() -> Path:
    """$PRIVFGL_CACHE/fedgpl, else ~/.cache/privfgl/fedgpl ($XDG_CACHE_HOME respected)."""
    base = os.environ.get("PRIVFGL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "privfgl")
    return Path(base) / "fedgpl"


def cache_path(key: str, in_dim: int, config: PretrainConfig, seed: int, cache_dir: Path | None = None) -> Path:
    """cache_dir / f"{key}-seed{seed}-{12 hex digits of sha256(config, in_dim)}.pt". The graphs
    themselves are not hashed: `key` must name the data."""
    blob = json.dumps({"config": asdict(config), "in_dim": in_dim}, sort_keys=True).encode()
    digest = hashlib.sha256(blob).hexdigest()[:12]
    return (cache_dir or default_cache_dir()) / f"{key}-seed{seed}-{digest}.pt"


def pretrained_trunk(graphs: list[Data], in_dim: int, key: str, config: PretrainConfig = PretrainConfig(),
                     seed: int = 0, cache_dir: Path | None = None, progress: bool = False) -> tuple[Trunk, dict]:
    """A Trunk with GraphCL weights, cached on disk: cache_dir (default $PRIVFGL_CACHE/fedgpl, else
    ~/.cache/privfgl/fedgpl) / f"{key}-seed{seed}-{hash of config and in_dim}.pt". `key` names the data
    (e.g. "cora-svd100"). A cache hit loads without training. Returns (trunk, info) with info =
    {"cache": "hit" | "miss", "path": str, "losses": [...], "seconds": float, "config": asdict(config)}.
    "seconds" is the wall time the pretraining took (stored in the file, so a hit reports it too).
    Writes the file atomically (temp file + os.replace)."""
    path = cache_path(key, in_dim, config, seed, cache_dir)
    if path.exists():
        saved = torch.load(path, weights_only=True)
        status = "hit"
    else:
        started = time.perf_counter()
        state, losses = pretrain_graphcl(graphs, in_dim, config, seed, progress)
        saved = {"state_dict": state, "losses": losses, "seconds": time.perf_counter() - started,
                 "config": asdict(config), "in_dim": in_dim}
        _atomic_save(saved, path)
        status = "miss"
    trunk = Trunk(in_dim, config.hidden, config.dropout)
    trunk.load_state_dict(saved["state_dict"])
    info = {"cache": status, "path": str(path), "losses": list(saved["losses"]), "seconds": float(saved["seconds"]),
            "config": asdict(config)}
    return trunk, info


def _atomic_save(obj: dict, path: Path) -> None:
    """torch.save to a temp file in path's folder, then os.replace onto path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
