"""experiments/authors_side_by_side_fedspray.py: privfgl runs the authors' main.py settings, both sides read
the same partition files (the repository's format) and the authors' split of each seed, the peer's log
is read run by run, and the target is judged as the issue states it. No peer is needed."""
import importlib
import importlib.util
import sys
from pathlib import Path

import pytest

from privfgl.data.partition_file import read_partition
from privfgl.methods.fedspray.params import resolve_params

REPO = Path(__file__).resolve().parents[1]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass resolves annotations through it
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def script():
    return importlib.import_module("experiments.authors_side_by_side_fedspray")


@pytest.fixture(scope="module")
def driver():
    return _load("fedspray_main", REPO / "experiments" / "peers" / "fedspray_main.py")


def test_privfgl_runs_the_authors_main_py_settings(script, driver):
    code = resolve_params({"preset": "code"})
    authors = {**driver.AUTHORS_RUN, "rounds": 500, "gnn": "sage", "proxy lr": 0.02}  # run(): rounds=500, SAGE
    assert set(script.AUTHORS_SETTINGS) == set(authors)
    for setting, (target, value) in script.AUTHORS_SETTINGS.items():
        assert authors[setting] == value, setting
        for key in (target if isinstance(target, tuple) else (target,)):
            got = script.PRIVFGL_ARGS[key[2:]] if key.startswith("--") else getattr(code, key)
            assert got == value, (setting, key)
    assert (code.lambda2, code.kd_conf_threshold, code.node_proxy_init, code.persistent_node_proxies,
            code.projector_start, code.gnn_init, code.head_init, code.selection) == \
        (1.0, 0.7, 0.1, True, "classifier", "uniform", "fan_out", "val_loss")  # client.py's choices


def test_each_stage_reads_the_shared_files_and_the_seeds_split_except_privfgl_own(script, tmp_path):
    cfg = script.privfgl_config(tmp_path, "cora", "privfgl", 2)  # rounds: 500, main.py's
    assert cfg["partition"] == f"file:{tmp_path}/partition/Cora_*.txt"
    assert cfg["split_file"] == str(tmp_path / "authors-split-cora-seed2.json")
    assert (cfg["seed"], cfg["model"], cfg["rounds"], cfg["threads"], cfg["method_params"]) == \
        (2, "sage", 500, 1, {"preset": "code"})
    assert script.privfgl_config(tmp_path, "cora", "privfgl-paper", 0)["method_params"] == {}
    assert script.privfgl_config(tmp_path, "cora", "privfgl-projector", 0)["method_params"] == \
        {"preset": "code", "projector_start": "projector"}
    own = script.privfgl_config(tmp_path, "citeseer", "privfgl-own", 1)
    assert "partition" not in own and "split_file" not in own and own["dataset"] == "citeseer"


def test_client_files_are_the_repositorys_format_and_privfgl_reads_them_back(script, tmp_path):
    parts = [[5, 0, 7], [1, 2], [9, 3, 4, 8]]
    files = script.write_client_files(parts, tmp_path / "partition", "Cora")
    assert [f.name for f in files] == ["Cora_00.txt", "Cora_01.txt", "Cora_02.txt"]
    assert files[1].read_text() == "1.000000000000000000e+00\n2.000000000000000000e+00\n"  # np.savetxt's default
    read, block = read_partition(f"file:{tmp_path}/partition/Cora_*.txt", num_nodes=11, num_clients=3)
    assert [p.tolist() for p in read] == [sorted(p) for p in parts]
    assert (block["assigned_nodes"], block["unassigned_nodes"]) == (9, 2)  # nodes 6 and 10 in no client


def test_the_peer_log_gives_each_finished_run_its_scores_selected_round_and_seconds(script):
    def rounds(losses):
        return [f"Round: {r:4d} | train_loss: {0.5:9.5f} | val_loss: {v:9.5f} | acc_train: 0.90000 | "
                f"acc_val: 0.80000 | acc_test: 0.80000" for r, v in enumerate(losses, 1)]

    def final(seed, acc, minority):
        return (f"Arch: main | dataset: Cora | lr: 0.0030 | epochs: 5 | lambda_1:  1.0 | proxy_dim:  64 | "
                f"seed: {seed:2d} | best_test_acc: {acc:6.4f} | acc_minority: {minority:6.4f}")

    log = "\n".join(["PEER_RUN_START 0 10.0", *rounds([0.9, 0.7, 0.7, 0.8]), final(0, 0.8123, 0.7),
                     "PEER_RUN_END 110.0", "PEER_RUN_START 1 110.0", *rounds([0.5, 0.6]), final(1, 0.75, 0.6),
                     "PEER_RUN_END 160.5", "PEER_RUN_START 2 160.5", *rounds([0.4])])  # run 2 never ends
    parsed = script.parse_peer_log(log)
    assert parsed == {"seeds": [0, 1], "acc": pytest.approx([81.23, 75.0]), "minority": pytest.approx([70.0, 60.0]),
                      "round": [2, 1], "seconds": [100.0, 50.5]}  # ties keep the first round (main.py's `<`)


def test_the_target_is_the_authors_mean_minus_one_std_on_both_accuracies_and_their_wall_time(script):
    peer = {"acc": [74.0, 76.0], "minority": [60.0, 62.0], "seconds": [100.0, 100.0]}  # floors 74 and 60
    holds = {"acc": [74.0, 74.0], "minority": [60.0, 60.0], "seconds": [90.0, 110.0]}
    assert script.verdict({"peer": peer, "privfgl": holds}) == \
        "acc holds (floor 74.00); minority holds (floor 60.00); time holds"
    fails = {"acc": [73.9, 74.0], "minority": [59.0, 61.1], "seconds": [101.0, 101.0]}
    assert script.verdict({"peer": peer, "privfgl": fails}) == \
        "acc fails (floor 74.00); minority holds (floor 60.00); time fails"
    assert script.verdict({"peer": peer}) == "not measured"


def test_the_table_names_the_commit_of_each_saved_stage(script, tmp_path):
    from experiments.side_by_side import save_result
    from privfgl.provenance import code_commit
    cell = next(iter(script.CELLS))
    script.write_client_files([[0, 1], [2]], tmp_path / "partition", script.CELLS[cell].name)
    run = {"acc": [80.0, 81.0, 82.0], "minority": [60.0, 61.0, 62.0], "round": [9, 10, 11],
           "seconds": [5.0, 5.0, 5.0]}
    results = save_result(tmp_path / "results-r500.json", cell, "peer", run)
    assert results[cell]["peer"]["code"] == code_commit()
    assert script.table(results, tmp_path, 500).rstrip().endswith(
        f"The results come from privfgl commit `{code_commit()}`.")
