"""dp-audit on node-level DP-SGD with gradient canaries: the canaries realise the accounted sensitivity Δ;
one audit run of the correct mechanism (server's view) stays at or below the accountant's ε and has power;
the DP mutants DG1-DG3 (experiments/mutants.py) push the same run's 95 % bound above the ε the broken run
reports. Runs are seeded (the DP noise too), on the synthetic sbm graph."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from attacks.audit import prepare_attacks, run_attacks
from attacks.dp.dp_audit import DPAudit
from attacks.dp.gradient_canaries import GradientCanaries
from privfgl.experiment import config_for, run
from privfgl.federation.runtime import flatten
from privfgl.privacy import noise_multiplier_for
from privfgl.privacy.dpsgd import clipped_sum, influence_count, node_sensitivity


def audit(epsilon: float = 3.0, clients: int = 3, canaries: int = 2000, optimizer: str = "sgd",
          rounds: int = 4, local_epochs: int = 1, **attack) -> tuple[dict, dict]:
    """One audited dp-sgd run (sbm, `rounds` rounds of `local_epochs` steps, noise seed 11): (metrics, record)."""
    sigma = noise_multiplier_for(epsilon, 1e-5, 1.0, rounds * local_epochs, "rdp")
    cfg = config_for({"method": "dp-sgd", "dataset": "sbm", "clients": clients, "rounds": rounds,
                      "local_epochs": local_epochs, "optimizer": optimizer, "progress": False, "transcript": "all",
                      "threads": 1, "method_params": {"sigma": sigma, "seed": 11}})
    attacks = [DPAudit(canaries=canaries, **attack)]
    record, setup = run(cfg, prepare=prepare_attacks(attacks, cfg.method))
    return run_attacks(setup, cfg, attacks, "server")[0].metrics, record


@pytest.fixture(scope="module")
def sgd_audit() -> tuple[dict, dict]:
    return audit()


def test_sgd_audit_is_valid(sgd_audit):
    """SGD, every round's upload: the per-round bound stays at or below ε (DG1: no per-node clip, DG3: half
    the noise, each must push it above)."""
    m, record = sgd_audit
    assert m["estimator"] == "per_round" and m["view"] == "rounds"
    assert m["epsilon_accountant"] == pytest.approx(record["privacy"]["epsilon"])
    assert m["epsilon_lower_bound"] <= m["epsilon_accountant"]
    assert m["canaries"] == record["gradient_canaries"]["inserted"] == 2000
    assert record["gradient_canaries"]["rows_in"] == influence_count(3, 2) and record["gradient_canaries"]["signed"]


def test_sgd_audit_has_power(sgd_audit):
    """The same run: the bound reaches half of ε and the per-round GDP estimate lies within 25 % of the
    mechanism's own ε (√T/σ-GDP): the server recovers each round's noisy sum exactly."""
    from attacks.dp.estimators import gdp_epsilon
    m, _ = sgd_audit
    assert m["epsilon_lower_bound"] >= m["epsilon_accountant"] / 2
    sigma = noise_multiplier_for(3.0, 1e-5, 1.0, 4, "rdp")
    assert m["gdp_epsilon_estimate"] == pytest.approx(gdp_epsilon(4 ** 0.5 / sigma, 1e-5), rel=0.25)


def test_several_local_sgd_steps_are_unrolled():
    """Three SGD steps a round: the server unrolls w_E = a^E·w_0 − lr·Σ a^{E−1−s}·ĝ_s (a = 1 − lr·wd, close
    to 1 at the default wd), a round's shift is A·Δ; the bound stays at or below ε and the GDP estimate lies
    within 25 % of the mechanism's √(RE)/σ."""
    from attacks.dp.estimators import gdp_epsilon
    m, _ = audit(local_epochs=3)
    assert m["epsilon_lower_bound"] <= m["epsilon_accountant"]
    sigma = noise_multiplier_for(3.0, 1e-5, 1.0, 12, "rdp")
    assert m["gdp_epsilon_estimate"] == pytest.approx(gdp_epsilon(12 ** 0.5 / sigma, 1e-5), rel=0.25)


def test_mean_clip_audit_is_valid():
    """One client holding every training node, 16 canaries of raw norm 10·C: the correct run stays at or
    below ε. DG2 (the mean gradient clipped to C instead of each node's) lets the canaries share a budget of
    n·C, n ≫ 2N_D − 1, and must push the bound above ε."""
    m, _ = audit(clients=1, canaries=16)
    assert m["epsilon_lower_bound"] <= m["epsilon_accountant"]


def test_adam_audit_is_valid_and_uses_the_one_run_bound():
    """Adam's step is not linear in the noisy gradient: unsigned canaries, the estimator is the f-DP one-run
    bound on the total step sizes, and it stays at or below ε."""
    m, record = audit(epsilon=8.0, canaries=2000, optimizer="adam")
    assert record["config"]["optimizer"] == "adam" and record["gradient_canaries"]["signed"] is False
    assert m["estimator"] == "one_run_fdp" and "per_round_epsilon" not in m
    assert 0 < m["epsilon_lower_bound"] <= m["epsilon_accountant"]


def test_canary_rows_realise_the_node_sensitivity():
    """Clipped, an in-canary's N_D rows sum to +C·ς·u_j and an out-canary's N_D − 1 rows to −(N_D − 1)C·ς·u_j:
    the two worlds differ by Δ·ς·u_j, Δ = node_sensitivity. Rows are in the model's order, directions in
    the runtime's sorted layout."""
    layout = [("b.weight", 30), ("a.bias", 7), ("c", 13)]
    slots, clip = influence_count(3, 2), 0.5
    canaries = GradientCanaries(20, seed=5, scale=10, support=2, client=0, slots=slots, clip=clip)
    indices, values = canaries.rows(3, layout)
    assert torch.allclose(values.norm(dim=1), torch.full((len(values),), 10 * clip, dtype=torch.float64))
    total = clipped_sum(torch.zeros(1, 50, dtype=torch.float64), clip, (indices, values))
    model_order = torch.arange(50)
    by_name = {"b.weight": model_order[:30], "a.bias": model_order[30:37], "c": model_order[37:]}
    sorted_total = total[flatten(by_name)[0].long()]  # the same vector in the runtime's sorted layout
    from attacks.dp.canary_clients import round_signs
    sign = torch.from_numpy(round_signs(5, 3, 20)).double()
    coins = torch.from_numpy(canaries.coins)
    weight = torch.where(coins, slots * clip, -(slots - 1) * clip) * sign
    assert torch.allclose(sorted_total, canaries.directions.combine(weight))
    delta = node_sensitivity(clip, 3, 2)
    assert slots * clip + (slots - 1) * clip == pytest.approx(delta)
    assert 4 < int(coins.sum()) < 16


def test_bad_parameters_are_one_line_errors():
    with pytest.raises(ValueError, match="no design takes all of bogus"):
        DPAudit(bogus=1)
    with pytest.raises(ValueError, match="client"):
        DPAudit(client=-1)
    from types import SimpleNamespace
    setup = SimpleNamespace(method=SimpleNamespace(params={}), clients=[])
    with pytest.raises(ValueError, match="view"):
        DPAudit(view="final").prepare(setup, "dp-sgd")
    with pytest.raises(ValueError, match="client=0"):
        DPAudit().prepare(setup, "dp-sgd")


def test_false_positives_of_the_scoring_on_the_exact_mechanism():
    """20 mechanism-only audits (experiments/dp_audit_sgd_validity.py --simulate, the design's own score) of
    the correctly accounted per-round Gaussian release: at most one 95 % bound above the accountant's ε."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "experiments"))
    from dp_audit_sgd_validity import simulated_audit
    found = [simulated_audit(4.0, 10, 1000, seed) for seed in range(20)]
    over = sum(f["epsilon_lower_bound"] > f["epsilon_accountant"] for f in found)
    assert over <= 1
    assert np.mean([f["epsilon_lower_bound"] for f in found]) > 1.0  # and the bounds are not trivially 0


def test_coins_and_round_signs_are_fair_and_independent():
    """The bound rests on fair, independent coins and signs: 4,000 canaries' coins and round signs are about
    half each, uncorrelated with each other and across rounds, and differ with the seed."""
    from attacks.dp.canary_clients import round_signs
    n = 4000
    coins = GradientCanaries(n, seed=5, scale=10, support=1, client=0, slots=13, clip=1.0).coins
    other = GradientCanaries(n, seed=6, scale=10, support=1, client=0, slots=13, clip=1.0).coins
    s0, s1 = round_signs(5, 0, n), round_signs(5, 1, n)
    tol = 4 / n ** 0.5  # four standard deviations of a fair ±1 mean
    assert abs(coins.mean() - 0.5) < tol / 2 and abs(s0.mean()) < tol
    assert abs(np.mean((2 * coins - 1) * s0)) < tol and abs(np.mean(s0 * s1)) < tol
    assert abs(np.mean(coins == other) - 0.5) < tol / 2
