"""Local, FedAvg and FedProx on real Cora: accuracy, determinism, the record, the transcript."""
import pytest
import torch

from privfgl.experiment import RunConfig, run
from privfgl.federation import SERVER


@pytest.fixture(autouse=True)
def _partition_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("PRIVFGL_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def cora_run(planetoid_root, **kw):
    settings = dict(method="fedavg", dataset="cora", partition="louvain", clients=10, rounds=5,
                    data_root=str(planetoid_root), download=False, progress=False)
    settings.update(kw)
    return run(RunConfig(**settings))


def test_fedavg_on_cora_louvain_reaches_the_peer_library_accuracy(planetoid_root):
    # OpenFGL's FedAvg reaches about 0.795 on this setting (20/40/40, GCN 64, 3 epochs, 100 rounds).
    record, _ = cora_run(planetoid_root, rounds=100, seed=0)
    assert record["metrics"]["test_acc"] >= 0.78


def test_the_same_seed_gives_the_same_run_and_another_seed_does_not(planetoid_root):
    a, _ = cora_run(planetoid_root, seed=3)
    b, _ = cora_run(planetoid_root, seed=3)
    c, _ = cora_run(planetoid_root, seed=4)
    assert a["metrics"]["curve"] == b["metrics"]["curve"]
    assert a["metrics"]["curve"] != c["metrics"]["curve"]


def test_run_record_follows_the_schema(planetoid_root):
    record, _ = cora_run(planetoid_root, rounds=3)
    assert record["schema"] == 1
    assert set(record) == {"schema", "config", "metrics", "cost", "time", "privacy", "attacks"}
    assert record["config"]["seed"] == 0 and record["config"]["versions"]["torch"].startswith("2.13")
    m = record["metrics"]
    assert 0 <= m["test_acc"] <= 1 and 0 <= m["test_f1_macro"] <= 1 and 0 <= m["val_acc"] <= 1
    assert len(m["per_client"]) == 10 and sum(c["n_test"] for c in m["per_client"]) > 0
    assert record["cost"]["bytes_up"] > 0 and record["cost"]["rounds"] == 3
    assert {"local_train", "aggregate"} <= set(record["time"]["phases"])
    assert record["privacy"]["protocol"] == "plain"


def test_plain_transcript_holds_each_client_upload_of_the_last_round(planetoid_root):
    record, setup = cora_run(planetoid_root, rounds=2)
    uploads = setup.federation.transcript.view(SERVER, name="model_update", round=1)
    assert len(uploads) == 10 and all(m.kind == "plaintext" and m.tensors is not None for m in uploads)
    n_train = [int(c.train_mask.sum()) for c in setup.clients]
    assert [float(m.tensors["n"]) for m in uploads] == n_train
    param_values = sum(t.numel() for t in uploads[0].tensors.values())
    assert all(m.nbytes == param_values * 8 for m in uploads)  # float64 pre-weighted upload
    assert record["cost"]["bytes_up"] == 2 * 10 * param_values * 8
    # the server's new model is the n-weighted mean: Σ n_k·w_k / Σ n_k, from the uploads it received
    (broadcast,) = [m for m in setup.federation.transcript.view("client0", name="global_model", round=1)]
    total_n = sum(float(m.tensors["n"]) for m in uploads)
    for name, w in broadcast.tensors.items():
        expected = sum(m.tensors[name] for m in uploads) / total_n
        assert torch.allclose(w.double(), expected, atol=1e-6), name


def test_local_sends_nothing_and_fedprox_and_finetuning_run(planetoid_root):
    local, _ = cora_run(planetoid_root, method="local", rounds=5)
    assert local["cost"]["bytes_up"] == 0 and local["cost"]["bytes_down"] == 0
    prox, _ = cora_run(planetoid_root, method="fedprox", mu=0.1, rounds=3, finetune_epochs=4)
    curve = prox["metrics"]["curve"]
    assert [(e["round"], e["stage"]) for e in curve] == [(r, "train") for r in range(3)] + \
        [(r, "finetune") for r in range(3, 7)]
    tuned = {(e["val_acc"], e["test_acc"]) for e in curve[3:]}
    assert len(tuned) > 1  # each fine-tuning epoch trains: the model, so its scores, move


def test_global_model_evaluation_is_one_model_for_every_client(planetoid_root):
    record, setup = cora_run(planetoid_root, rounds=3, evaluation="global_model")
    assert record["config"]["evaluation"] == "global_model"
    assert [e["round"] for e in record["metrics"]["curve"]] == [0, 1, 2]
    local, _ = cora_run(planetoid_root, rounds=3, evaluation="local_model")  # the clients' models, same seed
    assert record["metrics"]["curve"] != local["metrics"]["curve"]


def test_looped_engine_gives_the_same_accuracy_as_stacked_without_dropout(planetoid_root):
    a, _ = cora_run(planetoid_root, rounds=3, dropout=0.0, engine="stacked")
    b, _ = cora_run(planetoid_root, rounds=3, dropout=0.0, engine="looped")
    for x, y in zip(a["metrics"]["curve"], b["metrics"]["curve"]):
        assert abs(x["val_acc"] - y["val_acc"]) < 2e-3


@pytest.mark.parametrize("model", ["sage", "gat", "sgc", "mlp"])
def test_every_backbone_trains_federated(planetoid_root, model):
    record, _ = cora_run(planetoid_root, rounds=2, model=model, hidden=16)
    assert record["metrics"]["test_acc"] > 1 / 7  # better than chance after two rounds


def test_cuda_is_refused_clearly_without_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(ValueError, match="no CUDA device"):
        RunConfig(device="cuda").validate()


@pytest.mark.parametrize("method", ["dp-sgd", "fedgpl", "fedlog", "gap"])
def test_a_cpu_only_method_refuses_a_gpu_in_one_line_even_where_one_is_present(method):
    with pytest.raises(ValueError, match=f"^--device cuda: {method} runs on the CPU only; use --device cpu"):
        RunConfig(method=method, device="cuda").validate()
