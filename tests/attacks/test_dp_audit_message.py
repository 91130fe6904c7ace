"""dp-audit on message DP (canary contributions, attacks/dp/message_audit.py) and on O-pFGL's DP class
statistics (canary nodes, attacks/dp/opfgl_audit.py): one seeded audit run on the correct mechanism stays at
or below the accountant's ε and has power; the mutants DM1-DM4 (experiments/mutants.py) push the same run's
95 % bound above the ε the broken run reports. Runs are on the synthetic sbm graph, DP noise seeded."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from attacks.audit import parse_attack, prepare_attacks, run_attacks
from attacks.dp.canary_nodes import CanaryNodes, node_influence
from attacks.dp.dp_audit import DPAudit
from privfgl.experiment import config_for, run
from privfgl.privacy import noise_multiplier_for


def audit(options: dict, **attack) -> tuple[dict, dict]:
    """One audit run on sbm from the server's view: (dp-audit metrics, record)."""
    cfg = config_for({"dataset": "sbm", "progress": False, "transcript": "all", "threads": 1, **options})
    attacks = [DPAudit(**attack)]
    record, setup = run(cfg, prepare=prepare_attacks(attacks, cfg.method))
    return run_attacks(setup, cfg, attacks, "server")[0].metrics, record


def fedavg(dp: str, protocol: str = "secagg", rounds: int = 4, **attack) -> tuple[dict, dict]:
    return audit({"method": "fedavg", "clients": 10, "rounds": rounds, "hidden": 256, "local_epochs": 1,
                  "protocol": protocol, "dp": dp}, **attack)


def opfgl(epsilon: float, **attack) -> tuple[dict, dict]:
    params = {"dp_epsilon": epsilon, "dp_clip": 1.0, "dp_degree": 4, "dp_seed": "11", "dp_mode": "distributed",
              "condense_iters": 1, "max_iters": 1}
    return audit({"method": "opfgl", "clients": 10, "protocol": "secagg", "method_params": params}, **attack)


def gaussian(epsilon: float, mode: str, rounds: int = 4) -> str:
    sigma = noise_multiplier_for(epsilon, 1e-5, 1.0, rounds, "rdp")
    return f"gaussian:sigma={sigma:.6f},clip=0.5,delta=1e-5,seed=11,on=update,mode={mode}"


def test_fedavg_distributed_message_dp_audit_is_valid_and_has_power():
    """secagg (t = 7 of 10): the server opens each round's noised model_update sum and the 6 colluders remove
    their own shares; the per-round bound stays at or below ε and reaches half of it (DM1: half the noise std,
    DM2: half the releases accounted, each push it above)."""
    m, record = fedavg(gaussian(4, "distributed"), canaries=15000)
    assert m["estimator"] == "per_round" and m["canaries"] == record["canary_clients"]["inserted"] == 15000
    assert record["canary_clients"]["message"] == "model_update"
    assert m["epsilon_accountant"] == pytest.approx(record["privacy"]["epsilon"])
    assert m["epsilon_accountant"] / 2 <= m["epsilon_lower_bound"] <= m["epsilon_accountant"]


def test_local_laplace_audit_is_valid():
    """Laplace, local mode under plain: the sum of 5 clients' Laplace draws; the per-release bound (threshold
    at the shift), composed as the accountant composes, stays at or below ε and above 0."""
    m, record = audit({"method": "fedavg", "clients": 5, "rounds": 4, "hidden": 256, "local_epochs": 1,
                       "dp": "laplace:epsilon=1,clip=0.5,seed=11,on=update,mode=local"}, canaries=6000)
    assert record["privacy"]["accountant"].startswith("laplace")
    assert 0 < m["epsilon_lower_bound"] <= m["epsilon_accountant"]


def test_central_message_dp_is_refused_in_one_line():
    """Central DP on FedAvg: the receivers get Σ n·W / (Σ n + noise), not the noised sum."""
    with pytest.raises(ValueError, match="mode=central on model_update.*valid: mode=local or mode=distributed"):
        fedavg(gaussian(4, "central"), protocol="plain", canaries=100)


def test_bad_message_and_view_are_one_line_errors():
    with pytest.raises(ValueError, match="message='prompt' is not protected by --dp; valid: model_update"):
        fedavg(gaussian(4, "distributed"), canaries=100, message="prompt")
    with pytest.raises(ValueError, match="view='final': message DP is audited on every round's revealed sum"):
        fedavg(gaussian(4, "distributed"), canaries=100, view="final")
    with pytest.raises(ValueError, match="colour"):  # a key no design takes, at parse time
        parse_attack("dp-audit:colour=red")


def test_opfgl_canary_node_audit_is_valid_and_has_power():
    """O-pFGL, distributed noise under secagg, one release: the per-step bound stays at or below ε and above
    a quarter of it (DM3: half the noise std, DM4: the sensitivity with influence 1, each push it above)."""
    m, record = opfgl(8.0, canaries=640)
    assert m["canaries"] == record["canary_nodes"]["inserted"] == 640
    assert record["canary_nodes"]["influence"] == node_influence(4, 1) == 21
    assert m["epsilon_accountant"] == pytest.approx(record["privacy"]["epsilon"])
    assert m["epsilon_accountant"] / 4 <= m["epsilon_lower_bound"] <= m["epsilon_accountant"]


def test_opfgl_central_is_refused_in_one_line():
    params = {"dp_epsilon": 4.0, "dp_clip": 1.0, "dp_degree": 4, "dp_mode": "central"}
    with pytest.raises(ValueError, match="dp_mode=central keeps the noised statistics on the trusted server"):
        audit({"method": "opfgl", "clients": 5, "method_params": params}, canaries=100)


def test_canary_nodes_add_the_accounted_sensitivity_at_disjoint_cells():
    """An included canary adds 1 to n of its class, ±ΔS1 and ΔS2 at its own cell; excluded ones add nothing;
    the observation reads 1 for the included and 0 for the excluded on a noiseless sum."""
    C, f = 3, 5
    nodes = CanaryNodes(12, seed=4, num_classes=C, bound=0.5, influence=node_influence(2, 1))  # N = 1 + 2 + 4
    assert nodes.sensitivities == pytest.approx({"n": 1.0, "S1": 0.5 * 13, "S2": 0.25 * (1 + 2 ** 0.5 * 6)})
    flat = nodes.contribution(0, None, 2 * C * f + C)
    cells = nodes.cells.indices[:, 0].numpy()
    assert len(set(cells)) == 12
    s1, s2, n = flat[:C * f], flat[C * f:2 * C * f], flat[2 * C * f:]
    inc = nodes.coins
    assert torch.allclose(s1[cells[inc]].abs(), torch.full((int(inc.sum()),), 6.5, dtype=torch.float64))
    assert float(s1.abs().sum()) == pytest.approx(6.5 * inc.sum()) and float(s2.sum()) == pytest.approx(
        nodes.sensitivities["S2"] * inc.sum())
    assert n.tolist() == np.bincount(cells[inc] // f, minlength=C).tolist()
    assert np.allclose(nodes.observe(flat), inc.astype(float))


def test_gaussian_fit_estimate_of_a_far_fitted_distribution_is_a_number():
    """A broken mechanism's canaries sit hundreds of null stds away (DM4): the estimate is large or inf,
    never an overflow."""
    from attacks.dp.estimators import gaussian_fit_epsilon
    far = np.random.default_rng(0).normal(40.0, 1.0, 300)
    assert gaussian_fit_epsilon(far, 100, 1e-5) > 100


def test_canary_node_coins_are_fair_and_independent_across_seeds():
    """The coins the bound rests on: Binomial(m, 1/2) counts (within 4 std) and two seeds' coins agreeing
    about half the time; the cells a seed draws are another seed's only by chance."""
    m = 20000
    a, b = (CanaryNodes(m, seed=s, num_classes=7, bound=1.0, influence=1) for s in (0, 1))
    assert abs(int(a.coins.sum()) - m / 2) < 4 * (m / 4) ** 0.5
    assert abs(int((a.coins == b.coins).sum()) - m / 2) < 4 * (m / 4) ** 0.5
    for nodes in (a, b):
        nodes.contribution(0, None, 2 * 7 * 3000 + 7)
    same = (a.cells.indices == b.cells.indices).float().mean().item()
    assert same < 0.01  # 1/(C·f') expected per canary


def _simulated_scores(per_round: np.ndarray):
    from attacks.dp.fedavg_audit import AuditScores
    return AuditScores(per_round.sum(0) - per_round.shape[0] / 2, per_round, np.ones(per_round.shape, dtype=bool),
                       np.full(per_round.shape[1], np.nan))


def test_false_positives_of_both_designs_scoring_on_their_exact_mechanisms():
    """Mechanism-only runs scored by each design's own `score` (experiments/dp_audit_message_validity.py runs
    the real ones), 1,000 canaries, 20 games each: T = 4 Laplace releases at ε = 0.5 each (one draw each: the
    tightest the sum can be), and one Gaussian release at ε = 8 whose canary reaches the claim's full
    μ = 1/σ (canary nodes realise 0.82 of it). At most 2 of 20 95 % bounds above the accountant's ε, and
    the bounds are not vacuous."""
    from attacks.dp.canary_clients import CanaryDirections
    from attacks.dp.fedavg_audit import AuditAux, AuditTruth
    from attacks.dp.message_audit import CanaryContributionAudit
    from attacks.dp.opfgl_audit import CanaryNodeAudit
    from privfgl.privacy.accounting import PrivacyAccountant, gaussian_epsilon
    m, T = 1000, 4
    aux = AuditAux(CanaryDirections.draw(2, 100, 1, 0), (), None, None, 1.0, "rounds", (), ())
    acc = PrivacyAccountant(delta=1e-5)
    acc.add_laplace(0.5, count=T)
    laplace_eps = acc.spent()["epsilon"]
    sigma = noise_multiplier_for(8.0, 1e-5, 1.0, 1, "rdp")
    gauss_eps = gaussian_epsilon([(sigma, 1.0, 1)], 1e-5)
    bounds = {"laplace": [], "gaussian": []}
    for seed in range(20):
        rng = np.random.default_rng([seed, 0x5E])
        coins = rng.random(m) < 0.5
        lap = CanaryContributionAudit(canaries=m, seed=seed)
        lap.mechanism = "laplace"
        per_round = coins[None] + rng.laplace(0.0, 1 / 0.5, (T, m))
        found, _ = lap.score(_simulated_scores(per_round), AuditTruth(coins, laplace_eps, 1e-5, 1.0, T), aux)
        bounds["laplace"].append(found["epsilon_lower_bound"])
        per_step = coins[None] + sigma * rng.standard_normal((1, m))
        found, _ = CanaryNodeAudit(canaries=m, seed=seed).score(_simulated_scores(per_step),
                                                                AuditTruth(coins, gauss_eps, 1e-5, 1.0, 1), aux)
        bounds["gaussian"].append(found["epsilon_lower_bound"])
    lap_b, gauss_b = np.array(bounds["laplace"]), np.array(bounds["gaussian"])
    assert (lap_b > laplace_eps).sum() <= 2 and (gauss_b > gauss_eps).sum() <= 2, bounds
    assert lap_b.mean() > laplace_eps / 4 and gauss_b.mean() > gauss_eps / 4, bounds
