"""FedGPL tests' shared fixtures: a private cache per session and the small task graph."""
import pytest

from privfgl.data import contextual_sbm


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("PRIVFGL_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.fixture(scope="module")
def graph():
    return contextual_sbm(num_nodes=400, num_classes=3, num_features=32, homophily=0.85, seed=0)
