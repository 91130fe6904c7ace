"""`gradient-inversion:variant=multistep` on the training privfgl runs by default (FedAvg, Adam from
a fresh state, 3 local epochs, dropout 0.5): the one-step variants have no input there; the replay
of the local training beats the feature marginals; under crypten it has no input per client; it
reaches only its view and its declared aux."""
from __future__ import annotations

import pytest
import torch
from torch_geometric.data import Data

from attacks import parse_attack, run_attacks
from attacks.audit import public_knowledge
from attacks.base import NoInput
from attacks.uploads.gcn import dense_adjacency, gcn_normalize
from attacks.uploads.gradient_inversion import GradientInversion
from attacks.uploads.multistep_inversion import receptive_vocabulary, simulate_local_training
from attacks.uploads.updates import client_update
from attacks.view import adversary_view
from privfgl.experiment import run
from privfgl.training import LocalTrainers

from attack_cases import DEFAULT_TRAINING, by_target, fedavg_config
from tests.view_checks import reachable, spying

def test_the_replay_reproduces_the_clients_adam_update_without_dropout(bow_graph):
    # the simulation is privfgl's local training: with dropout 0 and the true inputs it gives the
    # uploaded update (float32 engine against a float32 replay)
    cfg = fedavg_config(optimizer="adam", local_epochs=3, dropout=0.0)
    _, setup = run(cfg, data=bow_graph)
    k = public_knowledge(setup, cfg)
    c = setup.clients[0]
    update = client_update(adversary_view(setup.federation.transcript), 0, 0)
    train = c.train_mask.nonzero().view(-1)
    sim = simulate_local_training({n: p.float() for n, p in update.before.items()}, c.x.float(),
                                  gcn_normalize(dense_adjacency(c.edge_index, c.num_nodes)), c.y[train], train, k,
                                  create_graph=False)
    for name, d in update.delta().items():
        assert torch.allclose(sim[name].double(), d, atol=2e-5), name
    # and the receptive vocabulary is exactly the words of the nodes within two hops of a training node
    a = dense_adjacency(c.edge_index, c.num_nodes) + torch.eye(c.num_nodes)
    near = ((a @ a)[train].sum(0) > 0)
    assert torch.equal(receptive_vocabulary(update.before, update.delta(), k), c.x[near].sum(0) > 0)


def test_multistep_beats_the_marginals_where_one_step_variants_have_no_input(default_fedavg):
    cfg, setup = default_fedavg
    for variant in ("ig", "dictionary"):  # one SGD step without dropout only
        assert "signs" in by_target(setup, cfg, f"gradient-inversion:variant={variant},clients=0")["client0"].metrics["no_input"]
    f = by_target(setup, cfg, "gradient-inversion:variant=multistep,clients=0")["client0"]
    assert f.metrics["nodes"] <= 30 and f.metrics["graph"] == "known" and f.metrics["variant"] == "multistep"
    # the words no node near a training node holds come out as exact zeros: over the whole matrix
    # the reconstruction beats the marginals, and the fitted labels beat the prior's majority label
    # (0.82 vs 0.45 with the clients' shared dropout stream; 0.64 vs 0.45 since each client draws its
    # own, training.dropout_seeds); per feature it stays near the marginals' 0.5 (docs/attacks.md)
    assert f.metrics["auc"] > f.baseline["auc"] + 0.05
    assert f.metrics["label_acc"] > f.baseline["label_acc"] + 0.15


def test_with_the_labels_known_the_replay_attributes_words_to_nodes(default_fedavg):
    cfg, setup = default_fedavg
    f = by_target(setup, cfg, "gradient-inversion:variant=multistep,labels=known,clients=0")["client0"]
    assert f.metrics["label_acc"] == 1.0  # declared aux, not inferred
    assert f.metrics["auc_per_feature"] > f.baseline["auc_per_feature"] + 0.1  # 0.5: any per-feature constant
    assert f.metrics["auc"] > f.baseline["auc"] + 0.1


def test_multistep_under_crypten_has_no_input_per_client(bow_graph):
    cfg = fedavg_config(protocol="crypten", **DEFAULT_TRAINING)
    _, setup = run(cfg, data=bow_graph)
    out = run_attacks(setup, cfg, [parse_attack("gradient-inversion:variant=multistep")])
    assert [f.target for f in out] == ["client0", "client1", "client2"]
    assert all("no plaintext update" in f.metrics["no_input"] for f in out)


def test_multistep_refuses_later_adam_rounds_and_bad_settings(default_fedavg):
    cfg, setup = default_fedavg
    f = by_target(setup, cfg, "gradient-inversion:variant=multistep,round=1,clients=0")["client0"]
    assert "moments" in f.metrics["no_input"]
    for spec in ("gradient-inversion:variant=multistep,graph=unknown", "gradient-inversion:variant=ig,labels=known",
                 "gradient-inversion:variant=multistep,masks=-1"):
        with pytest.raises(ValueError):
            parse_attack(spec)


def test_multistep_reaches_only_its_view_and_aux(default_fedavg):
    cfg, setup = default_fedavg
    attack = spying(GradientInversion, variant="multistep", clients=[0], iters=1)
    run_attacks(setup, cfg, [attack])
    (view, aux), = attack.received
    assert aux.labels is None
    private = {t.untyped_storage().data_ptr() for c in setup.clients for t in (c.x, c.y, c.edge_index, c.train_mask)}
    for o in reachable([view, aux]):
        assert not isinstance(o, (Data, LocalTrainers)) and o is not setup and o is not setup.federation
        if isinstance(o, torch.Tensor):
            assert o.untyped_storage().data_ptr() not in private, "a tensor shares memory with a client's data"
    assert {m.name for m in view.messages} <= {"model_update", "model_update:sum", "global_model"}
    with pytest.raises(NoInput):  # the aggregate is not one client's local training
        attack.attack(view, attack.declare_aux(setup, aux.knowledge, "aggregate:client0"))
