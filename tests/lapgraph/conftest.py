"""Shared by the LapGraph tests: a per-session partition cache, and Cora's client 0 (Louvain, 10 clients)."""
import pytest

from privfgl.experiment import RunConfig, build_setup


@pytest.fixture(autouse=True)
def _partition_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("PRIVFGL_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.fixture(scope="module")
def client(planetoid_root, tmp_path_factory):
    """Client 0 of Cora, Louvain, 10 clients (271 nodes)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PRIVFGL_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))
        cfg = RunConfig(method="lapgraph", dataset="cora", partition="louvain", clients=10,
                        data_root=str(planetoid_root), download=False, progress=False)
        return build_setup(cfg).clients[0]
