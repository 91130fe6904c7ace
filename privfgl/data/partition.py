"""Split one graph's nodes among federated clients, and cut the per-client subgraphs.

Methods (``PARTITIONS``), all deterministic per seed:

- ``louvain``: Louvain communities packed greedily into K balanced clients (FedSage+/OpenFGL).
- ``metis``: METIS K-way min-cut parts (a part METIS leaves empty, as it can when K nears N, gets
  the last node of the largest part).
- ``louvain+`` / ``metis+``: label-imbalance split (O-pFGL spec §3.2): 100 Louvain groups or
  METIS parts, then KMeans (k = K) over the groups' label histograms; one cluster per client.
- ``dirichlet``: label skew, per-class client proportions ~ Dir(alpha).
- ``file:PATH``: a partition given from outside, read and checked by privfgl.data.partition_file
  (never cached: the file is the partition; seed and parameters do not apply).

Parts are cached on disk as plain node-id text files, one per client, so that every method
sees the identical split. networkx, pymetis and scikit-learn are imported by the partition that
uses them, so a run that reads a cached partition never loads them.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.utils import remove_self_loops, subgraph, to_undirected

from privfgl.data.errors import DataError
from privfgl.data.partition_file import is_file_partition, read_partition

PARTITIONS = ("louvain", "metis", "louvain+", "metis+", "dirichlet", "planted")

# method -> its parameters and their defaults (min_size=None means min(10, N // K)).
PARTITION_PARAMS: dict[str, dict] = {
    "louvain": {"resolution": 1.0, "delta": 20},
    "metis": {},
    "louvain+": {"resolution": 1.0, "delta": 20, "num_groups": 100},
    "metis+": {"num_groups": 100},
    "dirichlet": {"alpha": 0.5, "min_size": None},
    "planted": {},
}

_CACHE_FORMAT = 1  # bump when an algorithm changes, so old cache entries are not reused


def partition_nodes(
    data: Data,
    method: str,
    num_clients: int,
    seed: int = 0,
    cache_dir: str | os.PathLike | None = None,
    **params,
) -> list[Tensor]:
    """Partition ``data``'s nodes into ``num_clients`` disjoint, non-empty, covering parts.

    Returns one sorted int64 tensor of global node ids per client. With ``cache_dir``, parts are
    read from / written to ``<cache_dir>/<dataset>-<method>-<K>-<seed>-<hash>/client_<k>.txt``
    (one node id per line; the hash covers the parameters and the graph itself).
    Raises DataError for an unknown method, a bad client count or bad parameters. ``file:PATH``
    returns the file's clients (privfgl.data.partition_file.read_partition); nodes in no client are
    in no part.
    """
    if is_file_partition(method):
        if params:
            raise DataError(f"partition {method!r} takes no parameters (got {', '.join(sorted(params))}); the "
                            "file is the whole partition")
        return read_partition(method, int(data.num_nodes), num_clients)[0]
    key = str(method).strip().lower()
    if key not in PARTITIONS:
        raise DataError(f"unknown partition method {method!r}; valid methods: {', '.join(PARTITIONS)}, "
                        "file:PATH")
    num_nodes = int(data.num_nodes)
    if isinstance(num_clients, bool) or not isinstance(num_clients, (int, np.integer)) \
            or not 1 <= num_clients <= num_nodes:
        raise DataError(f"num_clients={num_clients!r}: must be an integer in [1, {num_nodes}] "
                        f"(the number of nodes of {_dataset_name(data)!r})")
    num_clients = int(num_clients)
    if not _is_int(seed, lo=0):
        raise DataError(f"seed={seed!r}: must be an integer >= 0")
    params = _resolve_params(key, params, num_nodes, num_clients)

    folder = None
    if cache_dir is not None:
        tag = _cache_tag(data, key, params)
        folder = Path(cache_dir) / f"{_dataset_name(data)}-{key}-{num_clients}-{seed}-{tag}"
        cached = _read_parts(folder, num_nodes, num_clients)
        if cached is not None:
            return cached

    if key == "planted":
        parts = _planted(data, num_clients)
    elif num_clients == 1:
        parts = [np.arange(num_nodes)]
    elif key == "louvain":
        parts = _pack(_louvain(data, seed, params["resolution"]), num_clients, num_nodes, params["delta"])
    elif key == "metis":
        parts = _metis(data, num_clients, seed)
    elif key == "louvain+":
        groups = _pack(_louvain(data, seed, params["resolution"]), params["num_groups"], num_nodes,
                       params["delta"])
        parts = _label_clusters(groups, _labels(data), num_clients, seed)
    elif key == "metis+":
        parts = _label_clusters(_metis(data, params["num_groups"], seed), _labels(data), num_clients, seed)
    else:
        parts = _dirichlet(_labels(data), num_clients, seed, params["alpha"], params["min_size"])

    result = [torch.from_numpy(np.sort(np.asarray(p, dtype=np.int64))) for p in parts]
    empty = [k for k, p in enumerate(result) if p.numel() == 0]
    if empty:
        raise DataError(f"partition {key!r} of {_dataset_name(data)!r} into {num_clients} clients "
                        f"left clients {empty} empty; use fewer clients or other parameters")
    if folder is not None:
        _write_parts(folder, result, {"dataset": _dataset_name(data), "method": key,
                                      "num_clients": num_clients, "seed": seed, "params": params,
                                      "num_nodes": num_nodes})
    return result


def client_subgraphs(data: Data, parts: list[Tensor]) -> list[Data]:
    """One Data per client: x, y, edge_index (local ids, intra-client edges only), global_id.

    Local node i of client k is global node ``parts[k][i]`` (``global_id`` int64 [n_k]);
    ``num_classes`` and ``name`` are carried over when present.
    """
    num_nodes = int(data.num_nodes)
    extra = {a: data[a] for a in ("num_classes", "name") if a in data}
    idxs = []
    for k, part in enumerate(parts):
        idx = torch.as_tensor(part, dtype=torch.long).view(-1)
        if idx.numel() and (idx.min() < 0 or idx.max() >= num_nodes):
            raise DataError(f"parts[{k}] holds node ids outside [0, {num_nodes})")
        idxs.append(idx)
    edge_indices = _intra_client_edges(data.edge_index, idxs, num_nodes)
    return [Data(x=data.x[idx], y=data.y[idx], edge_index=edge_index, global_id=idx.clone(), **extra)
            for idx, edge_index in zip(idxs, edge_indices)]


def _intra_client_edges(edge_index: Tensor, idxs: list[Tensor], num_nodes: int) -> list[Tensor]:
    """Each part's induced edges, relabelled to positions in the part, in edge_index's order (what
    PyG's ``subgraph(idx, edge_index, relabel_nodes=True)`` gives per part). Disjoint parts: one pass
    over the edges for all parts, O(N + E log E); PyG's subgraph per part scans every edge, O(K·(N + E))
    (53 s for 1000 clients on a 1M-node graph). Overlapping parts: subgraph per part."""
    owner = torch.full((num_nodes,), -1, dtype=torch.long)
    local = torch.zeros(num_nodes, dtype=torch.long)
    for k, idx in enumerate(idxs):
        owner[idx] = k
        local[idx] = torch.arange(idx.numel())
    sizes = torch.tensor([idx.numel() for idx in idxs], dtype=torch.long)
    assigned = owner[owner >= 0]
    if not torch.equal(torch.bincount(assigned, minlength=len(idxs)), sizes):  # a node in two parts, or twice
        return [subgraph(idx, edge_index, relabel_nodes=True, num_nodes=num_nodes)[0] for idx in idxs]
    src_owner, dst_owner = owner[edge_index[0]], owner[edge_index[1]]
    kept = edge_index[:, (src_owner == dst_owner) & (src_owner >= 0)]
    kept_owner = owner[kept[0]]
    order = torch.argsort(kept_owner, stable=True)  # by part, edge order kept within a part
    relabelled = local[kept[:, order]]
    counts = torch.bincount(kept_owner, minlength=len(idxs)).tolist()
    return [e.contiguous() for e in relabelled.split(counts, dim=1)]


# --------------------------------------------------------------------------- parameters


def _resolve_params(method: str, params: dict, num_nodes: int, num_clients: int) -> dict:
    valid = PARTITION_PARAMS[method]
    unknown = sorted(set(params) - set(valid))
    if unknown:
        names = ", ".join(valid) or "none"
        raise DataError(f"unknown parameter(s) {unknown} for partition {method!r}; valid: {names}")
    p = {**valid, **params}
    if "resolution" in p and not _is_positive_number(p["resolution"]):
        raise DataError(f"resolution={p['resolution']!r}: must be a number > 0")
    if "delta" in p and not _is_int(p["delta"], lo=0):
        raise DataError(f"delta={p['delta']!r}: must be an integer >= 0")
    if "num_groups" in p:
        if not _is_int(p["num_groups"], lo=num_clients):
            raise DataError(f"num_groups={p['num_groups']!r}: must be an integer >= "
                            f"num_clients={num_clients}")
        p["num_groups"] = min(int(p["num_groups"]), num_nodes)
    if "alpha" in p and not _is_positive_number(p["alpha"]):
        raise DataError(f"alpha={p['alpha']!r}: must be a number > 0")
    if "min_size" in p:
        if p["min_size"] is None:
            p["min_size"] = min(10, num_nodes // num_clients)
        if not _is_int(p["min_size"], lo=1) or p["min_size"] * num_clients > num_nodes:
            raise DataError(f"min_size={p['min_size']!r}: must be an integer in "
                            f"[1, {num_nodes // num_clients}] (nodes / clients)")
    return {k: (float(v) if k in ("resolution", "alpha") else int(v)) for k, v in p.items()}


def _is_int(v, lo: int = -(2**63)) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= lo


def _is_positive_number(v) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) and v > 0


def _labels(data: Data) -> np.ndarray:
    y = getattr(data, "y", None)
    if y is None or y.dim() != 1 or y.numel() != data.num_nodes or (y.numel() and y.min() < 0):
        raise DataError("this partition needs node labels: data.y must be int64 [N] with values >= 0")
    return y.numpy().astype(np.int64)


# --------------------------------------------------------------------------- algorithms


def _louvain(data: Data, seed: int, resolution: float) -> list[list[int]]:
    """Louvain communities as sorted node-id lists, ordered by smallest node id."""
    import networkx as nx

    graph = nx.Graph()
    graph.add_nodes_from(range(int(data.num_nodes)))
    src, dst = data.edge_index.numpy()
    graph.add_edges_from(zip(src.tolist(), dst.tolist()))
    communities = nx.community.louvain_communities(graph, resolution=resolution, seed=seed)
    return sorted((sorted(c) for c in communities), key=lambda c: c[0])


def _pack(communities: list[list[int]], num_owners: int, num_nodes: int, delta: int) -> list[list[int]]:
    """Greedy community packing of FedSage+/OpenFGL into ``num_owners`` groups of ~N/num_owners.

    Communities larger than N/num_owners - delta are cut into chunks of that size; chunks are
    taken largest first and given to the current owner if it stays below N/num_owners + delta,
    else to the next owner in rotation; owners holding >= N/num_owners leave the rotation (the
    last one stays). A chunk no owner in rotation can take goes to the smallest owner.
    """
    max_len = max(1, num_nodes // num_owners - delta)
    groups = [list(c) for c in communities]
    i = 0
    while i < len(groups):
        if len(groups[i]) > max_len:
            groups.append(groups[i][max_len:])
            groups[i] = groups[i][:max_len]
        i += 1
    groups.sort(key=len, reverse=True)

    cap = num_nodes // num_owners
    owners: list[list[int]] = [[] for _ in range(num_owners)]
    rotation, pos = list(range(num_owners)), 0
    for group in groups:
        while len(rotation) >= 2 and len(owners[rotation[pos]]) >= cap:
            rotation.pop(pos)
            pos %= len(rotation)
        target = None
        for _ in range(len(rotation)):
            if len(owners[rotation[pos]]) + len(group) < cap + delta:
                target = rotation[pos]
                break
            pos = (pos + 1) % len(rotation)
        if target is None:
            target = min(range(num_owners), key=lambda k: len(owners[k]))
        owners[target].extend(group)
    return owners


def _planted(data: Data, num_clients: int) -> list[np.ndarray]:
    """The graph's own clients (``data.client`` [N], e.g. the sbm-pubmed-clients stand-in)."""
    client = getattr(data, "client", None)
    if client is None:
        raise DataError(f"partition 'planted' needs a graph with planted clients (data.client), such as "
                        f"sbm-pubmed-clients; {_dataset_name(data)!r} has none")
    planted = int(client.max()) + 1
    if num_clients != planted:
        raise DataError(f"partition 'planted': {_dataset_name(data)!r} has {planted} planted clients, "
                        f"got num_clients={num_clients}; use --clients {planted}")
    client = client.numpy()
    return [np.flatnonzero(client == k) for k in range(planted)]


def _metis(data: Data, num_parts: int, seed: int) -> list[np.ndarray]:
    """METIS K-way parts (pymetis with an explicit seed, so it is deterministic).

    Seed 0 uses METIS's default seed (the result of a plain ``pymetis.part_graph`` call); seed s
    > 0 uses METIS seed s + 1, because METIS seeds 0 and 1 give the same random stream.
    """
    import pymetis

    num_nodes = int(data.num_nodes)
    edge_index, _ = remove_self_loops(data.edge_index)
    src, dst = to_undirected(edge_index, num_nodes=num_nodes).numpy()  # sorted by src
    adj_starts = np.concatenate([[0], np.cumsum(np.bincount(src, minlength=num_nodes))])
    adjacency = pymetis.CSRAdjacency(adj_starts=adj_starts.astype(np.int64), adjacent=dst.astype(np.int64))
    _, membership = pymetis.part_graph(num_parts, adjacency=adjacency,
                                       options=pymetis.Options(seed=int(seed) + 1 if seed else -1))
    membership = np.asarray(membership)
    sizes = np.bincount(membership, minlength=num_parts)
    for k in np.flatnonzero(sizes == 0):  # METIS may leave parts empty when parts are tiny (K near N)
        donor = int(np.argmax(sizes))
        membership[np.flatnonzero(membership == donor)[-1]] = k
        sizes[donor] -= 1
        sizes[k] += 1
    return [np.flatnonzero(membership == k) for k in range(num_parts)]


def _label_clusters(groups: list, y: np.ndarray, num_clients: int, seed: int) -> list[np.ndarray]:
    """KMeans (k = num_clients) over the groups' normalized label histograms; a cluster = a client.

    If KMeans leaves a cluster empty (duplicate histograms), the last group of the cluster with
    the most groups moves into it, so every client gets nodes.
    """
    from sklearn.cluster import KMeans
    from sklearn.exceptions import ConvergenceWarning

    groups = [np.asarray(g, dtype=np.int64) for g in groups if len(g)]
    if len(groups) < num_clients:
        raise DataError(f"only {len(groups)} non-empty groups for {num_clients} clients; "
                        "use fewer clients or more groups (num_groups)")
    num_classes = int(y.max()) + 1
    hist = np.stack([np.bincount(y[g], minlength=num_classes) / len(g) for g in groups])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        labels = KMeans(n_clusters=num_clients, random_state=seed, n_init=10).fit_predict(hist)
    for c in range(num_clients):
        if not np.any(labels == c):
            donor = int(np.argmax(np.bincount(labels, minlength=num_clients)))
            labels[np.flatnonzero(labels == donor)[-1]] = c
    return [np.concatenate([groups[i] for i in np.flatnonzero(labels == c)]) for c in range(num_clients)]


def _dirichlet(y: np.ndarray, num_clients: int, seed: int, alpha: float, min_size: int,
               max_draws: int = 1000) -> list[np.ndarray]:
    """Label skew (NIID-Bench): each class is split among clients with proportions ~ Dir(alpha).

    Clients already holding >= N/K nodes get no more (if the draw gives all of a class to such
    clients, it is split evenly among the others); draws repeat until every client has at least
    ``min_size`` nodes.
    """
    rng = np.random.default_rng(seed)
    num_nodes = len(y)
    for _ in range(max_draws):
        owners: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        sizes = np.zeros(num_clients, dtype=np.int64)
        for c in np.unique(y):
            idx = rng.permutation(np.flatnonzero(y == c))
            open_ = sizes < num_nodes / num_clients
            p = rng.dirichlet(np.full(num_clients, alpha)) * open_
            if not p.sum() > 0:  # all the mass fell on full clients: split evenly among the rest
                p = open_.astype(np.float64)
            cuts = (np.cumsum(p / p.sum()) * len(idx)).astype(np.int64)[:-1]
            for k, chunk in enumerate(np.split(idx, cuts)):
                owners[k].append(chunk)
                sizes[k] += len(chunk)
        if sizes.min() >= min_size:
            return [np.concatenate(o) for o in owners]
    raise DataError(f"dirichlet partition: no draw in {max_draws} gave every client >= "
                    f"min_size={min_size} nodes (alpha={alpha}, {num_clients} clients); "
                    "raise alpha or lower min_size or num_clients")


# --------------------------------------------------------------------------- cache


def _dataset_name(data: Data) -> str:
    name = data["name"] if "name" in data else "graph"
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", str(name)) or "graph"


def _cache_tag(data: Data, method: str, params: dict) -> str:
    """Short hash of the parameters and of the graph (edges and labels)."""
    h = hashlib.sha256(json.dumps({"format": _CACHE_FORMAT, "method": method, "params": params},
                                  sort_keys=True).encode())
    h.update(str(int(data.num_nodes)).encode())
    h.update(np.ascontiguousarray(data.edge_index.numpy()).tobytes())
    if getattr(data, "y", None) is not None:
        h.update(np.ascontiguousarray(data.y.numpy()).tobytes())
    return h.hexdigest()[:12]


def _read_parts(folder: Path, num_nodes: int, num_clients: int) -> list[Tensor] | None:
    """Cached parts, or None if absent or not a valid partition of the graph."""
    files = [folder / f"client_{k}.txt" for k in range(num_clients)]
    if not all(f.is_file() for f in files):
        return None
    parts = [torch.from_numpy(np.array(f.read_text().split(), dtype=np.int64)) for f in files]
    flat = torch.cat(parts)
    valid = (all(p.numel() > 0 for p in parts) and flat.numel() == num_nodes
             and torch.equal(torch.sort(flat).values, torch.arange(num_nodes)))
    return [torch.sort(p).values for p in parts] if valid else None


def _write_parts(folder: Path, parts: list[Tensor], meta: dict) -> None:
    """Write client_<k>.txt files and meta.json atomically (a temp folder renamed into place)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    for k, part in enumerate(parts):
        (tmp / f"client_{k}.txt").write_text("\n".join(map(str, part.tolist())) + "\n")
    (tmp / "meta.json").write_text(json.dumps({**meta, "sizes": [p.numel() for p in parts]}, indent=1))
    shutil.rmtree(folder, ignore_errors=True)  # an invalid old entry
    try:
        tmp.rename(folder)
    except OSError:  # another process wrote the same entry first
        shutil.rmtree(tmp, ignore_errors=True)
