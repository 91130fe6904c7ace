"""FedSpray: personalised GNNs distilled from a global feature-structure encoder and class-wise
structure proxies; encoder and proxies aggregated as pre-weighted sums, so that under a secure
protocol the server never learns a client's label distribution."""
import pytest
import torch

from privfgl.data import load_dataset
from privfgl.experiment import RunConfig, run
from privfgl.federation import SERVER
from privfgl.methods.fedspray.run import FedSprayClient, server_update
from privfgl.methods.fedspray.model import embed, head, init_encoder, initial_proxies
from privfgl.methods.fedspray.params import resolve_params
from tests.view_checks import class_rates, holds


@pytest.fixture(autouse=True)
def _partition_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("PRIVFGL_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.fixture(scope="module")
def sbm():
    return load_dataset("sbm")  # 2000 nodes, 64 features, 5 classes (synthetic)


def fedspray(data, rounds=3, protocol="plain", clients=5, partition="louvain+", model="gcn", transcript="last",
             **params):
    cfg = RunConfig(method="fedspray", dataset="sbm", partition=partition, clients=clients, rounds=rounds,
                    split=(0.4, 0.3, 0.3), seed=0, protocol=protocol, model=model, method_params=params,
                    progress=False, transcript=transcript)
    return run(cfg, data=data)


@pytest.fixture(scope="module")
def plain_run(sbm):
    return fedspray(sbm, transcript="all")


# ---- parameters -----------------------------------------------------------------------------------
def test_defaults_follow_the_paper_and_preset_code_sets_the_authors_choices():
    p = resolve_params({})
    assert (p.lambda1, p.lambda2, p.local_epochs, p.lr_gnn, p.lr_encoder, p.lr_proxy, p.proxy_dim) == \
        (5.0, 1.0, 5, 0.003, 0.003, 0.02, 64)
    assert not p.persistent_node_proxies and p.kd_conf_threshold is None and p.proxy_weights == "ratios"
    assert p.gnn_init == "glorot" and not p.persistent_encoder_optimizer and p.head_init == "fan_in"
    code = resolve_params({"preset": "code"})
    assert (code.lambda1, code.kd_conf_threshold, code.persistent_node_proxies, code.gnn_init,
            code.persistent_encoder_optimizer, code.head_init) == (1.0, 0.7, True, "uniform", True, "fan_out")
    assert p.projector_start == "projector" and code.projector_start == "classifier"
    assert resolve_params({"preset": "code", "lambda1": "2"}).lambda1 == 2.0  # explicit keys win
    assert resolve_params({"kd_conf_threshold": "none"}).kd_conf_threshold is None


@pytest.mark.parametrize("params, named", [({"lambda1": -1}, "lambda1"), ({"proxy_weights": "fractions"}, "proxy_weights"),
                                           ({"kd_conf_threshold": 1.5}, "kd_conf_threshold"),
                                           ({"gnn_init": "zeros"}, "gnn_init"), ({"local_epochs": "five"}, "local_epochs"),
                                           ({"head_init": "xavier"}, "head_init"),
                                           ({"projector_start": "encoder"}, "projector_start"),
                                           ({"persistent_node_proxies": "maybe"}, "persistent_node_proxies"),
                                           ({"preset": "authors"}, "preset"), ({"lamda1": 5}, "lamda1")])
def test_bad_method_params_name_the_param_and_what_is_valid(params, named):
    with pytest.raises(ValueError, match=rf"fedspray: .*{named}.*valid"):
        resolve_params(params)


def test_backbones_other_than_gcn_sage_sgc_are_refused(sbm):
    with pytest.raises(ValueError, match="fedspray: --model 'gat' is not supported; valid: gcn, sage, sgc"):
        fedspray(sbm, rounds=1, model="gat")


def test_encoder_heads_start_at_torchs_bound_or_at_the_authors_bound():
    d_s, C = 64, 5
    torch_like = init_encoder(300, d_s, C, seed=0)
    code_like = init_encoder(300, d_s, C, seed=0, head_init="fan_out")
    for omega in (torch_like, code_like):  # g_e: U(±1/√d_s) either way
        assert omega["embedding.weight"].abs().max() <= d_s ** -0.5
    for name in ("classifier.weight", "classifier.bias", "projector.weight", "projector.bias"):
        assert torch_like[name].abs().max() <= d_s ** -0.5 < code_like[name].abs().max() <= C ** -0.5


# ---- the server's arithmetic --------------------------------------------------------------------
def test_server_divides_revealed_sums_per_class_and_keeps_a_class_nobody_holds():
    torch.manual_seed(0)
    K, C, d = 3, 4, 5
    omega = [{"w": torch.randn(2, 2)} for _ in range(K)]
    n = torch.tensor([10.0, 30.0, 60.0])
    s = torch.randn(K, C, d)
    p = torch.tensor([[0.5, 0.5, 0.0, 0.0], [0.2, 0.0, 0.8, 0.0], [1.0, 0.0, 0.0, 0.0]])  # class 3: nobody
    enc_sums = {"w": sum(n[k] * omega[k]["w"] for k in range(K)), "n": n.sum()}
    prox_sums = {"proxy": (p[..., None] * s).sum(0), "weight": p.sum(0)}
    S_prev = torch.full((C, d), 7.0)
    new_omega, S = server_update(enc_sums, prox_sums, {"w": torch.zeros(2, 2)}, S_prev)
    assert torch.allclose(new_omega["w"], sum(n[k] / n.sum() * omega[k]["w"] for k in range(K)))  # Eq. 14
    for j in range(3):  # Eq. 15
        assert torch.allclose(S[j], sum(p[k, j] / p[:, j].sum() * s[k, j] for k in range(K)))
    assert torch.equal(S[3], S_prev[3])


# ---- the method ---------------------------------------------------------------------------------
def test_one_run_reports_overall_and_minority_accuracy_and_selects_by_pooled_validation_loss(plain_run):
    record, setup = plain_run
    m = record["metrics"]
    assert m["selected_by"] == "val_loss" and 0 < m["test_acc"] <= 1 and 0 <= m["minority_acc"] <= 1
    losses = [e["val_loss"] for e in setup.tracker.history]
    assert len(losses) == 3 and m["best_round"] == losses.index(min(losses)) and m["val_loss"] == min(losses)
    assert m["test_acc"] > 1.5 / setup.num_classes  # the personalised GNNs learn on this easy graph
    per_round = [msg.name for msg in setup.federation.transcript.view("client0")]
    assert per_round.count("global_encoder") == 4  # ω_0, S_0 then one broadcast per round
    # one encoder and one proxy upload per client per round, sized as ω (+ n) and C×d_s (+ C)
    d_x, C, d_s = setup.num_features, setup.num_classes, 64
    values = (d_x * d_s + d_s) + 2 * (d_s * C + C) + 1 + (C * d_s + C)
    assert record["cost"]["bytes_up_per_client"] == [3 * 8 * values] * 5


def test_the_same_seed_gives_the_same_run(sbm, plain_run):
    record, _ = plain_run
    again, _ = fedspray(sbm, transcript="all")
    assert again["metrics"]["curve"] == record["metrics"]["curve"]
    assert again["metrics"]["test_acc"] == record["metrics"]["test_acc"]


def test_the_gnn_never_leaves_the_client(plain_run):
    _, setup = plain_run
    names = {name for m in setup.federation.transcript.view(SERVER) if m.tensors for name in m.tensors}
    assert not any(name.startswith(("convs.", "conv.")) for name in names)
    assert {"embedding.weight", "classifier.weight", "projector.weight", "proxy", "weight", "n"} <= names


def test_lambda1_zero_is_purely_local_training_and_lambda1_couples_the_gnn_to_the_encoder(sbm):
    curve = lambda r: [(e["val_acc"], e["test_acc"]) for e in r[0]["metrics"]["curve"]]
    local_a = fedspray(sbm, rounds=2, lambda1=0)
    local_b = fedspray(sbm, rounds=2, lambda1=0, lr_encoder=0.1, lr_proxy=0.5)
    assert curve(local_a) == curve(local_b)  # the encoder cannot reach the GNN
    coupled_a = fedspray(sbm, rounds=2, lambda1=5)
    coupled_b = fedspray(sbm, rounds=2, lambda1=5, lr_encoder=0.1, lr_proxy=0.5)
    assert curve(coupled_a)[1] != curve(coupled_b)[1]  # round 1 distils from the round-0 encoder


def test_a_clients_uploads_depend_only_on_its_own_data(sbm):
    _, setup = fedspray(sbm, rounds=1)
    outside = torch.ones(sbm.num_nodes, dtype=torch.bool)
    outside[setup.clients[0].global_id] = False
    changed = sbm.clone()
    changed.x = sbm.x.clone()
    changed.x[outside] += 1.0  # every node but client 0's
    _, setup2 = fedspray(changed, rounds=1)
    for name in ("encoder_update", "proxy_update"):
        a = setup.federation.transcript.view(SERVER, name=name)
        b = setup2.federation.transcript.view(SERVER, name=name)
        assert all(torch.equal(a[0].tensors[f], b[0].tensors[f]) for f in a[0].tensors)  # client 0
        assert not all(torch.equal(a[1].tensors[f], b[1].tensors[f]) for f in a[1].tensors)  # client 1


def local_client(setup, k=0, **params):
    """A fresh FedSpray client k on a finished run's partition, with ω_0 and S_0."""
    p = resolve_params(params)
    omega = init_encoder(setup.num_features, p.proxy_dim, setup.num_classes, seed=0, head_init=p.head_init)
    client = FedSprayClient(k, setup.clients[k], p, omega, setup.model, setup.num_classes, 0, torch.device("cpu"))
    return client, omega, initial_proxies(setup.num_classes, p.proxy_dim)


def test_phase1_distils_on_every_node_by_default_and_on_labelled_plus_confident_nodes_with_a_threshold(sbm):
    _, setup = fedspray(sbm, rounds=1)
    client, _, _ = local_client(setup)
    q = torch.rand(client.graph.num_nodes, setup.num_classes).softmax(-1)
    every = client._kd_weights(q)  # Eq. 6: mean over all of V^(k)
    assert (every > 0).all() and abs(float(every.sum()) - 1) < 1e-4
    q_conf = q.clone()
    confident = torch.zeros(client.graph.num_nodes, dtype=torch.bool)
    confident[::3] = True
    q_conf[confident] = torch.nn.functional.one_hot(torch.zeros(int(confident.sum()), dtype=torch.long),
                                                    setup.num_classes).float()
    client.p = resolve_params({"kd_conf_threshold": 0.7})
    some = client._kd_weights(q_conf)  # the code: labelled nodes plus unlabelled ones with max q > 0.7
    assert torch.equal(some > 0, client.train | confident)
    assert abs(float(some.sum()) - 1) < 1e-4


def reference_phase2(client, S, gnn_logits):
    """Phase 2 written out over every node of the client's graph (Eqs. 11-13), losses on V_L."""
    target = gnn_logits[client.L].log_softmax(-1)
    with torch.no_grad():
        client.node_proxy.copy_(S[client.yL])
    client.opt_omega = torch.optim.Adam(client.omega.values(), lr=client.p.lr_encoder)
    for _ in range(client.p.local_epochs):
        client.opt_omega.zero_grad()
        client.opt_proxy.zero_grad()
        e = embed(client.omega, client.graph)
        q_logits = head(client.omega, "projector", e, client.graph)[client.L]
        s = torch.zeros_like(e).index_put((client.L,), client.node_proxy)
        p_logp = head(client.omega, "classifier", e + s, client.graph)[client.L].log_softmax(-1)
        kl = (target.exp() * (target - p_logp)).sum(-1)
        loss = ((torch.nn.functional.cross_entropy(q_logits, client.yL, reduction="none") + kl) * client.ce_w).sum()
        loss.backward()
        client.opt_omega.step()
        client.opt_proxy.step()


@pytest.mark.parametrize("features", ["dense", "sparse"])
def test_phase2_trains_the_encoder_and_proxies_on_the_labelled_nodes_as_written_over_the_whole_graph(sbm, features):
    data = sbm.clone()
    if features == "sparse":  # bag-of-words-like input: the other input_linear path
        data.x = (sbm.x > 1.5).float()
    _, setup = fedspray(data, rounds=1)
    for k in range(len(setup.clients)):
        fast, omega, S = local_client(setup, k)
        ref, _, _ = local_client(setup, k)
        for c in (fast, ref):
            c.phase1(omega, S)
        logits = fast.predict()
        assert torch.equal(logits, ref.predict())
        fast.phase2(S, logits)
        reference_phase2(ref, S, logits)
        for name in fast.omega:
            assert torch.allclose(fast.omega[name], ref.omega[name], atol=1e-5), name
        assert torch.allclose(fast.node_proxy, ref.node_proxy, atol=1e-5)
        assert not torch.allclose(fast.omega["classifier.bias"], omega["classifier.bias"].expand_as(
            fast.omega["classifier.bias"]))  # it did train


def test_labelled_proxies_restart_from_the_global_proxies_each_round_unless_they_persist(sbm):
    _, setup = fedspray(sbm, rounds=1)
    results = {}
    for persistent in (False, True):
        for start in (0.1, 3.0):  # what the node proxies held after the previous round
            client, omega, S = local_client(setup, persistent_node_proxies=persistent)
            with torch.no_grad():
                client.node_proxy.fill_(start)
            client.phase1(omega, S)
            client.phase2(S, client.predict())
            results[persistent, start] = client.local_proxies()
    assert torch.equal(results[False, 0.1], results[False, 3.0])  # paper: s_i = S_{r-1}[y_i] (Alg. 1 line 4)
    assert not torch.allclose(results[True, 0.1], results[True, 3.0])  # code: each node keeps its own


@pytest.mark.parametrize("start", ["projector", "classifier"])
def test_phase2s_projector_starts_from_the_received_projector_or_with_the_code_from_the_received_classifier(sbm, start):
    _, setup = fedspray(sbm, rounds=1)
    client, omega, S = local_client(setup, local_epochs=1, projector_start=start)
    client.phase1(omega, S)
    client.phase2(S, client.predict())
    trained = {part: client.encoder_upload()[f"projector.{part}"] / client.n_train for part in ("weight", "bias")}
    for part in ("weight", "bias"):  # one Adam step moves every entry by at most lr (its first step: lr·sign(g))
        step = (trained[part] - omega[f"{start}.{part}"].double()).abs().max()
        assert step <= client.p.lr_encoder * (1 + 1e-3), part
    other = "classifier" if start == "projector" else "projector"
    assert (trained["weight"] - omega[f"{other}.weight"].double()).abs().max() > 10 * client.p.lr_encoder


@pytest.mark.parametrize("model", ["sage", "sgc"])
def test_sage_and_sgc_backbones_train(sbm, model):
    record, setup = fedspray(sbm, rounds=5, model=model, lr_gnn=0.03)
    assert record["metrics"]["test_acc"] > 1.5 / setup.num_classes


def test_the_authors_code_choices_run(sbm):
    record, setup = fedspray(sbm, rounds=2, preset="code", proxy_weights="counts")
    uploads = setup.federation.transcript.view(SERVER, name="proxy_update")
    counts = torch.bincount(setup.clients[0].y[setup.clients[0].train_mask], minlength=setup.num_classes)
    assert torch.equal(uploads[-5].tensors["weight"], counts.double())  # counts instead of ratios
    assert 0 < record["metrics"]["test_acc"] <= 1


# ---- privacy: what the server learns ------------------------------------------------------------
def test_under_plain_the_server_sees_every_clients_label_distribution(plain_run):
    _, setup = plain_run
    observed = [m.tensors for m in setup.federation.transcript.view(SERVER) if m.tensors]
    for k, fractions in enumerate(class_rates(setup)):
        assert any(holds(t, fractions) for t in observed), f"client {k}'s label fractions not in the plain view"


@pytest.mark.parametrize("protocol", ["crypten", "ckks"])
def test_under_a_secure_protocol_the_server_sees_no_clients_label_fractions_and_accuracy_matches(sbm, plain_run,
                                                                                                 protocol):
    plain, plain_setup = plain_run
    secure, setup = fedspray(sbm, protocol=protocol)
    server = setup.federation.transcript.view(SERVER)
    uploads = [m for m in server if m.name in ("encoder_update", "proxy_update")]
    assert len(uploads) == 2 * 3 * 5 and all(m.tensors is None and m.kind in ("share", "ciphertext") for m in uploads)
    observed = [m.tensors for m in server if m.tensors]
    # under ckks the key holder's decrypted sum arrives as ":reveal"; it is the sum itself, nothing more
    assert {m.name for m in server if m.tensors} <= {"encoder_update:sum", "proxy_update:sum", "global_encoder",
                                                     "encoder_update:reveal", "proxy_update:reveal"}
    for k, fractions in enumerate(class_rates(setup)):
        assert not any(holds(t, fractions) for t in observed), f"client {k}'s label fractions leak under {protocol}"
    # what is revealed is the sum over clients of the fractions, equal to plain's
    revealed = setup.federation.transcript.view(SERVER, name="proxy_update:sum")[-1].tensors["weight"]
    assert torch.allclose(revealed, sum(class_rates(setup)), atol=1e-4)
    assert abs(secure["metrics"]["test_acc"] - plain["metrics"]["test_acc"]) <= 0.005
    assert abs(secure["metrics"]["minority_acc"] - plain["metrics"]["minority_acc"]) <= 0.005


def test_label_inference_reads_the_exact_distribution_under_plain_and_only_the_sum_under_ckks(sbm, plain_run):
    from attacks import parse_attack, run_attacks  # what `privfgl audit --attack label-inference` runs
    attack = parse_attack("label-inference:round=1")
    cfg = RunConfig(method="fedspray", dataset="sbm", clients=5)
    plain = {f.target: f.metrics for f in run_attacks(plain_run[1], cfg, [attack])}
    for k in range(5):
        assert plain[f"client{k}"]["js"] < 1e-9 and plain[f"client{k}"]["cosine"] > 1 - 1e-9
    _, secure_setup = fedspray(sbm, protocol="ckks", rounds=2, transcript="all")
    secure = {f.target: f.metrics for f in run_attacks(secure_setup, cfg, [attack])}
    assert all("no_input" in secure[f"client{k}"] for k in range(5))
    assert all("js" in secure[f"aggregate:client{k}"] for k in range(5))
    # the aggregate is the clients' summed fractions: not any one client's distribution
    assert max(secure[f"aggregate:client{k}"]["js"] for k in range(5)) > 0.01


# ---- the reproduction script ----------------------------------------------------------------------
def test_reproduction_script_adds_extra_settings_to_fedspray_variants_only():
    import argparse
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parents[1] / "experiments" / "reproduce_fedspray.py"
    spec = importlib.util.spec_from_file_location("reproduce_fedspray", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    args = argparse.Namespace(partition="louvain+", clients=10, rounds=100, data_root=None, model="gcn",
                              method_param=["lambda1=2"])
    code = script.config("fedspray-code", "cora", 3, "plain", args)
    assert code.method_params == {"preset": "code", "lambda1": "2"} and code.seed == 3 and code.split == (0.4, 0.3, 0.3)
    assert script.variant_name("fedspray-code", args) == "fedspray-code [lambda1=2]"
    fedavg = script.config("fedavg", "cora", 3, "plain", args)
    assert not fedavg.method_params and script.variant_name("fedavg", args) == "fedavg"
    standin = script.config("fedspray", "sbm-physics", 0, "plain", args)
    assert (standin.partition, standin.clients) == ("louvain", 12)  # the paper's client count for Physics
