"""FedOMD: ONI/OrthoConv, CMD from secure sums, the three aggregations per round, the split, params,
evaluation protocol, and the moments under crypten/ckks against plain."""

import pytest
import torch
from torch_geometric.nn import GCNConv

import protocols
from privfgl.data import contextual_sbm
from privfgl.data.splits import random_split, split_clients, stratified_split
from privfgl.experiment import RunConfig, effective_protocol_params, run
from privfgl.federation import SERVER, client_name
from privfgl.methods.fedomd.run import build_model, row_normalize
from privfgl.methods.fedomd.cmd import cmd, cmd_layer, global_statistics, hidden_sums, moment_sums
from privfgl.methods.fedomd.params import resolve_params
from privfgl.models.ortho_gcn import OrthoGCN, SparseFeatures, normalized_adjacency, oni, ortho_penalty

FAST = {"patience": 0}


@pytest.fixture(autouse=True)
def _partition_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("PRIVFGL_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.fixture(scope="module")
def sbm():
    return contextual_sbm(num_nodes=300, num_classes=3, num_features=40, seed=0)


def fedomd_config(**kw) -> RunConfig:
    base = dict(method="fedomd", dataset="sbm", partition="louvain", clients=3, rounds=3, split=(0.05, 0.2, 0.2),
                split_mode="random", progress=False, transcript="all", method_params=dict(FAST))
    base.update(kw)
    return RunConfig(**base)


@pytest.fixture(scope="module")
def runs(sbm, tmp_path_factory):
    """One short run per protocol on the same seed (the transcript keeps every round)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PRIVFGL_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))
        return {p: run(fedomd_config(protocol=p), data=sbm) for p in ("plain", "crypten", "ckks")}


# --------------------------------------------------------------------------- model


def test_oni_orthogonalises_and_more_iterations_get_closer():
    v = torch.randn(16, 64, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    errors = [float(torch.linalg.matrix_norm(oni(v, t) @ oni(v, t).T - torch.eye(16, dtype=torch.float64)))
              for t in (1, 4, 8)]
    assert errors[0] > errors[1] > errors[2] and errors[2] < 1e-5
    # a square V: rows are centred, so T has rank d − 1; T Tᵀ has one zero and otherwise at most 1
    square = torch.linalg.eigvalsh(oni(v[:, :16], 4) @ oni(v[:, :16], 4).T)
    assert abs(float(square[0])) < 1e-8 and float(square[-1]) < 1 + 1e-6


def test_ortho_penalty_is_the_unsquared_frobenius_distance_of_t_tt_to_identity():
    torch.manual_seed(0)
    model = OrthoGCN(10, 8, 3, ortho_layers=2, iters=2)
    expected = sum(torch.linalg.matrix_norm(c.transformed_weight() @ c.transformed_weight().T - torch.eye(8))
                   for c in model.ortho)
    assert torch.allclose(ortho_penalty(model), expected) and float(expected.detach()) > 0


def test_gcn_layers_compute_exactly_pygs_gcnconv_for_dense_and_sparse_features(sbm):
    torch.manual_seed(0)
    x = (torch.rand(sbm.num_nodes, 30) < 0.05).float()
    model = OrthoGCN(30, 8, 3).eval()
    adj = normalized_adjacency(sbm.edge_index, sbm.num_nodes)
    reference = GCNConv(30, 8)
    reference.load_state_dict(model.first.state_dict())
    assert torch.allclose(model._first_layer(x, adj, None), reference(x, sbm.edge_index), atol=1e-5)
    dense_out, sparse_out = model(x, adj)[0], model(SparseFeatures(x), adj)[0]
    assert torch.allclose(dense_out, sparse_out, atol=1e-5)
    dense_out.sum().backward()
    g = model.first.lin.weight.grad.clone()
    model.zero_grad()
    sparse_out.sum().backward()
    assert torch.allclose(g, model.first.lin.weight.grad, atol=1e-4)


def test_hidden_outputs_are_the_relu_outputs_of_every_layer_but_the_last(sbm):
    model = OrthoGCN(sbm.num_features, 8, 3, ortho_layers=3).eval()
    logits, hidden = model(sbm.x, normalized_adjacency(sbm.edge_index, sbm.num_nodes))
    assert logits.shape == (sbm.num_nodes, 3) and len(hidden) == 4
    assert all(h.shape == (sbm.num_nodes, 8) and bool((h >= 0).all()) for h in hidden)


# --------------------------------------------------------------------------- CMD


def test_global_statistics_from_sums_are_the_pooled_central_moments_of_all_clients():
    g = torch.Generator().manual_seed(0)
    zs = [[torch.rand(n, 5, generator=g) * 3] for n in (7, 12, 30)]
    n = [7, 12, 30]
    mean, total = global_statistics({"z1": sum(hidden_sums(z)["z1"] for z in zs)}, float(sum(n))), sum(n)
    moments = global_statistics({k: sum(moment_sums(z, mean, 5)[k] for z in zs) for k in moment_sums(zs[0], mean, 5)},
                                total)
    pooled = torch.cat([z[0] for z in zs]).double()
    assert torch.allclose(mean["z1"], pooled.mean(0))
    for j in range(2, 6):
        assert torch.allclose(moments[f"z1_m{j}"], ((pooled - pooled.mean(0)) ** j).mean(0))


def test_cmd_is_zero_for_matching_statistics_and_its_gradient_flows_only_through_the_local_outputs():
    z = torch.rand(20, 4, generator=torch.Generator().manual_seed(1), requires_grad=True)
    own = [(z.detach() - z.detach().mean(0)) ** j for j in range(2, 6)]
    assert float(cmd_layer(z, z.detach().mean(0), [m.mean(0) for m in own]).detach()) < 1e-6
    gm = {"z1": torch.zeros(4, dtype=torch.float64, requires_grad=True)}
    gs = {f"z1_m{j}": torch.zeros(4, dtype=torch.float64, requires_grad=True) for j in range(2, 6)}
    value = cmd([z], gm, gs, 5)
    value.backward()
    expected = torch.linalg.vector_norm(z.mean(0)) + sum(torch.linalg.vector_norm(((z - z.mean(0)) ** j).mean(0))
                                                         for j in range(2, 6))
    assert torch.allclose(value, expected) and z.grad is not None and gm["z1"].grad is None


def _pool_stats(zs: list[torch.Tensor], max_order: int = 5):
    """Global mean and central moments (as the server reveals them) of the clients' outputs zs."""
    n = sum(z.shape[0] for z in zs)
    mean = global_statistics({"z1": sum(hidden_sums([z])["z1"] for z in zs)}, float(n))
    keys = moment_sums([zs[0]], mean, max_order)
    return mean, global_statistics({k: sum(moment_sums([z], mean, max_order)[k] for z in zs) for k in keys}, float(n))


def test_std_scaled_cmd_is_invariant_to_scaling_and_zero_when_the_client_is_the_pool():
    g = torch.Generator().manual_seed(2)
    zs = [torch.relu(torch.randn(n, 6, generator=g, dtype=torch.float64)) for n in (15, 40)]
    mean, mom = _pool_stats(zs)
    base = float(cmd([zs[0]], mean, mom, 5, cmd_scale="std"))
    assert base > 0.01 and float(cmd([zs[0]], mean, mom, 5)) != pytest.approx(base)
    c = 37.0
    mean_c, mom_c = _pool_stats([z * c for z in zs])
    assert float(cmd([zs[0] * c], mean_c, mom_c, 5, cmd_scale="std")) == pytest.approx(base, rel=1e-5)
    mean_1, mom_1 = _pool_stats(zs[:1])  # a single client: its statistics are the pool's
    assert float(cmd([zs[0]], mean_1, mom_1, 5, cmd_scale="std")) < 1e-6


def test_squared_norm_and_bound_scale_are_the_documented_transformations():
    g = torch.Generator().manual_seed(3)
    z = torch.rand(30, 5, generator=g) * 4
    gm, gs = torch.rand(5, generator=g), [torch.rand(5, generator=g) for _ in range(4)]
    terms = [torch.linalg.vector_norm(z.mean(0) - gm)] + [
        torch.linalg.vector_norm(((z - z.mean(0)) ** j).mean(0) - s) for j, s in zip(range(2, 6), gs)]
    assert float(cmd_layer(z, gm, gs)) == pytest.approx(float(sum(terms)), rel=1e-5)
    assert float(cmd_layer(z, gm, gs, norm="squared")) == pytest.approx(float(sum(t * t for t in terms)), rel=1e-5)
    b = 2.5  # scale b: the CMD of z / b against the statistics of the pool divided by b^j
    scaled = cmd_layer(z / b, gm / b, [s / b ** j for j, s in zip(range(2, 6), gs)])
    assert float(cmd_layer(z, gm, gs, scale=b)) == pytest.approx(float(scaled), rel=1e-5)
    mean, mom = _pool_stats([z])
    assert float(cmd([z], mean, mom, 5, cmd_scale="bound", bound=b)) < 1e-6


def test_bound_clamps_the_shared_statistics_and_eval_mode_uses_the_no_dropout_pass(sbm):
    b = 0.05
    _, setup = run(fedomd_config(rounds=1, method_params={"patience": 0, "cmd_scale": "bound", "cmd_bound": b}),
                   data=sbm)
    up = setup.federation.transcript.view(SERVER, "hidden_sums", 0)
    # clamp(Z, 0, b)/b: every summed value lies in [0, 1], so |sum| <= n (inside CKKS's and CrypTen's range)
    assert all(0 <= float(m.tensors["z1"].min()) and float(m.tensors["z1"].max()) <= float(m.tensors["n"]) for m in up)
    moments = setup.federation.transcript.view(SERVER, "moment_sums", 0)
    n = {m.sender: float(m.tensors["n"]) for m in up}
    assert all(float(v.abs().max()) <= n[m.sender] for m in moments for v in m.tensors.values())

    def first_means(mode):
        _, st = run(fedomd_config(rounds=1, method_params={"patience": 0, "stats_mode": mode, "cmd_scale": "none"}),
                    data=sbm)
        return st, st.federation.transcript.view(client_name(0), "global_mean", 0)[0].tensors
    st, train_mean = first_means("train")
    _, eval_mean = first_means("eval")
    p = resolve_params({})
    torch.manual_seed(st.method.seed)
    model = build_model(st, p).eval()
    with torch.no_grad():
        hidden = [model(c.x.float(), normalized_adjacency(c.edge_index, c.num_nodes))[1] for c in st.clients]
    n = sum(c.num_nodes for c in st.clients)
    expected = sum(h[0].double().sum(0) for h in hidden) / n
    assert torch.allclose(eval_mean["z1"], expected, atol=1e-5)
    assert not torch.allclose(train_mean["z1"], expected, atol=1e-5)


# --------------------------------------------------------------------------- split and params


def test_random_split_gives_every_client_a_training_node_and_the_stratified_default_is_unchanged(sbm):
    tr, va, te = random_split(150, 0.01, 0.2, 0.2, seed=3)
    assert int(tr.sum()) == 1 and int(va.sum()) == 30 and int(te.sum()) == 30
    assert not bool((tr & va).any() or (tr & te).any() or (va & te).any())
    tr2, _, _ = random_split(1000, 0.01, 0.2, 0.2, seed=3)
    assert int(tr2.sum()) == 10 and torch.equal(random_split(150, 0.01, 0.2, 0.2, seed=3)[0], tr)
    subs = [sbm.subgraph(torch.arange(0, 150)), sbm.subgraph(torch.arange(150, 300))]
    split_clients(subs, 0.01, 0.2, 0.2, seed=0, mode="random")
    assert all(int(s.train_mask.sum()) >= 1 for s in subs)
    split_clients(subs, 0.2, 0.4, 0.4, seed=0)
    client_seed = int(__import__("numpy").random.SeedSequence([0, 1]).generate_state(1)[0])
    assert torch.equal(subs[1].train_mask, stratified_split(subs[1].y, 0.2, 0.4, 0.4, client_seed)[0])


@pytest.mark.parametrize("params, key", [({"beta": -1}, "beta"), ({"max_order": 1}, "max_order"),
                                         ({"cmd_scale": "minmax"}, "cmd_scale"), ({"cmd_norm": "l1"}, "cmd_norm"),
                                         ({"cmd_bound": 0}, "cmd_bound"), ({"stats_mode": "test"}, "stats_mode"),
                                         ({"dropout": 1.0}, "dropout"), ({"stats_nodes": "some"}, "stats_nodes"),
                                         ({"oni_init_first": "maybe"}, "oni_init_first"), ({"lr": "fast"}, "lr"),
                                         ({"select": "test_acc"}, "select"), ({"features": "l2"}, "features")])
def test_bad_method_params_name_the_key_and_the_valid_values(params, key):
    with pytest.raises(ValueError, match=rf"fedomd: invalid method param {key}=.*valid: "):
        resolve_params(params)
    with pytest.raises(ValueError, match="unknown method param.*valid: alpha"):
        resolve_params({"gamma": 1})


def test_model_selection_names_its_valid_criteria():
    assert resolve_params({}).select == "val_acc" and resolve_params({"select": "val_loss"}).select == "val_loss"
    with pytest.raises(ValueError, match=r"invalid method param select='val_f1'; valid: val_acc, val_loss"):
        resolve_params({"select": "val_f1"})


def test_row_features_divide_each_node_by_its_own_sum_and_need_non_negative_features(sbm):
    x = torch.tensor([[1.0, 0.0, 3.0], [0.0, 0.0, 0.0], [2.0, 2.0, 0.0]])
    assert torch.equal(row_normalize(x), torch.tensor([[0.25, 0.0, 0.75], [0.0, 0.0, 0.0], [0.5, 0.5, 0.0]]))
    bag = sbm.clone()
    bag.x = (sbm.x > 0).float()                                   # bag-of-words-like, non-negative
    record, _ = run(fedomd_config(method_params={**FAST, "features": "row"}), data=bag)
    raw, _ = run(fedomd_config(), data=bag)
    assert record["config"]["method_params"]["features"] == "row"
    assert record["metrics"]["val_loss"] != raw["metrics"]["val_loss"]  # the model saw other inputs
    with pytest.raises(ValueError, match="features=row .* negative feature values; use features=raw"):
        run(fedomd_config(method_params={**FAST, "features": "row"}), data=sbm)


def test_bad_setups_are_refused_clearly(sbm):
    with pytest.raises(ValueError, match="no training node.*--split-mode random"):
        run(fedomd_config(split=(0.001, 0.2, 0.2), split_mode="stratified"), data=sbm)
    with pytest.raises(ValueError, match="fedomd does not use --layers .*ortho_layers"):
        run(fedomd_config(layers=3), data=sbm)


# --------------------------------------------------------------------------- rounds, views, protocols


def test_every_round_has_three_sequential_aggregations_of_sums(runs):
    record, setup = runs["plain"]
    names = [m.name for m in setup.federation.transcript.view(SERVER) if m.sender == client_name(0) and m.round == 1]
    assert names == ["hidden_sums", "moment_sums", "model_update"]
    up = setup.federation.transcript.view(SERVER, "hidden_sums", 1)
    sent = {m.sender: m.tensors for m in up}
    n = [c.num_nodes for c in setup.clients]
    assert [float(sent[client_name(k)]["n"]) for k in range(3)] == n  # sums with their counts, not means
    revealed = setup.federation.transcript.view(SERVER, "hidden_sums:sum", 1)[0].tensors
    broadcast = [m for m in setup.federation.transcript.view(client_name(0), "global_mean", 1)][0].tensors
    assert torch.allclose(broadcast["z1"], revealed["z1"] / sum(n))
    moments = [m for m in setup.federation.transcript.view(SERVER, "moment_sums", 1)]
    assert set(moments[0].tensors) == {f"z{l}_m{j}" for l in (1, 2, 3) for j in range(2, 6)} | {"n"}
    assert [float(m.tensors["n"]) for m in sorted(moments, key=lambda m: m.sender)] == n  # its own count


def test_server_sees_each_upload_under_plain_and_only_shares_or_ciphertexts_under_secure(runs):
    for proto, kind in (("plain", "plaintext"), ("crypten", "share"), ("ckks", "ciphertext")):
        _, setup = runs[proto]
        for name in ("hidden_sums", "moment_sums", "model_update"):
            seen = [m for m in setup.federation.transcript.view(SERVER, name, 2) if m.sender == client_name(1)]
            assert seen and all(m.kind == kind for m in seen)
            assert all((m.tensors is None) == (proto != "plain") for m in seen)
            assert setup.federation.transcript.view(SERVER, name + ":sum", 2)


def test_secure_runs_match_plain_on_the_same_seed(runs):
    plain = runs["plain"][1].federation.transcript.view(client_name(0), "global_model")[-1].tensors
    for proto in ("crypten", "ckks"):
        other = runs[proto][1].federation.transcript.view(client_name(0), "global_model")[-1].tensors
        assert max(float((plain[k] - other[k]).abs().max()) for k in plain) < 1e-5, proto
        assert abs(runs[proto][0]["metrics"]["test_acc"] - runs["plain"][0]["metrics"]["test_acc"]) < 0.005


def test_crypten_gets_32_fractional_bits_unless_the_user_sets_them():
    assert effective_protocol_params(fedomd_config(protocol="crypten")) == {"precision_bits": 32}
    assert effective_protocol_params(fedomd_config(protocol="crypten", protocol_params={"precision_bits": 20})) == \
        {"precision_bits": 20}
    assert effective_protocol_params(fedomd_config(protocol="ckks")) == {"max_abs": 2.0**16}  # finer grid


def test_metrics_are_the_macro_average_over_parties_at_the_highest_macro_validation_accuracy(runs):
    m = runs["plain"][0]["metrics"]
    assert m["test_acc"] == pytest.approx(sum(c["test_acc"] for c in m["per_client"]) / 3)
    assert m["val_acc"] == pytest.approx(sum(c["val_acc"] for c in m["per_client"]) / 3)
    best = max(m["curve"], key=lambda e: (e["val_acc"], -e["val_loss"], -e["round"]))  # ties: lower val loss
    assert m["best_round"] == best["round"] and m["val_loss"] == best["val_loss"]
    assert m["selected_by"] == "val_acc" and m["selection"].startswith("max macro val_acc")
    assert m["rounds_run"] == 3 and "test_acc_micro" in m and "test_acc_weighted" in m


def test_select_val_loss_takes_the_round_with_the_lowest_pooled_validation_loss(sbm):
    record, _ = run(fedomd_config(rounds=8, transcript="none", method_params={"patience": 0, "select": "val_loss"}),
                    data=sbm)
    m = record["metrics"]
    best = min(m["curve"], key=lambda e: (e["val_loss"], e["round"]))
    assert m["best_round"] == best["round"] and m["val_loss"] == best["val_loss"] and m["selected_by"] == "val_loss"
    assert m["test_acc"] == pytest.approx(sum(c["test_acc"] for c in m["per_client"]) / 3)


def test_the_tracker_prefers_higher_validation_accuracy_then_lower_validation_loss(sbm):
    from privfgl.methods.fedomd.selection import PartyMacroTracker
    clients = [sbm.subgraph(torch.arange(0, 150)), sbm.subgraph(torch.arange(150, 300))]
    split_clients(clients, 0.1, 0.4, 0.4, seed=0, mode="random")
    good = [torch.nn.functional.one_hot(c.y, 3).float() for c in clients]  # right on every node
    def rounds(select):
        t = PartyMacroTracker(clients, 3, patience=2, select=select)
        # r0: uniform, r1: right but unsure, r2: right and sure, r3: wrong and sure
        for r, logits in enumerate(([torch.zeros(c.num_nodes, 3) for c in clients], [0.1 * g for g in good],
                                    [5.0 * g for g in good], [-5.0 * g for g in good])):
            t.evaluate(r, logits)
        return t
    acc, loss = rounds("val_acc"), rounds("val_loss")
    assert acc.best["round"] == 2 and acc.best["val_acc"] == 1.0  # r1 and r2 tie on accuracy; r2 has the lower loss
    assert loss.best["round"] == 2 and not acc.should_stop()
    with pytest.raises(ValueError, match="unknown model selection 'test_acc'; valid: val_acc, val_loss"):
        PartyMacroTracker(clients, 3, select="test_acc")


@pytest.mark.parametrize("select", ["val_acc", "val_loss"])
def test_early_stopping_after_patience_rounds_without_a_better_selection_criterion(sbm, select):
    record, _ = run(fedomd_config(rounds=60, transcript="none", method_params={"patience": 2, "lr": 0.5,
                                                                               "select": select}), data=sbm)
    m = record["metrics"]
    assert m["stopped_early"] and m["rounds_run"] == m["best_round"] + 3 and m["rounds_run"] < 60


def test_the_same_seed_gives_the_same_run(sbm, runs):
    again, _ = run(fedomd_config(), data=sbm)
    assert again["metrics"]["curve"] == runs["plain"][0]["metrics"]["curve"]


def test_trace_prints_one_line_on_every_nth_round(sbm, capsys):
    run(fedomd_config(method_params={**FAST, "trace": 2}), data=sbm)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("fedomd round")]
    assert [line.split(":")[0] for line in lines] == ["fedomd round 0", "fedomd round 2"]
    assert all("beta*CMD" in line and "CMD by order" in line and "val_acc" in line for line in lines)


def test_cmd_off_skips_the_statistics_exchange(sbm):
    _, setup = run(fedomd_config(rounds=1, method_params={"beta": 0, "patience": 0}), data=sbm)
    assert {m.name for m in setup.federation.transcript.view(SERVER)} >= {"model_update"}
    assert not setup.federation.transcript.view(SERVER, "moment_sums")


def test_on_cora_the_moment_sums_keep_their_digits_under_crypten_and_ckks(cora, planetoid_root):
    """Real uploads (round 5 of a Cora run, 3 parties): the secure sums of the 2nd-5th moment sums
    equal the exact sums within the protocol's bound (crypten: K·2^-(p+1); ckks: its grid's), and
    every sum above 1e-3 keeps 6 significant digits under crypten with FedOMD's 32 fractional bits, 4
    under ckks with FedOMD's public range 2^16; CrypTen's default 16 bits do not keep 6."""
    cfg = RunConfig(method="fedomd", dataset="cora", partition="louvain", clients=3, rounds=6, split=(0.01, 0.2, 0.2),
                    split_mode="random", data_root=str(planetoid_root), download=False, progress=False,
                    method_params={"patience": 0})
    _, setup = run(cfg)
    uploads = [m.tensors for m in setup.federation.transcript.view(SERVER, "moment_sums", 5)]
    assert len(uploads) == 3
    from privfgl.federation.runtime import flatten
    flats = [flatten(u)[0] for u in uploads]
    exact = sum(flats)
    big = exact.abs() > 1e-3
    assert bool(big.any())
    from privfgl.methods.fedomd.params import PROTOCOL_DEFAULTS
    for name, params, relative in (("crypten", PROTOCOL_DEFAULTS["crypten"], 1e-6),
                                   ("ckks", PROTOCOL_DEFAULTS["ckks"], 1e-4)):
        with protocols.get_protocol(name, **params) as proto:
            result = proto.aggregate(flats)
        err = (result.total - exact).abs()
        assert float(err.max()) <= result.error_bound, name
        assert float((err[big] / exact[big].abs()).max()) < relative, name
    with protocols.get_protocol("crypten", precision_bits=16) as coarse:
        err16 = (coarse.aggregate(flats).total - exact).abs()
    assert float((err16[big] / exact[big].abs()).max()) > 1e-6  # why FedOMD raises CrypTen's default


def test_label_inference_reads_the_first_adam_step_of_the_last_bias_under_plain_and_only_the_sum_when_secure(runs):
    from attacks import parse_attack, run_attacks  # what `privfgl audit --attack label-inference` runs
    from attacks.uploads.fedomd_labels import fedomd_label_distribution
    from attacks.uploads.updates import client_update
    from attacks.view import adversary_view
    attack, cfg = parse_attack("label-inference:round=0"), fedomd_config()
    _, setup = runs["plain"]
    plain = {f.target: f.metrics for f in run_attacks(setup, cfg, [attack])}
    view = adversary_view(setup.federation.transcript, SERVER)
    for k, c in enumerate(setup.clients):
        assert "js" in plain[f"client{k}"]
        est = fedomd_label_distribution(client_update(view, k, 0))
        present = torch.bincount(c.y[c.train_mask], minlength=setup.num_classes) > 0
        assert bool((est > 0).any()) and not bool(((est > 0) & ~present).any())  # Δb_c > 0 only for present classes
    for proto in ("crypten", "ckks"):
        secure = {f.target: f.metrics for f in run_attacks(runs[proto][1], cfg, [attack])}
        assert all("no_input" in secure[f"client{k}"] for k in range(3))
        assert all("js" in secure[f"aggregate:client{k}"] for k in range(3))
