"""FedGPL's client samples given from outside (`--method-param samples=file:PATH`): each client's task,
induced graphs, labels and B.8 parts, as another code built them (experiments/peers/fedgpl_main.py
writes the authors' own), so that privfgl trains on exactly those samples.

The file is a `torch.save` of a dict (read back with `weights_only=True`):

    {"format": "privfgl-fedgpl-samples/1", "dataset": "cora", "num_classes": 7,
     "features": float32 [N, d] or absent (the public reduced feature table the samples were cut from),
     "clients": [{"task": "node" | "edge" | "graph",
                  "x": float32 [n, d]          every graph's node features, graph after graph,
                  "node_ptr": int64 [S + 1]    graph i's rows are x[node_ptr[i]:node_ptr[i + 1]],
                  "edge_index": int64 [2, e]   graph i's edges, local ids (0 .. its node count - 1),
                  "edge_ptr": int64 [S + 1]    graph i's edges are edge_index[:, edge_ptr[i]:edge_ptr[i + 1]],
                  "y": int64 [S]               labels in [0, num_classes),
                  "part": int64 [S]}, ...]}    0 train-support, 1 train-query, 2 test-support, 3 test-query

Clients come in task order: the first third node, the next edge, the last graph (privfgl's layout).
This module needs torch alone, so a peer's venv can load it by path to write the file.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import torch

FORMAT = "privfgl-fedgpl-samples/1"
TASKS = ("node", "edge", "graph")
PARTS = ("train-support", "train-query", "test-support", "test-query")


def pack_client(task: str, graphs: list[tuple[torch.Tensor, torch.Tensor, int, int]]) -> dict:
    """One client's entry from (x [n_i, d], edge_index [2, e_i] local ids, label, part) per graph."""
    xs, edges, node_ptr, edge_ptr = [], [], [0], [0]
    for x, edge_index, _, _ in graphs:
        xs.append(x.detach().to(torch.float32))
        edges.append(edge_index.detach().to(torch.int64))
        node_ptr.append(node_ptr[-1] + x.size(0))
        edge_ptr.append(edge_ptr[-1] + edge_index.size(1))
    return {"task": task, "x": torch.cat(xs), "edge_index": torch.cat(edges, dim=1),
            "node_ptr": torch.tensor(node_ptr, dtype=torch.int64), "edge_ptr": torch.tensor(edge_ptr, dtype=torch.int64),
            "y": torch.tensor([g[2] for g in graphs], dtype=torch.int64),
            "part": torch.tensor([g[3] for g in graphs], dtype=torch.int64)}


def write_samples(path: str | Path, dataset: str, num_classes: int, clients: list[dict],
                  features: torch.Tensor | None = None) -> str:
    """Writes the file (clients from pack_client); returns its SHA-256 (hex)."""
    blob = {"format": FORMAT, "dataset": dataset.lower(), "num_classes": int(num_classes), "clients": clients}
    if features is not None:
        blob["features"] = features.detach().to(torch.float32)
    torch.save(blob, path)
    return file_sha256(path)


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_samples(path: str | Path, dataset: str, num_classes: int, num_clients: int, dim: int,
                 num_nodes: int | None = None) -> dict:
    """The file at `path`, checked against the run (dataset, its class count, --clients, the method's
    feature width dim, the dataset's node count for `features`). Raises ValueError with one line naming
    the file, the first problem and what is valid. Returns the dict as stored plus "sha256"."""
    def bad(problem: str, valid: str) -> ValueError:
        return ValueError(f"fedgpl: samples file {path}: {problem}; valid: {valid}")

    if not Path(path).is_file():
        raise bad("no such file", "samples=file:PATH naming a file written by privfgl.methods.fedgpl.samples_file")
    try:
        blob = torch.load(path, weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unreadable file is one line
        raise bad(f"unreadable ({type(e).__name__})", f"a torch.save'd dict of format {FORMAT}") from None
    if not isinstance(blob, dict) or blob.get("format") != FORMAT:
        raise bad("not a FedGPL samples file", f"a dict with format {FORMAT!r}")
    if str(blob.get("dataset")) != dataset.lower():
        raise bad(f"made for dataset {blob.get('dataset')!r}, the run is on {dataset!r}", f"--dataset {blob.get('dataset')}")
    if blob.get("num_classes") != num_classes:
        raise bad(f"num_classes {blob.get('num_classes')!r}", f"{num_classes} ({dataset}'s classes)")
    clients = blob.get("clients")
    if not isinstance(clients, list) or len(clients) != num_clients:
        count = len(clients) if isinstance(clients, list) else clients
        raise bad(f"{count} clients, the run has {num_clients}", f"--clients {count}")
    per_task = num_clients // len(TASKS)
    for k, c in enumerate(clients):
        _check_client(k, c, TASKS[k // per_task] if per_task else None, num_classes, dim, bad)
    features = blob.get("features")
    if features is not None and (not isinstance(features, torch.Tensor) or features.dim() != 2
                                 or features.size(1) != dim or (num_nodes is not None and features.size(0) != num_nodes)):
        shape = tuple(features.shape) if isinstance(features, torch.Tensor) else type(features).__name__
        raise bad(f"features of shape {shape}", f"float [{num_nodes if num_nodes is not None else 'N'}, {dim}] or absent")
    return {**blob, "sha256": file_sha256(path)}


def _check_client(k: int, c: dict, task: str | None, num_classes: int, dim: int, bad) -> None:
    keys = ("task", "x", "node_ptr", "edge_index", "edge_ptr", "y", "part")
    if not isinstance(c, dict) or any(key not in c for key in keys):
        raise bad(f"client {k} lacks {[key for key in keys if not isinstance(c, dict) or key not in c]}",
                  f"each client a dict with {', '.join(keys)}")
    if c["task"] != task:
        raise bad(f"client {k} has task {c['task']!r}, expected {task!r}",
                  "clients in task order: the first third node, the next edge, the last graph")
    if any(not isinstance(c[key], torch.Tensor) for key in keys[1:]):
        raise bad(f"client {k}: a field is not a tensor", ", ".join(keys[1:]) + " as tensors")
    x, node_ptr, edge_index, edge_ptr, y, part = (c[key] for key in keys[1:])
    S = y.numel()
    if S == 0:
        raise bad(f"client {k} has no samples", "at least one sample per client")
    if y.dim() != 1 or part.shape != y.shape or node_ptr.shape != (S + 1,) or edge_ptr.shape != (S + 1,):
        raise bad(f"client {k}: y {tuple(y.shape)}, part {tuple(part.shape)}, node_ptr {tuple(node_ptr.shape)}, "
                  f"edge_ptr {tuple(edge_ptr.shape)}", "y and part [S], node_ptr and edge_ptr [S + 1]")
    if x.dim() != 2 or x.size(1) != dim or not torch.is_floating_point(x):
        raise bad(f"client {k}: x of shape {tuple(x.shape)}", f"float [n, {dim}] (dim={dim})")
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise bad(f"client {k}: edge_index of shape {tuple(edge_index.shape)}", "int [2, e]")
    for name, ptr, total in (("node_ptr", node_ptr, x.size(0)), ("edge_ptr", edge_ptr, edge_index.size(1))):
        if int(ptr[0]) != 0 or int(ptr[-1]) != total or bool((ptr[1:] < ptr[:-1]).any()):
            raise bad(f"client {k}: {name} is not 0 .. {total} non-decreasing", f"offsets from 0 to {total}")
    sizes = node_ptr[1:] - node_ptr[:-1]
    if bool((sizes == 0).any()):
        raise bad(f"client {k}: sample {int((sizes == 0).nonzero()[0])} has no nodes", "every graph at least one node")
    if bool(((y < 0) | (y >= num_classes)).any()):
        raise bad(f"client {k}: a label outside [0, {num_classes})", f"labels 0 .. {num_classes - 1}")
    if bool(((part < 0) | (part >= len(PARTS))).any()):
        raise bad(f"client {k}: a part outside 0 .. 3", "0 " + ", 1 ".join(PARTS[:2]) + ", 2 test-support, 3 test-query")
    if not (bool((part <= 1).any()) and bool((part >= 2).any())):
        raise bad(f"client {k} lacks training or test samples", "every client holds a train and a test part")
    owner = torch.repeat_interleave(torch.arange(S), edge_ptr[1:] - edge_ptr[:-1])
    if edge_index.numel() and bool(((edge_index < 0) | (edge_index >= sizes[owner].unsqueeze(0))).any()):
        raise bad(f"client {k}: an edge id outside its graph", "local node ids 0 .. n_i - 1 per graph")
