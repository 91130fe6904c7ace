"""`--method gap` end to end on Cora: the record's privacy block, the calibrated mechanism it used, the
uploads through the protocol (plain and secagg), determinism per noise seed, one line for bad input."""
import json
import math

import pytest
import torch

from privfgl.cli import main
from privfgl.experiment import RunConfig, run
from privfgl.federation import SERVER
from privfgl.methods.gap.accounting import calibrate_sigma, spent_epsilon


@pytest.fixture(autouse=True)
def _partition_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("PRIVFGL_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def gap_run(planetoid_root, params=None, **kw):
    settings = dict(method="gap", dataset="cora", partition="louvain", clients=10, rounds=3, local_epochs=1,
                    data_root=str(planetoid_root), download=False, progress=False,
                    method_params={"encoder_rounds": 2, "seed": 3, **(params or {})})
    settings.update(kw)
    return run(RunConfig(**settings))


def test_the_record_gives_the_unit_delta_rule_and_the_accountants_epsilon_of_the_mechanism_that_ran(
        planetoid_root, monkeypatch):
    import privfgl.methods.gap.run as gap
    used = []
    real = gap.perturbed_hops
    monkeypatch.setattr(gap, "perturbed_hops", lambda x, ei, hops, mech, *a: used.append((hops, mech)) or
                        real(x, ei, hops, mech, *a))
    record, setup = gap_run(planetoid_root, {"epsilon": 2.0})
    priv = record["privacy"]
    sigma = calibrate_sigma(2.0, 1e-5, 2, "rdp")
    assert priv["epsilon"] == spent_epsilon(sigma, 2, 1e-5, "rdp") <= 2.0 and priv["accountant"] == "rdp"
    assert priv["dp"]["sigma"] == sigma and priv["dp"]["sensitivity"] == math.sqrt(2)
    assert priv["dp"]["unit"].startswith("one undirected edge") and "1/|E|" in priv["dp"]["delta_rule"]
    assert "features and labels" in priv["dp"]["not_protected"]
    assert len(used) == 10 and {(h, m.std) for h, m in used} == {(2, sigma * math.sqrt(2))}
    # the server sees the encoder's and the classifier's uploads, never the aggregations
    names = {m.name for m in setup.federation.transcript.view(SERVER)}
    assert {"encoder_update", "model_update"} <= names and "gap_release" not in names
    assert len(setup.federation.transcript.view(SERVER, name="model_update", round=0)) == 10


def test_the_directed_unit_has_sensitivity_one_and_more_utility_per_epsilon(planetoid_root):
    record, _ = gap_run(planetoid_root, {"edge": "directed", "epsilon": 2.0})
    assert record["privacy"]["dp"]["sensitivity"] == 1.0
    assert record["privacy"]["dp"]["noise_std"] == calibrate_sigma(2.0, 1e-5, 2, "rdp")


def test_hops_zero_is_a_graph_free_mlp_spending_nothing_on_edges(planetoid_root):
    record, _ = gap_run(planetoid_root, {"hops": 0})
    assert record["privacy"]["epsilon"] == 0.0 and record["privacy"]["dp"]["sigma"] is None


def test_a_seeded_run_repeats_and_another_noise_seed_changes_it(planetoid_root):
    a, _ = gap_run(planetoid_root)
    b, _ = gap_run(planetoid_root)
    c, _ = gap_run(planetoid_root, {"seed": 4})
    assert a["metrics"]["curve"] == b["metrics"]["curve"]
    assert c["metrics"]["curve"] != a["metrics"]["curve"]
    assert "seed_warning" in a["privacy"]["dp"]


def test_each_client_draws_its_hop_noise_from_its_own_stream_of_the_stated_width(planetoid_root, monkeypatch):
    """One noise source per client (NoiseSource.for_client: what lets a client draw its noise on its own Ray
    actor), each of unit width per unit std and pairwise uncorrelated; the record names the run's seed."""
    import privfgl.methods.gap.run as gap
    sources = []
    real = gap.perturbed_hops
    monkeypatch.setattr(gap, "perturbed_hops", lambda x, ei, hops, mech, source, *a: sources.append(source) or
                        real(x, ei, hops, mech, source, *a))
    record, _ = gap_run(planetoid_root)
    assert len(sources) == 10 and len({id(s) for s in sources}) == 10
    draws = torch.stack([s.gaussian((20000,), 1.0) for s in sources])
    assert all(0.97 < float(d.std()) < 1.03 for d in draws)
    corr = torch.corrcoef(draws) - torch.eye(10, dtype=draws.dtype)
    assert float(corr.abs().max()) < 0.05  # independent streams: |r| ~ 0.007 each
    assert record["privacy"]["dp"]["seed"] == 3


def test_it_runs_from_the_cli_under_plain_and_secagg(planetoid_root, tmp_path, capsys):
    for protocol in ("plain", "secagg"):
        out = tmp_path / f"{protocol}.json"
        code = main(["run", "--method", "gap", "--dataset", "cora", "--clients", "10", "--rounds", "2",
                     "--local-epochs", "1", "--protocol", protocol, "--method-param", "epsilon=1", "--method-param", "encoder_rounds=2",
                     "--data-root", str(planetoid_root), "--offline", "--no-progress", "--out", str(out)])
        assert code == 0, capsys.readouterr().err
        record = json.loads(out.read_text())
        assert record["config"]["protocol"] == protocol and record["privacy"]["epsilon"] <= 1.0
        assert 0.3 < record["metrics"]["test_acc"] <= 1.0


@pytest.mark.parametrize("argv,message", [
    (["--method-param", "unit=vertex"], "gap: invalid method param unit='vertex'; valid: edge, node"),
    (["--method-param", "epsilon=-1"], "gap: invalid method param epsilon=-1.0; valid: a number > 0"),
    (["--method-param", "edge=both"], "valid: undirected, directed"),
    (["--method-param", "hops=x"], "gap: invalid method param hops='x'; valid: an integer"),
    (["--method-param", "sigma=1"], "gap: unknown method param(s) sigma"),
    (["--method-param", "unit=node", "--method-param", "sample_rate=0"],
     "gap: invalid method param sample_rate=0.0; valid: a number in (0, 1]"),
    (["--method-param", "unit=node", "--method-param", "sample_rate=1.5"], "valid: a number in (0, 1]"),
    (["--method-param", "sample_rate=0.5"], "valid: 1 at unit=edge"),
    (["--method-param", "delta=0.01"], "gap: delta=0.01 must be < 1/|E|"),
    (["--dp", "gaussian:sigma=1,clip=1,on=update,mode=central"], "--dp does not apply to gap"),
    (["--model", "sage"], "gap trains its own encoder and classifier"),
])
def test_bad_input_is_one_line_and_exit_code_2(planetoid_root, capsys, argv, message):
    code = main(["run", "--method", "gap", "--dataset", "cora", "--clients", "10", "--rounds", "1", *argv,
                 "--data-root", str(planetoid_root), "--offline", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
