"""`privfgl audit`: runs the method, then the attacks, and writes them into the run record."""
import json

import pytest

from privfgl.cli import main


def test_audit_writes_findings_with_baselines(tmp_path, capsys):
    out = tmp_path / "audit.json"
    code = main(["audit", "--method", "fedavg", "--dataset", "sbm", "--partition", "louvain", "--clients", "3",
                 "--rounds", "1", "--local-epochs", "1", "--optimizer", "sgd", "--dropout", "0", "--hidden", "16",
                 "--no-progress", "--attack", "label-inference:clients=0", "--out", str(out)])
    assert code == 0
    record = json.loads(out.read_text())
    assert record["config"]["transcript"] == "all" and record["config"]["optimizer"] == "sgd"
    rows = {a["target"]: a for a in record["attacks"]}
    assert set(rows) == {"client0", "aggregate:client0"}
    assert set(rows["client0"]) >= {"name", "target", "metrics", "baseline"}
    assert rows["client0"]["metrics"]["js"] < rows["client0"]["baseline"]["uniform_js"]
    assert "label-inference" in capsys.readouterr().out


def test_audit_help_names_every_registered_attack(capsys, monkeypatch):
    from attacks import ATTACKS
    from privfgl.cli import ATTACK_NAMES
    assert sorted(ATTACK_NAMES) == sorted(ATTACKS)
    monkeypatch.setenv("COLUMNS", "1000")  # argparse wraps at hyphens otherwise
    with pytest.raises(SystemExit):
        main(["audit", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert all(name in help_text for name in ATTACKS)


def test_audit_rejects_an_unknown_attack(capsys):
    code = main(["audit", "--method", "fedavg", "--dataset", "sbm", "--attack", "model-stealing"])
    assert code == 2
    assert "unknown attack 'model-stealing'" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--attack", "gradient-inversion:clients=9"], "attack gradient-inversion: clients=9: the run has 3 clients"),
    (["--attack", "gradient-inversion:clients=a"], "clients='a': expected client indices joined by +"),
    (["--attack", "label-inference:foo=1"], "attack label-inference: unknown parameter 'foo'; valid: round, clients"),
    (["--attack", "label-inference", "--adversary", "foo"], "--adversary 'foo': not a party of this run"),
    (["--attack", "label-inference", "--adversary", "client3"], "--adversary 'client3': not a party of this run"),
    (["--attack", "membership:candidates=canaries"], "candidates=canaries in a run without canaries"),  # was: no input
])
def test_audit_refuses_targets_and_parties_the_run_does_not_have_before_running(capsys, argv, message):
    code = main(["audit", "--method", "fedavg", "--dataset", "sbm", "--clients", "3", "--rounds", "1", *argv])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("argv, target, reason", [
    (["--attack", "secagg-collusion"], "all", "no masked input of 'model_update' in the server's view"),
    (["--attack", "split-features"], "client0", "split-features reads FedGPL's split messages, not fedavg's"),
    (["--attack", "split-decoder"], "client0", "split-decoder reads FedGPL's split messages, not fedavg's"),
    (["--attack", "secagg-collusion", "--protocol", "secagg", "--protocol-param", "mode=multiprocess"], "client0",
     "secagg ran the clients in worker or party processes"),
])
def test_an_attack_that_does_not_apply_to_the_run_reports_no_input_with_its_reason(tmp_path, capsys, argv, target, reason):
    # these raised a traceback before (the attack failed while naming its targets or declaring its aux)
    out = tmp_path / "audit.json"
    code = main(["audit", "--method", "fedavg", "--dataset", "sbm", "--clients", "3", "--rounds", "1", "--hidden", "16",
                 "--no-progress", "--out", str(out), *argv])
    assert code == 0
    rows = {a["target"]: a for a in json.loads(out.read_text())["attacks"]}
    assert reason in rows[target]["metrics"]["no_input"]
    assert "no input" in capsys.readouterr().out
