"""The clients' datasets of FedGPL (spec B.1, B.8): node-, edge- and graph-level tasks, all recast
(ProG style) as |C|-way classification of small induced graphs with one label set.

- node task: the ego graph of one node, labelled with that node's label;
- edge task: the neighbourhood of an edge (u, v) with y[u] == y[v], labelled with that label;
- graph task: the neighbourhood of 3-5 same-label seed nodes, labelled with the seeds' label.

A sample's neighbourhood grows hop by hop (node 2..5 hops, edge 1..3, graph 1..5) until it holds
at least ``min_nodes`` nodes; if it stays smaller it is padded with random same-class nodes, and
if it is larger it is cut to ``max_nodes``, keeping the nodes closest in hops. Its edges are all
the graph's edges among the kept nodes. Per task and class, up to ``max_per_class`` samples are
split 1:1:1:1 into train-support / train-query / test-support / test-query, and every split is
divided among the task's clients (IID or label-Dirichlet).

Build time: ``client_datasets(cora)`` (all three tasks, dim=100, max_per_class=400: 2,246 node,
2,653 edge and 2,800 graph samples, about 0.64 GB of tensors) took 5.5-8.4 s on a 2-core CPU that
another job kept busy, 3.7-4.4 s with one BLAS/OpenMP thread (measured, 3 runs each).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F
from sklearn.decomposition import TruncatedSVD
from torch_geometric.data import Data
from torch_geometric.utils import remove_self_loops, subgraph, to_undirected

TASKS = ("node", "edge", "graph")

# task -> (hops to start from, most hops to expand to) (spec B.8)
_HOPS = {"node": (2, 5), "edge": (1, 3), "graph": (1, 5)}
_GRAPH_SEEDS = (3, 5)  # seed nodes per graph-task sample, both ends included
_DIRICHLET_DRAWS = 1000  # label-Dirichlet redraws until every client holds a sample of every split


def reduce_features(x: torch.Tensor, dim: int = 100, seed: int = 0) -> torch.Tensor:
    """x [n, f] -> [n, dim] float32: the truncated-SVD projection (sklearn TruncatedSVD,
    random_state=seed) when f > dim, else x itself; zero-padded to dim columns when fewer remain
    (f < dim, or n < dim). Deterministic per seed."""
    if dim < 1:
        raise ValueError(f"dim={dim!r}: must be an integer >= 1")
    x = x.detach().cpu().to(torch.float32)
    if x.size(1) > dim:
        z = TruncatedSVD(n_components=dim, random_state=seed).fit_transform(x.numpy())
        x = torch.from_numpy(np.ascontiguousarray(z, dtype=np.float32))
    return F.pad(x, (0, dim - x.size(1)))


def build_task_samples(data: Data, task: str, max_per_class: int = 400, seed: int = 0,
                       min_nodes: int = 100, max_nodes: int = 300) -> list[Data]:
    """Induced graphs for one task over the whole graph ``data`` (x already reduced to [N, d]).

    Each sample is a Data with x [n_i, d] float32, edge_index [2, e_i] int64 (local ids, both
    directions, no self loops), y int64 [1] (the label) and center int64 [k] (the global ids of
    its seed nodes: k = 1 node, 2 edge, 3-5 graph (at most the class size); they are its local
    nodes 0..k-1) and node_ids int64 [n_i] (the global id of each local node; the attacks' ground
    truth, never sent).
    n_i lies in [min_nodes, max_nodes] unless the seeds' neighbourhood plus their class is smaller.
    Per class up to ``max_per_class`` samples, ordered by class: node and edge tasks draw distinct
    nodes / same-label edges (so fewer when the class has fewer); the graph task always draws
    ``max_per_class`` seed groups, using every node of the class once before reusing any.
    Deterministic per seed.
    """
    if task not in TASKS:
        raise ValueError(f"task={task!r}: must be one of {', '.join(TASKS)}")
    if max_per_class < 1:
        raise ValueError(f"max_per_class={max_per_class!r}: must be an integer >= 1")
    if not (1 <= min_nodes <= max_nodes and max_nodes >= _GRAPH_SEEDS[1]):
        raise ValueError(f"min_nodes={min_nodes!r}, max_nodes={max_nodes!r}: need "
                         f"1 <= min_nodes <= max_nodes and max_nodes >= {_GRAPH_SEEDS[1]}")
    rng = np.random.default_rng([seed, TASKS.index(task)])
    graph = _Neighbourhoods(data)
    start_hops, max_hops = _HOPS[task]
    samples = []
    for label in range(graph.num_classes):
        for seeds in _seed_sets(graph, task, label, max_per_class, rng):
            layers = graph.hop_layers(seeds, start_hops, max_hops, min_nodes)
            nodes = _closest(layers, max_nodes, rng)
            if nodes.size < min_nodes:
                nodes = np.concatenate([nodes, graph.padding(nodes, label, min_nodes - nodes.size, rng)])
            samples.append(graph.induced(nodes, seeds, label))
    return samples


def split_samples(labels: torch.Tensor, seed: int = 0) -> torch.Tensor:
    """labels int64 [S] -> split int64 [S]. Per class, the samples are shuffled and cut 1:1:1:1
    (first parts one larger when it does not divide) into train-support / train-query /
    test-support / test-query (spec B.8), coded 0 = train (train-support), 1 = val (train-query,
    for model selection), 2 = test (test-support + test-query). Deterministic per seed."""
    y = labels.cpu().numpy()
    rng = np.random.default_rng(seed)
    split = np.empty(len(y), dtype=np.int64)
    for label in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == label))
        for part, chunk in zip((0, 1, 2, 2), np.array_split(idx, 4)):
            split[chunk] = part
    return torch.from_numpy(split)


@dataclass
class ClientSamples:
    """One FedGPL client's private dataset: S induced graphs of one task, their labels and splits."""

    task: str
    graphs: list[Data]
    y: torch.Tensor  # int64 [S]
    split: torch.Tensor  # int64 [S] in {0 train, 1 val, 2 test}


def client_datasets(data: Data, num_clients: int = 9, dim: int = 100, max_per_class: int = 400,
                    dirichlet_alpha: float | None = None, seed: int = 0) -> list[ClientSamples]:
    """The ``num_clients`` FedGPL clients' datasets from one graph (x [N, f], y [N], edge_index).

    num_clients must be a positive multiple of 3: clients 0..K/3-1 get the node task, the next
    K/3 the edge task, the last K/3 the graph task. Features are reduced once to ``dim``
    (reduce_features). Per task, the samples (build_task_samples) are split (split_samples) and
    every split is divided among the task's clients: in equal shares of a seeded shuffle
    (dirichlet_alpha None, the spec default), or label-Dirichlet (spec §5.3.2): each class is
    divided by proportions ~ Dir(alpha) over the task's clients, one draw per class used for all
    three splits, redrawn until every client holds at least one sample of every split.
    A client's samples keep the task's order (by class). Deterministic per seed.
    """
    if isinstance(num_clients, bool) or not isinstance(num_clients, int) or num_clients < 3 \
            or num_clients % len(TASKS):
        raise ValueError(f"num_clients={num_clients!r}: must be a positive multiple of 3 "
                         f"(a third of the clients per task: {', '.join(TASKS)}), e.g. 3, 6, 9")
    if dirichlet_alpha is not None and not dirichlet_alpha > 0:
        raise ValueError(f"dirichlet_alpha={dirichlet_alpha!r}: must be > 0, or None for IID")
    reduced = Data(x=reduce_features(data.x, dim, seed), edge_index=data.edge_index, y=data.y)
    per_task = num_clients // len(TASKS)
    clients = []
    for t, task in enumerate(TASKS):
        graphs = build_task_samples(reduced, task, max_per_class, seed)
        y = torch.tensor([int(g.y) for g in graphs], dtype=torch.long)
        split = split_samples(y, seed)
        rng = np.random.default_rng([seed, t, 1])  # a stream apart from build_task_samples'
        if dirichlet_alpha is None:
            shares = _iid_shares(split.numpy(), per_task, rng)
        else:
            shares = _dirichlet_shares(y.numpy(), split.numpy(), per_task, dirichlet_alpha, rng)
        for idx in shares:
            clients.append(ClientSamples(task=task, graphs=[graphs[i] for i in idx],
                                         y=y[torch.from_numpy(idx)], split=split[torch.from_numpy(idx)]))
    return clients


# --------------------------------------------------------------------------- sampling


class _Neighbourhoods:
    """One graph prepared for fast hop-by-hop expansion: a CSR adjacency (undirected, no self
    loops), the labels and the nodes of each class."""

    def __init__(self, data: Data):
        self.num_nodes = int(data.num_nodes)
        self.x = data.x.detach().cpu().to(torch.float32).numpy()
        edge_index, _ = remove_self_loops(data.edge_index)
        self.edge_index = to_undirected(edge_index, num_nodes=self.num_nodes)
        row, col = self.edge_index.numpy()
        self.adj = sp.csr_matrix((np.ones(row.size, dtype=np.int8), (row, col)),
                                 shape=(self.num_nodes, self.num_nodes))
        self.y = data.y.cpu().numpy()
        self.num_classes = int(self.y.max()) + 1
        self.class_nodes = [np.flatnonzero(self.y == c) for c in range(self.num_classes)]

    def same_label_edges(self, label: int) -> np.ndarray:
        """[m, 2] int64: the undirected edges (u < v) with y[u] == y[v] == label."""
        row, col = self.edge_index.numpy()
        keep = (row < col) & (self.y[row] == label) & (self.y[col] == label)
        return np.stack([row[keep], col[keep]], axis=1)

    def hop_layers(self, seeds: np.ndarray, start_hops: int, max_hops: int,
                   min_nodes: int) -> list[np.ndarray]:
        """[seeds, nodes at 1 hop, at 2 hops, ...]: all layers up to start_hops, then one more
        layer at a time while fewer than min_nodes are reached, up to max_hops."""
        reached = np.zeros(self.num_nodes, dtype=bool)
        reached[seeds] = True
        layers = [seeds]
        count = seeds.size
        for hop in range(1, max_hops + 1):
            if hop > start_hops and count >= min_nodes:
                break
            neighbours = self.adj[layers[-1]].indices
            layer = np.unique(neighbours[~reached[neighbours]])
            if layer.size == 0:
                break
            reached[layer] = True
            layers.append(layer)
            count += layer.size
        return layers

    def padding(self, nodes: np.ndarray, label: int, count: int, rng: np.random.Generator) -> np.ndarray:
        """Up to ``count`` random nodes of class ``label`` not in ``nodes``."""
        candidates = self.class_nodes[label]
        candidates = candidates[~np.isin(candidates, nodes)]
        return rng.choice(candidates, min(count, candidates.size), replace=False)

    def induced(self, nodes: np.ndarray, seeds: np.ndarray, label: int) -> Data:
        """The sample on ``nodes`` (global ids, in local order) with all the edges among them.

        Only the kept nodes' own edges go to subgraph, and x is gathered in numpy: whole-graph
        torch ops per sample are slow on a busy 2-core CPU (intra-op threads contend)."""
        rows = self.adj[nodes]
        incident = np.stack([np.repeat(nodes, np.diff(rows.indptr)), rows.indices]).astype(np.int64)
        edge_index, _ = subgraph(torch.from_numpy(nodes.astype(np.int64)), torch.from_numpy(incident),
                                 relabel_nodes=True, num_nodes=self.num_nodes)
        return Data(x=torch.from_numpy(self.x[nodes]), edge_index=edge_index,
                    y=torch.tensor([label], dtype=torch.long),
                    center=torch.from_numpy(seeds.astype(np.int64)),
                    node_ids=torch.from_numpy(nodes.astype(np.int64)))


def _seed_sets(graph: _Neighbourhoods, task: str, label: int, max_per_class: int,
               rng: np.random.Generator) -> list[np.ndarray]:
    """The seed nodes (int64 arrays) of the task's samples of class ``label``."""
    if task == "node":
        nodes = graph.class_nodes[label]
        return [np.array([v]) for v in rng.choice(nodes, min(max_per_class, nodes.size), replace=False)]
    if task == "edge":
        edges = graph.same_label_edges(label)
        return list(edges[rng.choice(len(edges), min(max_per_class, len(edges)), replace=False)])
    nodes = graph.class_nodes[label]
    groups: list[np.ndarray] = []
    pool = np.empty(0, dtype=np.int64)
    while nodes.size and len(groups) < max_per_class:
        k = min(int(rng.integers(_GRAPH_SEEDS[0], _GRAPH_SEEDS[1] + 1)), nodes.size)
        if pool.size < k:
            pool = rng.permutation(nodes)
        groups.append(pool[:k])
        pool = pool[k:]
    return groups


def _closest(layers: list[np.ndarray], max_nodes: int, rng: np.random.Generator) -> np.ndarray:
    """At most max_nodes nodes of ``layers``, nearest layers first; the layer that does not fit
    whole gives a random subset."""
    kept = []
    room = max_nodes
    for layer in layers:
        if layer.size > room:
            layer = rng.choice(layer, room, replace=False)
        kept.append(layer)
        room -= layer.size
        if room == 0:
            break
    return np.concatenate(kept)


# --------------------------------------------------------------------------- clients


def _iid_shares(split: np.ndarray, num_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Sorted sample indices per client: every split shuffled and cut into equal parts."""
    shares: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for part in range(3):
        idx = rng.permutation(np.flatnonzero(split == part))
        for k, chunk in enumerate(np.array_split(idx, num_clients)):
            shares[k].append(chunk)
    return [np.sort(np.concatenate(s)) for s in shares]


def _dirichlet_shares(y: np.ndarray, split: np.ndarray, num_clients: int, alpha: float,
                      rng: np.random.Generator) -> list[np.ndarray]:
    """Sorted sample indices per client: every class of every split cut by proportions
    ~ Dir(alpha) (one draw per class); redrawn until no client lacks a split."""
    present = set(np.unique(split))
    for _ in range(_DIRICHLET_DRAWS):
        shares: list[list[np.ndarray]] = [[np.empty(0, dtype=np.int64)] for _ in range(num_clients)]
        for label in np.unique(y):
            cumulative = np.cumsum(rng.dirichlet(np.full(num_clients, alpha)))[:-1]
            for part in range(3):
                idx = rng.permutation(np.flatnonzero((y == label) & (split == part)))
                for k, chunk in enumerate(np.split(idx, (cumulative * idx.size).astype(np.int64))):
                    shares[k].append(chunk)
        result = [np.sort(np.concatenate(s)) for s in shares]
        if all(set(split[idx]) == present for idx in result):
            return result
    raise ValueError(f"label-Dirichlet(alpha={alpha}): no draw in {_DIRICHLET_DRAWS} gave each of "
                     f"{num_clients} clients a sample of every split; raise alpha or max_per_class")
