"""dp-audit's canary rows on the server's split messages M2 (embeddings) and M4 (feature_grads): the server
noises them; the adversary observes the downlink to one client (that client's view) and scores only the
slots it carried. One audit run on the correct mechanism stays at or below the accountant's ε and reaches
at least half of it; the download noise at half scale (DF4) or unclipped download rows (DF5,
experiments/mutants.py) push the same run's 95 % bound above the ε the broken run reports. Runs are seeded
(the DP noise too)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from attacks.audit import prepare_attacks, run_attacks
from attacks.dp.dp_audit import DPAudit
from attacks.dp.split_audit import CanaryRows
from attacks.view import adversary_view
from privfgl.experiment import config_for, run
from privfgl.privacy.spec import check_dp_for_run
from privfgl.privacy.split_dp import SplitDP

SMALL = {"dim": 16, "hidden": 16, "max_per_class": 48, "pretrain_epochs": 1, "batch_size": 8}
CLIENTS = 3


def audited_run(dp: str, canaries: int = 3 * 3000, **attack):
    """One FedGPL run on the synthetic sbm graph (3 task clients, 3 rounds, tiny trunk) with dp-audit's canaries."""
    cfg = config_for({"method": "fedgpl", "dataset": "sbm", "partition": "tasks", "clients": CLIENTS, "rounds": 3,
                      "dp": dp, "method_params": SMALL, "progress": False, "transcript": "all", "threads": 1})
    attacks = [DPAudit(canaries=canaries, **attack)]
    record, setup = run(cfg, prepare=prepare_attacks(attacks, cfg.method))
    return cfg, attacks, record, setup


@pytest.fixture(scope="module")
def laplace_m2():
    return audited_run("laplace:epsilon=1,clip=1,on=m2,mode=local,seed=3")


def test_laplace_m2_audit_by_the_receiving_client_is_valid_and_reaches_half_the_composed_epsilon(laplace_m2):
    """Laplace ε = 1 per round on M2, 3 rounds (composed 3): client0 scores its own 3,000 of the 9,000 slots;
    the bound lies in [0.5ε, ε] (DF4 and DF5 must push it above ε)."""
    cfg, attacks, record, setup = laplace_m2
    m = run_attacks(setup, cfg, attacks, "client0")[0].metrics
    assert m["epsilon_accountant"] == pytest.approx(record["privacy"]["epsilon"]) == pytest.approx(3.0)
    assert m["message"] == "embeddings" and m["per_round_claim"] == "pure" and m["rounds_observed"] == 3
    assert m["canaries"] == 3000 and m["canaries_inserted"] == record["canary_rows"]["inserted"] == 9000
    assert m["epsilon_accountant"] / 2 <= m["epsilon_lower_bound"] <= m["epsilon_accountant"]
    assert m["one_run_epsilon"] <= m["epsilon_accountant"]


def test_only_the_receiving_client_can_audit_m2_and_it_gets_every_slot_of_its_own(laplace_m2):
    """The server made M2 before the noise: its view is refused in one line. Each client receives, in every
    round, exactly its own slots (N/K rows, whatever the coins) as M2's canary_rows, and no other client's."""
    cfg, attacks, record, setup = laplace_m2
    refused = run_attacks(setup, cfg, attacks, "server")[0].metrics
    assert "no receiver" in refused["no_input"] and "--adversary client0" in refused["no_input"]
    rows = setup.extras["split_canaries"]
    for k in range(CLIENTS):
        view = adversary_view(setup.federation.transcript, f"client{k}")
        got = [m for m in view.find("embeddings") if m.tensors and "canary_rows" in m.tensors]
        assert sorted(m.round for m in got) == [0, 1, 2]
        assert all(m.receiver == f"client{k}" and m.tensors["canary_rows"].shape == (len(rows.owned(k)), 16)
                   for m in got)


def test_gaussian_m4_audit_by_the_receiving_client_is_valid_and_reaches_half_the_composed_epsilon():
    """Gaussian σ = 1 on every split message (on=split): client1's bound on M4's canaries lies in [0.5, 1]×
    M4's own composed ε, hence below the run's, which composes M1-M4."""
    cfg, attacks, record, setup = audited_run("gaussian:sigma=1,clip=1,on=split,mode=local,seed=3", message="m4")
    m = run_attacks(setup, cfg, attacks, "client1")[0].metrics
    assert m["message"] == "feature_grads" and m["per_round_claim"] == "gaussian" and m["canaries"] == 3000
    assert m["epsilon_accountant_message"] / 2 <= m["epsilon_lower_bound"] <= m["epsilon_accountant_message"]
    assert m["epsilon_accountant_message"] < m["epsilon_accountant"]


def test_a_download_the_run_does_not_noise_is_refused_before_the_run():
    with pytest.raises(ValueError, match="message=m2: the run's --dp noises m1"):
        audited_run("laplace:epsilon=1,clip=1,on=m1,mode=local,seed=3", canaries=30, message="m2")


def test_m4_canary_slots_clip_to_exactly_c_in_l2_on_one_coordinate():
    """Under Gaussian's L2 clip an in-canary of M4 (raw norm 10·C) leaves C·e_i, an out-canary zeros; the
    rows go out only with the round's first M4 of each client."""
    spec = check_dp_for_run("gaussian:sigma=1,clip=0.5,on=m4,mode=local,seed=1", "fedgpl", "plain")
    dp = SplitDP(spec, noise=False)
    rows = CanaryRows(40, 3, "feature_grads", 0.5, 10.0, seed=0)
    for k in range(3):
        out = dp.protect("feature_grads", rows.rows("feature_grads", 0, k, 16))
        owned = rows.owned(k)
        expected = torch.zeros(len(owned), 16, dtype=torch.float64)
        expected[np.flatnonzero(rows.coins[owned]), rows.coordinates(k, 16)[rows.coins[owned]]] = 0.5
        assert torch.equal(out, expected)
    assert rows.rows("feature_grads", 0, 1, 16) is None and rows.rows("embeddings", 1, 0, 16) is None
