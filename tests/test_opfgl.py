"""O-pFGL: client statistics, Eq. 9 from sums, HRE, params, the server's view per protocol, Cora."""
import math

import pytest
import torch
from torch_geometric.utils import to_undirected

from privfgl.data import contextual_sbm
from privfgl.experiment import RunConfig, run
from privfgl.federation import SERVER, client_name
from privfgl.methods.opfgl_params import PRESET_PARTITION_SEED, PRESETS, resolve_params
from privfgl.methods.opfgl_stats import (class_homophily, class_sums, degrees, distill_factor, label_propagation,
                                         node_homophily, pooled_statistics, reliable_nodes)

# Small iteration counts: the mechanics, not the accuracy (the Cora test checks that).
FAST = {"condense_iters": 60, "max_iters": 200, "eval_every": 50, "patience": 2, "lr_stage1": 1e-2,
        "lr_stage2": 1e-2, "hre_k": 1, "f_th": 0.9}


@pytest.fixture(autouse=True)
def _partition_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("PRIVFGL_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def random_graph(n=60, classes=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, n, (2, 3 * n), generator=g)
    ei = to_undirected(ei[:, ei[0] != ei[1]])
    y = torch.randint(0, classes, (n,), generator=g)
    return ei, y, torch.rand(n, generator=g) < 0.4, g


def test_class_sums_equal_a_direct_per_class_computation():
    _, y, members, g = random_graph()
    xp = torch.rand(60, 5, generator=g)
    n_orig = torch.bincount(y, minlength=4)
    members[(y == 3).nonzero().view(-1)[1:]] = False  # class 3: at most one member -> below the threshold
    s = class_sums(xp, y, members, n_orig, 4, min_count=2)
    for c in range(4):
        rows = xp[members & (y == c)].double()
        if rows.shape[0] >= 2:
            assert int(s.n[c]) == rows.shape[0] and int(s.b[c]) == 1 and int(s.n_orig[c]) == int(n_orig[c])
            assert torch.allclose(s.s1[c], rows.sum(0)) and torch.allclose(s.s2[c], (rows ** 2).sum(0))
        else:
            assert int(s.n[c]) == int(s.b[c]) == int(s.n_orig[c]) == 0
            assert not s.s1[c].any() and not s.s2[c].any()
    assert s.n.dtype == s.b.dtype == s.n_orig.dtype == torch.int64


def test_eq9_from_sums_equals_the_papers_formula():
    g = torch.Generator().manual_seed(1)
    sizes = {0: [5, 3, 0, 7], 1: [2, 0, 0, 4]}  # class -> per-client counts (0: the client lacks it)
    data = {c: [torch.rand(n, 6, generator=g).double() * 3 for n in ns] for c, ns in sizes.items()}
    counts = {"n": torch.tensor([15, 6]), "b": torch.tensor([3, 2]), "n_orig": torch.tensor([15, 6])}
    sums = {"S1": torch.stack([torch.cat(data[c]).sum(0) for c in (0, 1)]),
            "S2": torch.stack([(torch.cat(data[c]) ** 2).sum(0) for c in (0, 1)])}
    paper = pooled_statistics(counts, sums, "paper")
    exact = pooled_statistics(counts, sums, "exact")
    for c in (0, 1):
        parts = [x for x in data[c] if x.shape[0]]
        n_k = torch.tensor([x.shape[0] for x in parts]).double()[:, None]
        mu_k = torch.stack([x.mean(0) for x in parts])
        s2_k = torch.stack([x.var(0, unbiased=True) for x in parts])
        big_n, m = n_k.sum(), len(parts)
        mu = (n_k * mu_k).sum(0) / big_n
        eq9 = ((n_k - 1) * s2_k + n_k * (mu_k - mu) ** 2).sum(0) / (big_n - m)
        assert torch.allclose(paper.mean[c], mu) and torch.allclose(paper.var[c], eq9)
        assert torch.allclose(exact.var[c], torch.cat(parts).var(0, unbiased=True))


def test_pooled_variance_is_clamped_and_min_contributors_withholds_classes():
    counts = {"n": torch.tensor([4, 6, 0]), "b": torch.tensor([1, 3, 0]), "n_orig": torch.tensor([4, 6, 0])}
    sums = {"S1": torch.tensor([[4.0], [6.0], [0.0]]), "S2": torch.tensor([[4.0 - 1e-12], [7.0], [0.0]])}
    s = pooled_statistics(counts, sums, min_contributors=2)
    assert s.present.tolist() == [False, True, False]
    assert float(s.var.min()) >= 0 and int(s.counts[0]) == 0 and not s.mean[0].any()
    assert float(pooled_statistics(counts, sums).var[0, 0]) == 0.0  # cancellation below 0 -> 0


def test_node_and_class_homophily_and_the_distillation_factor():
    # path 0-1-2-3, all labelled except 3; labels 0,0,1,1
    ei = to_undirected(torch.tensor([[0, 1, 2], [1, 2, 3]]))
    y = torch.tensor([0, 0, 1, 1])
    train = torch.tensor([True, True, True, False])
    h = node_homophily(y, train, ei)
    assert h.tolist() == [1.0, 0.5, 0.0, 0.0]  # node 2's only labelled neighbour (1) differs; 3 unlabelled
    big_h = class_homophily(y, train, ei, 2)
    assert big_h.tolist() == [1.5, 0.0]
    assert torch.allclose(distill_factor(big_h), torch.tensor([1 / (1 + math.log(2.5)), 1.0], dtype=torch.float64))


def test_label_propagation_is_clamped_and_fills_unreached_rows_uniformly():
    ei = to_undirected(torch.tensor([[0, 1], [1, 2]]))  # 0-1-2 and an isolated node 3
    y = torch.tensor([0, 0, 1, 1])
    out = label_propagation(y, torch.tensor([True, False, False, False]), ei, 2, iters=2, alpha=0.9)
    assert float(out.min()) >= 0 and float(out.max()) <= 1
    assert out[3].tolist() == [0.5, 0.5] and out[1, 0] > 0 and out[1, 1] == 0


@pytest.mark.parametrize("k, f_th, d_th", [(1, 0.95, 0), (2, 0.6, 3), (1, 1.0, 5), (0, 0.5, 0)])
def test_hre_selects_exactly_the_nodes_that_pass_every_criterion(k, f_th, d_th):
    ei, y, train, _ = random_graph(n=200, classes=3, seed=2)
    soft = label_propagation(y, train, ei, 3, iters=2, alpha=0.9)
    big_h = class_homophily(y, train, ei, 3)
    deg = degrees(ei, 200)
    mask = reliable_nodes(soft, train, deg, big_h, k, f_th, d_th)
    conf, pred = (soft / soft.sum(1, keepdim=True)).max(1)
    top = set(torch.sort(-big_h, stable=True).indices[:k].tolist())
    expected = [bool(not train[i] and conf[i] >= f_th and int(pred[i]) in top and (d_th == 0 or deg[i] >= d_th))
                for i in range(200)]
    assert mask.tolist() == expected
    if k == 0:
        assert not mask.any()


def test_bad_method_params_name_the_key_and_the_valid_values():
    with pytest.raises(ValueError, match=r"unknown method param\(s\) nope; valid: preset, hops"):
        resolve_params({"nope": 1})
    with pytest.raises(ValueError, match=r"preset='cora'.*valid: cora-louvain\+"):
        resolve_params({"preset": "cora"})
    with pytest.raises(ValueError, match=r"var_denominator='n-1'; valid: paper, exact"):
        resolve_params({"var_denominator": "n-1"})
    with pytest.raises(ValueError, match=r"f_th=1.5; valid: a number in \[0, 1\]"):
        resolve_params({"f_th": 1.5})
    with pytest.raises(ValueError, match=r"hops='two'; valid: an integer"):
        resolve_params({"hops": "two"})
    with pytest.raises(ValueError, match=r"distill='maybe'; valid: true or false"):
        resolve_params({"distill": "maybe"})
    p = resolve_params({"preset": "cora-louvain+", "d_th": "5", "distill": "false"})
    assert (p.hre_k, p.f_th, p.d_th, p.distill, p.patience) == (1, 1.0, 5, False, 10)
    assert set(PRESETS) >= {"cora-louvain+", "cora-metis+", "citeseer-louvain+", "citeseer-metis+"}


@pytest.fixture(scope="module")
def sbm():
    return contextual_sbm(num_nodes=300, num_classes=3, num_features=16, homophily=0.85, seed=0)


def sbm_run(data, protocol="plain", **params):
    cfg = RunConfig(method="opfgl", dataset="sbm", partition="louvain", clients=3, rounds=1, seed=0, protocol=protocol,
                    method_params={**FAST, **params}, progress=False)
    return run(cfg, data=data)


def test_bad_setups_are_refused_clearly(sbm):
    with pytest.raises(ValueError, match="rounds=5; O-pFGL is one-shot"):
        run(RunConfig(method="opfgl", dataset="sbm", partition="louvain", clients=3, rounds=5, progress=False), data=sbm)
    with pytest.raises(ValueError, match="model 'sage' is not supported; valid: gcn"):
        run(RunConfig(method="opfgl", dataset="sbm", partition="louvain", clients=3, rounds=1, model="sage",
                      progress=False), data=sbm)


@pytest.fixture(scope="module")
def runs(sbm):
    return {proto: sbm_run(sbm, proto) for proto in ("plain", "ckks", "crypten")}


def revealed(setup, name):
    for party in (SERVER, client_name(0)):
        seen = setup.federation.transcript.view(party, name=name + ":sum")
        if seen:
            return seen[0].tensors
    raise AssertionError(f"nobody observed {name}:sum")


def test_revealed_statistics_equal_plain_within_the_protocols_bound(runs):
    plain = revealed(runs["plain"][1], "class_stats")
    for proto in ("ckks", "crypten"):
        other = revealed(runs[proto][1], "class_stats")
        for name in ("S1", "S2"):
            assert torch.allclose(other[name], plain[name], atol=1e-4, rtol=0), (proto, name)
        counts = revealed(runs[proto][1], "class_counts")
        assert all(torch.equal(counts[n], revealed(runs["plain"][1], "class_counts")[n]) for n in counts)
        assert abs(runs[proto][0]["metrics"]["test_acc"] - runs["plain"][0]["metrics"]["test_acc"]) <= 0.005


def test_server_sees_each_upload_under_plain_and_only_aggregates_under_secure_protocols(runs):
    _, setup = runs["plain"]
    uploads = setup.federation.transcript.view(SERVER, name="class_stats")
    assert [m.sender for m in uploads] == [client_name(k) for k in range(3)]
    assert all(m.kind == "plaintext" and set(m.tensors) == {"S1", "S2"} for m in uploads)
    for proto in ("ckks", "crypten"):
        record, setup = runs[proto]
        view = setup.federation.transcript.view(SERVER)
        from_clients = [m for m in view if m.sender != SERVER]
        assert from_clients and all(m.tensors is None and m.kind in ("ciphertext", "share") for m in from_clients)
        with_payload = {m.name for m in view if m.tensors is not None}
        assert with_payload == {"class_stats:sum", "class_counts:sum"}, proto
        assert all(b > 0 for b in record["cost"]["bytes_up_per_client"])
    # counts went through BFV under ckks: their ciphertext is a separate message per client
    assert len(runs["ckks"][1].federation.transcript.view(SERVER, name="class_counts")) == 3


def test_the_record_holds_the_final_personalised_models_and_the_pseudo_graph_is_broadcast(runs):
    record, setup = runs["plain"]
    m = record["metrics"]
    assert m["best_stage"] == "stage2" and len(m["curve"]) == 1 and m["test_acc"] > 0.5
    (graph,) = setup.federation.transcript.view(client_name(1), name="pseudo_graph")
    assert graph.tensors["x"].shape == (3, 16) and graph.tensors["y"].tolist() == [0, 1, 2]
    assert {"condense", "stage1", "stage2", "client_stats"} <= set(record["time"]["phases"])


def test_server_efficient_variant_reveals_the_sums_to_clients_only(sbm):
    record, setup = sbm_run(sbm, "ckks", server_efficient=True)
    transcript = setup.federation.transcript
    assert all(m.tensors is None for m in transcript.view(SERVER))
    assert transcript.view(client_name(2), name="class_stats:sum")[0].tensors is not None
    assert transcript.view(client_name(0), name="pseudo_graph") == []
    assert 0 < record["metrics"]["test_acc"] <= 1


def test_the_same_seed_gives_the_same_run(sbm, runs):
    again, _ = sbm_run(sbm, "plain")
    assert again["metrics"]["per_client"] == runs["plain"][0]["metrics"]["per_client"]


def test_cora_louvain_plus_reaches_the_papers_range(planetoid_root):
    # Preset with halved schedules to keep the suite short; the full preset: experiments/reproduce_opfgl.py.
    cfg = RunConfig(method="opfgl", dataset="cora", partition="louvain+", clients=10, rounds=1, seed=0,
                    partition_seed=PRESET_PARTITION_SEED, data_root=str(planetoid_root), download=False,
                    progress=False, protocol="ckks",
                    method_params={"preset": "cora-louvain+", "condense_iters": 1500, "max_iters": 1500})
    record, setup = run(cfg)
    assert record["metrics"]["test_acc"] >= 0.68 and record["metrics"]["test_f1_macro"] >= 0.45
    (upload,) = [m for m in setup.federation.transcript.view(SERVER, name="class_stats") if m.sender == "client0"]
    assert upload.kind == "ciphertext" and upload.tensors is None
    assert len(record["cost"]["bytes_up_per_client"]) == 10
