"""dp-audit on DP-FedAvg with canary clients: one audit run on the correct mechanism stays at or below
the accountant's ε and has power (a bound well above 0); the DP mutants DA1, DA2, DA4 (experiments/mutants.py)
make the same run's 95 % bound exceed the ε the broken run reports, and DA3 (half the rounds accounted) and DA5.
Runs are seeded (the DP noise too)."""
from __future__ import annotations

import pytest
import torch

from attacks.audit import prepare_attacks, run_attacks
from attacks.dp.canary_clients import CanaryClients, CanaryDirections
from attacks.dp.dp_audit import DPAudit
from privfgl.experiment import config_for, run
from privfgl.privacy import noise_multiplier_for


def audit(dp: str, protocol: str = "plain", q: float = 1.0, rounds: int = 4, canaries: int = 15000,
          adversary: str = "server", server: dict | None = None, **attack) -> tuple[dict, dict]:
    """One audit run on the synthetic sbm graph (5 clients, tiny GCN): (dp-audit metrics, record). `server`:
    DP-FedAvg's server step params (server_lr, server_momentum)."""
    cfg = config_for({"method": "dp-fedavg", "dataset": "sbm", "clients": 5 if protocol != "secagg" else 10,
                      "rounds": rounds, "hidden": 256, "local_epochs": 1, "protocol": protocol, "dp": dp,
                      "method_params": {"q": q, "sampling_seed": 0, **(server or {})}, "progress": False,
                      "transcript": "all",
                      "threads": 1})
    attacks = [DPAudit(canaries=canaries, **attack)]
    record, setup = run(cfg, prepare=prepare_attacks(attacks, cfg.method))
    findings = run_attacks(setup, cfg, attacks, adversary)
    return findings[0].metrics, record


def sigma_for(epsilon: float, rounds: int = 4, q: float = 1.0) -> float:
    return noise_multiplier_for(epsilon, 1e-5, q, rounds, "rdp")


def test_central_audit_is_valid():
    """Central DP, every round's model: the bound stays at or below ε (DA1: half the noise, DA3: half the
    rounds accounted, each must push it above)."""
    m, record = audit(f"gaussian:sigma={sigma_for(3):.6f},clip=0.5,delta=1e-5,seed=11,on=update,mode=central")
    assert m["epsilon_accountant"] == pytest.approx(record["privacy"]["epsilon"])
    assert m["epsilon_lower_bound"] <= m["epsilon_accountant"]
    assert m["canaries"] == record["canary_clients"]["inserted"] == 15000 and m["view"] == "rounds"


def test_central_audit_has_power():
    """The same audit reaches 0.7× ε (the per-round bound; the mechanism's own ε(√T/σ) is 0.92× the RDP
    accountant's here), and its per-round GDP estimate lies within 25 % of it."""
    from attacks.dp.estimators import gdp_epsilon
    sigma = sigma_for(3)
    m, _ = audit(f"gaussian:sigma={sigma:.6f},clip=0.5,delta=1e-5,seed=11,on=update,mode=central")
    assert m["estimator"] == "per_round" and m["epsilon_lower_bound"] >= 0.7 * m["epsilon_accountant"]
    assert m["gdp_epsilon_estimate"] == pytest.approx(gdp_epsilon(4 ** 0.5 / sigma, 1e-5), rel=0.25)


def test_server_momentum_is_undone_from_its_public_beta_and_the_audit_keeps_its_power():
    """Server momentum (β = 0.9, η = 0.1) makes each released step a mix of every earlier round's noised sum;
    the adversary undoes it from the public β (Δ_t − β·Δ_{t−1}). Valid and as powerful as without momentum,
    the per-round GDP estimate at the mechanism's own μ = √T/σ (an audit that does not undo it mixes earlier
    rounds' signed canaries into each round: DFK3)."""
    from attacks.dp.estimators import gdp_epsilon
    sigma = sigma_for(3)
    m, _ = audit(f"gaussian:sigma={sigma:.6f},clip=0.5,delta=1e-5,seed=11,on=update,mode=central",
                 server={"server_lr": 0.1, "server_momentum": 0.9})
    assert m["epsilon_lower_bound"] <= m["epsilon_accountant"]
    assert m["estimator"] == "per_round" and m["epsilon_lower_bound"] >= 0.7 * m["epsilon_accountant"]
    assert m["gdp_epsilon_estimate"] == pytest.approx(gdp_epsilon(4 ** 0.5 / sigma, 1e-5), rel=0.25)


def test_skipped_clip_is_caught_by_the_canaries_raw_norm():
    """Canaries upload 10·C·u_j: only the clip makes it C·u_j (DA2)."""
    m, _ = audit(f"gaussian:sigma={sigma_for(2):.6f},clip=0.5,delta=1e-5,seed=11,on=update,mode=central",
                 canaries=1000)
    assert m["epsilon_lower_bound"] <= m["epsilon_accountant"]


def test_visible_participation_no_amplification_audit():
    """Under plain the server sees who was sampled: the audit that sums only the rounds a canary was
    sampled in stays below the ε accounted at rate 1 (DA4: the amplified ε claimed at q = 0.1, about 1.45
    here against 9.98 at rate 1, must fall below it)."""
    m, record = audit("gaussian:sigma=1.5,clip=0.5,delta=1e-5,seed=11,on=update,mode=central", q=0.1, rounds=8)
    assert m["epsilon_lower_bound"] <= m["epsilon_accountant"]


def test_distributed_shares_against_the_tolerated_coalition():
    """secagg (t = 7 of 10): the server with 6 colluders removes their shares every round. Shares sized
    against them leave the calibrated noise and the bound stays at or below ε (DA5); sized against the
    server alone (colluders=0) they leave 4/10 of the variance, and one audit run catches it."""
    dp = f"gaussian:sigma={sigma_for(3):.6f},clip=0.5,delta=1e-5,seed=11,on=update,mode=distributed"
    m, _ = audit(dp, protocol="secagg", canaries=15000)
    assert m["epsilon_lower_bound"] <= m["epsilon_accountant"]
    broken, _ = audit(dp + ",colluders=0", protocol="secagg", canaries=15000)
    assert broken["epsilon_lower_bound"] > broken["epsilon_accountant"]


def test_canary_inputs_are_clipped_and_only_the_included_sampled_ones_enter():
    """The sum holds C·u_j for each canary whose coin is in and which was sampled, nothing else."""
    from privfgl.privacy.message_dp import MessageDP
    from privfgl.privacy.spec import parse_dp_spec
    dp = MessageDP(parse_dp_spec("gaussian:sigma=1,clip=0.5,delta=1e-5,seed=11,on=update,mode=central"), 3)
    canaries = CanaryClients(200, seed=3, scale=10, support=2, sample_rate=0.5)
    total = canaries.contribution(0, dp, 500)
    u = canaries.directions
    from attacks.dp.canary_clients import round_signs
    taking_part = torch.from_numpy(canaries.coins & canaries.sampled[0]).double()
    expected = u.combine(taking_part * torch.from_numpy(round_signs(3, 0, 200)).double() * 0.5)
    assert torch.allclose(total, expected)
    norms = torch.zeros(200, 500, dtype=torch.float64).scatter_(1, u.indices, u.signs).norm(dim=1)
    assert torch.allclose(norms, torch.ones(200, dtype=torch.float64))
    assert 60 < int(canaries.coins.sum()) < 140


def test_directions_are_seeded_disjoint_and_orthonormal():
    a = CanaryDirections.draw(300, 2000, 6, seed=1)
    assert torch.equal(a.indices, CanaryDirections.draw(300, 2000, 6, seed=1).indices)
    assert not torch.equal(a.indices, CanaryDirections.draw(300, 2000, 6, seed=2).indices)
    assert a.indices.unique().numel() == 300 * 6  # no coordinate shared by two canaries
    dense = torch.zeros(300, 2000, dtype=torch.float64).scatter_(1, a.indices, a.signs)
    assert torch.allclose(dense @ dense.T, torch.eye(300, dtype=torch.float64))
    v = torch.randn(2, 2000, dtype=torch.float64)
    assert torch.allclose(a.project(v), v @ dense.T)
    with pytest.raises(ValueError, match="canaries × support <= 2000"):
        CanaryDirections.draw(401, 2000, 5, seed=1)


def test_auto_canaries_are_twenty_thousand_or_as_many_as_the_model_holds():
    from attacks.dp.canary_clients import AUTO_COUNT
    from privfgl.privacy.message_dp import MessageDP
    from privfgl.privacy.spec import parse_dp_spec
    dp = MessageDP(parse_dp_spec("gaussian:sigma=1,clip=0.5,delta=1e-5,seed=11,on=update,mode=central"), 3)
    for dimension, support, expected in ((500, 1, 500), (500, 3, 166), (50_000, 1, AUTO_COUNT)):
        canaries = CanaryClients(None, seed=3, scale=10, support=support, sample_rate=1.0)
        canaries.contribution(0, dp, dimension)
        assert canaries.count == expected == canaries.coins.size == canaries.record()["inserted"]


def test_bad_parameters_are_one_line_errors():
    for kwargs in ({"canaries": 2}, {"view": "every"}, {"scale": 0.5}, {"confidence": 1.5}):
        with pytest.raises(ValueError):
            DPAudit(**kwargs)
    from types import SimpleNamespace
    with pytest.raises(ValueError, match="dp-fedavg"):
        DPAudit().prepare(SimpleNamespace(federation=None), "fedavg")


def test_false_positives_of_the_scoring_on_the_exact_gaussian_mechanism():
    """30 mechanism-only audits (experiments/dp_audit_validity.py's simulation, DPAudit.score itself) of a
    correctly accounted Gaussian mechanism: at most one 95 % bound above the accountant's ε."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "experiments"))
    from dp_audit_validity import one_audit
    found = [one_audit(4.0, 10, 2000, seed) for seed in range(30)]
    over = sum(f["epsilon_lower_bound"] > f["epsilon_accountant"] for f in found)
    assert over <= 1
    assert sum(f["epsilon_lower_bound"] for f in found) / 30 > 1.0  # and the bounds are not trivially 0
