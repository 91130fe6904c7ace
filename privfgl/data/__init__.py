"""Graph datasets, synthetic graphs, federated partitions and node splits."""

from privfgl.data.datasets import DATASETS, dataset_status, load_dataset, resolve_data_root
from privfgl.data.errors import DataError, DatasetUnavailable
from privfgl.data.partition import PARTITION_PARAMS, PARTITIONS, client_subgraphs, partition_nodes
from privfgl.data.splits import SPLIT_DEFAULTS, split_clients, stratified_split
from privfgl.data.synthetic import CLIENT_PRESETS, SYNTHETIC_PRESETS, client_csbm, contextual_sbm

__all__ = [
    "CLIENT_PRESETS", "DATASETS", "PARTITIONS", "PARTITION_PARAMS", "SPLIT_DEFAULTS", "SYNTHETIC_PRESETS",
    "DataError", "DatasetUnavailable",
    "client_csbm", "client_subgraphs", "contextual_sbm", "dataset_status", "load_dataset", "partition_nodes",
    "resolve_data_root", "split_clients", "stratified_split",
]
