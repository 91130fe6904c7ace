"""experiments/dp_fedavg_public_settings.py `search`: a candidate's backbone reaches the runs it is judged by, and
bad input gets one line naming it."""
import importlib
import sys

import pytest


@pytest.fixture(scope="module")
def script():
    return importlib.import_module("experiments.dp_fedavg_public_settings")


def test_a_candidate_s_backbone_and_training_reach_its_run_config(script):
    sgc = next(c for c in script.SEARCH if c.model == "sgc" and c.rounds == 40)
    cfg = script.config("sbm-cora", sgc.rounds, "gaussian:sigma=1,clip=3,on=update,mode=central,seed=0", "none",
                        (sgc.optimizer, sgc.lr), sgc.hidden, sgc.local_epochs, sgc.model)
    assert (cfg.model, cfg.optimizer, cfg.lr, cfg.local_epochs, cfg.rounds) == ("sgc", "sgd", 0.1, 1, 40)
    assert (cfg.dataset, cfg.partition, cfg.clients) == ("sbm-cora", "metis", 1000)
    assert str(sgc).startswith("sgc, T = 40 x E = 1, sgd lr 0.1")
    assert str(script.Candidate()).startswith("hidden 64, T = 20 x E = 3, adam")  # the earlier rows print as before


def test_a_candidate_s_own_clip_replaces_the_median_rule_and_says_so(script):
    one_round = [c for c in script.SEARCH if c.model == "sgc" and c.rounds == 1]
    assert [c.clip for c in one_round][:4] == [None, 1.0, 0.5, 2.0]
    assert str(one_round[1]).endswith("η = 1000, C = 1 (not the rule's)")
    assert "C =" not in str(one_round[0])  # the rule's C is printed in the table's own column


@pytest.mark.parametrize("argv, named", [(["search", "--only", "99"], "--only 99"),
                                         (["search", "--only", "x"], "--only x"),
                                         (["search", "--epsilon", "0"], "--epsilon 0"),
                                         (["signal", "--rounds", "0"], "--rounds 0"),
                                         (["signal", "--local-epochs", "0"], "--local-epochs 0")])
def test_bad_input_gets_one_line_naming_it(script, monkeypatch, capsys, argv, named):
    monkeypatch.setattr(sys, "argv", ["dp_fedavg_public_settings.py", *argv])
    with pytest.raises(SystemExit) as exit_:
        script.main()
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert named in err[-1] and "valid:" in err[-1] and "Traceback" not in "\n".join(err)
