"""FedLoG's evaluation settings (spec A.10, App F): the training clients of a data regime and the
graphs every client's model is tested on, built from the global graph and its partition.

Settings (``EVAL_SETTINGS``): ``seen`` (the clients' own test nodes; alone, the data is what it
would be without this module), ``unseen-node``, ``missing-class``, ``new-client`` (the closed-set
regime) and ``open-set`` (the open regime, not combinable with the closed ones). Which regime a
list of settings asks for: ``regime_of``. A regime reports all its settings whatever subset was
asked for (``REPORTED``): closed seen, unseen-node, missing-class, new-client; open seen,
open-set-unseen-node, open-set-missing-class. Accuracies are micro over clients, new-client's the
unweighted mean over clients (privfgl.evaluation). docs/evaluation-settings.md has the details.

Closed-set regime (any of unseen-node, missing-class, new-client): the global graph is partitioned
into K+1 parts; part K is the new client, never trained on. Each training client k removes its
missing classes before training: its smallest-share classes (node count among its nodes, classes
with >= 1 node, ties -> lower class id), one at a time until the removed nodes number >=
``MIN_MISSING_NODES`` (20), at most ``MAX_MISSING_CLASSES`` (2), never leaving it fewer than
``MIN_KEPT_CLASSES`` (2) classes. The removed nodes and their edges leave its training graph T_k;
the run's splits are then made on the T_k (privfgl.experiment.build_setup). Eval graphs of client k, h = ``HOPS`` (2):

- unseen-node / missing-class (one graph, two test masks): the subgraph of the global graph
  induced on the h-hop neighbourhood of T_k's nodes plus k's removed nodes. unseen-node tests the
  nodes outside T_k whose class is not one of k's missing classes; missing-class the nodes outside
  T_k of k's missing classes (k's removed nodes among them).
- new-client: part K's induced subgraph, every node a test node; the same graph for every client.

Open regime (open-set): round(``CROP_RATE`` · N) (20 %) of the global nodes are cropped at random
(seeded by the run's partition seed) before the rest is partitioned into K+1 parts; missing classes are removed as above. Client k's
eval graph is induced on T_k's nodes plus the cropped nodes within h hops of them along paths
through cropped nodes and T_k's nodes only (other clients' nodes are not added). Its test nodes
are the cropped nodes: open-set-unseen-node those of classes k trains on, open-set-missing-class
those of k's missing classes.

Every eval graph is a Data with x, edge_index (global edges among its nodes), y, test_mask
[n] (the setting's test nodes) and global_id [n].
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.utils import k_hop_subgraph, subgraph, to_undirected

from privfgl.data.partition import client_subgraphs

EVAL_SETTINGS = ("seen", "unseen-node", "missing-class", "new-client", "open-set")
CLOSED_SETTINGS = ("unseen-node", "missing-class", "new-client")
OPEN_SETTINGS = ("open-set",)
# What a regime reports, whichever of its settings were asked for.
REPORTED = {"closed": ("seen", "unseen-node", "missing-class", "new-client"),
            "open": ("seen", "open-set-unseen-node", "open-set-missing-class")}
HOPS = 2
MIN_MISSING_NODES = 20
MAX_MISSING_CLASSES = 2
MIN_KEPT_CLASSES = 2
CROP_RATE = 0.2

Partitioner = Callable[[Data, int], list[Tensor]]  # (graph, number of parts) -> sorted node ids per part


def regime_of(settings: tuple[str, ...] | list[str]) -> str | None:
    """"closed", "open", or None for `seen` alone. Assumes valid names and no closed+open mix."""
    if any(s in CLOSED_SETTINGS for s in settings):
        return "closed"
    if any(s in OPEN_SETTINGS for s in settings):
        return "open"
    return None


@dataclass(frozen=True)
class EvalSetting:
    """One setting: client k's model is tested on graphs[k]'s test_mask nodes. average "micro":
    pooled correct / pooled test nodes over clients; "clients": every client is tested on one
    shared graph (graphs[k] is the same object), the unweighted mean of the clients' accuracies."""
    name: str
    graphs: list[Data]
    average: str = "micro"


@dataclass
class RegimeData:
    """A regime's K training clients (x, y, edge_index, global_id; no split masks yet), its eval
    settings, and per client the missing classes and the number of nodes they removed."""
    regime: str
    clients: list[Data]
    settings: list[EvalSetting]
    missing_classes: list[list[int]]
    removed_nodes: list[int]
    new_client_nodes: int
    cropped_nodes: int

    def metadata(self) -> dict:
        """The run record's `data_regime` block."""
        return {"regime": self.regime, "h": HOPS, "reported": list(REPORTED[self.regime]),
                "missing_classes": self.missing_classes, "removed_nodes": self.removed_nodes,
                "new_client_nodes": self.new_client_nodes, "cropped_nodes": self.cropped_nodes}


def missing_classes(y: Tensor) -> list[int]:
    """The classes a client with labels y [n] removes (module docstring), in the order taken."""
    counts = torch.bincount(y)
    present = [c for c in range(counts.numel()) if int(counts[c])]
    order = sorted(present, key=lambda c: (int(counts[c]), c))
    taken, removed = [], 0
    for c in order:
        if removed >= MIN_MISSING_NODES or len(taken) == MAX_MISSING_CLASSES \
                or len(present) - len(taken) - 1 < MIN_KEPT_CLASSES:
            break
        taken.append(c)
        removed += int(counts[c])
    return taken


def crop_nodes(num_nodes: int, seed: int) -> Tensor:
    """The open regime's cropped nodes: round(CROP_RATE · N) node ids drawn uniformly, sorted int64."""
    g = torch.Generator().manual_seed(int(seed))
    return torch.randperm(num_nodes, generator=g)[:round(CROP_RATE * num_nodes)].sort().values


def build_regime(data: Data, regime: str, partition: Partitioner, num_clients: int, seed: int) -> RegimeData:
    """The regime's training clients and eval settings from the global graph `data` (x, y,
    edge_index). partition(graph, K+1) partitions a graph; seed draws the open regime's crop."""
    if regime not in REPORTED:
        raise ValueError(f"unknown regime {regime!r}; valid: {', '.join(REPORTED)}")
    n = int(data.num_nodes)
    cropped = crop_nodes(n, seed) if regime == "open" else torch.zeros(0, dtype=torch.long)
    parts = _partition_without(data, cropped, partition, num_clients + 1)
    *own, new_client = parts
    missing = [missing_classes(data.y[p]) for p in own]
    trained = [p[~_isin(data.y[p], m)] for p, m in zip(own, missing)]
    clients = client_subgraphs(data, trained)
    undirected = to_undirected(data.edge_index, num_nodes=n)
    if regime == "closed":
        removed = [p[_isin(data.y[p], m)] for p, m in zip(own, missing)]
        expanded = [_induced(data, torch.cat([_neighbourhood(t, undirected, n), r]).unique())
                    for t, r in zip(trained, removed)]
        new = _induced(data, new_client)
        new.test_mask = torch.ones(new.num_nodes, dtype=torch.bool)
        settings = [*_by_class(expanded, trained, missing, "unseen-node", "missing-class"),
                    EvalSetting("new-client", [new] * num_clients, "clients")]
    else:
        expanded = []
        for t in trained:  # paths through client k's training nodes and the cropped nodes only
            through, _ = subgraph(torch.cat([t, cropped]), undirected, num_nodes=n)
            expanded.append(_induced(data, _neighbourhood(t, through, n)))
        settings = _by_class(expanded, trained, missing, "open-set-unseen-node", "open-set-missing-class")
    return RegimeData(regime, clients, settings, missing, [int(p.numel() - t.numel()) for p, t in zip(own, trained)],
                      int(new_client.numel()), int(cropped.numel()))


def _isin(y: Tensor, classes: list[int]) -> Tensor:
    return torch.isin(y, torch.tensor(classes, dtype=y.dtype))


def _partition_without(data: Data, dropped: Tensor, partition: Partitioner, num_parts: int) -> list[Tensor]:
    """partition() of the graph without the nodes `dropped`, as global node ids."""
    if dropped.numel() == 0:
        return partition(data, num_parts)
    keep = torch.ones(int(data.num_nodes), dtype=torch.bool)
    keep[dropped] = False
    kept = keep.nonzero().view(-1)
    edge_index, _ = subgraph(kept, data.edge_index, relabel_nodes=True, num_nodes=int(data.num_nodes))
    name = f"{data['name'] if 'name' in data else 'graph'}-open"
    rest = Data(x=data.x[kept], y=data.y[kept], edge_index=edge_index, name=name)
    return [kept[p] for p in partition(rest, num_parts)]


def _induced(data: Data, nodes: Tensor) -> Data:
    """The global graph's subgraph induced on `nodes` (sorted global ids)."""
    edge_index, _ = subgraph(nodes, data.edge_index, relabel_nodes=True, num_nodes=int(data.num_nodes))
    return Data(x=data.x[nodes], y=data.y[nodes], edge_index=edge_index, global_id=nodes.clone())


def _neighbourhood(seeds: Tensor, edge_index: Tensor, num_nodes: int) -> Tensor:
    """Sorted ids of the nodes within HOPS hops of `seeds` along the undirected `edge_index`,
    the seeds included (closed regime: the global graph; open regime: the graph induced on the
    training and cropped nodes, so paths run through those only)."""
    return k_hop_subgraph(seeds, HOPS, edge_index, num_nodes=num_nodes)[0]


def _by_class(graphs: list[Data], trained: list[Tensor], missing: list[list[int]], unseen_name: str,
              missing_name: str) -> list[EvalSetting]:
    """Two settings on the same graphs (their Data share x and edge_index, only test_mask
    differs): nodes outside client k's training graph whose class k trains on (`unseen_name`), and
    those of k's missing classes (`missing_name`)."""
    unseen_graphs, missing_graphs = [], []
    for g, t, m in zip(graphs, trained, missing):
        outside = ~torch.isin(g.global_id, t)
        of_missing = _isin(g.y, m)
        for out, mask in ((unseen_graphs, outside & ~of_missing), (missing_graphs, outside & of_missing)):
            out.append(Data(x=g.x, edge_index=g.edge_index, y=g.y, global_id=g.global_id, test_mask=mask))
    return [EvalSetting(unseen_name, unseen_graphs), EvalSetting(missing_name, missing_graphs)]
