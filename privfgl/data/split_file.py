"""A per-client train/val/test split given from outside (``--split-file PATH``), beside a partition
(built-in or ``--partition file:PATH``): read and check it, fingerprint it, and write a run's own.

PATH is a JSON file holding one object per client, in client order:

    [{"train": [ids], "val": [ids], "test": [ids]}, ...]

with *global* node ids (the graph's numbering, as the partition file uses), so the file does not
depend on how a client orders its nodes. It replaces the split a run would draw (``--split``,
``--split-mode`` and the partition seed then do not choose the masks). A node of a client may be in
no part (it is then in no mask); every node listed must belong to that client, at most once over
its three parts, and the split must hold at least one training, validation and test node (a run
picks its round on validation nodes and scores it on test nodes). Problems raise DataError, one line
naming the file, the client and what is valid. The run record's ``split_file`` block holds the path,
the SHA-256 of the bytes read and the part sizes.

This module imports only the standard library at import time (the CLI resolves config paths with
it before torch loads).
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from privfgl.data.errors import DataError

if TYPE_CHECKING:
    from torch_geometric.data import Data

PARTS = ("train", "val", "test")
FORMAT = 'a JSON list with one {"train": [...], "val": [...], "test": [...]} object of global node ids per client'


def resolve_split_file(path: str | None, base: Path) -> str | None:
    """A relative PATH made relative to ``base`` (a config file's folder); None unchanged."""
    if path is None or os.path.isabs(path):
        return path
    return os.path.join(str(base), path)


def split_file_bytes(path: str) -> bytes:
    """The file's bytes (DataError when it is missing, a folder, or unreadable)."""
    p = Path(path)
    if p.is_dir():
        raise DataError(f"split file {path}: a folder, not a file; valid: {FORMAT}")
    if not p.is_file():
        raise DataError(f"split file {path}: no such file")
    try:
        return p.read_bytes()
    except OSError as e:
        raise DataError(f"split file {path}: cannot be read ({e.strerror or e})") from None


def split_sha256(path: str) -> str:
    """SHA-256 of the file's bytes."""
    return hashlib.sha256(split_file_bytes(path)).hexdigest()


def read_split(path: str, clients: list[Data]) -> dict:
    """Set train_mask/val_mask/test_mask (bool [n_k]) on each client's Data from the file, in place.

    Each client's Data carries ``global_id`` (int64 [n_k], privfgl.data.partition.client_subgraphs).
    Returns the record block {path, sha256, clients, train, val, test, in_no_part} (node counts)."""
    import torch
    blob = split_file_bytes(path)
    lists = _parse(path, blob)
    if len(lists) != len(clients):
        raise DataError(f"split file {path}: holds {len(lists)} clients, the partition has {len(clients)}; valid: one "
                        "object per client, in the partition's client order")
    masks = []
    for k, (parts, sub) in enumerate(zip(lists, clients)):
        gid = sub.global_id.cpu()
        order = torch.argsort(gid)
        seen = torch.zeros(gid.numel(), dtype=torch.bool)
        client_masks = []
        for name in PARTS:
            ids = torch.tensor(parts[name], dtype=torch.long)
            pos = torch.searchsorted(gid[order], ids).clamp(max=max(gid.numel() - 1, 0))
            found = gid[order][pos] == ids if gid.numel() else torch.zeros_like(ids, dtype=torch.bool)
            if not bool(found.all()):
                node = int(ids[~found][0])
                raise DataError(f"split file {path}: client {k} {name} lists node {node}, which is not one of client "
                                f"{k}'s nodes (its partition); valid: client k's parts hold only client k's nodes")
            local = order[pos]
            mask = torch.zeros(gid.numel(), dtype=torch.bool)
            mask[local] = True
            twice = seen[local] | (torch.bincount(local, minlength=gid.numel())[local] > 1)
            if bool(twice.any()):
                node = int(ids[twice][0])
                raise DataError(f"split file {path}: client {k} lists node {node} twice (in one part or in two of "
                                "train, val, test); valid: each node in at most one part")
            seen |= mask
            client_masks.append(mask)
        masks.append(client_masks)
    totals = {name: sum(int(m[i].sum()) for m in masks) for i, name in enumerate(PARTS)}
    for name, what in zip(PARTS, ("training", "validation", "test")):
        if totals[name] == 0:
            raise DataError(f"split file {path}: no client has a {what} node; valid: at least one node in some "
                            f"client's {name!r} (a run picks its round on validation nodes and scores on test nodes)")
    for sub, (train, val, test) in zip(clients, masks):
        sub.train_mask, sub.val_mask, sub.test_mask = train.to(sub.y.device), val.to(sub.y.device), test.to(sub.y.device)
    placed = sum(totals.values())
    return {"path": path, "sha256": hashlib.sha256(blob).hexdigest(), "clients": len(clients), **totals,
            "in_no_part": sum(int(sub.num_nodes) for sub in clients) - placed}


def write_split(clients: list[Data], path: str | os.PathLike) -> str:
    """Write the clients' train/val/test masks (global ids via ``global_id``) in the file format; returns
    the file's SHA-256."""
    lists = [{name: sorted(int(v) for v in sub.global_id[getattr(sub, f"{name}_mask").to(sub.global_id.device)])
              for name in PARTS} for sub in clients]
    data = (json.dumps(lists) + "\n").encode()
    Path(path).write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def _parse(path: str, blob: bytes) -> list[dict[str, list[int]]]:
    try:
        text = blob.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"split file {path}: not UTF-8 text ({e.reason} at byte {e.start}); valid: {FORMAT}") from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(f"split file {path}: not valid JSON at line {e.lineno}, column {e.colno}: {e.msg}; "
                        f"valid: {FORMAT}") from None
    if not isinstance(value, list):
        raise DataError(f"split file {path}: holds a JSON {type(value).__name__}; valid: {FORMAT}")
    out = []
    for k, client in enumerate(value):
        if not isinstance(client, dict) or set(client) != set(PARTS):
            got = sorted(client) if isinstance(client, dict) else type(client).__name__
            raise DataError(f"split file {path}: client {k} is {got}, not an object with exactly the keys train, "
                            f"val, test; valid: {FORMAT}")
        parts = {}
        for name in PARTS:
            ids = client[name]
            if not isinstance(ids, list):
                raise DataError(f"split file {path}: client {k} {name} is a {type(ids).__name__}, not a list of node "
                                "ids")
            bad = next((v for v in ids if isinstance(v, bool) or not isinstance(v, int)), None)
            if bad is not None:
                raise DataError(f"split file {path}: client {k} {name} holds {bad!r}, not a node id; valid: integers")
            parts[name] = ids
        out.append(parts)
    return out
