"""dp-audit of node-level GAP's DP-SGD steps (attacks/dp/gap_step_audit.py): gradient canaries of sensitivity C
in one client's per-node gradients of every encoder and classifier step, scored from the server's view. The
per-round statistic has the claimed distribution; one audit of the correct mechanism stays at or below the
steps' own ε (GAP and the DP-MLP, hops=0); the mutants NDA1-NDA2 (experiments/mutants.py) push the same run's
95 % bound above it. Runs are seeded (the DP noise too), on the synthetic sbm graph."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from attacks.audit import prepare_attacks, public_knowledge, run_attacks
from attacks.dp.dp_audit import DPAudit
from attacks.dp.gap_audit import CanaryEdgeAudit
from attacks.dp.gap_step_audit import GapStepAudit
from attacks.view import adversary_view
from privfgl.experiment import config_for, run
from privfgl.privacy.accounting import gaussian_epsilon


def audited_run(epsilon: float = 3.0, hops: int = 2, optimizer: str = "sgd", canaries: int = 1000,
                sample_rate: float = 1.0, **attack):
    """One audited node-level GAP run (sbm, 3 clients, 4 encoder and 4 classifier rounds of one step, D = 4,
    hidden 32, noise seed 11): (the design's metrics, the record, the design, the setup, the config)."""
    cfg = config_for({"method": "gap", "dataset": "sbm", "clients": 3, "rounds": 4, "local_epochs": 1,
                      "optimizer": optimizer, "hidden": 32, "progress": False, "transcript": "all", "threads": 1,
                      "method_params": {"unit": "node", "hops": hops, "degree": 4, "epsilon": epsilon,
                                        "encoder_rounds": 4, "seed": 11, "sample_rate": sample_rate}})
    attacks = [DPAudit(canaries=canaries, **attack)]
    record, setup = run(cfg, prepare=prepare_attacks(attacks, cfg.method))
    return run_attacks(setup, cfg, attacks, "server")[0].metrics, record, attacks[0].design, setup, cfg


@pytest.fixture(scope="module")
def sgd_run():
    return audited_run(stage="steps")


def test_the_per_round_statistic_is_the_claimed_gaussian(sgd_run):
    """SGD, one step a round: o_tj = 1 + N(0, σ²) for an in-canary, N(0, σ²) for an out-canary (σ the run's
    noise multiplier), every round of both parts: Kolmogorov-Smirnov against N(0, 1) after standardising."""
    _, record, design, setup, cfg = sgd_run
    view = adversary_view(setup.federation.transcript, "server")
    aux = design.declare_aux(setup, public_knowledge(setup, cfg), "canaries")
    rec = design.attack(view, aux)
    sigma, coins = record["privacy"]["dp"]["sigma"], design.inserted.coins
    assert rec.per_round.shape == (8, 1000) and rec.possible.all()
    outs, ins = rec.per_round[:, ~coins].ravel() / sigma, (rec.per_round[:, coins].ravel() - 1) / sigma
    for sample in (outs, ins):
        assert stats.kstest(sample, "norm").pvalue > 1e-3
        assert abs(sample.std() - 1) < 0.05
    assert stats.ks_2samp(outs, ins).pvalue > 1e-3  # shifted by exactly the sensitivity C, nothing else


def test_the_sgd_bound_stays_under_the_steps_epsilon_and_has_power(sgd_run):
    """The per-round bound holds against the accountant's ε of the 8 DP-SGD steps alone (the record's ε also
    pays for the K hops) and reaches 0.6 of it (NDA1: σ/4, NDA2: no per-node clip, must push it above)."""
    m, record, _, _, _ = sgd_run
    dp = record["privacy"]["dp"]
    steps = gaussian_epsilon([(dp["sigma"], 1.0, 8)], 1e-5, "rdp")
    assert dp["releases_by_stage"] == {"encoder_steps": 4, "hops": 2, "classifier_steps": 4}
    assert m["estimator"] == "per_round" and m["rounds"] == 8
    assert m["epsilon_accountant"] == pytest.approx(record["privacy"]["epsilon"])
    assert m["epsilon_accountant_steps"] == pytest.approx(steps) and steps < m["epsilon_accountant"]
    assert not m["caught"] and m["epsilon_lower_bound"] <= m["epsilon_accountant_steps"]
    assert m["epsilon_lower_bound"] >= 0.6 * m["epsilon_accountant_steps"]
    assert record["gradient_canaries"]["inserted"] == 1000 and record["gradient_canaries"]["rows_in"] == 1


def test_the_dp_mlp_is_audited_without_naming_the_stage():
    """hops=0 (the node-level DP-MLP) has no hops to audit: plain `dp-audit` picks the steps' design, whose
    claim is then the record's whole ε."""
    m, record, design, _, _ = audited_run(hops=0)
    assert isinstance(design, GapStepAudit)
    assert m["epsilon_accountant_steps"] == pytest.approx(record["privacy"]["epsilon"])
    assert not m["caught"] and m["epsilon_lower_bound"] <= m["epsilon_accountant"]


def test_adam_uses_the_one_run_fdp_bound_and_stays_under_epsilon():
    """Adam: unsigned canaries, the score is the total step, the estimator the Gaussian f-DP one-run bound."""
    m, record, _, _, _ = audited_run(epsilon=8.0, optimizer="adam", stage="steps")
    assert m["estimator"] == "one_run_fdp" and not record["gradient_canaries"]["signed"]
    assert not m["caught"] and 0 < m["epsilon_lower_bound"] <= m["epsilon_accountant_steps"]


def test_the_hops_stay_the_default_design_and_a_bad_stage_is_one_line():
    """Node level with hops: plain `dp-audit` still audits the hops (canary nodes); `stage=steps` the steps. An
    unknown stage, or stage=steps on edge-level GAP, stops with one line."""
    tiny = {"method": "gap", "dataset": "sbm", "clients": 3, "rounds": 1, "progress": False, "threads": 1}
    cfg = config_for({**tiny, "method_params": {"unit": "node", "encoder_rounds": 1}})
    attacks = [DPAudit(canaries=100)]
    run(cfg, prepare=prepare_attacks(attacks, cfg.method))
    assert isinstance(attacks[0].design, CanaryEdgeAudit)
    with pytest.raises(ValueError, match="stage='hops'.*valid: steps"):
        DPAudit(stage="hops")
    edge = config_for({**tiny, "method_params": {"encoder_rounds": 1}})
    with pytest.raises(ValueError, match="stage not used on --method gap"):
        run(edge, prepare=prepare_attacks([DPAudit(stage="steps")], edge.method))


def test_too_many_canaries_for_the_dp_mlp_is_one_line():
    with pytest.raises(ValueError, match="exceeds the message's .* coordinates"):
        audited_run(hops=0, canaries=5000)


def test_canaries_are_one_clipped_gradient_in_both_parts_with_one_coin():
    """In: one row of norm scale·C per part (clipped to C by the step); out: none. Same coins in both parts."""
    from attacks.dp.gap_step_audit import GapStepCanaries
    layouts = {"encoder": [("a", 50), ("b", 10)], "classifier": [("c", 30)]}
    can = GapStepCanaries(20, 3, 10.0, 1, 0, 1.0, True, layouts)
    for part in ("encoder", "classifier"):
        indices, values = can.rows(part, 2, layouts[part])
        assert len(indices) == int(can.coins.sum())
        assert np.allclose(values.abs().numpy(), 10.0)
        assert np.array_equal(can.parts[part].coins, can.coins)


@pytest.fixture(scope="module")
def sampled_run():
    """The DP-MLP (hops = 0) with Poisson-sampled steps at q = 1/4, ε = 2 over its 8 steps."""
    return audited_run(epsilon=2.0, hops=0, sample_rate=0.25, stage="steps")


def test_the_sampled_steps_bound_stays_under_their_epsilon_at_rate_q(sampled_run):
    """At q < 1 the steps are subsampled Gaussians, not Gaussian shifts: the estimator is the one-run bound
    (valid for any (ε, δ) mechanism) against the accountant's ε of the 8 steps at rate q (LPS1, the sampling
    skipped while the accountant still charges q, must push it above)."""
    m, record, _, _, _ = sampled_run
    dp = record["privacy"]["dp"]
    assert dp["sample_rate"] == 0.25 and dp["sampling"].startswith("Poisson")
    assert m["estimator"] == "one_run" and m["sample_rate"] == 0.25
    assert m["epsilon_accountant_steps"] == pytest.approx(gaussian_epsilon([(dp["sigma"], 0.25, 8)], 1e-5, "rdp"))
    assert m["epsilon_accountant_steps"] == pytest.approx(record["privacy"]["epsilon"])
    assert not m["caught"] and m["epsilon_lower_bound"] <= m["epsilon_accountant_steps"]


def test_a_sampled_in_canary_lands_at_rate_q_in_each_round_independently():
    """The sampling coins the amplification rests on, from the server's view (q = 1/4, ε = 8, 1,200 canaries,
    one step a round): an in-canary's per-round statistic is 1 + N(0, σ²) in the rounds whose step drew it and
    N(0, σ²) in the others, the mixture q·N(1, σ²) + (1 − q)·N(0, σ²) (Kolmogorov-Smirnov); its mean is q (the
    coins' width: LPS2, coins at 2q, fails here) and its rounds are uncorrelated (the coins' independence: one
    coin for all rounds would give a covariance of q(1 − q), 10 standard errors away)."""
    _, record, design, setup, cfg = audited_run(epsilon=8.0, hops=0, sample_rate=0.25, canaries=1200,
                                                stage="steps")
    view = adversary_view(setup.federation.transcript, "server")
    rec = design.attack(view, design.declare_aux(setup, public_knowledge(setup, cfg), "canaries"))
    sigma, coins, q = record["privacy"]["dp"]["sigma"], design.inserted.coins, 0.25
    ins, outs = rec.per_round[:, coins], rec.per_round[:, ~coins]
    assert rec.possible.all() and ins.shape[0] == 8

    def mixture(x):
        return q * stats.norm.cdf(x - 1, scale=sigma) + (1 - q) * stats.norm.cdf(x, scale=sigma)
    assert stats.kstest(ins.ravel(), mixture).pvalue > 1e-3
    assert stats.kstest(outs.ravel() / sigma, "norm").pvalue > 1e-3
    var = sigma ** 2 + q * (1 - q)
    assert abs(ins.mean() - q) < 4 * np.sqrt(var / ins.size)
    lagged = ((ins[:-1] - q) * (ins[1:] - q)).ravel()
    se = var / np.sqrt(lagged.size)
    assert abs(lagged.mean()) < 4 * se and q * (1 - q) > 10 * se
