"""experiments/lapgraph_chosen_on_validation.py: per graph, ε and seed, the candidate with the highest validation
accuracy is chosen, and its test accuracy is what is reported; test accuracy never enters the choice, and a seed
whose candidates did not read one release is refused."""
import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "experiments" / "lapgraph_chosen_on_validation.py"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("lapgraph_chosen_on_validation", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def row(name, eps, seed, val, test, dataset="cora", release=None):
    return {"cell": f"LapGraph {name}, target_epsilon={eps}, dataset={dataset}", "method": "lapgraph",
            "dataset": dataset, "target_epsilon": eps, "seed": seed, "val_acc": val, "test_acc": test,
            "release": release or (dataset, "louvain", 10, None, 0.99 * eps, 0.01 * eps, seed)}


def test_the_choice_follows_validation_not_test(script):
    rows = [row("gcn, select=top", 1.0, 0, 0.60, 0.90), row("gcn, select=map", 1.0, 0, 0.70, 0.65),
            row("gcn, select=top", 1.0, 1, 0.72, 0.70), row("gcn, select=map", 1.0, 1, 0.71, 0.99),
            row("gcn, select=top", 1.0, 0, 0.10, 0.99, dataset="citeseer"),
            {"cell": "FedAvg GCN, no DP, dataset=cora", "method": "fedavg", "dataset": "cora",
             "target_epsilon": None, "seed": 0, "val_acc": 0.99, "test_acc": 0.99}]
    chosen = script.choose_on_validation(rows)
    assert [p["chosen"] for p in chosen[("cora", 1.0)]] == ["gcn, select=map", "gcn, select=top"]
    assert [p["test_acc"] for p in chosen[("cora", 1.0)]] == [0.65, 0.70]
    assert chosen[("citeseer", 1.0)][0]["candidates"] == 1


def test_the_block_names_the_target_and_whether_it_is_met(script, tmp_path):
    rows = [row("gcn, select=top", eps, s, 0.5, acc) for eps, acc in ((1.0, 0.70), (8.0, 0.70)) for s in (0, 1)]
    block, series, refs = script.report(rows, tmp_path)
    assert "| cora | 1 | 0.7000 ± 0.0000 |" in block and "≥ 0.66: met" in block and "≥ 0.74: unmet" in block
    assert list(series["cora"].x) == [1.0, 8.0]


def test_candidates_of_different_releases_are_refused(script):
    same = row("gcn, select=top", 1.0, 0, 0.6, 0.6)
    other_noise = row("gcn, select=map", 1.0, 0, 0.7, 0.7, release=("cora", "louvain", 10, None, 0.99, 0.01, 5))
    with pytest.raises(ValueError, match="did not read one seeded release"):
        script.choose_on_validation([same, other_noise])
    os_entropy = {**row("gcn, select=map", 1.0, 0, 0.7, 0.7), "release": None}
    with pytest.raises(ValueError, match="did not read one seeded release"):
        script.choose_on_validation([same, os_entropy])


def test_the_release_key_names_the_graph_the_split_of_epsilon_and_the_noise_seed(script):
    record = {"config": {"dataset": "cora", "partition": "louvain", "clients": 10, "partition_seed": None},
              "privacy": {"dp": {"method": "lapgraph", "noise_source": "seeded", "seed": 3, "epsilon_entries": 0.99,
                                 "epsilon_count": 0.01}}}
    assert script.release_key(record) == ("cora", "louvain", 10, None, 0.99, 0.01, 3)
    record["privacy"]["dp"]["noise_source"] = "os"
    assert script.release_key(record) is None


def test_without_records_it_says_so_in_one_line(script, tmp_path, capsys):
    assert script.main(["--results", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert "no run records there" in err and len(err.strip().splitlines()) == 1
