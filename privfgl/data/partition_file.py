"""A partition given from outside (``--partition file:PATH``): read and check it, fingerprint it,
and write privfgl's own partitions in the same format for a peer's code to run on.

PATH is one of:

- a text file, one line per client holding its node ids, separated by whitespace or commas;
- a JSON file holding a list of lists of node ids (one list per client);
- a glob pattern (``*``, ``?`` or ``[``) naming one file per client, taken in sorted name order, each
  holding that client's node ids separated by whitespace or commas (FedSpray ships
  ``partition/PubMed_*.txt``, one id per line written by ``np.savetxt``).

This module imports only the standard library at import time (the CLI resolves config paths with
it before torch loads). Node ids are integers; a number with an integral value (``1.000000000000000000e+00``, as
``np.savetxt`` writes) counts as that integer. Every client must be non-empty, no node may be in
two clients (or twice in one), ids must lie in [0, N), and the client count must equal
``--clients``. Nodes in no client are dropped: they belong to no client's graph (FedSpray's
partitions keep only the largest Louvain communities). The run record's ``partition_file`` block
says how many. Problems raise DataError, one line naming the file, the place and what is valid.
"""
from __future__ import annotations

import glob
import hashlib
import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from privfgl.data.errors import DataError

if TYPE_CHECKING:
    from torch import Tensor

FILE_PREFIX = "file:"
FORMATS = ("lines", "json")
_GLOB_CHARS = re.compile(r"[*?\[]")


def is_file_partition(partition: str) -> bool:
    """True for a ``file:PATH`` partition."""
    return isinstance(partition, str) and partition.startswith(FILE_PREFIX)


def partition_path(partition: str) -> str:
    """PATH of ``file:PATH`` (DataError if it is empty)."""
    path = partition[len(FILE_PREFIX):]
    if not path.strip():
        raise DataError(f"partition {partition!r}: no path; valid: file:PATH (a text or JSON file, or a glob "
                        "pattern of one file per client)")
    return path


def resolve_partition(partition, base: Path):
    """``file:PATH`` with a relative PATH made relative to ``base`` (a config file's folder); any other
    value unchanged. Config files (``--config``, sweep TOML) resolve against their own folder; the
    ``--partition`` flag against the working directory."""
    if not is_file_partition(partition):
        return partition
    path = partition_path(partition)
    return partition if os.path.isabs(path) else FILE_PREFIX + os.path.join(str(base), path)


def partition_files(partition: str) -> list[Path]:
    """The files a ``file:`` partition reads (one, or a glob's matches sorted by name); DataError when
    there are none or PATH is a folder."""
    path = partition_path(partition)
    if _GLOB_CHARS.search(path):
        files = sorted(Path(p) for p in glob.glob(path) if os.path.isfile(p))
        if not files:
            raise DataError(f"partition file pattern {path}: matches no file; valid: a glob such as "
                            "partition/PubMed_*.txt matching one file per client")
        return files
    if os.path.isdir(path):
        raise DataError(f"partition file {path}: a folder, not a file; valid: a text or JSON file, or a glob "
                        f"pattern of one file per client (e.g. {os.path.join(path, '*.txt')})")
    if not os.path.isfile(path):
        raise DataError(f"partition file {path}: no such file")
    return [Path(path)]


def file_sha256(partition: str) -> str:
    """SHA-256 of the bytes read: the file's, or a glob's files concatenated in client order."""
    h = hashlib.sha256()
    for f in partition_files(partition):
        h.update(_read_bytes(f))
    return h.hexdigest()


def read_partition(partition: str, num_nodes: int, num_clients: int) -> tuple[list[Tensor], dict]:
    """The clients of a ``file:PATH`` partition of a graph with ``num_nodes`` nodes, checked.

    Returns one sorted int64 tensor of global node ids per client, and the record block
    {path (as given), files, sha256, clients, assigned_nodes, unassigned_nodes}.
    """
    path = partition_path(partition)
    files = partition_files(partition)
    blobs = [_read_bytes(f) for f in files]
    if not _GLOB_CHARS.search(path):
        lists, places = _parse_single(files[0], blobs[0])
    else:  # one file per client, even when the pattern matches one file
        lists, places = [], []
        for f, blob in zip(files, blobs):
            lists.append(_ids(_text(f, blob).replace(",", " ").split(), f, f"{f}"))
            places.append(str(f))
    parts = _check(path, lists, places, num_nodes, num_clients)
    h = hashlib.sha256()
    for blob in blobs:
        h.update(blob)
    assigned = sum(p.numel() for p in parts)
    return parts, {"path": path, "files": [str(f) for f in files], "sha256": h.hexdigest(),
                   "clients": len(parts), "assigned_nodes": assigned, "unassigned_nodes": num_nodes - assigned}


def write_partition(parts: list[Tensor], path: str | os.PathLike, fmt: str = "lines") -> str:
    """Write ``parts`` (node ids per client) to ``path``: ``lines`` (one line per client, ids separated
    by spaces) or ``json`` (a list of lists). Returns the file's SHA-256."""
    if fmt not in FORMATS:
        raise DataError(f"partition format {fmt!r}; valid: {', '.join(FORMATS)}")
    import torch
    lists = [[int(v) for v in torch.as_tensor(p).view(-1).tolist()] for p in parts]
    text = json.dumps(lists) + "\n" if fmt == "json" else "".join(" ".join(map(str, ids)) + "\n" for ids in lists)
    data = text.encode()
    Path(path).write_bytes(data)
    return hashlib.sha256(data).hexdigest()


# --------------------------------------------------------------------------- parsing and checks


def _read_bytes(f: Path) -> bytes:
    try:
        return f.read_bytes()
    except OSError as e:
        raise DataError(f"partition file {f}: cannot be read ({e.strerror or e})") from None


def _text(f: Path, blob: bytes) -> str:
    try:
        return blob.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"partition file {f}: not UTF-8 text ({e.reason} at byte {e.start}); valid: node ids "
                        "as text, one line per client, or a JSON list of lists") from None


def _parse_single(f: Path, blob: bytes) -> tuple[list[list[int]], list[str]]:
    """One file: JSON (its first character '[') or one line per client."""
    text = _text(f, blob)
    if text.lstrip().startswith("["):
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            raise DataError(f"partition file {f}: not valid JSON at line {e.lineno}, column {e.colno}: "
                            f"{e.msg}") from None
        if not isinstance(value, list) or not all(isinstance(c, list) for c in value):
            raise DataError(f"partition file {f}: JSON must be a list of lists of node ids (one list per client)")
        lists = []
        for k, client in enumerate(value):
            bad = next((v for v in client if isinstance(v, bool) or not isinstance(v, (int, float))
                        or isinstance(v, float) and not v.is_integer()), None)
            if bad is not None:
                raise DataError(f"partition file {f}: client {k} (JSON list {k}) holds {bad!r}, not a node id; "
                                "valid: integers")
            lists.append([int(v) for v in client])
        return lists, [f"JSON list {k}" for k in range(len(lists))]
    lines = text.splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    return ([_ids(line.replace(",", " ").split(), f, f"line {i + 1}") for i, line in enumerate(lines)],
            [f"line {i + 1}" for i in range(len(lines))])


def _ids(tokens: list[str], f: Path, place: str) -> list[int]:
    out = []
    for tok in tokens:
        try:
            out.append(int(tok))
            continue
        except ValueError:
            pass
        try:
            value = float(tok)
        except ValueError:
            value = None
        if value is None or not value.is_integer():
            raise DataError(f"partition file {f}: {place}: {tok!r} is not a node id; valid: integers separated "
                            "by whitespace or commas")
        out.append(int(value))
    return out


def _check(path: str, lists: list[list[int]], places: list[str], num_nodes: int,
           num_clients: int) -> list[Tensor]:
    import numpy as np
    import torch
    if len(lists) != num_clients:
        raise DataError(f"partition file {path}: holds {len(lists)} clients, --clients is {num_clients}; valid: "
                        f"--clients {len(lists)}, or a file with {num_clients} clients")
    owner = np.full(num_nodes, -1, dtype=np.int64)
    parts = []
    for k, (ids, place) in enumerate(zip(lists, places)):
        if not ids:
            raise DataError(f"partition file {path}: client {k} ({place}) is empty; valid: every client holds "
                            "at least one node")
        arr = np.asarray(ids, dtype=np.int64)
        outside = arr[(arr < 0) | (arr >= num_nodes)]
        if outside.size:
            raise DataError(f"partition file {path}: client {k} ({place}) holds node id {int(outside[0])}, "
                            f"outside the graph's range 0..{num_nodes - 1}")
        uniq, counts = np.unique(arr, return_counts=True)
        if (counts > 1).any():
            raise DataError(f"partition file {path}: client {k} ({place}) lists node {int(uniq[counts > 1][0])} "
                            "twice; valid: each node once")
        taken = owner[uniq] >= 0
        if taken.any():
            node = int(uniq[taken][0])
            raise DataError(f"partition file {path}: node {node} is in client {int(owner[node])} and client {k} "
                            f"({place}); valid: each node in at most one client")
        owner[uniq] = k
        parts.append(torch.from_numpy(uniq))
    return parts
