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
    (["--canaries", "-1"], "invalid canaries -1; valid: an integer >= 0"),
    (["--absent", "0:12"], "invalid absent {'0': [12]}; valid: rounds 0..0 (or '*': every round) and client "
                           "indices 0..9"),
    (["--absent", "1:0"], "invalid absent {'1': [0]}; valid: rounds 0..0"),  # a round the run does not have
    (["--absent=-1:0"], "absent: round keys must be integers >= 0 or '*', got '-1'"),  # was silently no absence
    (["--lr", "nan"], "invalid lr nan; valid: a finite number > 0"),  # was torch's message
    (["--lr", "inf"], "invalid lr inf; valid: a finite number > 0"),  # was a NaN-input error after training
    (["--split", "1,0,0"], "each > 0"),  # no validation or test nodes to choose and score a round on
    (["--split", "0.001,0.001,0.001"], "leaves every client with no training node"),  # was: accuracy 0.0 over no test node
    (["--seed", "-1"], "invalid seed -1; valid: an integer from 0 to 2**32 - 1"),
    (["--partition-seed", "-1"], "invalid partition_seed -1"),
    (["--canaries", "2", "--canary-seed", "-5"], "invalid canary_seed -5"),
    (["--canary-seed", "5"], "canary_seed 5 without canaries"),  # was accepted, with no effect
    (["--method-param", "foo=1"], "fedavg: takes no method params (got foo)"),
    (["--method", "fedprox", "--method-param", "mu=abc"], "fedprox: takes no method params (got mu)"),
    (["--absent-rate", "1"], "invalid absent_rate 1.0; valid: a probability in [0, 1)"),
    (["--method", "fedgpl", "--canaries", "2"], "canaries 2: fedgpl's task clients"),
])
def test_bad_input_gives_one_clear_line_and_exit_code_2(planetoid_root, capsys, argv, message):
    code, _, err = run_cli(capsys, "run", "--dataset", "cora", "--data-root", str(planetoid_root), "--offline",
                           "--rounds", "1", "--no-progress", *argv)
    assert code == 2
    assert err.startswith("privfgl: error:") and message.lower() in err.lower()
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("settings, message", [
    ({"canaries": 2.5}, "invalid canaries 2.5; valid: an integer"),
    ({"canaries": True}, "invalid canaries True"),
    ({"canaries": 2, "canary_seed": "abc"}, "invalid canary_seed 'abc'; valid: an integer, or unset"),
])
def test_bad_canary_settings_in_a_config_file_are_one_line(planetoid_root, tmp_path, capsys, settings, message):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps(settings))
    code, _, err = run_cli(capsys, "run", "--config", str(cfg), "--data-root", str(planetoid_root), "--offline")
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("text, message", [
    ('{"rounds": "two"}', "invalid rounds 'two'; valid: an integer"),
    ('{"dropout": "high"}', "invalid dropout 'high'; valid: a number"),
    ('{"dp": 5}', "invalid dp 5; valid: a string, or unset"),
    ('{"protocol_params": "x"}', "invalid protocol_params 'x'; valid: a mapping"),
    ('{"seed": true}', "invalid seed True; valid: an integer"),
    ('{"split": "0.5,0.5,0.5"}', "invalid split (0.5, 0.5, 0.5)"),  # parsed as the flag is, then checked
    ('{"rounds": 2, "clients": ', "c.json: not valid JSON at line 1, column 26"),
])
def test_a_config_file_of_the_wrong_shape_is_one_line(planetoid_root, tmp_path, capsys, text, message):
    cfg = tmp_path / "c.json"
    cfg.write_text(text)
    code, _, err = run_cli(capsys, "run", "--config", str(cfg), "--data-root", str(planetoid_root), "--offline")
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_a_config_that_is_bad_yaml_or_a_folder_is_one_line(tmp_path, capsys):
    bad = tmp_path / "c.yaml"
    bad.write_text("rounds: [1\n")
    code, _, err = run_cli(capsys, "run", "--config", str(bad))
    assert code == 2 and "c.yaml: not valid YAML at line 2, column 1" in err and len(err.strip().splitlines()) == 1
    code, _, err = run_cli(capsys, "run", "--config", str(tmp_path))
    assert code == 2 and "a folder, not a file" in err


def test_canaries_are_inserted_per_client_outside_every_accuracy_and_recorded(planetoid_root, tmp_path, capsys):
    import torch
    from privfgl.cli import build_parser, config_from_args
    from privfgl.experiment import build_setup
    argv = ["run", "--dataset", "cora", "--clients", "3", "--rounds", "1", "--data-root", str(planetoid_root),
            "--offline", "--no-progress"]
    plain = build_setup(config_from_args(build_parser().parse_args(argv)))
    setup = build_setup(config_from_args(build_parser().parse_args([*argv, "--canaries", "5", "--canary-seed", "7"])))
    info = setup.extras["canaries"]  # auditor side: which nodes, which trained
    assert info["nodes"].shape == (15, 2) and info["member"].shape == (15,) and info["seed"] == 7
    for k, (a, b) in enumerate(zip(plain.clients, setup.clients)):
        n = int(a.num_nodes)
        assert int(b.num_nodes) == n + 5 and torch.equal(b.x[:n], a.x) and torch.equal(b.train_mask[:n], a.train_mask)
        assert not b.test_mask[n:].any() and not b.val_mask[n:].any()  # in no evaluation mask
        assert torch.equal(b.train_mask[n:], info["member"][info["nodes"][:, 0] == k])  # members train
    for mask in ("test_mask", "val_mask"):  # the tracker scores exactly the real nodes it scored before
        scored = lambda tracker: sum(int(getattr(view, mask).sum()) for view in tracker.views)
        assert scored(setup.tracker) == scored(plain.tracker)
    assert 0 < int(info["member"].sum()) < 15  # a fair coin per canary: members and non-members
    other = build_setup(config_from_args(build_parser().parse_args([*argv, "--canaries", "5", "--canary-seed", "8"])))
    x = lambda s: torch.cat([c.x[-5:] for c in s.clients])
    assert not torch.equal(x(other), x(setup))  # another canary seed, other canaries

    out = tmp_path / "r.json"
    assert run_cli(capsys, *argv, "--canaries", "5", "--out", str(out))[0] == 0
    record = json.loads(out.read_text())
    assert record["config"]["canaries"] == 5 and record["config"]["canary_seed"] is None
    block = record["canaries"]
    assert (block["per_client"], block["inserted"], block["seed"]) == (5, 15, 0) and "member" not in block
    assert "accuracy is on the real nodes only" in block["evaluation"]
    assert run_cli(capsys, *argv, "--out", str(out))[0] == 0 and "canaries" not in json.loads(out.read_text())


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


def test_quickstart_falls_back_to_the_synthetic_graph_offline_and_says_so(tmp_path, capsys, monkeypatch):
    from privfgl import plots
    titles = []
    real_bars = plots.bar_panels
    monkeypatch.setattr(plots, "bar_panels", lambda *a, **k: titles.append(k["title"]) or real_bars(*a, **k))
    code, stdout, _ = run_cli(capsys, "quickstart", "--data-root", str(tmp_path / "empty"), "--rounds", "1", "--offline",
                              "--seeds", "0", "--out-dir", str(tmp_path / "runs"), "--no-progress")
    assert code == 0
    assert "Cora is not available" in stdout and "synthetic" in stdout
    assert len(stdout.split("Cora is not available")[0].strip().splitlines()) == 0
    # the table and the PNG name the dataset the runs used, never the one they could not load
    header = next(line for line in stdout.splitlines() if "mean ± std over seeds" in line)
    assert header.startswith("FedAvg, synthetic graph 'sbm', 10 clients") and "Cora" not in header
    assert len(titles) == 1 and "synthetic graph 'sbm'" in titles[0] and "Cora" not in titles[0]
    # the audit table: one row per protection, with accuracy, cost and the attack beside its baseline
    for label in ("plain", "crypten (secret sharing)", "ckks sum (HE)", "secagg (masking)", "central DP, eps 8"):
        assert f"| {label} | 1 |" in stdout
    assert "label-inference:cosine:baseline" in stdout
    # the DP row's audited lower bound stands beside its ε (dp-audit, canaries=auto); "–" elsewhere
    table = [line for line in stdout.splitlines() if line.startswith("| ")]
    titles = [t.strip() for t in table[0].strip("|").split("|")]
    rows = {cells[0]: dict(zip(titles, cells)) for cells in
            ([c.strip() for c in line.strip("|").split("|")] for line in table[2:])}
    assert titles.index("ε audit ≥") == titles.index("epsilon") + 1
    dp = rows["central DP, eps 8"]
    assert 0 < float(dp["ε audit ≥"]) <= float(dp["epsilon"])
    assert all(row["ε audit ≥"] == "–" for label, row in rows.items() if label != "central DP, eps 8")
    dp_record = json.loads(next((tmp_path / "runs" / "records").glob("central_DP*/seed0.json")).read_text())
    from attacks.dp.canary_clients import AUTO_COUNT
    assert 1000 < dp_record["canary_clients"]["inserted"] <= AUTO_COUNT  # auto: as many as the small model holds
    assert (tmp_path / "runs" / "quickstart.png").read_bytes()[:4] == b"\x89PNG"
    records = list((tmp_path / "runs" / "records").rglob("seed0.json"))
    assert len(records) == 5 and all(json.loads(p.read_text())["config"]["dataset"] == "sbm" for p in records)


@pytest.mark.parametrize("argv, message", [
    (["run", "--method", "opfgl", "--rounds", "5"], "O-pFGL is one-shot"),  # a method's own check
    (["run", "--out", "/proc/no/such.json"], "--out /proc/no/such.json"),  # checked before the run
    (["run", "--save-view", "/proc/no/view"], "--save-view /proc/no/view"),
    (["run", "--clients", "x"], "argument --clients: invalid int value: 'x'"),
    (["run", "--split", "-0.2,0.6,0.6"],  # argparse takes the value for an option
     "argument --split: expected one argument; a value that starts with '-' is written --split=VALUE"),
    (["run", "--split=-0.2,0.6,0.6"], "each > 0"),  # written so, the value is read and checked
    (["run", "--bogus"], "unrecognized arguments: --bogus"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    (["audit", "--attack", "telepathy"], "unknown attack 'telepathy'"),
    (["run", "--canaries", "x"], "argument --canaries: invalid int value: 'x'"),
    (["run", "--absent", "x:1"], "argument --absent: 'x:1': expected ROUND:K[+K...]"),
    (["audit", "--canary-seed", "1.5", "--attack", "membership"], "argument --canary-seed: invalid int value: '1.5'"),
    (["run", "--save-view", ""], "--save-view: an empty path"),  # was silently no view
    (["run", "--out", "/dev/null"], "--out /dev/null: is not a regular file"),  # was: replaced by the record
    (["run", "--dp", "gaussian:sigma=1,clip=1,on=update,mode=local", "--dp", "laplace:epsilon=1,clip=1,on=update,mode=local"],
     "argument --dp: given twice"),  # was: the last spec, silently
    (["run", "--transcript", "none", "--save-view", "/tmp/privfgl-test-view"], "--save-view with --transcript none"),
    (["audit", "--transcript", "none", "--attack", "label-inference"], "audit with --transcript none"),  # was: no input
    (["run", "--method", "dp-sgd", "--method-param", "federated=maybe"], "dp-sgd: federated must be true or false"),
    (["run", "--protocol", "crypten", "--protocol-param", "mode=multiprocess", "--crypten-mode", "inprocess"],
     "--crypten-mode inprocess and --protocol-param mode=multiprocess disagree"),  # was: in process, silently
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


def test_save_view_keeps_every_rounds_payloads_and_replaces_an_earlier_view(planetoid_root, tmp_path, capsys):
    folder = tmp_path / "view"
    folder.mkdir()
    (folder / "m999999-stale.npy").write_bytes(b"from another run")  # a file of a view saved there before
    (folder / "notes.txt").write_text("the auditor's own")
    argv = ["run", "--method", "fedavg", "--dataset", "cora", "--clients", "3", "--rounds", "2", "--save-view",
            str(folder), "--data-root", str(planetoid_root), "--offline", "--no-progress"]
    code, out, _ = run_cli(capsys, *argv)
    assert code == 0 and "server's view:" in out
    view = json.loads((folder / "view.json").read_text())
    uploads = [m for m in view["messages"] if m["name"] == "model_update"]
    assert sorted({m["round"] for m in uploads}) == [0, 1] and all(m["tensors"] for m in uploads)  # not only the last
    written = {name for m in view["messages"] for name in (*m["tensors"].values(), *m["blobs"])}
    on_disk = {p.name for p in folder.iterdir()} - {"view.json", "notes.txt"}
    assert on_disk == written and (folder / "notes.txt").exists()  # the stale file is gone, others' kept


def test_sigterm_removes_the_parties_private_files_and_processes(planetoid_root, tmp_path):
    """`kill` / `timeout` end a run as Ctrl-C does: under mode=multiprocess the clients' inputs sit in a
    private folder in /dev/shm until the run unwinds, so SIGTERM must unwind it too."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    from tests.processes import alive
    shm = Path("/dev/shm")
    if not shm.is_dir():
        pytest.skip("no /dev/shm")
    before = set(shm.glob("privfgl-secagg-*"))
    env = {**os.environ, "PRIVFGL_CACHE": str(tmp_path / "cache")}
    proc = subprocess.Popen([sys.executable, "-c", "from privfgl.cli import entry; entry()", "run", "--method", "fedavg",
                             "--dataset", "cora", "--clients", "3", "--rounds", "500", "--protocol", "secagg",
                             "--protocol-param", "mode=multiprocess", "--data-root", str(planetoid_root), "--offline",
                             "--no-progress"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not set(shm.glob("privfgl-secagg-*")) - before and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    folders = set(shm.glob("privfgl-secagg-*")) - before
    assert folders, f"the run never made its folder: {proc.poll()} {proc.stderr.read() if proc.poll() is not None else ''}"
    children = [int(p) for p in Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()]
    assert children  # the parties are running
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "privfgl: interrupted" in err and "Traceback" not in err
    assert not any(f.exists() for f in folders)
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(pid) for pid in children)


def test_out_writes_through_a_symlink_and_refuses_a_fifo(tmp_path, capsys):
    # before: the atomic write replaced the link (or the FIFO, or a device) by a regular file
    import os

    (tmp_path / "link.json").symlink_to(tmp_path / "target.json")
    os.mkfifo(tmp_path / "fifo.json")
    base = ["run", "--method", "fedavg", "--dataset", "sbm", "--clients", "3", "--rounds", "1", "--no-progress", "--out"]
    assert main([*base, str(tmp_path / "link.json")]) == 0
    assert (tmp_path / "link.json").is_symlink() and json.loads((tmp_path / "target.json").read_text())["config"]
    assert main([*base, str(tmp_path / "fifo.json")]) == 2
    assert "is not a regular file" in capsys.readouterr().err and not (tmp_path / "fifo.json").is_file()


@pytest.mark.parametrize("quiet", [False, True])
def test_audit_shows_a_progress_bar_over_its_attack_targets_unless_told_not_to(planetoid_root, capsys, quiet):
    argv = ["audit", "--method", "fedavg", "--dataset", "cora", "--clients", "3", "--rounds", "1", "--optimizer", "sgd",
            "--lr", "0.5", "--dropout", "0", "--attack", "label-inference", "--data-root", str(planetoid_root),
            "--offline", *(["--no-progress"] if quiet else [])]
    code, _, err = run_cli(capsys, *argv)
    assert code == 0
    assert ("attacks:" in err and "target" in err) is not quiet, err[-500:]
