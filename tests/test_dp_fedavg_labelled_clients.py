"""experiments/dp_fedavg_labelled_clients.py: a scaled graph keeps sbm-cora's shape but for its node count, scale 1
is the evaluated sbm-cora itself, the runs are the sweep's one-round cells with only the client count scaled, and
bad input gets one line naming it."""
import importlib
import sys
import tomllib
from pathlib import Path

import pytest
import torch

from privfgl.data import load_dataset
from privfgl.privacy import noise_multiplier_for

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def script():
    return importlib.import_module("experiments.dp_fedavg_labelled_clients")


def test_scale_one_is_the_evaluated_sbm_cora(script):
    scaled, evaluated = script.scaled_graph(1), load_dataset("sbm-cora", seed=0)
    assert torch.equal(scaled.x, evaluated.x) and torch.equal(scaled.edge_index, evaluated.edge_index)
    assert torch.equal(scaled.y, evaluated.y)


def test_a_larger_scale_multiplies_the_nodes_and_keeps_the_shape(script):
    graph = script.scaled_graph(2)
    assert (graph.num_nodes, graph.num_features, graph.num_classes) == (2 * 2708, 1433, 7)
    assert 3.5 < graph.edge_index.shape[1] / graph.num_nodes < 4.3  # mean degree about 3.9 (both directions stored)


def test_the_runs_are_the_sweep_s_one_round_cells_with_the_clients_scaled(script):
    sweep = tomllib.loads((REPO / "experiments" / "dp_fedavg_sbm_cora_sgc.toml").read_text())
    cell = next(c for c in sweep["cells"] if c["label"] == "DP-FedAvg, SGC, one round (T = 1, C = 1)")
    dp = script.scaled_config("dp", 10, 2)
    assert (dp.method, dp.rounds, dp.model, dp.optimizer, dp.lr, dp.partition, dp.split_mode) == \
        (cell["method"], cell["rounds"], "sgc", "sgd", 0.1, "metis", "random")
    assert dp.clients == 10_000 and dp.seed == 2
    assert dp.dp == cell["dp"].format(sigma=noise_multiplier_for(8, 1e-5, 1.0, 1, "rdp"), seed=2)
    assert dp.method_params["server_lr"] == 1000.0
    fedavg = script.scaled_config("fedavg", 4, 0)
    assert (fedavg.method, fedavg.rounds, fedavg.clients, fedavg.dp) == ("fedavg", 40, 4000, None)


def test_bad_scale_gets_one_line_naming_it(script, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["dp_fedavg_labelled_clients.py", "--scale", "0"])
    with pytest.raises(SystemExit) as exit_:
        script.main()
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "--scale 0" in err[-1] and "valid:" in err[-1]


def _client(edges, y, train, test):
    from torch_geometric.data import Data
    n = len(y)
    mask = lambda ids: torch.tensor([i in ids for i in range(n)])  # noqa: E731
    edge_index = torch.tensor(edges, dtype=torch.long).t() if edges else torch.empty(2, 0, dtype=torch.long)
    return Data(x=torch.zeros(n, 1), y=torch.tensor(y), edge_index=edge_index, num_nodes=n,
                train_mask=mask(train), test_mask=mask(test))


def test_a_test_node_s_group_is_its_place_relative_to_the_labelled_node(script):
    path = [(0, 1), (1, 0), (1, 2), (2, 1)]  # 0 - 1 - 2: node 2 is two hops from node 0
    assert script.group(_client(path, [3, 0, 3], train={0}, test={2})) == "linked, same class"
    assert script.group(_client(path, [3, 0, 5], train={0}, test={2})) == "linked, other class"
    assert script.group(_client([(0, 1), (1, 0)], [3, 3, 3], train={0}, test={2})) == "unlinked"  # node 2 isolated
    far = [(0, 1), (1, 0), (1, 2), (2, 1), (2, 3), (3, 2)]  # node 3 is three hops away: outside SGC's reach
    assert script.group(_client(far, [3, 0, 3, 3], train={0}, test={3})) == "unlinked"
    mixed = script.group(_client([(0, 1), (1, 0)], [3, 3, 3], train={0}, test={1, 2}))  # one linked, one not
    assert mixed is None


def test_the_split_sums_each_group_s_clients(script):
    path = [(0, 1), (1, 0)]
    clients = [_client(path, [1, 1], {0}, {1}), _client(path, [1, 2], {0}, {1}), _client([], [1, 1], {0}, {1}),
               _client(path, [1, 1], {0}, {1})]
    rows = [{"test_correct": 1, "n_test": 1}, {"test_correct": 0, "n_test": 1}, {"test_correct": 1, "n_test": 1},
            {"test_correct": 0, "n_test": 1}]
    assert script.split_accuracy(rows, clients) == {"linked, same class": (1, 2), "linked, other class": (0, 1),
                                                    "unlinked": (1, 1)}
