"""The --dp grammar: valid specs resolve, bad ones fail with one clear error (ConfigError, CLI exit 2)."""
import pytest

from privfgl.cli import main
from privfgl.experiment import ConfigError, RunConfig
from privfgl.privacy import DPSpecError, check_dp_for_run, parse_dp_spec


def test_valid_specs_resolve_aliases_and_defaults():
    g = parse_dp_spec("gaussian:sigma=1.0,clip=1.0,on=update,mode=local")
    assert (g.mechanism, g.messages, g.mode, g.sigma, g.clip) == ("gaussian", ("model_update",), "local", 1.0, 1.0)
    assert (g.delta, g.accountant, g.seed, g.secure) == (1e-5, "rdp", None, True)  # noise from OS entropy
    assert parse_dp_spec("gaussian:sigma=1.0,clip=1.0,on=update,mode=local,seed=5").seed == 5
    assert g.build().std == 1.0
    lap = parse_dp_spec("laplace:epsilon=0.5,clip=2,on=stats,mode=central,seed=os")
    assert lap.messages == ("class_stats", "class_counts") and lap.secure and lap.seed is None
    assert lap.build().scale == 4.0 and lap.clip_norm == 1
    prv = parse_dp_spec("gaussian:sigma=2,clip=0.5,on=model_update,mode=distributed,delta=1e-6,accountant=prv")
    assert prv.build().std == 1.0 and prv.delta == 1e-6 and prv.accountant == "prv"


@pytest.mark.parametrize("spec,needle", [
    ("laplace:epsilon=-1,clip=1,on=stats,mode=central", "epsilon must be a finite number > 0"),
    ("gaussian:sigma=0,clip=1,on=update,mode=central", "sigma must be a finite number > 0"),
    ("laplace:epsilon=1,on=stats,mode=central", "missing clip"),
    ("gaussian:sigma=1,clip=1,mode=central", "missing on"),
    ("gaussian:sigma=1,clip=1,on=update", "missing mode"),
    ("gaussian:sigma=1,clip=1,on=weights,mode=local", "unknown message 'weights'"),
    ("exponential:epsilon=1,clip=1,on=update,mode=local", "unknown mechanism 'exponential'"),
    ("gaussian:sigma=1,clip=1,on=update,mode=local,epsilon=3", "unknown key 'epsilon' for gaussian"),
    ("laplace:epsilon=1,clip=1,on=update,mode=distributed", "Laplace noise is not split"),
    ("gaussian:sigma=1,clip=1,on=update,mode=global", "mode 'global' is not valid"),
    ("gaussian:sigma=1,clip=abc,on=update,mode=local", "clip='abc' is not a number"),
    ("gaussian:sigma=1,clip=1,on=update,mode=local,delta=2", "delta must be in (0, 1)"),
    ("gaussian:sigma=1,sigma=2,clip=1,on=update,mode=local", "sigma is given twice"),
    ("gaussian:sigma=1,clip=1,on=update,mode=local,seed=x", "seed must be an integer or 'os' (the default)"),
])
def test_bad_specs_name_the_problem(spec, needle):
    with pytest.raises(DPSpecError) as e:
        parse_dp_spec(spec)
    assert needle in str(e.value) and isinstance(e.value, ConfigError)


@pytest.mark.parametrize("method,protocol,spec,needle", [
    ("local", "plain", "gaussian:sigma=1,clip=1,on=update,mode=central", "sends no message --dp can protect"),
    ("fedavg", "plain", "gaussian:sigma=1,clip=1,on=stats,mode=central", "sends no message"),
    ("fedavg", "plain", "gaussian:sigma=1,clip=1,on=update,mode=distributed", "needs a secure protocol"),
    ("dp-fedavg", "plain", None, "dp-fedavg needs --dp"),
    ("dp-fedavg", "plain", "laplace:epsilon=1,clip=1,on=update,mode=central", "uses the Gaussian mechanism"),
    ("dp-sgd", "plain", "gaussian:sigma=1,clip=1,on=update,mode=central", "does not apply to dp-sgd"),
])
def test_specs_that_do_not_fit_the_run_are_rejected(method, protocol, spec, needle):
    with pytest.raises(DPSpecError, match=needle.replace("(", r"\(")):
        check_dp_for_run(spec, method, protocol)
    with pytest.raises(ConfigError):
        RunConfig(method=method, protocol=protocol, dp=spec).validate()


def test_cli_prints_one_line_and_exits_2(capsys):
    spec = "laplace:epsilon=-1,clip=1,on=update,mode=central"
    code = main(["run", "--method", "fedavg", "--dataset", "sbm", "--dp", spec])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "epsilon must be a finite number > 0" in err
