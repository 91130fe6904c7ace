"""`privfgl sweep`: a TOML grid -> one record per (cell, seed), resumable; mean ± std tables; plots."""
from __future__ import annotations

import json
import shutil
import statistics
from pathlib import Path

import pytest

from privfgl.cli import main
from privfgl.errors import ConfigError
from privfgl.sweep import load_sweep, missing, report, run_sweep
from privfgl.sweep.runner import record_path, run_config

REPO = Path(__file__).resolve().parents[1]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

SMALL = """
[sweep]
name = "small"
seeds = [0, 1]

[base]
method = "fedavg"
dataset = "cora"
partition = "louvain"
clients = 3
rounds = 2
transcript = "none"

[[cells]]
label = "fedavg"

[[cells]]
label = "local"
method = "local"

[[plots]]
file = "acc.png"
kind = "bars"
y = ["test_acc", "MB_up_per_client"]
"""


@pytest.fixture(autouse=True)
def _partition_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("PRIVFGL_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def write(tmp_path: Path, text: str, name: str = "sweep.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def small(tmp_path: Path, planetoid_root: Path, text: str = SMALL):
    return load_sweep(write(tmp_path, text), results=tmp_path / "results",
                      overrides={"data_root": str(planetoid_root), "download": False})


def test_cells_are_the_explicit_cells_crossed_with_the_grids(tmp_path):
    sweep = load_sweep(write(tmp_path, """
[sweep]
seeds = [0, 1, 2]
[base]
method = "dp-fedavg"
method_params = { q = 1.0 }
[grid]
evaluation = ["local_model", "global_model"]
[[cells]]
label = "DP"
grid = { target_epsilon = [1, 8] }
[[cells]]
label = "no DP"
method = "fedavg"
"method_params.mu" = 0.1
"""))
    assert len(sweep.cells) == 2 * 2 + 2 and len(sweep.tasks) == 18
    assert sweep.cells[0].label == "DP, target_epsilon=1, evaluation=local_model"
    assert sweep.cells[-1].options["method_params"] == {"q": 1.0, "mu": 0.1}  # dotted key: one method param
    assert len({c.key for c in sweep.cells}) == 6
    assert sweep.name == "sweep" and sweep.results == Path("runs/sweep")  # defaults from the file name


def test_a_cell_key_changes_with_what_runs_not_with_where():
    from privfgl.sweep.config import Cell
    a = Cell("x", {"method": "fedavg", "rounds": 2})
    assert Cell("x", {"method": "fedavg", "rounds": 2, "data_root": "/d", "download": False}).key == a.key
    assert Cell("x", {"method": "fedavg", "rounds": 3}).key != a.key


def test_a_cell_key_changes_with_the_contents_of_a_methods_input_file(tmp_path):
    """FedGPL's samples=file:PATH (or trunk=): an edited file is a new cell, never a stale record."""
    import os
    from privfgl.sweep.config import Cell
    samples = tmp_path / "samples.pt"
    samples.write_bytes(b"first")
    cell = lambda: Cell("x", {"method": "fedgpl", "method_params": {"samples": f"file:{samples}"}})
    before = cell().key
    assert cell().key == before
    samples.write_bytes(b"other")
    os.utime(samples, ns=(1, 1))  # a new modification time: the digest is remembered per (path, time, size)
    assert cell().key != before


@pytest.mark.parametrize("text, message", [
    ("[sweep]\nseeds = []\n", "seeds must be a non-empty list"),
    ("[grid]\nrounds = 3\n", "[grid] rounds must be a non-empty list"),
    ("[swep]\n", "unknown table(s) swep"),
    ("[sweep]\nname = \n", "not valid TOML"),
    ("[[plots]]\nfile = \"a.png\"\ny = \"test_acc\"\nkind = \"pie\"\n", "kind 'pie'; valid: bars, line"),
    ("[[cells]]\nlabel = \"a\"\n[[cells]]\nlabel = \"a\"\n", "two cells have the same options"),
    ("[sweep]\nheaders = [\"x\"]\n", "headers must map columns to titles"),
    # the wrong shape of a table or value: one line, not a traceback
    ("sweep = 5\n", "sweep must be a table ([sweep])"),
    ("base = 5\n", "base must be a table ([base])"),
    ("grid = 5\n", "grid must be a table ([grid])"),
    ("cells = 5\n", "cells must be an array of tables ([[cells]])"),
    ("cells = []\n", "cells is empty"),
    ("[base]\nrounds = 2\n[grid]\n'rounds.x' = [1]\n", "sets a key inside 'rounds', which is 2, not a table"),
    ("[[cells]]\nlabel = 5\n", "a cell's label must be a string, got 5"),
    ("[[cells]]\nlabel = \"a\"\npaper = 5\n", "cell 'a': paper must map columns to published numbers"),
    ("[sweep]\ncolumns = \"test_acc\"\n", "columns must be a list of column names"),
    # silently wrong before: one table row per label, one replicate per seed
    ("[[cells]]\nlabel = \"a\"\n[[cells]]\nlabel = \"a\"\nrounds = 3\n", "two cells are labelled 'a'"),
    ("[sweep]\nseeds = [0, 0]\n", "seeds [0, 0] name a seed twice"),
    ("[sweep]\nwarmup = \"yes\"\n", "[sweep] warmup must be true or false, got 'yes'"),
])
def test_a_malformed_file_names_the_problem(tmp_path, text, message):
    with pytest.raises(ConfigError) as e:
        load_sweep(write(tmp_path, text))
    assert message in str(e.value)


def test_a_file_that_is_not_utf8_or_a_folder_is_named(tmp_path):
    (tmp_path / "latin1.toml").write_bytes(b"\xff[sweep]\n")
    with pytest.raises(ConfigError, match="latin1.toml: not UTF-8 text"):
        load_sweep(tmp_path / "latin1.toml")
    with pytest.raises(ConfigError, match="a folder, not a file"):
        load_sweep(tmp_path)


@pytest.mark.parametrize("cell, message", [
    ('dataset = "coraa"', "unknown dataset 'coraa'"),
    ('protocol = "secagg"\nprotocol_params = { bogus = 1 }', "secagg: unknown parameter(s) bogus"),
    ('attacks = ["label-inference"]\nadversary = "client99"', "--adversary 'client99': not a party of this run"),
    ('method = "dp-fedavg"\ndp = "gaussian:sigma={sigma},clip=1,on=update"\ntarget_epsilon = -1',
     "target_epsilon -1: valid: a number > 0"),
    ('method = "dp-fedavg"\ndp = "gaussian:sigma={sigma},clip=1,on=update"\ntarget_epsilon = "eight"',
     "target_epsilon 'eight'"),
    ('method = "fedavg"\ntarget_epsilon = 4', "target_epsilon 4 is used by no option of the cell"),  # was ignored
    ('attacks = ["membership"]', 'attacks with transcript "none"'),  # SMALL's base keeps no payloads
    ('method = "fedomd"\nlr = 0.05', "fedomd does not use --lr (given 0.05)"),  # was run with fedomd's own lr
    ('method = "opfgl"', "opfgl: --rounds 2 is not supported; valid: 1"),  # SMALL's rounds; failed in its run
])
def test_every_cell_is_checked_before_the_first_run(tmp_path, cell, message):
    """A cell that would fail in its run is refused before any cell runs (the others' runs are not
    spent first), with the message `privfgl run` gives for the same setting."""
    from privfgl.sweep import check_cells
    sweep = load_sweep(write(tmp_path, SMALL + f'\n[[cells]]\nlabel = "bad"\n{cell}\n'))
    with pytest.raises(ConfigError) as e:
        check_cells(sweep)
    assert "cell 'bad'" in str(e.value) and message in str(e.value)


def test_a_line_plot_over_a_run_option_that_is_not_a_number_is_refused_before_the_runs(tmp_path):
    # it was refused by the report, after every run; an x that is a metric can only be checked then
    from privfgl.sweep import check_cells
    line = SMALL + '\n[[plots]]\nfile = "line.png"\nkind = "line"\nx = "method"\ny = "test_acc"\n'
    with pytest.raises(ConfigError, match="sweep small: plot line.png: x 'method' must be a numeric column; the "
                                          "cells have fedavg, local"):
        check_cells(load_sweep(write(tmp_path, line)))
    check_cells(load_sweep(write(tmp_path, line.replace('x = "method"', 'x = "test_acc_last"'))))  # a metric


def test_target_epsilon_calibrates_sigma_and_seed_fills_placeholders(tmp_path):
    sweep = load_sweep(write(tmp_path, """
[base]
method = "dp-fedavg"
rounds = 30
target_epsilon = 8
dp = "gaussian:sigma={sigma},clip=0.5,on=update,mode=central,seed={seed}"
method_params = { sampling_seed = "{seed}" }
"""))
    cfg, sigma = run_config(sweep.cells[0], 5, None, False)
    from privfgl.privacy.accounting import noise_multiplier_for
    assert sigma == pytest.approx(noise_multiplier_for(8.0, 1e-5, 1.0, 30))
    assert cfg.dp == f"gaussian:sigma={sigma!r},clip=0.5,on=update,mode=central,seed=5"
    assert cfg.method_params == {"sampling_seed": 5} and cfg.seed == 5
    # dp-sgd's accountant composes rounds × local_epochs steps, δ from its own method param
    sgd = load_sweep(write(tmp_path, """
[base]
method = "dp-sgd"
rounds = 30
local_epochs = 2
target_epsilon = 8
method_params = { sigma = "{sigma}", delta = 1e-6 }
""", "sgd.toml"))
    cfg, sigma = run_config(sgd.cells[0], 0, None, False)
    assert sigma == pytest.approx(noise_multiplier_for(8.0, 1e-6, 1.0, 60)) and cfg.method_params["sigma"] == sigma


@pytest.mark.parametrize("cell, delta, q, releases", [
    # FedSpray's on=all protects its encoder and proxy sums: two releases a round
    ('method = "fedspray"\nrounds = 30\ndp = "gaussian:sigma={sigma},clip=1,on=all,mode=central"', 1e-5, 1.0, 60),
    # FedOMD's rounds are its own default (1000), three messages a round
    ('method = "fedomd"\ndp = "gaussian:sigma={sigma},clip=1,on=all,mode=central,delta=1e-6"', 1e-6, 1.0, 3000),
    # DP-FedAvg under plain: the server sees who took part, so the accountant takes q = 1, not 0.5
    ('method = "dp-fedavg"\nrounds = 30\nmethod_params = { q = 0.5 }\n'
     'dp = "gaussian:sigma={sigma},clip=1,on=update,mode=central"', 1e-5, 1.0, 30),
    ('method = "dp-fedavg"\nrounds = 30\nprotocol = "secagg"\nmethod_params = { q = 0.5 }\n'
     'dp = "gaussian:sigma={sigma},clip=1,on=update,mode=distributed"', 1e-5, 0.5, 30),
    # FedGPL's split messages: one release per noised message a round (on=split: all four)
    ('method = "fedgpl"\nrounds = 10\ndp = "gaussian:sigma={sigma},clip=1,on=split,mode=local,accountant=prv"',
     1e-5, 1.0, 40),
])
def test_target_epsilon_calibrates_for_the_releases_the_run_makes(tmp_path, cell, delta, q, releases):
    from privfgl.privacy.accounting import noise_multiplier_for
    sweep = load_sweep(write(tmp_path, f"[base]\ntarget_epsilon = 4\n{cell}\n"))
    accountant = "prv" if "accountant=prv" in cell else "rdp"
    _, sigma = run_config(sweep.cells[0], 0, None, False)
    assert sigma == pytest.approx(noise_multiplier_for(4.0, delta, q, releases, accountant))


def test_a_calibrated_run_spends_at_most_its_target(tmp_path, planetoid_root):
    """Run end to end: the record's ε (the run's own accountant) is within the target, and close to it."""
    sweep = small(tmp_path, planetoid_root, """
[sweep]
name = "dp"
seeds = [0]
[base]
method = "dp-fedavg"
dataset = "cora"
clients = 3
rounds = 2
transcript = "none"
target_epsilon = 4
method_params = { q = 0.5 }
dp = "gaussian:sigma={sigma},clip=1,on=update,mode=central"
""")
    assert run_sweep(sweep, progress=False) == []
    record = json.loads(record_path(sweep.results, sweep.cells[0], 0).read_text())
    assert 3.9 <= record["privacy"]["epsilon"] <= 4.0  # calibrated at q = 0.5 it spent 5.5 (q = 1 under plain)


def test_a_run_over_its_target_epsilon_is_refused(tmp_path):
    from privfgl.sweep.runner import check_spent
    cell = load_sweep(write(tmp_path, '[base]\nmethod = "dp-fedavg"\ntarget_epsilon = 4\n'
                                      'dp = "gaussian:sigma={sigma},clip=1,on=update,mode=central"\n')).cells[0]
    check_spent(cell, 1.2, 4.0)
    with pytest.raises(RuntimeError, match="the run spent ε = 4.1, over its target_epsilon 4"):
        check_spent(cell, 1.2, 4.1)


def test_method_defaults_apply_inside_a_sweep(tmp_path):
    sweep = load_sweep(write(tmp_path, "[base]\nmethod = \"opfgl\"\npartition = \"louvain+\"\n"))
    cfg, _ = run_config(sweep.cells[0], 0, None, False)
    assert (cfg.rounds, cfg.partition_seed, cfg.method_params) == (1, 42, {"preset": "cora-louvain+"})


@pytest.fixture(scope="module")
def finished(tmp_path_factory, planetoid_root) -> Path:
    """SMALL run once (2 cells x 2 seeds); tests copy its results folder."""
    folder = tmp_path_factory.mktemp("finished")
    sweep = small(folder, planetoid_root)
    assert run_sweep(sweep, progress=False) == []
    return sweep.results


def copied(finished: Path, tmp_path: Path, planetoid_root: Path, text: str = SMALL):
    shutil.copytree(finished, tmp_path / "results")
    return small(tmp_path, planetoid_root, text)


def test_a_sweep_runs_every_cell_once_and_resumes_only_what_is_missing(finished, tmp_path, planetoid_root):
    sweep = copied(finished, tmp_path, planetoid_root)
    paths = [record_path(sweep.results, c, s) for c, s in sweep.tasks]
    assert all(p.is_file() for p in paths) and missing(sweep) == []
    record = json.loads(paths[1].read_text())
    assert record["sweep"]["cell"] == "fedavg" and record["sweep"]["seed"] == 1 and record["config"]["seed"] == 1

    stamps = {p: p.stat().st_mtime_ns for p in paths}
    paths[2].unlink()  # a crash before this run ended leaves no record...
    paths[2].with_suffix(".json.tmp").write_text("{half a rec")  # ...at most a temp file, never read
    assert [(c.label, s) for c, s in missing(sweep)] == [("local", 0)]
    assert run_sweep(sweep, progress=False) == []
    assert all(p.stat().st_mtime_ns == stamps[p] for p in paths if p != paths[2])  # the others are not re-run
    assert json.loads(paths[2].read_text())["sweep"]["cell"] == "local"


def test_the_report_has_mean_and_std_over_seeds_and_a_png(finished, tmp_path, planetoid_root):
    sweep = copied(finished, tmp_path, planetoid_root)
    table, files = report(sweep)
    rows = [json.loads(record_path(sweep.results, c, s).read_text())["metrics"]["test_acc"]
            for c, s in sweep.tasks if c.label == "fedavg"]
    mean, std = statistics.fmean(rows), statistics.stdev(rows)
    line = next(row for row in table.splitlines() if row.startswith("| fedavg |"))
    assert f"{mean:.4f} ± {std:.4f}" in line
    assert {p.name for p in files} == {"runs.csv", "summary.csv", "summary.md", "acc.png"}
    png = (sweep.results / "acc.png").read_bytes()
    assert png[:8] == PNG_SIGNATURE and len(png) > 10_000


def test_a_docs_page_gets_the_sweeps_block_rewritten_not_appended_twice(finished, tmp_path, planetoid_root):
    page = tmp_path / "docs" / "page.md"
    page.parent.mkdir()
    page.write_text("# Page\n\nprose before\n")
    sweep = copied(finished, tmp_path, planetoid_root,
                   SMALL.replace('name = "small"', 'name = "small"\ndoc = "%s"' % page))
    report(sweep)
    page.write_text(page.read_text() + "\nprose after\n")
    report(sweep)
    text = page.read_text()
    assert text.count("<!-- sweep:small -->") == 1 and text.count("| fedavg | 2 |") == 1
    assert text.startswith("# Page\n\nprose before") and text.rstrip().endswith("prose after")
    assert "![acc](img/small/acc.png)" in text and (page.parent / "img" / "small" / "acc.png").is_file()


def test_a_doc_that_is_not_a_markdown_page_is_refused_before_anything_runs(tmp_path, planetoid_root, capsys):
    # before: --doc CONFIG.toml appended the report's Markdown block to the sweep's own config, which then no
    # longer parsed as TOML
    config = write(tmp_path, SMALL)
    before = config.read_text()
    for doc in (config, tmp_path / "notes.txt"):
        code = main(["sweep", str(config), "--results", str(tmp_path / "results"), "--doc", str(doc),
                     "--data-root", str(planetoid_root), "--offline", "--no-progress"])
        assert code == 2 and "valid: a .md file (not the sweep's config)" in capsys.readouterr().err
    assert config.read_text() == before and not (tmp_path / "results").exists() and not (tmp_path / "notes.txt").exists()


def test_paper_numbers_and_record_paths_become_columns(finished, tmp_path, planetoid_root, capsys):
    text = SMALL.replace('seeds = [0, 1]', 'seeds = [0, 1]\ncolumns = ["test_acc", "metrics.test_f1_macro"]').replace(
        'label = "fedavg"', 'label = "fedavg"\npaper = { test_acc = 0.795 }')  # a reference: the same cell
    sweep = copied(finished, tmp_path, planetoid_root, text)
    for seed in (0, 1):
        record_path(sweep.results, sweep.cells[1], seed).unlink()
    args = ["sweep", str(write(tmp_path, text)), "--results", str(sweep.results), "--data-root", str(planetoid_root),
            "--offline", "--no-progress"]
    assert main([*args, "--cells", "fedavg"]) == 0  # only the matching cells run (here: none missing)...
    assert "0 to run" in capsys.readouterr().err
    assert main([*args, "--cells", "local"]) == 0
    header, _, fedavg, local = capsys.readouterr().out.split("\n\n", 1)[1].splitlines()[:4]
    names = header.strip("| ").split(" | ")
    assert names[names.index("test_acc"):] == ["test_acc", "paper:test_acc", "metrics.test_f1_macro"]
    assert " | 0.7950 | " in fedavg and " | – | " in local and "| local | 2 |" in local  # ...the report has all
    assert main([*args, "--cells", "nothing"]) == 2


def test_record_paths_index_lists_and_headers_title_the_columns(finished, tmp_path, planetoid_root):
    from privfgl.sweep.report import collect, record_value
    record = {"attacks": [{"metrics": {"auc": 0.7}}, {"metrics": {"auc": 0.9}}]}
    assert record_value(record, "attacks.1.metrics.auc") == 0.9  # a number indexes a list: the second finding
    assert record_value(record, "attacks.2.metrics.auc") is None and record_value(record, "attacks.x") is None
    text = SMALL.replace('seeds = [0, 1]', 'seeds = [0, 1]\ncolumns = ["test_acc", "cost.bytes_up_per_client.0"]\n'
                         'headers = { test_acc = "accuracy", "cost.bytes_up_per_client.0" = "client 0 bytes" }')
    sweep = copied(finished, tmp_path, planetoid_root, text)
    table, _ = report(sweep)
    assert "| cell | seeds | method | accuracy | client 0 bytes |" in table  # titles in the table only...
    header = (sweep.results / "runs.csv").read_text().splitlines()[0].split(",")
    assert "test_acc" in header and "cost.bytes_up_per_client.0" in header  # ...the CSV keeps the column names
    first = json.loads(record_path(sweep.results, sweep.cells[0], 0).read_text())
    assert collect(sweep)[0]["cost.bytes_up_per_client.0"] == first["cost"]["bytes_up_per_client"][0]


def test_a_failing_run_is_reported_and_loses_nothing_else(finished, tmp_path, planetoid_root, monkeypatch):
    sweep = copied(finished, tmp_path, planetoid_root)
    record_path(sweep.results, sweep.cells[1], 1).unlink()
    record_path(sweep.results, sweep.cells[0], 0).unlink()
    import privfgl.experiment
    real = privfgl.experiment.run

    def flaky(cfg, data=None):
        if cfg.method == "local" and cfg.seed == 1:
            raise RuntimeError("disk on fire")
        return real(cfg, data)
    monkeypatch.setattr(privfgl.experiment, "run", flaky)
    failures = run_sweep(sweep, progress=False)
    assert failures == ["local, seed 1: RuntimeError: disk on fire"]
    assert [(c.label, s) for c, s in missing(sweep)] == [("local", 1)]  # fedavg seed 0 ran after it


def test_a_column_no_record_has_is_warned_and_a_line_plot_needs_a_numeric_x(finished, tmp_path, planetoid_root,
                                                                           capsys):
    typo = SMALL.replace('seeds = [0, 1]', 'seeds = [0, 1]\ncolumns = ["test_accuracy"]')
    report(copied(finished, tmp_path, planetoid_root, typo))
    assert "column 'test_accuracy' is in no record of sweep small" in capsys.readouterr().err
    line = SMALL + '\n[[plots]]\nfile = "line.png"\nkind = "line"\nx = "method"\ny = "test_acc"\n'
    shutil.rmtree(tmp_path / "results")
    with pytest.raises(ConfigError, match="plot line.png: x 'method' must be a numeric column; the cells have fedavg, local"):
        report(copied(finished, tmp_path, planetoid_root, line))


def test_a_title_names_the_datasets_the_records_ran_on():
    from privfgl.sweep.report import titled
    assert titled("FedAvg on {dataset}", [{"dataset": "cora"}, {"dataset": "cora"}]) == "FedAvg on Cora"
    assert titled("FedAvg on {dataset}", [{"dataset": "citeseer"}, {"dataset": "sbm"}]) == \
        "FedAvg on CiteSeer, synthetic graph 'sbm'"
    assert titled("FedAvg on Cora", [{"dataset": "sbm"}]) == "FedAvg on Cora"  # no placeholder: as written


def test_warmup_runs_each_cell_once_untimed_and_unrecorded_before_its_timed_runs(tmp_path, planetoid_root,
                                                                                monkeypatch):
    """[sweep] warmup = true: a cell's first timed run no longer carries the process's start-up (the
    quickstart's seconds read as the cost of a protection, not of whichever backend ran first)."""
    import privfgl.experiment
    from privfgl.sweep import runner
    monkeypatch.setattr(runner, "_WARMED", set())
    calls = []
    real = privfgl.experiment.run
    monkeypatch.setattr(privfgl.experiment, "run", lambda cfg, data=None: calls.append((cfg.method, cfg.rounds,
                                                                                        cfg.seed)) or real(cfg, data))
    sweep = small(tmp_path, planetoid_root, SMALL.replace('seeds = [0, 1]', 'seeds = [0, 1]\nwarmup = true'))
    assert sweep.warmup and run_sweep(sweep, progress=False) == []
    assert calls == [("fedavg", 1, 0), ("fedavg", 2, 0), ("fedavg", 2, 1), ("local", 1, 0), ("local", 2, 0),
                     ("local", 2, 1)]
    records = sorted((sweep.results / "records").rglob("*.json"))
    assert len(records) == 4 and all(json.loads(p.read_text())["config"]["rounds"] == 2 for p in records)
    calls.clear()
    (sweep.results / "records" / sweep.cells[1].key / "seed1.json").unlink()
    assert run_sweep(sweep, progress=False) == [] and calls == [("local", 2, 1)]  # warm already in this process
    off = small(tmp_path, planetoid_root)
    assert not off.warmup  # the default: no extra run


def test_parallel_jobs_write_the_same_records(finished, tmp_path, planetoid_root):
    two = small(tmp_path, planetoid_root)
    assert run_sweep(two, jobs=2, progress=False) == []
    for cell, seed in two.tasks:
        a = json.loads(record_path(finished, cell, seed).read_text())
        b = json.loads(record_path(two.results, cell, seed).read_text())
        assert b["config"]["threads"] == 1
        assert abs(a["metrics"]["test_acc"] - b["metrics"]["test_acc"]) < 0.02  # thread count changes float sums


def test_cli_sweep_and_its_bad_inputs(finished, tmp_path, planetoid_root, capsys):
    sweep = copied(finished, tmp_path, planetoid_root)
    record_path(sweep.results, sweep.cells[0], 1).unlink()
    args = ["sweep", str(write(tmp_path, SMALL)), "--results", str(sweep.results), "--data-root", str(planetoid_root),
            "--offline", "--no-progress"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "| fedavg | 2 |" in out and "written:" in out
    assert main([*args, "--table-only"]) == 0

    def one_line_error(argv, message):
        code = main(argv)
        err = capsys.readouterr().err
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    one_line_error(["sweep", str(tmp_path / "nope.toml")], "no such file")
    one_line_error([*args, "--jobs", "0"], "--jobs 0")
    bad = write(tmp_path, SMALL.replace('method = "local"', 'method = "fedsgd"'), "bad.toml")
    one_line_error(["sweep", str(bad), "--results", str(tmp_path / "r2")], "cell 'local': invalid method 'fedsgd'")
    assert not (tmp_path / "r2").exists()  # checked before anything runs or any folder is made
    one_line_error(["sweep", str(bad), "--table-only", "--results", str(tmp_path / "r3")], "--table-only: results "
                   "folder")
    (tmp_path / "docdir").mkdir()
    one_line_error([*args, "--doc", str(tmp_path / "docdir")], "--doc")  # before the runs, not after them


def test_the_shipped_sweeps_are_valid(tmp_path):
    from privfgl.sweep import check_cells
    for path in [REPO / "privfgl" / "sweep" / "quickstart.toml", *sorted((REPO / "experiments").glob("*.toml"))]:
        sweep = load_sweep(path, results=tmp_path / path.stem)
        check_cells(sweep)
        assert sweep.cells and sweep.plots, path


class _Captured(Exception):
    def __init__(self, cfg):
        self.cfg = cfg


def _script(name: str):
    import importlib.util
    import sys
    sys.path.insert(0, str(REPO / "experiments"))
    spec = importlib.util.spec_from_file_location(name, REPO / "experiments" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _capture(module, call):
    """The RunConfig a script's function would run (its `run` replaced by a catch)."""
    def fake_run(cfg, data=None):
        raise _Captured(cfg)
    real, module.run = module.run, fake_run
    try:
        call()
    except _Captured as c:
        return c.cfg
    finally:
        module.run = real
    raise AssertionError("the script did not run anything")


def _script_configs(name: str, seed: int) -> dict[str, object]:
    """label -> the RunConfig the reproduction script runs for the cell of that label."""
    import argparse
    m = _script(name)
    if name == "reproduce_fedlog":
        names = {"fedlog": "FedLoG", "fedavg": "FedAvg", "local": "Local"}
        return {f"{names[meth]}, {d} K={k}": m.config(meth, d, k, seed, "plain", 100, {})
                for d in ("cora", "citeseer") for k in m.KS for meth in names}
    if name == "reproduce_fedomd":
        return {f"FedOMD, {d} M={k}": _capture(m, lambda d=d, k=k: m.one_run(d, k, seed, "plain", 1000, {}, Path("/x")))
                for d, k in m.PAPER}
    if name == "reproduce_fedgpl":
        return {f"{m.NAMES[(f, p)]}, {d}": _capture(m, lambda d=d, f=f, p=p: m.one_run(d, f, p, seed, 50, {}, Path("/x")))
                for d in ("cora", "citeseer") for f, p in (("hidta", "vpg"), ("fedavg", "vpg"))}
    if name == "reproduce_fedspray":
        args = argparse.Namespace(partition="louvain+", clients=10, rounds=100, model="gcn", data_root=None,
                                  method_param=[])
        labels = {"fedspray": "FedSpray (paper defaults)", "fedspray-code": "FedSpray, preset=code", "fedavg": "FedAvg",
                  "fedavg-matched": "FedAvg, matched settings", "local": "Local"}
        return {f"{labels[v]}, {d}": m.config(v, d, seed, "plain", args) for d in ("cora", "citeseer") for v in labels}
    args = argparse.Namespace(data_root=None)
    names = {"standalone": "Standalone", "fedavg": "FedAvg (1 round + FT)", "opfgl": "O-pFGL"}
    return {f"{names[meth]}, {d} {p}": m.config(meth, d, p, seed, "plain", args)
            for d, p in m.PAPER for meth in names}


@pytest.mark.parametrize("name", ["reproduce_opfgl", "reproduce_fedlog", "reproduce_fedomd", "reproduce_fedgpl",
                                  "reproduce_fedspray"])
def test_each_reproduction_sweep_runs_exactly_its_scripts_runs(name):
    """The sweep config of a reproduction gives, cell by cell, the RunConfig its script runs (so the
    script's measured records are the sweep's); where and how they run is not compared."""
    import dataclasses
    ignored = {"progress", "transcript", "data_root", "download", "method_defaults", "threads"}
    sweep = load_sweep(REPO / "experiments" / f"{name}.toml")
    expected = _script_configs(name, seed=1)
    assert sorted(c.label for c in sweep.cells) == sorted(expected)
    for cell in sweep.cells:
        ours, theirs = run_config(cell, 1, None, False)[0], expected[cell.label]
        differ = {f.name: (getattr(ours, f.name), getattr(theirs, f.name)) for f in dataclasses.fields(ours)
                  if f.name not in ignored and getattr(ours, f.name) != getattr(theirs, f.name)}
        assert differ == {}, (cell.label, differ)


def test_sigterm_stops_a_parallel_sweep_now_and_leaves_no_worker(tmp_path, planetoid_root):
    """`kill` on `privfgl sweep --jobs 2`: the runs in flight are interrupted (no record, no temp file),
    the runs queued to the workers do not start, and no worker outlives the sweep."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from tests.processes import alive
    config = write(tmp_path, SMALL.replace("rounds = 2", "rounds = 5000"))
    proc = subprocess.Popen([sys.executable, "-c", "from privfgl.cli import entry; entry()", "sweep", str(config),
                             "--results", str(tmp_path / "res"), "--jobs", "2", "--no-progress", "--offline",
                             "--data-root", str(planetoid_root)], env={**os.environ, "PRIVFGL_CACHE": str(tmp_path)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    children = lambda: [int(p) for p in open(f"/proc/{proc.pid}/task/{proc.pid}/children").read().split()]
    deadline = time.monotonic() + 60
    while len(children()) < 3 and time.monotonic() < deadline:  # the two workers and the resource tracker
        time.sleep(0.2)
    time.sleep(8)  # the workers are in their first runs
    workers = children()
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and err.strip().endswith("privfgl: interrupted"), err
    assert time.monotonic() - start < 15  # 5000 rounds would take minutes: the runs were stopped, not awaited
    assert not [p for p in (tmp_path / "res").rglob("*") if p.is_file()]
    time.sleep(1)
    assert not [pid for pid in workers if alive(pid)]


@pytest.mark.parametrize("text", ["", "[sweep]\nname = \"empty\"\n", "[base]\n"])
def test_a_config_that_defines_no_runs_is_refused(tmp_path, text):
    # before: it ran one default cell (FedAvg, Cora, 10 clients, 100 rounds)
    with pytest.raises(ConfigError, match="defines no runs; valid: a \\[base\\] table, a \\[grid\\] table or \\[\\[cells\\]\\]"):
        load_sweep(write(tmp_path, text))


def test_a_cells_summary_counts_its_own_seeds_and_averages_only_the_numbers_it_has():
    rows = [{"cell": "a", "seed": 0, "test_acc": 0.5, "epsilon": None, "leak": float("nan")},
            {"cell": "a", "seed": 1, "test_acc": 0.7, "epsilon": 2.0, "leak": 0.25},
            {"cell": "b", "seed": 0, "test_acc": 0.9, "epsilon": None, "leak": None}]
    from privfgl.sweep.report import summarise
    a, b = summarise(rows, ["a", "b"])
    assert (a["seeds"], b["seeds"]) == (2, 1)
    assert a["test_acc"] == pytest.approx(0.6) and a["test_acc:std"] == pytest.approx(statistics.stdev([0.5, 0.7]))
    assert (a["epsilon"], a["leak"]) == (2.0, 0.25)  # a missing or non-finite value is left out, never a 0
    assert b["epsilon"] is None and b["leak"] is None and "leak:std" not in b


def test_the_report_names_the_commit_its_records_come_from_and_a_mix(finished, tmp_path, planetoid_root):
    from privfgl.provenance import code_commit
    sweep = copied(finished, tmp_path, planetoid_root)
    table, _ = report(sweep)
    assert f"The records come from privfgl commit `{code_commit()}`." in table.splitlines()[0]
    path = record_path(sweep.results, *sweep.tasks[0])
    record = json.loads(path.read_text())
    record["config"]["versions"]["privfgl_commit"] = "000000000000"  # a record left by older code
    path.write_text(json.dumps(record))
    table, _ = report(sweep)
    assert f"commits `000000000000` (1), `{code_commit()}` ({len(sweep.tasks) - 1}): not all from one code" in table


def test_a_record_row_reads_the_last_rounds_accuracy_and_the_upload_per_round():
    record = {"sweep": {"cell": "c", "seed": 0, "sigma": None, "options": {}},
              "config": {"method": "fedavg", "dataset": "cora", "partition": "louvain", "clients": 2, "rounds": 4,
                         "protocol": "plain", "evaluation": "local_model"},
              "metrics": {"test_acc": 0.8, "last": {"test_acc": 0.7}, "val_acc": 0.75, "best_round": 2},
              "cost": {"bytes_up_per_client": [2e6, 4e6], "rounds": 4}, "time": {"total_s": 1.5},
              "privacy": {"epsilon": None}}
    from privfgl.sweep.report import record_row
    row = record_row(record)
    assert (row["test_acc"], row["test_acc_last"], row["best_round"]) == (0.8, 0.7, 2)
    assert (row["MB_up_per_client"], row["MB_up_per_client_round"]) == (3.0, 0.75)


def test_a_line_plot_keeps_the_cells_its_where_names_and_dashes_the_series_dashed_names(tmp_path, monkeypatch):
    from privfgl import plots
    from privfgl.sweep.report import draw
    drawn = {}
    monkeypatch.setattr(plots, "line_plot", lambda series, path, **kw: drawn.setdefault(path.name, series))
    sweep = load_sweep(write(tmp_path, SMALL + """
[[plots]]
file = "cora.png"
kind = "line"
x = "clients"
y = "test_acc"
series = ["method", "target_epsilon"]
where = { dataset = "sbm-cora" }
dashed = { method = "fedavg" }
"""))
    row = lambda dataset, method, clients, eps, acc: dict(cell=f"{dataset} {method} {clients} {eps}", dataset=dataset,
                                                         method=method, clients=clients, target_epsilon=eps, test_acc=acc)
    summary = [row("sbm-cora", "dp-fedavg", 10, 8, 0.3), row("sbm-cora", "dp-fedavg", 1000, 8.0, 0.7),
               row("sbm-cora", "fedavg", 10, None, 0.8), row("sbm-cora", "fedavg", 1000, None, 0.75),
               row("sbm-pubmed", "dp-fedavg", 10, 8, 0.1)]
    draw(sweep, summary)
    lines = {s.label: s for s in drawn["cora.png"]}
    assert set(lines) == {"dp-fedavg, 8", "fedavg"}          # no sbm-pubmed point; no "None" in a label
    assert list(lines["dp-fedavg, 8"].y) == [0.3, 0.7] and lines["dp-fedavg, 8"].linestyle == "-"
    assert list(lines["fedavg"].x) == [10.0, 1000.0] and lines["fedavg"].linestyle == "--"
    with pytest.raises(ConfigError, match="plot cora.png: where must be a table of column = value"):
        load_sweep(write(tmp_path, SMALL + '\n[[plots]]\nfile = "cora.png"\ny = "test_acc"\nwhere = "sbm-cora"\n'))


def test_a_cell_with_its_own_seeds_runs_only_at_those_of_the_sweeps(tmp_path):
    text = """
[sweep]
seeds = [0, 1, 2]
[base]
method = "fedavg"
[[cells]]
label = "accuracy"
[[cells]]
label = "audit"
rounds = 3
seeds = [0]
"""
    sweep = load_sweep(write(tmp_path, text))
    assert [(c.name, s) for c, s in sweep.tasks] == [("accuracy", 0), ("accuracy", 1), ("accuracy", 2), ("audit", 0)]
    assert [c.name for c, _ in load_sweep(write(tmp_path, text), seeds=[1, 2]).tasks] == ["accuracy", "accuracy"]
    plain = load_sweep(write(tmp_path, text.replace("seeds = [0]\n", "")))
    assert sweep.cells[1].key == plain.cells[1].key  # a cell's seeds say when it runs, not what runs
    with pytest.raises(ConfigError, match="cell 'audit': seeds must be a non-empty list of integers"):
        load_sweep(write(tmp_path, text.replace("seeds = [0]\n", "seeds = 0\n")))
    with pytest.raises(ConfigError, match=r"cell 'audit': seeds \[0, 7\] are not all among \[sweep\] seeds"):
        load_sweep(write(tmp_path, text.replace("seeds = [0]\n", "seeds = [0, 7]\n")))  # 7 would be skipped


def test_a_where_list_keeps_any_of_its_values_and_a_cells_name_is_one_series(tmp_path, monkeypatch):
    from privfgl import plots
    from privfgl.sweep.report import draw
    drawn = {}
    monkeypatch.setattr(plots, "line_plot", lambda series, path, **kw: drawn.setdefault(path.name, (series, kw)))
    sweep = load_sweep(write(tmp_path, SMALL + """
[[plots]]
file = "edge.png"
kind = "line"
x = "target_epsilon"
y = "test_acc"
series = ["name"]
where = { dataset = "cora", name = ["GAP, edge level", "FedAvg GCN"] }
"""))
    row = lambda name, eps, acc, dataset="cora": dict(cell=f"{name}, {eps}, {dataset}", name=name, dataset=dataset,
                                                     target_epsilon=eps, test_acc=acc)
    draw(sweep, [row("GAP, edge level", 1.0, 0.6), row("GAP, edge level", 8.0, 0.7), row("GAP, node level", 8.0, 0.3),
                 row("FedAvg GCN", None, 0.8), row("GAP, edge level", 8.0, 0.1, "citeseer")])
    series, kw = drawn["edge.png"]
    assert [(s.label, list(s.x), list(s.y)) for s in series] == [("GAP, edge level", [1.0, 8.0], [0.6, 0.7])]
    assert [(r.label, r.y, r.linestyle) for r in kw["references"]] == [("FedAvg GCN, None, cora", 0.8, "--")]
