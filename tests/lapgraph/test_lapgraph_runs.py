"""`--method lapgraph` end to end on Cora: the record's privacy block, training and evaluation on the released
graphs, uploads through the protocol (plain and secagg), determinism per noise seed, one line for bad input."""
import json

import pytest

from privfgl.cli import main
from privfgl.experiment import RunConfig, run
from privfgl.federation import SERVER



def lapgraph_run(planetoid_root, params=None, method="lapgraph", **kw):
    settings = dict(method=method, dataset="cora", partition="louvain", clients=10, rounds=3, local_epochs=1,
                    data_root=str(planetoid_root), download=False, progress=False,
                    method_params={"seed": 3, **(params or {})} if method == "lapgraph" else {})
    settings.update(kw)
    return run(RunConfig(**settings))


def test_the_record_gives_the_unit_the_split_and_pure_epsilon(planetoid_root):
    record, setup = lapgraph_run(planetoid_root, {"epsilon": 2.0, "count_share": 0.25})
    priv = record["privacy"]
    dp = priv["dp"]
    assert priv["epsilon"] == 2.0 and priv["delta"] == 0.0
    assert dp["epsilon_entries"] == 1.5 and dp["epsilon_count"] == 0.5
    assert dp["epsilon_entries"] + dp["epsilon_count"] == priv["epsilon"]  # the count's ε is charged
    assert dp["noise_scale_entries"] == 1 / 1.5 and dp["noise_scale_count"] == 1 / 0.5
    assert dp["sensitivity"] == {"entries_l1": 1.0, "count_l1": 1.0}
    assert dp["unit"].startswith("one undirected edge") and "features and labels" in dp["not_protected"]
    assert dp["noise_source"] == "seeded" and dp["seed"] == 3 and "seed_warning" in dp
    assert "LapGraph" in priv["trust"]["dp"]["why"]
    # the server sees the model uploads, never the release
    names = {m.name for m in setup.federation.transcript.view(SERVER)}
    assert "model_update" in names and "lapgraph_release" not in names
    assert len(setup.federation.transcript.view(SERVER, name="model_update", round=0)) == 10


def test_training_and_evaluation_read_the_released_graph_not_the_true_one(planetoid_root):
    """At ε = 1e7 the release is the true graph, so the run is FedAvg's to the bit; at ε = 0.5 it is not."""
    fedavg, _ = lapgraph_run(planetoid_root, method="fedavg")
    exact, _ = lapgraph_run(planetoid_root, {"epsilon": 1e7})
    noisy, _ = lapgraph_run(planetoid_root, {"epsilon": 0.5})
    assert exact["metrics"]["curve"] == fedavg["metrics"]["curve"]
    assert noisy["metrics"]["curve"] != fedavg["metrics"]["curve"]


def test_the_run_s_model_is_the_one_trained_on_the_release(planetoid_root):
    """--model sage (privacy_utility_lapgraph_sage.toml): at ε = 1e7 the run is FedAvg SAGE's to the bit."""
    fedavg_sage, _ = lapgraph_run(planetoid_root, method="fedavg", model="sage")
    lapgraph_sage, _ = lapgraph_run(planetoid_root, {"epsilon": 1e7}, model="sage")
    lapgraph_gcn, _ = lapgraph_run(planetoid_root, {"epsilon": 1e7})
    assert lapgraph_sage["config"]["model"] == "sage"
    assert lapgraph_sage["metrics"]["curve"] == fedavg_sage["metrics"]["curve"]
    assert lapgraph_sage["metrics"]["curve"] != lapgraph_gcn["metrics"]["curve"]


def test_a_seeded_run_repeats_and_another_noise_seed_changes_it(planetoid_root):
    a, _ = lapgraph_run(planetoid_root)
    b, _ = lapgraph_run(planetoid_root)
    c, _ = lapgraph_run(planetoid_root, {"seed": 4})
    assert a["metrics"]["curve"] == b["metrics"]["curve"]
    assert c["metrics"]["curve"] != a["metrics"]["curve"]


def test_os_entropy_is_the_default_noise(planetoid_root):
    record, _ = run(RunConfig(method="lapgraph", dataset="cora", partition="louvain", clients=10, rounds=1,
                              local_epochs=1, data_root=str(planetoid_root), download=False, progress=False))
    assert record["privacy"]["dp"]["noise_source"] == "os" and record["privacy"]["dp"]["seed"] is None


def test_it_runs_from_the_cli_under_plain_and_secagg(planetoid_root, tmp_path, capsys):
    for protocol in ("plain", "secagg"):
        out = tmp_path / f"{protocol}.json"
        code = main(["run", "--method", "lapgraph", "--dataset", "cora", "--clients", "10", "--rounds", "3",
                     "--protocol", protocol, "--method-param", "epsilon=8", "--method-param", "rank=20",
                     "--data-root", str(planetoid_root), "--offline", "--no-progress", "--out", str(out)])
        assert code == 0, capsys.readouterr().err
        record = json.loads(out.read_text())
        assert record["config"]["protocol"] == protocol and record["privacy"]["epsilon"] == 8.0
        assert record["privacy"]["dp"]["rank"] == 20 and 0.3 < record["metrics"]["test_acc"] <= 1.0


@pytest.mark.parametrize("argv,message", [
    (["--method-param", "epsilon=-1"], "lapgraph: invalid method param epsilon=-1.0; valid: a number > 0"),
    (["--method-param", "count_share=1"], "lapgraph: invalid method param count_share=1.0; valid: a number in (0, 1)"),
    (["--method-param", "rank=-2"], "lapgraph: invalid method param rank=-2; valid: an integer >= 0"),
    (["--method-param", "rank=x"], "lapgraph: invalid method param rank='x'; valid: an integer"),
    (["--method-param", "seed=abc"], "lapgraph: invalid method param seed='abc'; valid: os or an integer"),
    (["--method-param", "sigma=1"], "lapgraph: unknown method param(s) sigma"),
    (["--method-param", "select=best"], "lapgraph: invalid method param select='best'; valid: top or map"),
    (["--method-param", "select=map", "--method-param", "rank=20"],
     "lapgraph: invalid method param select='map'; valid: top with rank > 0"),
    (["--method-param", "max_nodes=100"], "over the limit max_nodes=100"),
    (["--dp", "laplace:epsilon=1,clip=1,on=update,mode=local"], "--dp does not apply to lapgraph"),
    (["--mu", "0.5"], "FedProx's proximal weight"),
])
def test_bad_input_is_one_line_and_exit_code_2(planetoid_root, capsys, argv, message):
    code = main(["run", "--method", "lapgraph", "--dataset", "cora", "--clients", "10", "--rounds", "1", *argv,
                 "--data-root", str(planetoid_root), "--offline", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
