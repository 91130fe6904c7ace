"""experiments/authors_side_by_side_fedlog.py: the authors' flags and constants map onto privfgl's fedlog
defaults; the exported clients give privfgl the same clients and split as its own closed regime; the
peer's log is read run by run; the target is judged as the issue states it."""
import importlib
import json
from pathlib import Path

import pytest
import torch

from privfgl.methods.fedlog.params import resolve_params

REPO = Path(__file__).resolve().parents[1]


def _script():
    return importlib.import_module("experiments.authors_side_by_side_fedlog")


def test_every_authors_flag_maps_to_privfgls_default_with_the_authors_value():
    defaults = resolve_params({})
    for flag, (key, value) in _script().FLAGS.items():
        assert getattr(defaults, key) == value, (flag, key)


def test_each_cell_is_a_dataset_and_client_count_of_table_1a():
    cells = _script().CELLS
    assert sorted(cells) == sorted(f"{d}-{k}" for d in ("cora", "citeseer") for k in (3, 5, 10))
    for name, cell in cells.items():
        assert name == f"{cell.dataset}-{cell.clients}" and 70 < cell.paper < 90


def test_the_exported_clients_and_split_are_the_closed_regimes_own(tmp_path):
    from privfgl.experiment import build_clients, config_for
    script = _script()
    common = {"method": "fedlog", "dataset": "sbm", "clients": 3, "partition": "metis", "partition_seed": 0,
              "seed": 0}
    regime = config_for({**common, "evaluate": list(script.CLOSED)})
    script.export_regime(regime, tmp_path)
    own = build_clients(regime)
    given = build_clients(script.file_config(tmp_path, "sbm", 3, seed=1))
    for a, b in zip(own.clients, given.clients, strict=True):
        assert torch.equal(a.global_id, b.global_id)
        assert torch.equal(a.edge_index, b.edge_index)
        for mask in ("train_mask", "val_mask", "test_mask"):
            assert torch.equal(getattr(a, mask), getattr(b, mask)), mask
    evals = json.loads((tmp_path / "eval.json").read_text())
    assert len(evals["clients"]) == 3 and evals["new_client"]
    trained = {int(v) for c in own.clients for v in c.global_id}
    assert not trained & set(evals["new_client"])
    for k, c in enumerate(evals["clients"]):  # tested nodes lie outside the client's training graph
        assert not set(c["unseen_node"]) & {int(v) for v in own.clients[k].global_id}
        assert set(c["unseen_node"]) | set(c["missing_class"]) <= set(c["nodes"])


def test_the_peer_log_gives_each_finished_run_and_its_seconds():
    log = "\n".join(["PEER_RUN_START 0 10.0",
                     "[ROUND 1] Test Acc at Best Val :  0.5000 at 1 round.",
                     "[ROUND 2] Test Acc at Best Val :  0.8355 at 2 round.",
                     "PEER_RUN_START 1 110.0",
                     "[ROUND 1] Test Acc at Best Val :  0.8000 at 1 round.",
                     "PEER_RUN_START 2 160.0",
                     "[ROUND 1] Test Acc at Best Val :  0.1000 at 1 round."])
    parsed = _script().parse_peer_log(log)  # run 2 never ends: left out
    assert parsed == {"acc": [83.55, 80.0], "seconds": [100.0, 50.0], "seeds": [0, 1], "best_round": [2, 1]}
    parsed = _script().parse_peer_log(log + "\nPEER_RUN_END 190.0")
    assert parsed["acc"] == pytest.approx([83.55, 80.0, 10.0]) and parsed["seconds"] == [100.0, 50.0, 30.0]
    assert _script().one_run(parsed, 1) == {"acc": 80.0, "seconds": 50.0, "best_round": 1}


def test_the_target_is_the_authors_mean_minus_one_std_and_their_wall_time():
    verdict = _script().verdict

    def runs(*pairs):  # {seed: run}, as results.json keeps them
        return {str(s): {"acc": a, "seconds": t, "best_round": 1} for s, (a, t) in enumerate(pairs)}
    peer = runs((74.0, 100.0), (76.0, 100.0))  # 75 ± 1: floor 74
    assert verdict({"peer": peer, "privfgl": runs((74.0, 90.0), (74.0, 110.0))}) == \
        "acc holds (floor 74.00); time holds"
    assert verdict({"peer": peer, "privfgl": runs((73.9, 101.0), (74.0, 101.0))}) == \
        "acc fails (floor 74.00); time fails"
    assert verdict({"peer": peer}) == "not measured"
    one_seed = runs((74.0, 100.0))  # no std: no verdict, nor on seeds the two sides do not share
    assert verdict({"peer": one_seed, "privfgl": runs((80.0, 1.0), (80.0, 1.0))}) == \
        "not measured (seeds: the authors' 0, privfgl's 0, 1)"
    assert verdict({"peer": one_seed, "privfgl": runs((80.0, 1.0))}) == \
        "not measured (seeds: the authors' 0, privfgl's 0)"
    # one side ran a seed more: the target on the seeds both ran, and the verdict says which
    more = runs((73.0, 90.0), (75.0, 90.0), (60.0, 500.0))
    assert verdict({"peer": peer, "privfgl": more}) == \
        "acc holds (floor 74.00); time holds, on the seeds both ran (0, 1)"
    assert verdict({"peer": more, "privfgl": peer}) == \
        "acc holds (floor 73.00); time fails, on the seeds both ran (0, 1)"


def test_the_table_has_every_cell_a_smaller_budgets_rows_and_the_ablations(tmp_path):
    script = _script()
    def runs(acc, seeds=(0, 1, 2)):
        return {str(s): {"acc": acc, "seconds": 10.0, "best_round": 3} for s in seeds}
    results = {"cora-3@rounds=5,gen=10": {"peer": runs(80.0), "privfgl": runs(81.0),
                                           "privfgl+warmup_form=code": runs(79.5, seeds=(0,)),
                                           "privfgl+preset=code": {"0": {"acc": 82.0, "seconds": 10.0, "best_round": 3,
                                                                         "acc_code_selection": 83.0}}}}
    text = script.table(results, tmp_path)
    rows = [line for line in text.splitlines() if line.startswith("| Cora") or line.startswith("| CiteSeer")]
    assert len(rows) == 2  # only the cell with results: Cora K=3 at the full budget, not run, and at the smaller one
    assert "| Cora K=3 (rounds=5,gen=10) | — | 80.00 ± 0.00 | 81.00 ± 0.00 |" in text
    assert "acc holds (floor 80.00); time holds" in text
    assert "| cora-3 (rounds=5,gen=10) | `warmup_form=code` | 79.50 ± 0.00 (1 of 3 seeds) |" in text
    assert "| cora-3 (rounds=5,gen=10) | its defaults | 81.00 ± 0.00 |" in text
    assert "| `preset=code` | 82.00 ± 0.00 (1 of 3 seeds) | 82.00 | 83.00 ± 0.00 | 10 | 80.00 ± 0.00 |" in text
    assert text.count("not measured") == 1
    every = [line for line in script.table({}, tmp_path).splitlines() if line.startswith(("| Cora", "| CiteSeer"))]
    assert len(every) == 6 and all("not run" in line for line in every)  # an empty results file: every cell


def _run(acc, code=None, files=("p" * 64, "s" * 64)):
    run = {"acc": acc, "seconds": 10.0, "best_round": 3, "files": {"partition": files[0], "split": files[1]}}
    return {**run, "code": code} if code else run


def test_merging_results_files_keeps_every_run_and_refuses_two_scores_for_one_seed():
    script = _script()
    mine = {"cora-5": {"peer": {"0": _run(86.0)}}}
    script.merge_results(mine, {"cora-5": {"peer": {"1": _run(85.0)}, "privfgl": {"0": _run(87.0)}}}, "b.json")
    script.merge_results(mine, {"cora-5": {"peer": {"0": _run(86.0)}}}, "c.json")  # the same run twice: fine
    assert sorted(mine["cora-5"]["peer"]) == ["0", "1"] and mine["cora-5"]["privfgl"]["0"]["acc"] == 87.0
    with pytest.raises(SystemExit, match=r"--merge d.json: cora-5 peer seed 1 is 84.00 there and 85.00"):
        script.merge_results(mine, {"cora-5": {"peer": {"1": _run(84.0)}}}, "d.json")


def test_the_table_names_the_commits_its_runs_came_from_and_files_that_differ(tmp_path):
    script = _script()
    results = {"cora-5": {"peer": {"0": _run(86.0, "aaaa"), "1": _run(85.0, "aaaa")},
                          "privfgl": {"0": _run(86.5, "bbbb"), "1": _run(85.5)}}}
    text = script.table(results, tmp_path)
    assert "The runs come from privfgl commits `aaaa` (2), `bbbb` (1), and 1 from before commits were kept" in text
    assert "cora-5: `partition.txt` pppppppppppp…, `split.json` ssssssssssss…" in text
    assert "did not all run on the same files" not in text
    results["cora-5"]["privfgl"]["1"] = _run(85.5, "bbbb", files=("q" * 64, "s" * 64))
    assert "**cora-5's runs did not all run on the same files**" in script.table(results, tmp_path)


def test_write_only_merges_and_writes_the_block_without_running_anything(tmp_path, monkeypatch):
    script = _script()
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"cora-5": {"peer": {"0": _run(86.0), "1": _run(85.0)},
                                            "privfgl": {"0": _run(86.5, "abcd"), "1": _run(85.5, "abcd")}}}))
    kept, page = tmp_path / "kept.json", tmp_path / "page.md"

    def no_runs(*_args, **_kwargs):
        raise AssertionError("--write-only ran something")
    monkeypatch.setattr(script, "run_stage", no_runs)
    monkeypatch.setattr("sys.argv", ["x", "--work", str(tmp_path / "w"), "--results", str(kept), "--merge",
                                     str(other), "--write-only", "--out", str(page), "--tag", "full"])
    assert script.main() == 0
    assert json.loads(kept.read_text()) == json.loads(other.read_text())
    text = page.read_text()
    assert text.count("<!-- full -->") == 1
    assert "| Cora K=5 | 85.75 | 85.50 ± 0.50 (2 of 3 seeds) | 86.00 ± 0.50 (2 of 3 seeds) |" in text
    assert "privfgl commits `abcd` (2), and 2 from before commits were kept: not all from one code." in text
    other.write_text("{not json")
    with pytest.raises(SystemExit, match=r"--merge .*other.json: not a readable results file"):
        script.main()


def test_more_training_seeds_are_accepted_and_the_footnote_names_the_seeds_stored(tmp_path, monkeypatch, capsys):
    script = _script()
    assert script.seeds_phrase({}) == "0, 1, 2 on both sides"
    three = {"cora-3": {"peer": {str(s): _run(86.0) for s in range(3)}, "privfgl": {str(s): _run(86.0) for s in range(3)}}}
    assert "Training seeds 0, 1, 2 on both sides;" in script.table(three, tmp_path)
    del three["cora-3"]["peer"]["2"]  # a side that ran two of the three: the footnote says so
    assert 'Training seeds 0, 1, 2 on both sides (fewer where a row says "n of 3 seeds");' in \
        script.table(three, tmp_path)
    more = {"cora-3": {"privfgl": {str(s): _run(86.0) for s in (3, 4, 11)}}}
    assert "Training seeds 3, 4, 11 (per seed above);" in script.table(more, tmp_path)
    assert script.seed_number("11") == 11
    monkeypatch.setattr("sys.argv", ["x", "--work", str(tmp_path), "--seeds", "-1", "--write-only"])
    with pytest.raises(SystemExit):
        script.main()
    assert "'-1' is not a training seed (an integer ≥ 0)" in capsys.readouterr().err
