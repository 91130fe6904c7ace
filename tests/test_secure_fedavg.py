"""FedAvg through real secure aggregation: same accuracy as plain, and the server sees only sums."""
import pytest

from privfgl.experiment import RunConfig, run
from privfgl.federation import SERVER
from tests.view_checks import assert_no_input_in_blobs


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


def upload_grids(protocol, num_clients: int) -> set[int]:
    """The fixed-point scales 2^-f the clients encode their uploads on (crypten's default 16 too)."""
    if protocol.name == "ckks":
        return {16, protocol.grid_bits(num_clients)}
    if protocol.name == "secagg":
        from protocols.secagg.quantize import make_grid

        return {16, make_grid(protocol.bits, protocol.clip_range, protocol.frac_bits, num_clients, False).frac_bits}
    return {16, getattr(protocol, "precision_bits", 16), getattr(protocol, "frac_bits", 16)}


def assert_last_uploads_unreadable_by_the_server(setup, **check) -> None:
    """No client's model update of the last round (the transcript keeps that round's bytes) can be read
    from the bytes the server received in it (``view_checks.assert_no_input_in_blobs``)."""
    federation = setup.federation
    last = max(r for r, name in federation.audit_log if name == "model_update")
    uploads = federation.audit_log[(last, "model_update")]["uploads"]
    assert len(uploads) == 10
    received = federation.transcript.view(SERVER, round=last)
    assert_no_input_in_blobs(received, uploads, upload_grids(federation.protocol, len(uploads)), **check)


def test_the_upload_check_reads_the_plain_server_view(plain_run):
    _, setup = plain_run
    with pytest.raises(AssertionError, match="client 0's input can be read"):
        assert_last_uploads_unreadable_by_the_server(setup)


@pytest.mark.parametrize("protocol, params", [("crypten", {}), ("ckks", {}), ("ckks", {"preset": "sum"}),
                                              ("bfv", {"preset": "sum"}), ("secagg", {})])
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
    assert_last_uploads_unreadable_by_the_server(setup, windows=2)
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
