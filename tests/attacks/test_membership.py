"""Membership inference (attacks.membership): beats the guess on an overfitted plain Cora run, attacks
only the global model under crypten, runs under DP with its empirical ε lower bound below the
accountant's ε, and reads only its view and aux."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from torch_geometric.data import Data

from attacks import run_attacks
from attacks.membership import Membership
from privfgl.cli import main
from privfgl.experiment import RunConfig, run
from privfgl.training import LocalTrainers
from attack_cases import by_target, overfitted_config
from tests.view_checks import reachable, spying


def test_loss_attack_beats_the_guess_on_the_global_and_the_client_models(overfitted_plain):
    cfg, setup = overfitted_plain
    out = by_target(setup, cfg, "membership")
    g = out["global"]
    assert g.metrics["members"] == g.metrics["non_members"] > 400
    assert g.metrics["auc"] > 0.6 > g.baseline["auc"] + 0.05
    assert g.metrics["tpr_at_fpr_0.1"] > g.baseline["tpr_at_fpr_0.1"]
    assert g.metrics["epsilon_lb"] > 0  # an unprotected model: a positive certified ε at 95 %
    assert g.metrics["accountant_epsilon"] is None and g.metrics["dp_covers"] is None
    clients = [out[f"client{k}"].metrics["auc"] for k in range(5)]
    assert sum(clients) / 5 > 0.6


def test_shadow_attack_beats_the_guess(overfitted_plain):
    cfg, setup = overfitted_plain
    out = by_target(setup, cfg, "membership:variant=shadow,target=global,shadows=2,epochs=40")
    assert out["global"].metrics["variant"] == "shadow"
    assert out["global"].metrics["auc"] > 0.58


def test_under_crypten_only_the_global_model_is_attacked(cora):
    cfg = overfitted_config(protocol="crypten", rounds=2, clients=3)
    _, setup = run(cfg, data=cora)
    out = by_target(setup, cfg, "membership")
    assert all("no_input" in out[f"client{k}"].metrics for k in range(3))
    assert "auc" in out["global"].metrics


def test_dp_fedavg_bound_stays_below_the_accountants_epsilon(cora):
    # Central Gaussian DP on the update, 10 releases: the global model is covered by the accountant's ε;
    # the lower bound, at 95 % confidence, must not exceed it.
    cfg = overfitted_config(method="dp-fedavg", rounds=10, dp="gaussian:sigma=0.8,clip=1.0,on=update,mode=central",
                     transcript="all")  # a delta needs the global model it started from
    _, setup = run(cfg, data=cora)
    out = by_target(setup, cfg, "membership")
    g = out["global"]
    eps = g.metrics["accountant_epsilon"]
    assert eps is not None and g.metrics["dp_covers"] is True and g.metrics["confidence"] == 0.95
    assert g.metrics["epsilon_lb"] <= eps and g.metrics["epsilon_lb_bonferroni"] <= eps
    assert out["client0"].metrics["dp_covers"] is False  # central mode: the server saw clipped, un-noised uploads


def test_dp_sgd_runs_and_its_bound_stays_below_epsilon(bow_graph):
    cfg = RunConfig(method="dp-sgd", dataset="bow", partition="louvain", clients=3, rounds=2, local_epochs=1,
                    hidden=16, transcript="all", progress=False, method_params={"sigma": 1.0, "seed": 3})
    _, setup = run(cfg, data=bow_graph)
    out = by_target(setup, cfg, "membership")
    assert set(out) == {"global", "client0", "client1", "client2"}
    for f in out.values():
        assert f.metrics["dp_covers"] is True and f.metrics["epsilon_lb"] <= f.metrics["accountant_epsilon"]


def test_message_dp_in_local_mode_covers_every_upload(bow_graph):
    cfg = RunConfig(method="fedavg", dataset="bow", partition="louvain", clients=3, rounds=3, hidden=16,
                    dp="gaussian:sigma=2.0,clip=1.0,on=update,mode=local", transcript="last", progress=False)
    record, setup = run(cfg, data=bow_graph)
    out = by_target(setup, cfg, "membership")
    for f in out.values():
        assert f.metrics["accountant_epsilon"] == pytest.approx(record["privacy"]["epsilon"])
        assert f.metrics["dp_covers"] is True and f.metrics["epsilon_lb"] <= f.metrics["accountant_epsilon"]


def test_membership_reads_only_its_view_and_aux(overfitted_plain):
    cfg, setup = overfitted_plain
    spy = spying(Membership, variant="shadow", clients=[0], shadows=1, epochs=2)
    run_attacks(setup, cfg, [spy])
    assert len(spy.received) == 2
    private = {t.untyped_storage().data_ptr() for c in setup.clients
               for t in (c.x, c.y, c.edge_index, c.train_mask, c.val_mask, c.test_mask)}
    for view, aux in spy.received:
        for o in reachable([view, aux]):
            assert not isinstance(o, (Data, LocalTrainers)) and o is not setup and o is not setup.federation
            if isinstance(o, torch.Tensor):
                assert o.untyped_storage().data_ptr() not in private, "a tensor shares memory with a client's data"
                assert o.dtype != torch.bool or o.numel() != aux.candidates.shape[0], "a membership mask in the aux"


def test_membership_from_the_cli(tmp_path, planetoid_root, capsys):
    out = tmp_path / "audit.json"
    assert main(["audit", "--method", "dp-fedavg", "--dataset", "cora", "--clients", "3", "--rounds", "2",
                 "--dp", "gaussian:sigma=1.0,clip=1.0,on=update,mode=central", "--data-root", str(planetoid_root),
                 "--offline", "--no-progress", "--attack", "membership:target=global", "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    (f,) = record["attacks"]
    assert f["metrics"]["accountant_epsilon"] == pytest.approx(record["privacy"]["epsilon"])
    assert f["metrics"]["epsilon_lb"] <= record["privacy"]["epsilon"]
    assert "epsilon_lb" in capsys.readouterr().out


def test_membership_on_canaries_from_the_cli(tmp_path, planetoid_root, capsys):
    out = tmp_path / "audit.json"
    assert main(["audit", "--method", "dp-fedavg", "--dataset", "cora", "--clients", "3", "--rounds", "2",
                 "--dp", "gaussian:sigma=1.0,clip=1.0,on=update,mode=central", "--canaries", "10", "--canary-seed", "4",
                 "--data-root", str(planetoid_root), "--offline", "--no-progress",
                 "--attack", "membership:target=global,candidates=canaries", "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["canaries"]["inserted"] == 30 and record["canaries"]["seed"] == 4
    (f,) = record["attacks"]
    assert f["metrics"]["members"] + f["metrics"]["non_members"] == 30  # every canary, none of the real nodes
    assert f["metrics"]["confidence"] == 0.95 and f["metrics"]["epsilon_lb"] <= record["privacy"]["epsilon"]


def test_canaries_are_memorised_more_than_real_nodes_and_tighten_the_bound(cora):
    cfg = overfitted_config(rounds=20, canaries=40, canary_seed=1)
    _, setup = run(cfg, data=cora)
    canary = by_target(setup, cfg, "membership:target=global,candidates=canaries")["global"]
    real = by_target(setup, cfg, "membership:target=global")["global"]
    assert canary.metrics["members"] + canary.metrics["non_members"] == 200
    assert canary.metrics["auc"] > max(0.9, real.metrics["auc"])
    assert canary.metrics["epsilon_lb_bonferroni"] > real.metrics["epsilon_lb_bonferroni"]
    setup, cfg = plain_run(cora)
    no_canaries = by_target(setup, cfg, "membership:target=global,candidates=canaries")["global"]
    assert "no candidate" in no_canaries.metrics["no_input"]


def plain_run(cora):
    cfg = overfitted_config(rounds=1, clients=3)
    return run(cfg, data=cora)[1], cfg


def test_the_membership_audit_sweep_keeps_every_bound_below_the_accountants_epsilon(tmp_path, planetoid_root):
    """experiments/membership_audit.toml, small (3 clients, 2 rounds of 1 local epoch, 10 canaries per
    client, seed 0) and four of its cells (each method once): in every row, the three attacks' 95 % bounds (split
    half and Bonferroni) stay at or below the run's accountant ε, which the calibrated σ keeps at its target."""
    from privfgl.sweep import load_sweep, report, run_sweep
    from privfgl.sweep.runner import record_path
    sweep = load_sweep(Path(__file__).resolve().parents[2] / "experiments" / "membership_audit.toml",
                       results=tmp_path / "results", seeds=[0],
                       overrides={"clients": 3, "rounds": 2, "local_epochs": 1, "canaries": 10,
                                  "data_root": str(planetoid_root), "download": False})
    labels = ("DP-FedAvg, ε = ∞", "DP-FedAvg, target_epsilon=8.0", "FedAvg, message DP, target_epsilon=2.0",
              "DP-SGD, target_epsilon=2.0")
    sweep = dataclasses.replace(sweep, cells=tuple(c for c in sweep.cells if c.label in labels), doc=None)
    assert len(sweep.cells) == 4 and run_sweep(sweep, progress=False) == []
    for cell, seed in sweep.tasks:
        record = json.loads(record_path(sweep.results, cell, seed).read_text())
        eps, target = record["privacy"]["epsilon"], cell.options.get("target_epsilon")
        if target is not None:
            assert 0.9 * target <= eps <= target + 0.02, (cell.label, eps)
        assert record["canaries"]["inserted"] == 30
        canaries, real, shadow = record["attacks"]  # attacks.0, .1 and .2 of the sweep's columns
        assert canaries["metrics"]["members"] + canaries["metrics"]["non_members"] == 30
        for f in (canaries, real, shadow):
            m = f["metrics"]
            assert m["confidence"] == 0.95 and m["dp_covers"] is True and m["accountant_epsilon"] == pytest.approx(eps)
            assert m["epsilon_lb"] <= min(eps, m["epsilon_lb_ceiling"]), cell.label
            assert m["epsilon_lb_bonferroni"] <= min(eps, m["epsilon_lb_bonferroni_ceiling"]), cell.label
    table, _ = report(sweep)
    assert "canaries: ε lb Bonferroni" in table and "| DP-SGD, target_epsilon=2.0 | 1 |" in table

