"""FedLoG: a GraphSAGE embedder with head/tail synthetic nodes and prototype classifiers; global
synthetic data and class generators built from class-rate-weighted sums the clients pre-multiply,
so that under a secure protocol the server holds no client's class rates, counts or head nodes."""
import pytest
import torch

from privfgl.data import load_dataset
from privfgl.experiment import RunConfig, run
from privfgl.federation import SERVER, client_name
from privfgl.methods.fedlog.client import FedLoGClient, initial_synthetic
from privfgl.methods.fedlog.generator import NeighbourGenerator, flat_params
from privfgl.methods.fedlog.model import PrototypeInteraction, gate, mix
from privfgl.methods.fedlog.params import resolve_params
from tests.record_checks import assert_per_client_values_are_auditor_only
from tests.view_checks import class_rates, holds

SMALL = {"s": 4, "hidden": 32, "embed_dim": 16, "generator_epochs": 3, "generator_gnns": 2,
         "generator_hidden": "32", "batch_size": 128, "lr": 0.01, "lr_synthetic": 0.01}


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("PRIVFGL_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.fixture(scope="module")
def sbm():
    return load_dataset("sbm")  # 2000 nodes, 64 features, 5 classes (synthetic)


def fedlog(data, rounds=3, protocol="plain", clients=3, transcript="all", seed=0, partition="metis",
           partition_params=None, **params):
    cfg = RunConfig(method="fedlog", dataset="sbm", partition=partition, clients=clients, rounds=rounds,
                    partition_params=partition_params or {},
                    split=(0.4, 0.3, 0.3), seed=seed, protocol=protocol, method_params={**SMALL, **params},
                    progress=False, transcript=transcript)
    return run(cfg, data=data)


@pytest.fixture(scope="module")
def plain_run(sbm):
    return fedlog(sbm)


# ---- the model ----------------------------------------------------------------------------------
def test_prototype_interaction_is_eqs_14_to_18_pair_by_pair():
    torch.manual_seed(0)
    layer, D = PrototypeInteraction(8), 8
    torch.nn.init.normal_(layer.trans[-1].weight)  # away from its near-zero init, so the update shows
    h, n, protos = torch.randn(5, D), torch.randn(5, D), torch.randn(6, D)
    expected = []
    for v in range(5):
        t = []
        for j in range(6):
            dr = torch.cat([h[v], n[v]]) - torch.cat([protos[j], protos[j]])
            m = layer.msg_out(torch.nn.functional.silu(layer.msg_in(torch.cat([h[v], n[v], (dr ** 2).sum()[None]]))))
            t.append((h[v] - protos[j]) * layer.trans(torch.nn.functional.silu(m)))
        expected.append(h[v] + torch.stack(t).mean(0))
    assert torch.allclose(layer(h, n, protos), torch.stack(expected), atol=1e-5)


def test_the_code_classifier_normalises_the_query_and_not_the_prototypes():
    """The authors' clsf: LayerNorm(query), message passing that adds zeros to it, then the distance to
    the class means of the embedder's prototype outputs as they are (euclidean_dist(embeds, syn_proto))."""
    from privfgl.methods.fedlog.model import BranchClassifier
    torch.manual_seed(0)
    branch, C, s, D = BranchClassifier(8, 2, "code"), 3, 4, 8
    torch.nn.init.normal_(branch.norm.weight), torch.nn.init.normal_(branch.norm.bias)  # a trained affine
    h, protos = torch.randn(5, D), 5 * torch.randn(C * s, D) + 2
    q = torch.nn.functional.layer_norm(h, (D,), branch.norm.weight, branch.norm.bias)
    means = protos.view(C, s, D).mean(1)
    expected = (-((q[:, None, :] - means[None]) ** 2).sum(-1)).log_softmax(-1)
    assert torch.allclose(branch(h, h, protos, s), expected, atol=1e-5)


def test_the_degree_gate_and_the_probability_mixture():
    alpha = gate(torch.tensor([0, 4, 100]), tail_degree=3)
    assert torch.allclose(alpha, torch.tensor([torch.sigmoid(torch.tensor(-4.0)), 0.5, 1.0]))
    lp_a, lp_b = torch.randn(3, 4).log_softmax(-1), torch.randn(3, 4).log_softmax(-1)
    mixed = mix(lp_a, lp_b, alpha)
    assert torch.allclose(mixed.exp(), alpha[:, None] * lp_a.exp() + (1 - alpha[:, None]) * lp_b.exp(), atol=1e-6)
    assert torch.allclose(mixed.exp().sum(-1), torch.ones(3))


def test_params_name_a_bad_key_and_what_is_valid():
    with pytest.raises(ValueError, match="classifier='x'; valid: paper, code"):
        resolve_params({"classifier": "x"})
    with pytest.raises(ValueError, match="unknown method param"):
        resolve_params({"nope": 1})
    with pytest.raises(ValueError, match="generator_hidden"):
        resolve_params({"generator_hidden": "a,b"})


# ---- the federation ------------------------------------------------------------------------------
def test_a_run_learns_and_reports_its_class_support(plain_run, sbm):
    record, setup = plain_run
    m = record["metrics"]
    assert m["test_acc"] > 0.5 and len(m["curve"]) == 3
    assert m["fedlog"]["class_contributors"] == [sum(int(bool((c.y[c.train_mask] == k).any())) for c in setup.clients)
                                                 for k in range(setup.num_classes)]


def test_per_client_values_are_auditor_only_and_pretraining_time_is_summed(plain_run):
    """Each client's curriculum and warm-up are named auditor-only; its generator-pretraining time
    (which says how much data it holds) is reported only summed over the clients (issue #40)."""
    record, _ = plain_run
    assert {"metrics.fedlog.gamma_mean", "metrics.fedlog.warmup_epochs_run"} <= set(record["privacy"]["auditor_only"])
    generators = record["time"]["caches"]["generators"]
    assert set(generators) == {"hit", "miss", "seconds"} and generators["hit"] + generators["miss"] == 3
    assert_per_client_values_are_auditor_only(record)


def test_the_same_seed_gives_the_same_run(plain_run, sbm):
    again, _ = fedlog(sbm)
    assert again["metrics"]["curve"] == plain_run[0]["metrics"]["curve"]


def test_the_global_synthetic_data_is_the_class_rate_weighted_mean_of_the_head_nodes(plain_run):
    """Eq. 7 from the revealed sums: within each class, the mean over its s rows of X_g equals
    Σ_k r_k^c mean_i x_k^(c,i) / Σ_k r_k^c (rows are permuted within classes on the clients)."""
    _, setup = plain_run
    t, s, C = setup.federation.transcript, SMALL["s"], setup.num_classes
    ups = [m.tensors["x_head"] for m in t.view(SERVER, name="synthetic_update", round=2)]
    rates = class_rates(setup)
    x_g = t.view(client_name(0), name="global_synthetic", round=2)[0].tensors
    for c in range(C):
        rows = slice(c * s, (c + 1) * s)
        # each upload row block is r_k^c times a permutation of client k's class-c head rows
        expected = sum(u[rows].mean(0) for u in ups) / sum(r[c] for r in rates)
        assert torch.allclose(x_g["x"][x_g["y"] == c].double().mean(0), expected, atol=1e-5)


def test_the_clients_load_the_aggregated_class_generators(plain_run):
    """NG^c = Σ_k r_k^c NG_k / Σ_k r_k^c is what every client receives and uses (the authors' code
    never loads it)."""
    _, setup = plain_run
    t = setup.federation.transcript
    ups = [m.tensors["ng"] for m in t.view(SERVER, name="generator_update")]
    support = t.view(SERVER, name="class_support:sum")[0].tensors
    got = t.view(client_name(1), name="class_generators")[0].tensors
    for row, c in enumerate(got["classes"].tolist()):
        assert torch.allclose(got["ng"][row].double(), sum(u[c] for u in ups) / support["r"][c], atol=1e-5)


def test_min_contributors_withholds_a_class_before_any_sum(sbm):
    """A class held by fewer clients than asked is zeroed by every client before the protocol, so
    no revealed sum holds its rows (one holder's 'sum' is its own data)."""
    record, setup = fedlog(sbm, rounds=1, clients=5, min_contributors=3, partition="dirichlet",
                           partition_params={"alpha": 0.05})
    info = record["metrics"]["fedlog"]
    withheld = [c for c, n in enumerate(info["class_contributors"]) if n < 3]
    assert info["withheld_classes"] == withheld and withheld, "the partition should leave some class with < 3 holders"
    s = SMALL["s"]
    for m in setup.federation.transcript.view(SERVER, name="synthetic_update"):
        for c in withheld:
            assert not m.tensors["x_head"][c * s:(c + 1) * s].any()
    got = setup.federation.transcript.view(client_name(0), name="global_synthetic")[0].tensors
    assert not set(got["y"].tolist()) & set(withheld)


def test_the_plain_server_sees_every_clients_class_rates(plain_run):
    _, setup = plain_run
    observed = [m.tensors for m in setup.federation.transcript.view(SERVER) if m.tensors]
    for k, rates in enumerate(class_rates(setup)):
        assert any(holds(t, rates) for t in observed), f"client {k}'s class rates not in the plain view"


@pytest.mark.parametrize("protocol", ["crypten", "ckks"])
def test_under_a_secure_protocol_the_server_sees_only_sums_and_accuracy_matches(sbm, plain_run, protocol):
    plain, plain_setup = plain_run
    secure, setup = fedlog(sbm, protocol=protocol)
    server = setup.federation.transcript.view(SERVER)
    names = ("class_support", "generator_update", "model_update", "synthetic_update")
    uploads = [m for m in server if m.name in names]
    assert uploads and all(m.tensors is None and m.kind in ("share", "ciphertext") for m in uploads)
    assert {m.name for m in server if m.tensors} <= {f"{n}:{x}" for n in names for x in ("sum", "reveal")} | \
        {"global_model", "synthetic_seed", "class_generators", "global_synthetic"}
    observed = [m.tensors for m in server if m.tensors]
    for k, c in enumerate(setup.clients):
        rates = class_rates(setup)[k]
        counts = torch.bincount(c.y[c.train_mask], minlength=setup.num_classes).double()
        assert not any(holds(t, rates) or holds(t, counts) for t in observed), f"client {k}'s class rates leak"
    # no client's (permuted, weighted) head rows: each revealed x_head row is a sum over clients
    plain_uploads = [m.tensors["x_head"] for m in plain_setup.federation.transcript.view(SERVER, name="synthetic_update")]
    for t in observed:
        for up in plain_uploads:
            for row in up[:3]:
                assert not holds(t, row)
    assert abs(secure["metrics"]["test_acc"] - plain["metrics"]["test_acc"]) <= 0.005


def test_a_client_predicts_on_another_graph_with_that_graphs_degrees(sbm):
    from privfgl.data import client_subgraphs, partition_nodes, split_clients
    parts = partition_nodes(sbm, "metis", 2, seed=0)
    clients = client_subgraphs(sbm, parts)
    split_clients(clients, 0.4, 0.3, 0.3, seed=0)
    p = resolve_params(SMALL)
    from privfgl.methods.fedlog.model import FedLoGModel
    client = FedLoGClient(0, clients[0], 5, p, FedLoGModel(64, p).state_dict(), initial_synthetic(5, 64, p, 0), 0)
    own = client.predict()
    assert torch.allclose(client.predict(clients[0]), own)
    assert client.predict(clients[1]).shape == (clients[1].num_nodes, 5)
    assert torch.allclose(own.exp().sum(-1), torch.ones(clients[0].num_nodes), atol=1e-5)


@pytest.mark.parametrize("form", ["full", "code"])
def test_the_warm_up_takes_one_full_batch_step_per_epoch_or_the_codes_minibatch_steps(sbm, form):
    from privfgl.data import client_subgraphs, partition_nodes, split_clients
    from privfgl.methods.fedlog.model import FedLoGModel
    clients = client_subgraphs(sbm, partition_nodes(sbm, "metis", 2, seed=0))
    split_clients(clients, 0.4, 0.3, 0.3, seed=0)
    p = resolve_params({**SMALL, "warmup_epochs": 2, "warmup_patience": 5, "batch_size": 32, "warmup_form": form})
    client = FedLoGClient(0, clients[0], 5, p, FedLoGModel(64, p).state_dict(), initial_synthetic(5, 64, p, 0), 0)
    calls = []
    client.model.embedder.register_forward_hook(lambda *_: calls.append(1))
    assert client.warmup() == 2
    steps = client.n_train // 32 if form == "code" else 1  # the code: floor(n / batch) minibatches, remainder unused
    assert steps > 1 or form == "full"
    assert len(calls) == 2 * (steps + 1)  # each step re-embeds the graph, then one evaluation per epoch


def test_generators_share_one_initialisation_and_are_mlps_with_tanh_outputs():
    p = resolve_params({"generator_hidden": "8,16"})
    from privfgl.methods.fedlog.generator import new_generator
    a, b = new_generator(10, p, 3), new_generator(10, p, 3)
    assert torch.equal(flat_params(a), flat_params(b)) and isinstance(a, NeighbourGenerator)
    assert a(torch.randn(4, 10) * 100).abs().max() <= 1


def test_fedlog_runs_the_papers_evaluation_settings(sbm):
    cfg = RunConfig(method="fedlog", dataset="sbm", partition="metis", clients=3, rounds=2, split=(0.4, 0.3, 0.3),
                    evaluate=("unseen-node", "missing-class", "new-client"), method_params=SMALL, progress=False)
    record, setup = run(cfg, data=sbm)
    settings = record["metrics"]["settings"]
    assert set(settings) == {"seen", "unseen-node", "missing-class", "new-client"}
    assert all(0 <= s["test_acc"] <= 1 and s["n_test"] > 0 for s in settings.values())
    assert record["data_regime"]["new_client_nodes"] > 0 and len(setup.clients) == 3


def test_the_trust_block_names_the_classes_one_client_exposes(sbm):
    record, _ = fedlog(sbm, rounds=1, clients=5, partition="dirichlet", partition_params={"alpha": 0.05},
                       transcript="none")
    trust = record["privacy"]["trust"]["fedlog"]
    info = record["metrics"]["fedlog"]
    assert trust["single_contributor_classes"] == [c for c, n in enumerate(info["class_contributors"]) if n == 1]
    assert trust["single_contributor_classes"], "alpha=0.05 should leave a class with one holder"


def test_defaults_are_the_authors_code_and_preset_paper_takes_the_papers_equations(sbm):
    code, paper = resolve_params({}), resolve_params({"preset": "paper"})
    assert (code.classifier, code.mixture, code.weighting, code.global_per_step, code.warmup_epochs) == \
        ("code", "log", "uniform", "all", 100)
    assert (paper.classifier, paper.mixture, paper.weighting, paper.warmup_epochs) == ("paper", "prob", "train_nodes", 0)
    record, _ = fedlog(sbm, rounds=2, transcript="none", preset="paper")
    assert record["metrics"]["test_acc"] > 0.3


def test_a_run_is_the_same_whether_the_generators_come_from_the_cache_or_not(sbm, tmp_path, monkeypatch):
    monkeypatch.setenv("PRIVFGL_CACHE", str(tmp_path))
    miss, _ = fedlog(sbm, rounds=2, transcript="none")
    hit, _ = fedlog(sbm, rounds=2, transcript="none")
    k = miss["config"]["clients"]
    assert (miss["time"]["caches"]["generators"]["miss"], hit["time"]["caches"]["generators"]["hit"]) == (k, k)
    assert hit["time"]["caches"]["generators"]["miss"] == 0
    assert miss["metrics"] == hit["metrics"]  # the cache's provenance sits under "time", not "metrics"


# ---- the authors' code where it departs (docs/authors-side-by-side.md, "FedLoG"; preset=code) ------
def _client(sbm, **params):
    from privfgl.data import client_subgraphs, partition_nodes, split_clients
    from privfgl.methods.fedlog.model import FedLoGModel
    clients = client_subgraphs(sbm, partition_nodes(sbm, "metis", 2, seed=0))
    split_clients(clients, 0.4, 0.3, 0.3, seed=0)
    p = resolve_params({**SMALL, **params})
    torch.manual_seed(0)
    return FedLoGClient(0, clients[0], 5, p, FedLoGModel(64, p).state_dict(), initial_synthetic(5, 64, p, 0), 0)


def test_preset_code_takes_every_departure_of_the_authors_code_and_the_defaults_take_none():
    code, default = resolve_params({"preset": "code"}), resolve_params({})
    departures = ("warmup_form", "warmup_monitor", "warmup_head", "generators", "batches", "optimizer_state")
    assert [getattr(code, k) for k in departures] == ["code", "test", "code", "code", "floor", "round"]
    assert [getattr(default, k) for k in departures] == ["full", "val", "torch", "paper", "ceil", "keep"]
    with pytest.raises(ValueError, match="generators='trained'; valid: paper, code"):
        resolve_params({"generators": "trained"})


@pytest.mark.parametrize("batches", ["ceil", "floor"])
def test_an_epoch_takes_every_training_node_or_the_codes_whole_minibatches_only(sbm, batches):
    client = _client(sbm, batch_size=32, batches=batches)
    assert client.n_train % 32, "the test needs a remainder"
    seen = []
    client.model.head.register_forward_hook(lambda _m, args, _o: seen.append(args[0].shape[0]))
    client.train_round(None)
    if batches == "floor":  # floor(n/b) batches of b; the last n mod b nodes of the epoch's order are unused
        assert seen == [32] * (client.n_train // 32)
    else:
        assert seen == [32] * (client.n_train // 32) + [client.n_train % 32]


@pytest.mark.parametrize("state", ["keep", "round"])
def test_adams_moments_carry_over_rounds_or_start_fresh_each_round_as_in_the_code(sbm, state):
    client = _client(sbm, batch_size=64, optimizer_state=state)
    steps = -(-client.n_train // 64)
    for _ in range(2):
        client.train_round(None)
    adam_steps = {int(s["step"]) for s in client.opt.state.values()}
    syn_steps = {int(s["step"]) for s in client.opt_syn.state.values()}
    expected = steps if state == "round" else 2 * steps
    assert adam_steps == syn_steps == {expected}


@pytest.mark.parametrize("form", ["full", "code"])
def test_the_warm_up_stops_on_the_test_nodes_with_warmup_monitor_test(sbm, form):
    """monitor=test on a client is monitor=val on the same client with its validation nodes set to its
    test nodes; with no validation nodes, monitor=val stops after patience + 1 epochs (full: ties do not count)."""
    params = {"warmup_epochs": 12, "warmup_patience": 1, "batch_size": 32, "warmup_form": form}
    a = _client(sbm, **params, warmup_monitor="test")
    b = _client(sbm, **params, warmup_monitor="val")
    a.data = a.data.clone()
    a.data.val_mask = torch.zeros_like(a.data.val_mask)
    b.data = b.data.clone()
    b.data.val_mask = a.data.test_mask.clone()
    ea, eb = a.warmup(), b.warmup()
    assert ea == eb and all(torch.equal(x, y) for x, y in zip(a.model.state_dict().values(),
                                                               b.model.state_dict().values()))
    blind = _client(sbm, **params, warmup_monitor="val")
    blind.data = a.data
    assert blind.warmup() != ea or form == "code"  # code: a tie counts, so an empty mask never stops it
    assert not all(torch.equal(x, y) for x, y in zip(a.model.state_dict().values(),
                                                     blind.model.state_dict().values()))


def test_the_generator_has_one_dropout_before_its_output_layer_as_the_codes_gen():
    p = resolve_params({"generator_hidden": "8,16"})
    from privfgl.methods.fedlog.generator import new_generator
    kinds = [type(m).__name__ for m in new_generator(10, p, 0).mlp]
    assert kinds == ["Linear", "ReLU", "Linear", "ReLU", "Dropout", "Linear", "Tanh"]


def test_generators_code_are_untrained_the_same_on_every_client_and_draw_dropout(sbm):
    from privfgl.methods.fedlog.generator import untrained_class_generators
    p = resolve_params({**SMALL, "generators": "code"})
    a, b = untrained_class_generators(64, 5, p, 7), untrained_class_generators(64, 5, p, 7)
    assert sorted(a) == list(range(5)) and all(torch.equal(flat_params(a[c]), flat_params(b[c])) for c in a)
    assert not torch.equal(flat_params(a[0]), flat_params(a[1]))  # one after another, not one copy
    x = torch.randn(6, 64)
    assert a[0].training and not torch.equal(a[0](x), a[0](x))  # training mode: dropout at every use
    record, setup = fedlog(sbm, rounds=2, generators="code")
    t = setup.federation.transcript
    names = {m.name for party in t.parties() for m in t.view(party)}
    assert "generator_update" not in names and "class_generators" not in names
    assert record["time"]["caches"]["generators"] == {"hit": 0, "miss": 0, "seconds": 0.0}
    assert "model_update" in names and record["metrics"]["test_acc"] > 0.3


@pytest.mark.parametrize("head", ["torch", "code"])
def test_the_warm_up_head_starts_from_torchs_initialisation_or_the_codes_wider_one(sbm, head):
    client = _client(sbm, warmup_head=head)  # embed_dim 16, C = 5: torch's bound 1/4, the code's 1/sqrt(5)
    with client.own_rng():
        heads = [client._warmup_head() for _ in range(20)]
    top = max(float(q.detach().abs().max()) for h in heads for q in h.parameters())
    if head == "code":
        assert 0.25 < top <= 5 ** -0.5
    else:
        assert top <= 0.25
