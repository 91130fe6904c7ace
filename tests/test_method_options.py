"""A shared run option the method ignores is refused, in one line and before the data is read; the
table of ignored options (privfgl/methods/options.py) is the methods' behaviour: for the quick
methods, every option it lists changes nothing in a run, and every option it does not list changes
something (every method, the slow ones too: `python experiments/method_options.py`)."""
from __future__ import annotations

import json

import pytest

import privfgl.experiment as experiment
from privfgl.cli import main
from privfgl.experiment import RunConfig, run
from privfgl.methods.options import OTHER_VALUES, TRAINING_OPTIONS, UNUSED

QUICK = {"fedavg": {}, "fedprox": {}, "local": {}, "fedspray": {}, "fedomd": {},
         "dp-fedavg": {"dp": "gaussian:sigma=1,clip=1,on=update,mode=central,seed=3"},  # seeded: comparable
         "gap": {"method_params": {"seed": 3, "encoder_rounds": 2}}}


@pytest.fixture(autouse=True)
def _partition_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("PRIVFGL_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def test_the_table_covers_every_method_and_names_only_training_options():
    from privfgl.methods import METHODS
    assert set(UNUSED) == set(METHODS)
    assert all(set(options) <= set(TRAINING_OPTIONS) for options in UNUSED.values())
    assert set(OTHER_VALUES) == set(TRAINING_OPTIONS)


@pytest.mark.parametrize("method", sorted(QUICK))
def test_an_option_changes_the_run_exactly_when_the_method_reads_it(method, cora, monkeypatch):
    monkeypatch.setattr(experiment, "unused_option", lambda method, option: None)  # run what the check refuses

    def outcome(**changed):
        cfg = RunConfig(method=method, clients=3, rounds=2, transcript="none", progress=False, **QUICK[method],
                        **changed)
        try:
            record, _ = run(cfg, data=cora)
        except ValueError:  # the method refuses the value itself (e.g. fedomd's --layers): it reads it
            return "refused"
        return json.dumps([record["metrics"], record["cost"]], sort_keys=True)

    base = outcome()
    assert outcome() == base  # deterministic, so a difference below is the option's
    for option, value in OTHER_VALUES.items():
        unused = option in UNUSED[method]
        assert (outcome(**{option: value}) == base) == unused, (method, option, "listed unused" if unused else "read")


def test_an_ignored_option_is_refused_in_one_line_before_the_data_is_read(tmp_path, capsys):
    missing = str(tmp_path / "no-data-here")
    code = main(["run", "--method", "fedomd", "--lr", "0.05", "--data-root", missing, "--offline", "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert err.endswith("fedomd does not use --lr (given 0.05): fedomd sets it with its own --method-param lr; "
                        "valid: leave --lr unset")
    assert main(["run", "--method", "fedavg", "--mu", "0.5", "--data-root", missing, "--offline"]) == 2
    assert "fedavg does not use --mu (given 0.5): it is FedProx's proximal weight" in capsys.readouterr().err


def test_an_ignored_option_at_its_default_is_accepted():
    RunConfig(method="fedavg", mu=0.01).validate()  # RunConfig's default: what the run does anyway
    RunConfig(method="fedgpl", partition="tasks", clients=9, lr=0.01, hidden=64).validate()
    with pytest.raises(experiment.ConfigError, match="fedgpl does not use --hidden"):
        RunConfig(method="fedgpl", partition="tasks", clients=9, hidden=128).validate()


@pytest.mark.parametrize("argv, message", [
    (["--method", "opfgl", "--rounds", "5"], "opfgl: --rounds 5 is not supported; valid: 1 (O-pFGL is one-shot)"),
    (["--method", "fedspray", "--model", "gat"],
     "fedspray: --model 'gat' is not supported; valid: gcn, sage, sgc (the paper's backbones)"),
    (["--method", "dp-sgd", "--model", "sage"],
     "dp-sgd: --model 'sage' is not supported; valid: gcn (dp-sgd trains a mean-aggregation GCN)"),
    (["--method", "fedomd", "--layers", "3"], "fedomd does not use --layers (given 3): fedomd's model is GCNConv -> "
                                              "ortho_layers x OrthoConv -> GCNConv"),
    (["--method", "opfgl", "--method-param", "dp_epsilon=1", "--method-param", "dp_clip=1", "--method-param",
      "dp_degree=3", "--dp", "gaussian:sigma=1,clip=1,on=stats,mode=central"],
     "opfgl: dp_epsilon (node-level DP on the statistics) and --dp (client-level message DP) are two DP mechanisms"),
])
def test_a_value_the_method_cannot_run_with_is_refused_before_the_data_is_read(tmp_path, capsys, argv, message):
    # these were refused by the method itself, after the data was loaded (in a sweep: after the earlier cells ran)
    code = main(["run", *argv, "--data-root", str(tmp_path / "no-data-here"), "--offline", "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and message in err, err


@pytest.mark.parametrize("method, param, message", [
    ("opfgl", "hopz=2", "opfgl: unknown method param(s) hopz; valid: preset, hops,"),
    ("fedlog", "lr=abc", "fedlog: invalid method param lr='abc'; valid: a number"),
    ("dp-sgd", "sigmaa=1", "dp-sgd: unknown method param(s) sigmaa; valid: sigma,"),
])
def test_a_bad_method_param_is_refused_before_the_data_is_read(tmp_path, capsys, method, param, message):
    # it was refused only once the method ran, after the dataset was loaded (and PyG had printed "Done!")
    code = main(["run", "--method", method, "--method-param", param, "--data-root", str(tmp_path / "no-data-here"),
                 "--offline", "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and message in err, err


def test_the_help_groups_the_training_flags_and_names_runconfigs_defaults():
    import re

    from privfgl.cli import build_parser
    from privfgl.experiment import RunConfig
    run_parser = build_parser()._subparsers._group_actions[0].choices["run"]
    group = next(g for g in run_parser._action_groups if g.title == "model and local training")
    flags = {a.dest: a.help for a in group._group_actions}
    assert set(flags) == set(TRAINING_OPTIONS)
    defaults = RunConfig()
    for option, text in flags.items():
        said = re.search(r"\(default ([^ )=]+)", text) or re.search(r"(\S+) \(default", text)  # "(default 3)", "gcn (default)"
        value = said.group(1)
        assert value == str(getattr(defaults, option)) or float(value) == getattr(defaults, option), (option, text)
