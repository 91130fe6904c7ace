"""Audits of DP randomness (issue #15). `dp-noise-removal` regenerates message-DP noise from the
public run record and subtracts it: with an explicit `seed=N` it recovers the clipped value exactly
(central, local and distributed mode); with the default OS entropy it stays at the noise level.
`participation` reads who took part in a DP-FedAvg round from the server's view: exactly under plain
(unsampled clients upload zeros), no better than the prior under crypten (only the sum is opened)."""
from __future__ import annotations

import json

import pytest

from attacks import parse_attack, run_attacks
from privfgl.cli import main
from privfgl.experiment import run

from attack_cases import fedavg_config

SPEC = "gaussian:sigma=1.0,clip=1.0,on=update,mode={mode}"
SECURE = {"protocol": "crypten", "protocol_params": {"precision_bits": 40}}  # sums exact to ~1e-12
CASES = {"central": {}, "local": {}, "distributed": SECURE}


def dp_fedavg_audit(graph, mode: str, seed: str = "", **params) -> dict[str, dict]:
    """Both attacks on a 3-round DP-FedAvg run (q = 1/2): finding per target."""
    cfg = fedavg_config(method="dp-fedavg", rounds=3, dp=SPEC.format(mode=mode) + seed,
                        method_params={"q": 0.5, **params}, **CASES[mode])
    _, setup = run(cfg, data=graph)
    found = run_attacks(setup, cfg, [parse_attack("dp-noise-removal"), parse_attack("participation")])
    return {f.target: f for f in found}


@pytest.fixture(scope="module")
def seeded(bow_graph):
    return {mode: dp_fedavg_audit(bow_graph, mode, ",seed=7", sampling_seed=1) for mode in CASES}


@pytest.fixture(scope="module")
def default(bow_graph):
    return {mode: dp_fedavg_audit(bow_graph, mode) for mode in CASES}


@pytest.mark.parametrize("mode", list(CASES))
def test_seeded_noise_is_removed_from_the_released_sum(seeded, mode):
    found = seeded[mode]["aggregate"]
    assert found.metrics["relative_rmse"] < 1e-6 and found.metrics["seed_from"] == "the --dp spec's seed"
    assert found.baseline["relative_rmse"] == pytest.approx(1.0, abs=0.1)  # the noised value: one noise std


def test_seeded_local_noise_is_removed_from_every_clients_upload(seeded):
    for k in range(3):
        assert seeded["local"][f"client{k}"].metrics["max_abs_error"] < 1e-12


@pytest.mark.parametrize("mode", list(CASES))
def test_os_entropy_noise_stays_at_the_noise_level(default, mode):
    targets = ["aggregate"] + (["client0", "client1", "client2"] if mode == "local" else [])
    for target in targets:
        assert default[mode][target].metrics["relative_rmse"] >= 0.5, target


def test_an_older_round_is_denoised_but_not_scored_and_the_audit_goes_on(bow_graph):
    # the runtime keeps the clipped uploads (the auditor's truth) of the latest release only; an older
    # round stopped the whole audit with an error before, losing the other attacks' results
    cfg = fedavg_config(method="dp-fedavg", rounds=3, dp=SPEC.format(mode="local") + ",seed=7",
                        method_params={"q": 0.5, "sampling_seed": 1}, transcript="all")
    _, setup = run(cfg, data=bow_graph)
    found = run_attacks(setup, cfg, [parse_attack("dp-noise-removal:round=0"), parse_attack("participation")])
    older = [f for f in found if f.name == "dp-noise-removal"]
    assert older and all("round=0 is older" in f.metrics["no_truth"] for f in older)
    assert all("seconds" in f.details for f in older)  # the attack itself ran
    assert any("accuracy" in f.metrics for f in found if f.name == "participation")


@pytest.mark.parametrize("mode", ["central", "distributed"])
def test_clients_uploads_carry_no_full_noise_outside_local_mode(seeded, mode):
    assert "does not carry the release's noise" in seeded[mode]["client0"].metrics["no_input"]


def test_participation_is_read_exactly_off_plain_uploads(seeded):
    found = seeded["central"]["sampled_clients"]
    assert found.metrics["accuracy"] == found.metrics["exact_rounds"] == 1.0 and found.metrics["rounds_read"] == 3
    assert found.baseline["accuracy"] < 1.0  # some clients sat a round out (the prior guesses all took part)


def test_participations_prior_and_scores_on_a_hand_example():
    from attacks.protocols.participation import participation_metrics, prior_guess
    assert prior_guess(0.2, 3) == [False] * 3 and prior_guess(0.8, 3) == [True] * 3  # each coin's likelier side
    truth = {0: [True, False, True], 1: [True, True, False]}
    guess = {0: [True, False, True], 1: [True, True, True]}  # round 1: one client wrong
    m = participation_metrics(guess, truth)
    assert (m["accuracy"], m["exact_rounds"], m["rounds"]) == (5 / 6, 0.5, 2)
    assert m["f1"] == 2 * 4 / (2 * 4 + 1 + 0)


def test_participation_under_crypten_is_no_better_than_the_prior(seeded):
    found = seeded["distributed"]["sampled_clients"]
    assert found.metrics["rounds_read"] == 0
    for key in ("accuracy", "f1", "exact_rounds"):
        assert found.metrics[key] == found.baseline[key]


def test_both_audits_run_from_the_cli(tmp_path, capsys):
    out = tmp_path / "audit.json"
    code = main(["audit", "--method", "dp-fedavg", "--dataset", "sbm", "--partition", "louvain", "--clients", "3",
                 "--rounds", "2", "--local-epochs", "1", "--hidden", "8", "--no-progress", "--method-param", "q=0.5",
                 "--dp", SPEC.format(mode="central") + ",seed=1", "--attack", "dp-noise-removal",
                 "--attack", "participation", "--out", str(out)])
    assert code == 0
    rows = {(a["name"], a["target"]): a for a in json.loads(out.read_text())["attacks"]}
    assert rows[("dp-noise-removal", "aggregate")]["metrics"]["relative_rmse"] < 1e-6
    assert rows[("participation", "sampled_clients")]["metrics"]["accuracy"] == 1.0
    printed = capsys.readouterr().out
    assert "dp-noise-removal" in printed and "participation" in printed


@pytest.mark.parametrize("dp_seed, removed", [("3", True), ("os", False)])
def test_dp_opfgl_noise_is_removed_only_when_seeded(dp_seed, removed):
    from privfgl.data import contextual_sbm
    from privfgl.experiment import RunConfig
    graph = contextual_sbm(num_nodes=300, num_classes=3, num_features=16, homophily=0.85, seed=0)
    cfg = RunConfig(method="opfgl", dataset="sbm", partition="louvain", clients=3, rounds=1, protocol="ckks",
                    method_params={"condense_iters": 60, "max_iters": 200, "eval_every": 50, "patience": 2, "dp_epsilon": 4.0, "dp_clip": 2.0, "dp_degree": 3,
                                   "dp_seed": dp_seed}, transcript="all", progress=False)
    record, setup = run(cfg, data=graph)
    assert record["privacy"]["dp"]["noise_source"] == ("os" if dp_seed == "os" else "seeded")
    found = {f.target: f for f in run_attacks(setup, cfg, [parse_attack("dp-noise-removal")])}["aggregate"]
    assert found.baseline["relative_rmse"] == pytest.approx(1.0, abs=0.2)  # the noised sum: one std per value
    if removed:
        assert found.metrics["relative_rmse"] < 1e-6 and found.metrics["seed_from"] == "the method's dp_seed"
    else:
        assert found.metrics["relative_rmse"] > 0.5
