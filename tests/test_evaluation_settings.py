"""`--evaluate`: FedLoG's evaluation settings in the tracker, the engines' predict_on, runs and the CLI."""
import json

import pytest
import torch
from torch_geometric.data import Data

from privfgl.cli import build_parser, config_from_args, main
from privfgl.data import client_subgraphs, contextual_sbm, partition_nodes, split_clients
from privfgl.data.settings import EvalSetting
from privfgl.evaluation import RoundTracker
from privfgl.experiment import RunConfig, partition_cache_dir, run
from privfgl.methods.opfgl.personalize import LocalGraphs, to_pyg_names
from privfgl.models.stacked import BlockGraph, stacked_predict
from privfgl.training import LoopedTrainers, ModelConfig, StackedTrainers, init_params
from test_training import random_clients

CLOSED = ("unseen-node", "missing-class", "new-client")


@pytest.fixture(autouse=True)
def _partition_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("PRIVFGL_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def cora_run(planetoid_root, **kw):
    settings = dict(method="fedavg", dataset="cora", partition="metis", clients=3, rounds=2,
                    data_root=str(planetoid_root), download=False, progress=False)
    return run(RunConfig(**{**settings, **kw}))


# ---- the tracker --------------------------------------------------------------------------------
def graph(y, test):
    n = len(y)
    return Data(x=torch.zeros(n, 1), edge_index=torch.zeros(2, 0, dtype=torch.long), y=torch.tensor(y),
                test_mask=torch.isin(torch.arange(n), torch.tensor(test, dtype=torch.long)))


def own(y, val, test):
    g = graph(y, test)
    g.train_mask = torch.zeros(len(y), dtype=torch.bool)
    g.val_mask = torch.isin(torch.arange(len(y)), torch.tensor(val))
    return g


def test_settings_are_pooled_over_clients_and_the_shared_graph_is_a_mean_over_clients():
    clients = [own([0, 1, 1], val=[0], test=[1, 2]), own([0, 0], val=[0], test=[1])]
    a, b = graph([0, 0, 1, 1, 1], test=[0, 1, 2]), graph([1], test=[0])  # unseen-node: 3 + 1 test nodes
    missing_a = Data(x=a.x, edge_index=a.edge_index, y=a.y, test_mask=torch.tensor([False, False, False, True, True]))
    missing_b = Data(x=b.x, edge_index=b.edge_index, y=b.y, test_mask=torch.zeros(1, dtype=torch.bool))
    shared = graph([0, 1], test=[0, 1])
    settings = [EvalSetting("unseen-node", [a, b]), EvalSetting("missing-class", [missing_a, missing_b]),
                EvalSetting("new-client", [shared, shared], "clients")]
    tracker = RoundTracker(clients, num_classes=2, settings=settings)
    calls = []

    def predict_on(graphs):  # client k predicts class k on its test nodes, the other class elsewhere
        calls.append(graphs)
        return [torch.eye(2)[torch.where(g.test_mask, k, 1 - k)] for k, g in enumerate(graphs)]

    own_logits = [torch.eye(2)[torch.tensor([0, 1, 0])], torch.eye(2)[torch.tensor([0, 0])]]
    e = tracker.evaluate(0, own_logits, predict_on=predict_on)
    assert len(calls) == 3  # one call per setting: each reads only its own test nodes
    s = e["settings"]
    assert list(s) == ["seen", "unseen-node", "missing-class", "new-client"]
    assert s["seen"]["test_acc"] == 2 / 3 and s["seen"]["n_test"] == 3               # 1 of 2, 1 of 1
    assert s["unseen-node"]["test_acc"] == 3 / 4 and s["unseen-node"]["n_test"] == 4  # 2 of 3, 1 of 1, pooled
    assert [c["test_acc"] for c in s["unseen-node"]["per_client"]] == [2 / 3, 1.0]
    assert s["missing-class"]["per_client"][1] == {"client": 1, "n_test": 0, "correct": 0, "test_acc": None}
    assert s["missing-class"]["test_acc"] == 0.0 and s["missing-class"]["n_test"] == 2
    assert s["new-client"] == {"test_acc": 0.5, "n_test": 2, "per_client": [  # each client: 1 of the 2 nodes
        {"client": 0, "n_test": 2, "correct": 1, "test_acc": 0.5},
        {"client": 1, "n_test": 2, "correct": 1, "test_acc": 0.5}]}
    worse = [torch.eye(2)[torch.tensor([1, 1, 0])], torch.eye(2)[torch.tensor([1, 1])]]  # validation drops
    last = tracker.evaluate(1, worse, predict_on=predict_on)
    summary = tracker.summary()
    assert summary["best_round"] == 0 and summary["settings"] == s
    assert summary["last"]["settings"] == last["settings"] and last["settings"]["seen"]["test_acc"] == 1 / 3


def test_a_run_with_settings_needs_predict_on_and_a_run_without_keeps_its_summary():
    clients = [own([0, 1], val=[0], test=[1])]
    with pytest.raises(ValueError, match="settings unseen-node, but the method passed no predict_on"):
        RoundTracker(clients, 2, settings=[EvalSetting("unseen-node", [graph([0], [0])])]).evaluate(0, [torch.eye(2)])
    tracker = RoundTracker(clients, 2)
    tracker.evaluate(0, [torch.eye(2)])
    assert "settings" not in tracker.summary() and "settings" not in tracker.summary()["last"]


# ---- predict_on ---------------------------------------------------------------------------------
@pytest.mark.parametrize("model", ["gcn", "sage", "sgc", "mlp"])
def test_stacked_predict_on_equals_looped_on_the_same_params_and_predict_on_own_graphs(model):
    clients = random_clients()
    cfg = ModelConfig(model=model, hidden=16, dropout=0.5)
    init = [init_params(cfg, 40, 4, seed=k) for k in range(3)]
    looped, stacked = LoopedTrainers(clients, cfg, init), StackedTrainers(clients, cfg, init)
    stacked.train(3)
    for k in range(3):
        looped.set_params(k, stacked.get_params(k))
    others = random_clients(sizes=(25, 10, 40), seed=1)
    first = stacked.predict_on(others)
    for a, b in zip(looped.predict_on(others), first, strict=True):
        assert a.shape == (b.shape[0], 4) and torch.allclose(a, b, atol=1e-5)
    assert all(torch.equal(a, b) for a, b in zip(stacked.predict_on(others), first))  # again, from the cached graph
    for engine in (looped, stacked):
        assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(engine.predict_on(clients), engine.predict()))


def test_opfgl_personalised_gcn_on_other_graphs_is_its_own_forward():
    clients = random_clients()
    for c in clients:
        c.val_mask = ~c.train_mask
    torch.manual_seed(0)
    params = {"w0": torch.randn(3, 40, 16), "b0": torch.randn(3, 16), "w1": torch.randn(3, 16, 4),
              "b1": torch.randn(3, 4)}
    graphs = LocalGraphs(clients, torch.device("cpu"))
    expected = graphs.split(graphs.forward(params, 2, 0.0, False))
    block = BlockGraph([c.x for c in clients], [c.edge_index for c in clients])
    got = stacked_predict("gcn", to_pyg_names(params, 2), block, 2)
    assert all(torch.allclose(a, b, atol=1e-4) for a, b in zip(expected, got, strict=True))


# ---- runs ---------------------------------------------------------------------------------------
def test_fedavg_closed_set_reports_all_four_settings_at_the_best_and_last_round(planetoid_root):
    record, setup = cora_run(planetoid_root, evaluate=CLOSED)
    m = record["metrics"]
    assert list(m["settings"]) == ["seen", *CLOSED] and list(m["last"]["settings"]) == ["seen", *CLOSED]
    for name, s in m["settings"].items():
        assert 0 <= s["test_acc"] <= 1 and s["n_test"] > 0 and len(s["per_client"]) == 3, name
    assert m["settings"]["seen"]["test_acc"] == m["test_acc_micro"]
    regime = record["data_regime"]
    assert regime["regime"] == "closed" and regime["h"] == 2 and regime["cropped_nodes"] == 0
    assert m["settings"]["new-client"]["n_test"] == regime["new_client_nodes"] > 0
    assert all(1 <= len(c) <= 2 for c in regime["missing_classes"])
    assert all(not torch.isin(c.y, torch.tensor(missing)).any()
               for c, missing in zip(setup.clients, regime["missing_classes"]))
    assert record["config"]["evaluate"] == list(CLOSED)
    json.dumps(record)


def test_any_closed_setting_reports_the_whole_closed_regime_and_open_set_its_own(planetoid_root):
    record, _ = cora_run(planetoid_root, method="local", evaluate=("new-client",), rounds=1)
    assert list(record["metrics"]["settings"]) == ["seen", *CLOSED]
    record, _ = cora_run(planetoid_root, evaluate=("seen", "open-set"))
    assert list(record["metrics"]["settings"]) == ["seen", "open-set-unseen-node", "open-set-missing-class"]
    regime = record["data_regime"]
    assert regime["regime"] == "open" and regime["cropped_nodes"] == round(0.2 * 2708)
    assert record["metrics"]["settings"]["open-set-unseen-node"]["n_test"] > 0


def test_seen_alone_leaves_the_data_and_the_record_as_before(planetoid_root, cora):
    record, setup = cora_run(planetoid_root, rounds=1)
    expected = client_subgraphs(cora, partition_nodes(cora, "metis", 3, seed=0, cache_dir=partition_cache_dir()))
    split_clients(expected, 0.2, 0.4, 0.4, seed=0)
    for got, want in zip(setup.clients, expected, strict=True):
        for key in ("x", "y", "edge_index", "global_id", "train_mask", "val_mask", "test_mask"):
            assert torch.equal(got[key], want[key]), key
    assert set(record) == {"schema", "config", "metrics", "cost", "time", "privacy", "attacks"}
    assert "settings" not in record["metrics"] and record["config"]["evaluate"] == ["seen"]


def test_fedspray_and_opfgl_evaluate_their_personalised_models_on_the_settings():
    data = contextual_sbm(num_nodes=400, num_classes=4, num_features=16, homophily=0.85, seed=0)
    common = dict(dataset="sbm", partition="louvain", clients=3, split=(0.4, 0.3, 0.3), progress=False)
    spray, _ = run(RunConfig(method="fedspray", rounds=2, evaluate=("open-set",), **common), data=data)
    assert list(spray["metrics"]["settings"]) == ["seen", "open-set-unseen-node", "open-set-missing-class"]
    assert spray["metrics"]["settings"]["open-set-unseen-node"]["test_acc"] is not None
    fast = {"condense_iters": 30, "max_iters": 60, "eval_every": 20, "patience": 1, "hre_k": 1, "f_th": 0.9}
    opfgl, _ = run(RunConfig(method="opfgl", rounds=1, evaluate=CLOSED, method_params=fast, **common), data=data)
    s = opfgl["metrics"]["settings"]
    assert list(s) == ["seen", *CLOSED] and s["unseen-node"]["n_test"] > 0 and 0 <= s["new-client"]["test_acc"] <= 1
    assert s["seen"]["test_acc"] == opfgl["metrics"]["test_acc_micro"]


# ---- the command line ---------------------------------------------------------------------------
@pytest.mark.parametrize("argv, message", [
    (["--evaluate", "unseen"], "invalid evaluate setting 'unseen'; valid: seen, unseen-node, missing-class, "
                               "new-client, open-set"),
    (["--evaluate", "open-set,unseen-node"], "--evaluate open-set cannot be combined with unseen-node"),
    (["--evaluate", "unseen-node", "--method", "fedomd"],
     "--evaluate unseen-node is not supported by method fedomd; supported: dp-fedavg, fedavg"),
    (["--evaluate", "new-client", "--method", "dp-sgd"], "not supported by method dp-sgd"),
])
def test_bad_settings_give_one_clear_line(planetoid_root, capsys, argv, message):
    code = main(["run", "--dataset", "cora", "--data-root", str(planetoid_root), "--offline", "--rounds", "1",
                 "--no-progress", *argv])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("privfgl: error:") and message in err and len(err.strip().splitlines()) == 1


def test_settings_come_from_the_flag_or_a_config_file(tmp_path):
    parser = build_parser()
    assert config_from_args(parser.parse_args(["run", "--evaluate", "unseen-node, new-client"])).evaluate == (
        "unseen-node", "new-client")
    for text in ("evaluate: [seen, open-set]\n", "evaluate: seen,open-set\n"):
        (tmp_path / "c.yaml").write_text(text)
        cfg = config_from_args(parser.parse_args(["run", "--config", str(tmp_path / "c.yaml")]))
        assert cfg.evaluate == ("seen", "open-set")
    assert RunConfig().evaluate == ("seen",)
