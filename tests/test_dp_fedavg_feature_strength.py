"""experiments/dp_fedavg_feature_strength.py: the stronger stand-in changes only the features, the calibration
takes the first signal that reaches the target, and the evaluated cells are the sweep's sbm-cora cells."""
import importlib
import tomllib
from pathlib import Path

import torch

from experiments.dp_fedavg_public_settings import SIGMA_EPS8

REPO = Path(__file__).resolve().parents[1]


def _script():
    return importlib.import_module("experiments.dp_fedavg_feature_strength")


def test_only_the_features_change_with_the_signal():
    weak, strong = _script().stand_in(1.0, 1), _script().stand_in(3.1, 1)
    assert torch.equal(weak.edge_index, strong.edge_index) and torch.equal(weak.y, strong.y)
    assert not torch.equal(weak.x, strong.x)
    # x = signal * mu_y + noise: with the same noise draw, the difference is (3.1 - 1) * mu_y, one row per class
    difference = strong.x - weak.x
    for c in range(int(weak.y.max()) + 1):
        rows = difference[weak.y == c]
        assert torch.allclose(rows, rows[0].expand_as(rows), atol=1e-5)


def test_the_calibration_takes_the_first_signal_that_reaches_the_target():
    first = _script().first_reaching
    seen = []
    accuracy = {1.0: 0.4, 2.0: 0.71, 3.0: 0.9}
    assert first(lambda s: seen.append(s) or accuracy[s], (1.0, 2.0, 3.0), 0.709) == 2.0
    assert seen == [1.0, 2.0]  # stops at the first that reaches it
    assert first(accuracy.get, (1.0, 2.0, 3.0), 0.95) is None


def test_the_evaluated_cells_are_the_sweeps_sbm_cora_cells():
    sweep = tomllib.loads((REPO / "experiments" / "dp_fedavg_many_clients.toml").read_text())
    cell = next(c for c in sweep["cells"] if c["label"] == "DP-FedAvg (C = 4)")
    dp = _script().evaluated_config("dp", 4.0, 0)
    assert (dp.method, dp.dataset, dp.partition, dp.split_mode, dp.hidden) == \
        (cell["method"], cell["dataset"], cell["partition"], cell["split_mode"], cell["hidden"])
    assert (dp.rounds, dp.evaluation, dp.clients) == (sweep["base"]["rounds"], sweep["base"]["evaluation"], 1000)
    assert dp.method_params == {k: (0 if v == "{seed}" else v) for k, v in cell["method_params"].items()}
    assert dp.dp == cell["dp"].format(sigma=SIGMA_EPS8, seed=0)
    fedavg_cell = next(c for c in sweep["cells"] if c["label"] == "FedAvg, no DP")
    fedavg = _script().evaluated_config("fedavg", 4.0, 0)
    assert (fedavg.method, fedavg.partition, fedavg.split_mode, fedavg.hidden) == \
        (fedavg_cell["method"], fedavg_cell["partition"], fedavg_cell["split_mode"], 64)
