"""FedAvg through real secure aggregation: same accuracy as plain, and the server sees only sums."""
import pytest

from privfgl.experiment import RunConfig, run
from privfgl.federation import SERVER


@pytest.fixture(autouse=True)
def _partition_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("PRIVFGL_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def cora_fedavg(planetoid_root, protocol, rounds=5, **params):
    cfg = RunConfig(method="fedavg", dataset="cora", partition="louvain", clients=10, rounds=rounds, seed=0,
                    protocol=protocol, protocol_params=params, data_root=str(planetoid_root), download=False,
                    progress=False)
    return run(cfg)


@pytest.fixture(scope="module")
def plain_run(planetoid_root):
    return cora_fedavg(planetoid_root, "plain")


@pytest.mark.parametrize("protocol, params", [("crypten", {}), ("ckks", {}), ("ckks", {"preset": "sum"}),
                                              ("bfv", {"preset": "sum"})])
def test_secure_fedavg_matches_plain_and_hides_every_upload(planetoid_root, plain_run, protocol, params):
    plain, _ = plain_run
    secure, setup = cora_fedavg(planetoid_root, protocol, **params)
    assert abs(secure["metrics"]["test_acc"] - plain["metrics"]["test_acc"]) <= 0.005
    for a, b in zip(secure["metrics"]["curve"], plain["metrics"]["curve"]):
        assert abs(a["val_acc"] - b["val_acc"]) <= 0.005
    server = setup.federation.transcript
    uploads = server.view(SERVER, name="model_update")
    assert len(uploads) == 5 * 10
    assert all(m.kind in ("ciphertext", "share") and m.tensors is None and m.nbytes > 0 for m in uploads)
    sums = server.view(SERVER, name="model_update:sum")
    assert len(sums) == 5 and sums[-1].tensors is not None  # the revealed aggregate only
    assert secure["privacy"]["protocol"] == protocol
    assert "plaintext" not in secure["privacy"]["server_view"]
    assert {"protect", "aggregate", "reveal"} <= set(secure["time"]["phases"])
    assert secure["cost"]["bytes_up"] > 0


def test_secure_uploads_cost_more_bytes_than_plain(planetoid_root, plain_run):
    plain, _ = plain_run
    ckks, _ = cora_fedavg(planetoid_root, "ckks", rounds=1)
    per_round_plain = plain["cost"]["bytes_up"] / 5
    assert ckks["cost"]["bytes_up"] > per_round_plain  # ~80 B/value vs 8 B/value


def test_multiprocess_crypten_runs_fedavg_with_one_process_per_party_and_matches_in_process(planetoid_root):
    inproc, _ = cora_fedavg(planetoid_root, "crypten", rounds=2)
    multi, setup = cora_fedavg(planetoid_root, "crypten", rounds=2, mode="multiprocess")
    assert multi["metrics"]["curve"] == inproc["metrics"]["curve"]
    assert multi["config"]["protocol_params"] == {"mode": "multiprocess"}
    assert all(m.kind == "share" for m in setup.federation.transcript.view(SERVER, name="model_update"))
