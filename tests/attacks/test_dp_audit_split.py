"""dp-audit on FedGPL's split DP with canary rows: the slots realise exactly the accounted sensitivity and
reveal nothing by their count; one audit run on the correct mechanism stays at or below the accountant's
ε and reaches at least half of it; halving the Laplace scale (DF1, experiments/mutants.py) makes the same
run's 95 % bound exceed the ε the broken run reports. Runs are seeded (the DP noise too)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from attacks.audit import prepare_attacks, run_attacks
from attacks.dp.dp_audit import DPAudit
from attacks.dp.split_audit import CanaryRowAudit, CanaryRows, RowAux
from privfgl.experiment import config_for, run
from privfgl.privacy.spec import check_dp_for_run
from privfgl.privacy.split_dp import SplitDP

SMALL = {"dim": 16, "hidden": 16, "max_per_class": 48, "pretrain_epochs": 1, "batch_size": 8}


def audit(dp: str, canaries: int = 3000, **attack) -> tuple[dict, dict]:
    """One audit run of FedGPL on the synthetic sbm graph (3 task clients, 3 rounds, tiny trunk)."""
    cfg = config_for({"method": "fedgpl", "dataset": "sbm", "partition": "tasks", "clients": 3, "rounds": 3,
                      "dp": dp, "method_params": SMALL, "progress": False, "transcript": "all", "threads": 1})
    attacks = [DPAudit(canaries=canaries, **attack)]
    record, setup = run(cfg, prepare=prepare_attacks(attacks, cfg.method))
    return run_attacks(setup, cfg, attacks, "server")[0].metrics, record


def test_laplace_m1_audit_is_valid_and_reaches_half_the_composed_epsilon():
    """Laplace ε = 1 per round on M1, 3 rounds (composed 3): the bound lies in [0.5ε, ε] (DF1 must push it
    above ε); the record says how many canary rows were inserted."""
    m, record = audit("laplace:epsilon=1,clip=1,on=m1,mode=local,seed=3")
    assert m["epsilon_accountant"] == pytest.approx(record["privacy"]["epsilon"]) == pytest.approx(3.0)
    assert m["estimator"] == "per_round" and m["per_round_claim"] == "pure" and m["rounds"] == 3
    assert m["epsilon_accountant"] / 2 <= m["epsilon_lower_bound"] <= m["epsilon_accountant"]
    assert m["one_run_epsilon"] <= m["epsilon_accountant"]
    assert record["canary_rows"]["inserted"] == m["canaries"] == 3000
    assert record["canary_rows"]["message"] == "prompted_graph"


def test_gaussian_m3_audit_is_valid():
    """Gaussian σ = 1 on M3 (and M1, which the accountant composes too): the bound of M3's canaries stays at
    or below M3's own composed ε, hence below the run's."""
    m, _ = audit("gaussian:sigma=1,clip=1,on=split,mode=local,seed=3", message="m3")
    assert m["message"] == "embedding_grads" and m["per_round_claim"] == "gaussian"
    assert 0 < m["epsilon_lower_bound"] <= m["epsilon_accountant_message"] < m["epsilon_accountant"]


def test_canary_slots_clip_to_exactly_c_on_one_coordinate_and_every_slot_is_sent():
    """In-canaries leave C·e_i after the run's clip (raw norm 10·C), out-canaries zeros; each client sends
    all its slots once per round, whatever the coins."""
    spec = check_dp_for_run("laplace:epsilon=1,clip=0.5,on=m1,mode=local,seed=1", "fedgpl", "plain")
    dp = SplitDP(spec, noise=False)
    rows = CanaryRows(40, 3, "prompted_graph", 0.5, 10.0, seed=0)
    sent = {k: dp.protect("prompted_graph", rows.rows("prompted_graph", 0, k, 16)) for k in range(3)}
    assert rows.rows("prompted_graph", 0, 0, 16) is None and rows.rows("embedding_grads", 1, 0, 16) is None
    for k, out in sent.items():
        owned = rows.owned(k)
        assert out.shape == (len(owned), 16)
        expected = torch.zeros(len(owned), 16, dtype=torch.float64)
        expected[np.flatnonzero(rows.coins[owned]), rows.coordinates(k, 16)[rows.coins[owned]]] = 0.5
        assert torch.equal(out, expected)
    assert 5 < rows.coins.sum() < 35


def simulated_bounds(runs: int, epsilon: float, rounds: int = 3, canaries: int = 2000) -> list[float]:
    """`runs` mechanism-only audits: each round the canary rows alone go through SplitDP.protect (seeded
    Laplace noise, seed per run) and the design's own attack and score read them."""
    out = []
    for run_seed in range(runs):
        spec = check_dp_for_run(f"laplace:epsilon={epsilon},clip=1,on=m1,mode=local,seed={run_seed}", "fedgpl",
                                "plain")
        dp, rows = SplitDP(spec), CanaryRows(canaries, 2, "prompted_graph", 1.0, 10.0, seed=run_seed)
        obs = []
        for t in range(rounds):
            sent = [dp.protect("prompted_graph", rows.rows("prompted_graph", t, k, 8)) for k in range(2)]
            o = np.empty(canaries)
            for k in range(2):
                o[rows.owned(k)] = sent[k][torch.arange(len(rows.owned(k))), rows.coordinates(k, 8)].numpy()
            obs.append(o)
            dp.end_round()
        design = CanaryRowAudit(canaries=canaries, seed=run_seed)
        design.rows = rows
        truth = design.truth(type("Setup", (), {"extras": {"dp": dp}})(), "canaries")
        metrics, _ = design.score(np.stack(obs), truth, RowAux("prompted_graph", canaries, 2, 1.0))
        out.append(metrics["epsilon_lower_bound"] / metrics["epsilon_accountant"])
    return out


def test_bounds_of_the_correct_mechanism_stay_below_epsilon_in_20_seeded_runs():
    """At most 1 of 20 seeded runs' 95 % bounds exceeds the accountant's ε (the per-round test's 5 % error
    is shared by its two Clopper-Pearson sides, so none is expected), and they are tight (median > 0.7ε)."""
    ratios = simulated_bounds(20, epsilon=0.5)
    assert sum(r > 1 for r in ratios) <= 1
    assert np.median(ratios) > 0.7


def test_the_sweep_audits_fedgpl_m1_laplace_at_every_composed_epsilon(tmp_path):
    """experiments/dp_audit.toml: FedGPL, Cora, 9 task clients, 3 rounds, Laplace on M1 at spec ε = E/3 per
    round, so the composed ε is E ∈ {0.5, …, 16}, each audited by 10,000 canary rows."""
    from pathlib import Path

    from privfgl.sweep import load_sweep
    sweep = load_sweep(Path(__file__).resolve().parents[2] / "experiments" / "dp_audit.toml", results=tmp_path)
    cells = [c.options for c in sweep.cells if c.options["method"] == "fedgpl"]
    assert all((o["dataset"], o["partition"], o["clients"], o["rounds"], o["attacks"]) ==
               ("cora", "tasks", 9, 3, ["dp-audit:canaries=10000"]) for o in cells)
    assert all(o["dp"].startswith("laplace:") and ",on=m1," in o["dp"] for o in cells)
    per_round = [float(o["dp"].split("epsilon=")[1].split(",")[0]) for o in cells]
    assert [round(3 * e, 4) for e in per_round] == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0]
