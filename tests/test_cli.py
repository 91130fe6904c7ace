"""The command line: one clear line for bad input, a record for a good run."""
import json

import pytest

from privfgl.cli import main


@pytest.fixture(autouse=True)
def _partition_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("PRIVFGL_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def run_cli(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_run_writes_the_record_and_prints_a_table(planetoid_root, tmp_path, capsys):
    out = tmp_path / "r.json"
    code, stdout, _ = run_cli(capsys, "run", "--method", "fedavg", "--dataset", "cora", "--partition", "louvain",
                              "--clients", "5", "--rounds", "2", "--seed", "1", "--data-root", str(planetoid_root),
                              "--offline", "--no-progress", "--out", str(out))
    assert code == 0
    record = json.loads(out.read_text())
    assert record["config"]["clients"] == 5 and record["config"]["seed"] == 1
    assert "test_acc" in stdout and "fedavg" in stdout


def test_threads_are_recorded_and_restored_after_the_run(planetoid_root, tmp_path, capsys):
    import torch
    before = torch.get_num_threads()
    out = tmp_path / "r.json"
    args = ("run", "--method", "fedavg", "--dataset", "cora", "--clients", "3", "--rounds", "1", "--data-root",
            str(planetoid_root), "--offline", "--no-progress", "--out", str(out))
    assert run_cli(capsys, *args, "--threads", "1")[0] == 0
    assert json.loads(out.read_text())["config"]["threads"] == 1 and torch.get_num_threads() == before
    assert run_cli(capsys, *args)[0] == 0
    assert json.loads(out.read_text())["config"]["threads"] == before


def test_config_file_is_read_and_flags_override_it(planetoid_root, tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("method: local\nclients: 3\nrounds: 2\nsplit: [0.3, 0.3, 0.4]\n")
    out = tmp_path / "r.json"
    code, _, _ = run_cli(capsys, "run", "--config", str(cfg), "--rounds", "1", "--data-root", str(planetoid_root),
                         "--offline", "--no-progress", "--out", str(out))
    assert code == 0
    c = json.loads(out.read_text())["config"]
    assert (c["method"], c["clients"], c["rounds"], c["split"]) == ("local", 3, 1, [0.3, 0.3, 0.4])


@pytest.mark.parametrize("argv, message", [
    (["--dataset", "imagenet"], "unknown dataset 'imagenet'"),
    (["--method", "fedsgd"], "invalid method 'fedsgd'; valid: local, fedavg, fedprox"),
    (["--partition", "random"], "random"),
    (["--clients", "5000"], "5000"),
    (["--split", "0.6,0.4,0.4"], "split"),
    (["--protocol", "rot13"], "invalid protocol 'rot13'"),
    (["--evaluation", "oracle"], "invalid evaluation"),
    (["--threads", "0"], "invalid threads 0; valid: an integer >= 1"),
])
def test_bad_input_gives_one_clear_line_and_exit_code_2(planetoid_root, capsys, argv, message):
    code, _, err = run_cli(capsys, "run", "--dataset", "cora", "--data-root", str(planetoid_root), "--offline",
                           "--rounds", "1", "--no-progress", *argv)
    assert code == 2
    assert err.startswith("privfgl: error:") and message.lower() in err.lower()
    assert len(err.strip().splitlines()) == 1


def test_a_missing_dataset_offline_names_the_root_and_the_files(tmp_path, capsys):
    code, _, err = run_cli(capsys, "run", "--dataset", "citeseer", "--data-root", str(tmp_path), "--offline")
    assert code == 2
    assert str(tmp_path) in err and "ind.citeseer" in err


def test_unknown_config_key_is_named(tmp_path, capsys):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"methd": "fedavg"}))
    code, _, err = run_cli(capsys, "run", "--config", str(cfg))
    assert code == 2 and "methd" in err


def test_datasets_lists_what_is_on_disk(planetoid_root, capsys):
    code, stdout, _ = run_cli(capsys, "datasets", "--data-root", str(planetoid_root))
    assert code == 0
    lines = {line.split()[0]: line for line in stdout.splitlines()[1:] if line.startswith("  ")}
    assert "available" in lines["cora"] and "missing" in lines["pubmed"]


def test_quickstart_falls_back_to_the_synthetic_graph_offline(tmp_path, capsys):
    code, stdout, _ = run_cli(capsys, "quickstart", "--data-root", str(tmp_path / "empty"), "--rounds", "1", "--offline",
                              "--seeds", "0", "--out-dir", str(tmp_path / "runs"), "--no-progress")
    assert code == 0
    assert "Cora is not available" in stdout and "synthetic" in stdout
    assert len(stdout.split("Cora is not available")[0].strip().splitlines()) == 0
    # the audit table: one row per protection, with accuracy, cost and the attack beside its baseline
    for label in ("plain", "crypten (secret sharing)", "ckks sum (HE)", "secagg (masking)", "central DP, eps 8"):
        assert f"| {label} | 1 |" in stdout
    assert "label-inference:cosine:baseline" in stdout
    assert (tmp_path / "runs" / "quickstart.png").read_bytes()[:4] == b"\x89PNG"
    records = list((tmp_path / "runs" / "records").rglob("seed0.json"))
    assert len(records) == 5 and all(json.loads(p.read_text())["config"]["dataset"] == "sbm" for p in records)


@pytest.mark.parametrize("argv, message", [
    (["run", "--method", "opfgl", "--rounds", "5"], "O-pFGL is one-shot"),  # a method's own check
    (["run", "--out", "/proc/no/such.json"], "--out /proc/no/such.json"),  # checked before the run
    (["run", "--save-view", "/proc/no/view"], "--save-view /proc/no/view"),
    (["run", "--clients", "x"], "argument --clients: invalid int value: 'x'"),
    (["run", "--bogus"], "unrecognized arguments: --bogus"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    (["audit", "--attack", "telepathy"], "unknown attack 'telepathy'"),
])
def test_every_bad_input_is_one_line_and_exit_code_2(planetoid_root, capsys, argv, message):
    try:
        code = main([*argv, "--data-root", str(planetoid_root), "--offline", "--no-progress"]
                    if argv[0] in ("run", "audit") and "--bogus" not in argv and "x" not in argv else argv)
    except SystemExit as e:  # argparse's own errors exit from parse_args
        code = e.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("privfgl") and "error:" in err and message in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_method_defaults_fill_in_what_the_user_did_not_set_and_are_recorded(planetoid_root, tmp_path, capsys):
    from privfgl.cli import build_parser, config_from_args
    parse = lambda *argv: config_from_args(build_parser().parse_args(["run", *argv]))
    cfg = parse("--method", "opfgl", "--dataset", "cora", "--partition", "louvain+")
    assert (cfg.rounds, cfg.partition_seed, cfg.method_params["preset"]) == (1, 42, "cora-louvain+")
    assert cfg.method_defaults == {"rounds": 1, "partition_seed": 42, "method_params": {"preset": "cora-louvain+"}}
    mine = parse("--method", "opfgl", "--partition", "metis+", "--partition-seed", "7",
                 "--method-param", "preset=cora-louvain+", "--method-param", "beta=0.5")
    assert (mine.partition_seed, mine.method_params) == (7, {"preset": "cora-louvain+", "beta": 0.5})  # user wins
    assert mine.method_defaults == {"rounds": 1}
    assert parse("--method", "fedomd").split == (0.01, 0.2, 0.2) and parse("--method", "fedomd").split_mode == "random"
    assert (parse("--method", "fedgpl").partition, parse("--method", "fedgpl").clients) == ("tasks", 9)
    assert parse("--method", "fedlog").partition == "metis" and parse("--method", "fedspray").split == (0.4, 0.3, 0.3)
    assert parse("--method", "fedavg").method_defaults == {}

    out = tmp_path / "r.json"
    code, _, _ = run_cli(capsys, "run", "--method", "opfgl", "--dataset", "cora", "--partition", "louvain+",
                         "--clients", "3", "--method-param", "condense_iters=20", "--method-param", "max_iters=20", "--method-param", "eval_every=10",
                         "--data-root", str(planetoid_root), "--offline", "--no-progress", "--out", str(out))
    assert code == 0
    config = json.loads(out.read_text())["config"]
    assert config["rounds"] == 1 and config["method_defaults"]["method_params"] == {"preset": "cora-louvain+"}
