"""Graph datasets, synthetic graphs, federated partitions and node splits.

The names below are loaded on first use (module ``__getattr__``), so ``import privfgl.data`` or
``from privfgl.data import DataError`` does not import torch or torch_geometric; ``from privfgl.data
import load_dataset`` imports only the module that defines it.
"""

from __future__ import annotations

import importlib

from privfgl.data.errors import DataError, DatasetUnavailable

# name -> the submodule that defines it
_LAZY = {
    "DATASETS": "datasets", "dataset_status": "datasets", "load_dataset": "datasets", "resolve_data_root": "datasets",
    "PARTITION_PARAMS": "partition", "PARTITIONS": "partition", "client_subgraphs": "partition",
    "partition_nodes": "partition", "read_partition": "partition_file", "write_partition": "partition_file",
    "SPLIT_DEFAULTS": "splits", "split_clients": "splits", "stratified_split": "splits",
    "CLIENT_PRESETS": "synthetic", "SYNTHETIC_PRESETS": "synthetic", "client_csbm": "synthetic",
    "contextual_sbm": "synthetic",
}


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
        globals()[name] = value  # later lookups skip __getattr__
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "CLIENT_PRESETS", "DATASETS", "PARTITIONS", "PARTITION_PARAMS", "SPLIT_DEFAULTS", "SYNTHETIC_PRESETS",
    "DataError", "DatasetUnavailable",
    "client_csbm", "client_subgraphs", "contextual_sbm", "dataset_status", "load_dataset", "partition_nodes",
    "read_partition", "resolve_data_root", "split_clients", "stratified_split", "write_partition",
]
