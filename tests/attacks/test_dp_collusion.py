"""`dp-collusion` (issue #40, finding 3): the server and the clients the protocol lets collude with it
remove their own distributed-DP noise shares from the revealed sum. On the old 1/K shares
(colluders=0) they leave significantly less than σ·clip; on the default shares, sized against that
coalition, the noise left is σ·clip (not significantly less)."""
from __future__ import annotations

import json
import math

import pytest
import torch

from attacks import parse_attack, run_attacks
from attacks.dp.dp_collusion import std_interval
from privfgl.cli import main
from privfgl.experiment import run

from attack_cases import fedavg_config

K = 6  # secagg: t = floor(2*6/3) + 1 = 5 of 6 holders, so 4 clients may collude with the server
SPEC = "gaussian:sigma=1.0,clip=1.0,on=update,mode={mode}"
SEED = ",seed=3"  # reproducible noise: each interval below is one fixed draw, not a 95 % coin


def audit(graph, mode: str = "distributed", extra: str = "", attack: str = "dp-collusion", protocol: str = "secagg",
          clients: int = K):
    cfg = fedavg_config(method="dp-fedavg", clients=clients, protocol=protocol,
                        dp=SPEC.format(mode=mode) + SEED + extra)
    _, setup = run(cfg, data=graph)
    (found,) = run_attacks(setup, cfg, [parse_attack(attack)])
    return found, setup


@pytest.fixture(scope="module")
def sized(bow_graph):
    return audit(bow_graph)


@pytest.fixture(scope="module")
def old_shares(bow_graph):
    return audit(bow_graph, extra=",colluders=0")


def test_the_tolerated_coalition_leaves_the_full_noise_on_the_default_shares(sized):
    found, setup = sized
    m = found.metrics
    assert m["colluders"] == [2, 3, 4, 5] and setup.federation.dp.share == 0.5
    assert not m["noise_removed"] and m["ci95_high"] >= 1.0  # not significantly below σ·clip
    assert m["remaining_ratio"] == pytest.approx(1.0, abs=0.1) and m["coordinates"] > 5_000
    assert found.baseline["remaining_ratio"] == pytest.approx(math.sqrt(K / 2), rel=0.1)  # the cost: K/(K-c) variance


def test_the_old_one_over_k_shares_lose_their_noise_to_the_same_coalition(old_shares):
    m = old_shares[0].metrics
    assert m["noise_removed"] and m["ci95_high"] < 1.0
    assert m["remaining_ratio"] == pytest.approx(math.sqrt(2 / K), rel=0.1)  # only 2 of 6 shares of 1/6 left
    assert old_shares[0].baseline["remaining_ratio"] == pytest.approx(1.0, abs=0.1)


def test_the_record_of_the_old_shares_is_flagged_unsafe(old_shares):
    dp = old_shares[1].federation.dp.report()["dp"]["distributed"]
    assert dp["colluders"] == 0 and dp["colluders_tolerated_by_protocol"] == 4 and dp["warning"].startswith("UNSAFE")


def test_the_colluders_aux_holds_their_own_noise_only(sized):
    _, setup = sized
    attack = parse_attack("dp-collusion:clients=1+4")
    aux = attack.declare_aux(setup, None, "aggregate")
    dp = setup.federation.dp
    own = dp.audit_noise[max(dp.audit_noise)]
    assert aux.colluders == (1, 4) and len(aux.own_noise) == 2
    for mine, k in zip(aux.own_noise, (1, 4)):
        assert all(torch.equal(mine[f], own[k][f]) and mine[f] is not own[k][f] for f in own[k])
    honest = [own[k] for k in (0, 2, 3, 5)]
    field = next(iter(own[0]))
    assert not any(torch.equal(z[field], h[field]) for z in aux.own_noise for h in honest)


def test_local_noise_is_not_removed_by_colluders(bow_graph):
    m = audit(bow_graph, mode="local")[0].metrics
    assert not m["noise_removed"] and m["remaining_ratio"] == pytest.approx(math.sqrt(2), rel=0.1)  # 2 full shares


def test_central_noise_has_no_client_share_to_remove(bow_graph):
    found, _ = audit(bow_graph, mode="central", protocol="plain")
    assert "no client-side Gaussian noise shares" in found.metrics["no_input"]


def test_under_crypten_the_shares_are_sized_for_k_minus_1_colluders(bow_graph):
    found, setup = audit(bow_graph, protocol="crypten", clients=3)
    assert setup.federation.dp.share == 1.0 and found.metrics["colluders"] == [1, 2]
    assert not found.metrics["noise_removed"]


def test_the_std_interval_covers_the_true_std_and_excludes_a_smaller_one():
    x = torch.randn(50_000, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 2.0
    est, low, high = std_interval(x)
    assert low < 2.0 < high and high < 2.05 and est == pytest.approx(2.0, rel=0.01)


def test_the_audit_runs_from_the_cli(tmp_path, capsys):
    out = tmp_path / "audit.json"
    code = main(["audit", "--method", "dp-fedavg", "--dataset", "sbm", "--partition", "louvain", "--clients", "4",
                 "--rounds", "1", "--local-epochs", "1", "--hidden", "8", "--no-progress", "--protocol", "secagg",
                 "--dp", SPEC.format(mode="distributed") + ",colluders=0", "--attack", "dp-collusion:colluders=2",
                 "--out", str(out)])
    assert code == 0
    (row,) = json.loads(out.read_text())["attacks"]
    assert row["metrics"]["colluders"] == [2, 3] and row["metrics"]["noise_removed"]
    assert "remaining_ratio" in capsys.readouterr().out
