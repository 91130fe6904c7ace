"""experiments/authors_side_by_side_fedgpl.py: the peer's log is read as the authors' code selects (the best
task-mean ACC over epochs), privfgl's record as its configuration selects, and the target is the issue's rule.
No peer runs here."""
import importlib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _script():
    return importlib.import_module("experiments.authors_side_by_side_fedgpl")


LOG = "\n".join(["PEER_RUN_START 0 100.0", "PEER_SAMPLES_SHA abc",
                 "PEER_EPOCH 0 ACC 0.600000 F1 0.500000 N 0.5 E 0.6 G 0.7",
                 "PEER_EPOCH 1 ACC 0.850000 F1 0.840000 N 0.75 E 0.9 G 0.9",
                 "PEER_EPOCH 2 ACC 0.850000 F1 0.700000 N 0.8 E 0.85 G 0.9",
                 "PEER_EPOCH 3 ACC 0.820000 F1 0.810000 N 0.7 E 0.86 G 0.9"])


def test_the_peer_log_gives_the_first_best_epoch_its_tasks_and_the_runs_seconds():
    parse = _script().parse_peer_log
    assert parse(LOG) is None  # not finished: no PEER_RUN_END
    r = parse(LOG + "\nPEER_RUN_END 250.5")
    assert r["best_round"] == 1 and abs(r["acc"] - 85.0) < 1e-9 and abs(r["f1"] - 84.0) < 1e-9
    assert [round(t, 6) for t in r["tasks"]] == [75.0, 90.0, 90.0]
    assert abs(r["last_acc"] - 82.0) < 1e-9 and r["seconds"] == 150.5 and r["samples_sha"] == "abc"


def test_privfgls_record_gives_its_selected_round_and_its_seconds_without_pretraining():
    record = {"metrics": {"best_round": 7, "samples_file": {"sha256": "f00"},
                          "per_task": {"acc": {"node": 0.8, "edge": 0.9, "graph": 1.0, "mean_over_tasks": 0.9},
                                       "f1": {"mean_over_tasks": 0.88}, "last_acc": {"mean_over_tasks": 0.85},
                                       "test_curve": [0.5, 0.92, 0.9]}},
              "time": {"total_s": 300.0, "caches": {"pretrain": {"cache": "miss", "seconds": 120.0}}}}
    r = _script().parse_record(record)
    assert round(r["acc"], 6) == 90.0 and round(r["best_test"], 6) == 92.0 and r["seconds"] == 180.0
    record["time"]["caches"]["pretrain"]["cache"] = "hit"
    assert _script().parse_record(record)["seconds"] == 300.0


def test_the_target_is_the_authors_mean_minus_one_std_and_their_wall_time():
    verdict = _script().verdict
    peer = [{"acc": 84.0, "seconds": 100.0}, {"acc": 86.0, "seconds": 100.0}]  # 85 ± 1: floor 84
    assert verdict(peer, [{"acc": 84.0, "seconds": 90.0}, {"acc": 84.0, "seconds": 110.0}]) == \
        "acc holds (floor 84.00); time holds"
    assert verdict(peer, [{"acc": 83.9, "seconds": 101.0}, {"acc": 84.0, "seconds": 101.0}]) == \
        "acc fails (floor 84.00); time fails"
    assert verdict(peer, []) == "not measured"


def test_hidtas_gain_is_paired_by_seed():
    gain = _script().gain
    hidta = [{"seed": 0, "acc": 88.0}, {"seed": 1, "acc": 87.0}, {"seed": 2, "acc": 90.0}]
    fedavg = [{"seed": 0, "acc": 87.0}, {"seed": 1, "acc": 88.0}]  # seed 2 not run: left out
    assert gain(hidta, fedavg) == "0.00 ± 1.00"
    assert gain(hidta, fedavg[:1]) == "1.00 (1 seed)"
    assert gain(hidta, []) == "not run"


def test_the_code_configuration_is_the_authors_options():
    s = _script()
    cmd = s.privfgl_command(type("A", (), {"work": Path("/w"), "peer_src": Path("/src")})(), "cora",
                            "privfgl-code-trunk", 1, Path("/w/o.json"))
    params = dict(a.split("=", 1) for a in cmd[cmd.index("--method-param") + 1::2])
    assert params == {"samples": "file:/w/authors-cora.pt", "node_ratio": "0.1", "selection": "test",
                      "eval_dropout": "true", "hidta_mode": "code", "lr_prompt": "0.15", "lr_head": "0.2",
                      "freeze_trunk": "true", "trunk": "file:/src/pre_trained_gnn/Cora.GraphCL.TransformerConv.pth"}
    peer = s.peer_command(type("A", (), {"peer_python": "py"})(), "citeseer", "peer-fedavg", 2)
    flags = dict(zip(peer[3::2], peer[4::2]))
    assert flags == {"--dataset_name": "CiteSeer", "--num_classes": "6", "--algorithm": "VPG", "--federated": "FedAvg",
                     "--ratio": "0.1", "--epochs": "50", "-S": "2"}


def test_the_table_names_the_commits_of_privfgls_runs_and_not_the_peers():
    script = _script()
    made = {"metrics": {"best_round": 1, "per_task": {"acc": {"node": 0.8, "edge": 0.9, "graph": 1.0,
                                                              "mean_over_tasks": 0.9},
                                                      "f1": {"mean_over_tasks": 0.88},
                                                      "last_acc": {"mean_over_tasks": 0.85}, "test_curve": [0.9]}},
            "time": {"total_s": 10.0, "caches": {"pretrain": {"cache": "hit", "seconds": 1.0}}},
            "config": {"versions": {"privfgl_commit": "0123456789ab"}}}
    ours = script.parse_record(made)
    assert ours["code"] == "0123456789ab"
    cell, stage = next(iter(script.CELLS)), next(s for s in script.STAGES if not s.startswith("peer"))
    results = {cell: {stage: [{**ours, "seed": 0}], "peer": [{"acc": 85.0, "seconds": 1.0, "seed": 0}]}}
    assert "The privfgl runs come from privfgl commit `0123456789ab`." in script.table(results)
    del made["config"]  # a record from before commits were kept
    assert script.parse_record(made)["code"] is None
