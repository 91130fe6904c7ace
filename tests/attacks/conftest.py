"""Fixtures for the attack tests (the shared cases live in attack_cases.py)."""
from __future__ import annotations

import pytest
from torch_geometric.data import Data

from attack_cases import DEFAULT_TRAINING, bag_of_words_graph, fedavg_config


@pytest.fixture(autouse=True)
def _partition_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("PRIVFGL_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.fixture(scope="session")
def bow_graph() -> Data:
    return bag_of_words_graph()


@pytest.fixture(scope="session")
def overfitted_plain(cora):
    """(cfg, setup) of attack_cases.overfitted_config() under plain, run once for the membership and
    link-stealing tests (the attacks read copies from its view)."""
    from attack_cases import overfitted_config
    from privfgl.experiment import run
    cfg = overfitted_config()
    _, setup = run(cfg, data=cora)
    return cfg, setup


@pytest.fixture(scope="module")
def default_fedavg(bow_graph):
    """(cfg, setup) of FedAvg on the bag-of-words graph under privfgl's default training (Adam, 3 local
    epochs, dropout 0.5), once per test module."""
    from privfgl.experiment import run
    cfg = fedavg_config(**DEFAULT_TRAINING)
    _, setup = run(cfg, data=bow_graph)
    return cfg, setup
