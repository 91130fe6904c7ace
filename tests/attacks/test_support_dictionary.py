"""`gradient-inversion:variant=support` on the training privfgl runs by default (FedAvg, Adam from a
fresh state, 3 local epochs, dropout 0.5): the first layer's exact zeros are read off the upload, words
held by one node move on one set of units, and rows built from those sets beat both nulls and the
prior, in round 0 and later; only the revealed sum under a secure protocol; nothing where the zeros
are not exact."""
from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from attacks import run_attacks
from attacks.audit import public_knowledge
from attacks.uploads.gradient_inversion import GradientInversion
from attacks.uploads.multistep_inversion import receptive_vocabulary
from attacks.uploads.support_dictionary import MOVED_TOL, off_decay_movement, support_atoms
from attacks.uploads.updates import client_update, round_starts
from attacks.view import adversary_view
from privfgl.experiment import run
from privfgl.training import LocalTrainers

from attack_cases import DEFAULT_TRAINING, by_target, fedavg_config
from tests.view_checks import reachable, spying

def test_words_held_by_one_node_move_on_exactly_the_same_units(default_fedavg):
    # the fact the attack stands on, checked against the truth: per client, the words only one node
    # holds fall into groups by moved set that are exactly the owners (no two owners share a set)
    cfg, setup = default_fedavg
    k = public_knowledge(setup, cfg)
    view = adversary_view(setup.federation.transcript)
    checked = 0
    for i, c in enumerate(setup.clients):
        update = client_update(view, i, 0)
        moved = np.abs(off_decay_movement(update.before, update.delta(), k)) > MOVED_TOL
        holders = (c.x > 0).sum(0)
        by_owner = defaultdict(set)
        for j in ((holders == 1) & torch.from_numpy(moved.any(1))).nonzero().view(-1).tolist():
            by_owner[int(c.x[:, j].argmax())].add(moved[j].tobytes())
        assert all(len(sets) == 1 for sets in by_owner.values())
        owner_set = {owner: next(iter(sets)) for owner, sets in by_owner.items()}
        owners_of = Counter(owner_set.values())
        assert sum(n == 1 for n in owners_of.values()) >= 0.6 * len(by_owner)
        checked += len(by_owner)
        # and the atoms the attack forms from the upload alone include those groups of >= 2 words
        atoms = {support.tobytes() for support, _ in support_atoms(moved, np.nonzero(moved.any(1))[0])}
        words_per_set = Counter(row.tobytes() for row in moved)
        assert {s for s in owner_set.values() if words_per_set[s] >= 2} <= atoms
    assert checked > 50


def test_support_beats_both_nulls_and_the_prior_where_one_step_variants_have_no_input(default_fedavg):
    cfg, setup = default_fedavg
    assert "signs" in by_target(setup, cfg, "gradient-inversion:variant=dictionary,clients=0")["client0"].metrics["no_input"]
    out = by_target(setup, cfg, "gradient-inversion:variant=support")
    for k in range(3):  # here 0.81-0.97 against 0.60-0.62 (marginals) and 0.55-0.62 (words permuted)
        f = out[f"client{k}"]
        assert f.metrics["variant"] == "support" and f.metrics["graph"] == "unknown"  # graph-free
        assert f.metrics["auc_per_feature"] > f.baseline["auc_per_feature"] + 0.15
        assert f.metrics["auc_per_feature"] > f.baseline["words_permuted"]["auc_per_feature"] + 0.15
        assert f.metrics["label_acc"] > f.baseline["label_acc"] + 0.1
    # the revealed aggregate mixes the three clients' supports: scored per client, well below
    mean = lambda prefix: sum(out[f"{prefix}client{k}"].metrics["auc_per_feature"] for k in range(3)) / 3
    assert mean("aggregate:") < mean("") - 0.1


def test_support_under_secagg_reads_only_the_revealed_sum(bow_graph):
    cfg = fedavg_config(protocol="secagg", **DEFAULT_TRAINING)
    _, setup = run(cfg, data=bow_graph)
    out = by_target(setup, cfg, "gradient-inversion:variant=support")
    assert all("no plaintext update" in out[f"client{k}"].metrics["no_input"] for k in range(3))
    assert all("auc_per_feature" in out[f"aggregate:client{k}"].metrics for k in range(3))


@pytest.mark.parametrize("settings, reason", [
    (dict(method="fedprox"), "proximal"),
    (dict(method="dp-fedavg", dp="gaussian:sigma=0.01,clip=1.0,on=update,mode=local"), "noise"),
    (dict(dp="gaussian:sigma=0.01,clip=1.0,on=update,mode=local"), "noise"),
])
def test_support_refuses_uploads_without_exact_zeros(bow_graph, settings, reason):
    cfg = fedavg_config(**{**DEFAULT_TRAINING, **settings})
    _, setup = run(cfg, data=bow_graph)
    assert reason in by_target(setup, cfg, "gradient-inversion:variant=support,clients=0")["client0"].metrics["no_input"]


def test_central_dp_leaves_every_clipped_upload_open_to_it(bow_graph):
    # DP-FedAvg under mode=central noises only the sum: each client's upload is its delta times one
    # clip factor, which the attack reads off the columns on the decay-only path; tight clipping
    # (the factor far below 1) gives the same reconstruction as clipping that never binds
    rows = {}
    for clip in (1e-3, 1e3):
        cfg = fedavg_config(method="dp-fedavg", dp=f"gaussian:sigma=0.01,clip={clip},on=update,mode=central", **DEFAULT_TRAINING)
        _, setup = run(cfg, data=bow_graph)
        [f] = run_attacks(setup, cfg, [GradientInversion(variant="support", clients=[0])])[:1]
        assert f.metrics["auc_per_feature"] > f.baseline["auc_per_feature"] + 0.15
        rows[clip] = f.metrics["auc_per_feature"]
    assert rows[1e-3] == pytest.approx(rows[1e3], abs=1e-9)


def test_support_reads_later_rounds_through_adams_carried_state_and_sgd_in_any_round(bow_graph):
    # privfgl keeps each client's Adam across rounds: a coordinate with no gradient so far followed the
    # decay-only path through every earlier round, which the server computes from its own broadcasts;
    # so in round 2 the receptive vocabulary is read exactly as in round 0 (the same words)
    cfg = fedavg_config(rounds=3, **DEFAULT_TRAINING)
    _, setup = run(cfg, data=bow_graph)
    k = public_knowledge(setup, cfg)
    view = adversary_view(setup.federation.transcript)
    words = {}
    for r in (0, 2):
        update = client_update(view, 0, r)
        earlier = [s["convs.0.lin.weight"] for s in round_starts(view, r)]
        words[r] = receptive_vocabulary(update.before, update.delta(), k, earlier=earlier)
        without = receptive_vocabulary(update.before, update.delta(), k)  # as if Adam restarted
        assert (without.sum() > words[r].sum()) == (r > 0)
    assert torch.equal(words[0], words[2])
    f = by_target(setup, cfg, "gradient-inversion:variant=support,round=2,clients=0")["client0"]
    assert f.metrics["auc_per_feature"] > f.baseline["auc_per_feature"] + 0.15
    cfg = fedavg_config(optimizer="sgd", lr=0.5, local_epochs=3, dropout=0.5, rounds=2)
    _, setup = run(cfg, data=bow_graph)
    f = by_target(setup, cfg, "gradient-inversion:variant=support,round=1,clients=0")["client0"]
    assert f.metrics["auc_per_feature"] > f.baseline["auc_per_feature"] + 0.1


def test_support_reaches_only_its_view(default_fedavg):
    cfg, setup = default_fedavg
    spy = spying(GradientInversion, variant="support", clients=[0])
    run_attacks(setup, cfg, [spy])
    private = {t.untyped_storage().data_ptr() for c in setup.clients for t in (c.x, c.y, c.edge_index, c.train_mask)}
    for view, aux in spy.received:  # client0 and aggregate:client0
        assert aux.graph is None and aux.labels is None
        for o in reachable([view, aux]):
            assert not isinstance(o, (Data, LocalTrainers)) and o is not setup and o is not setup.federation
            if isinstance(o, torch.Tensor):
                assert o.untyped_storage().data_ptr() not in private, "a tensor shares memory with a client's data"
        assert {m.name for m in view.messages} <= {"model_update", "model_update:sum", "global_model"}
