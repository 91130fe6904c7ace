"""`gradient-inversion` on FedSpray's encoder upload and FedOMD's model upload (attacks.uploads.method_uploads):
both beat their trivial baselines on plain runs; under a secure protocol no client's upload is an
input and only the revealed sums are attacked."""
from __future__ import annotations

import pytest
import torch

from attacks import parse_attack, run_attacks
from attacks.uploads.method_uploads import FedSprayEncoderInversion, adam_first_step_gradient
from privfgl.experiment import RunConfig, run


def findings(setup, cfg, spec="gradient-inversion"):
    return {f.target: f for f in run_attacks(setup, cfg, [parse_attack(spec)])}


def fedspray_config(**kw):
    settings = dict(method="fedspray", dataset="bow", partition="louvain", clients=3, rounds=1, split=(0.4, 0.3, 0.3),
                    transcript="all", progress=False)
    settings.update(kw)
    return RunConfig(**settings)


def fedomd_config(**kw):
    settings = dict(method="fedomd", dataset="bow", partition="louvain", clients=3, rounds=1, split=(0.05, 0.2, 0.2),
                    split_mode="random", transcript="all", progress=False)
    settings.update(kw)
    return RunConfig(**settings)


@pytest.fixture(scope="module")
def fedspray_runs(bow_graph):
    out = {}
    for protocol in ("plain", "crypten"):
        cfg = fedspray_config(protocol=protocol)
        out[protocol] = (cfg, run(cfg, data=bow_graph)[1])
    return out


@pytest.fixture(scope="module")
def fedomd_runs(bow_graph):
    out = {}
    for protocol in ("plain", "crypten"):
        cfg = fedomd_config(protocol=protocol)
        out[protocol] = (cfg, run(cfg, data=bow_graph)[1])
    return out


def test_fedspray_encoder_update_gives_up_the_labelled_nodes_rows_and_labels(fedspray_runs):
    cfg, setup = fedspray_runs["plain"]
    out = findings(setup, cfg)
    for k in range(3):
        m, b = out[f"client{k}"].metrics, out[f"client{k}"].baseline
        assert m["variant"] == "sign-dictionary" and b["auc_per_feature"] < 0.65
        assert m["word_set_precision"] == 1.0 and m["word_set_recall"] == 1.0  # the moved columns are the words held
        assert m["auc_per_feature"] >= 0.8 and m["f1_at_density"] > b["f1_at_density"]
        assert m["label_count_error"] == 0  # weight·N of the plain proxy upload
        assert m["label_acc"] > b["label_acc"]


def test_secure_fedspray_leaves_only_the_revealed_encoder_sum(fedspray_runs):
    cfg, setup = fedspray_runs["crypten"]
    out = findings(setup, cfg)
    assert all("no_input" in out[f"client{k}"].metrics for k in range(3))
    assert all("auc_per_feature" in out[f"aggregate:client{k}"].metrics for k in range(3))


def test_adams_first_step_keeps_the_gradient_magnitude_in_its_epsilon():
    # −lr·g'/(|g'| + ε) is not a pure sign: |g'| = ε·r/(1 − r) with r = |Δ|/lr, to float32 precision
    g = torch.Generator().manual_seed(0)
    w = torch.nn.Parameter(0.03 * torch.randn(64, 50, generator=g))
    grad = 1e-5 * torch.randn(64, 50, generator=g) * (torch.rand(64, 50, generator=g) < 0.5)
    before = w.detach().clone()
    opt = torch.optim.Adam([w], lr=0.01, weight_decay=1e-4)
    w.grad = grad.clone()
    opt.step()
    est = adam_first_step_gradient(before, w.detach(), 0.01, 1e-4)
    assert float((est - grad).abs().max()) < 0.05 * float(grad.abs().max())
    assert bool((est[grad == 0].abs() < 1e-7).all())


def test_fedomd_first_adam_step_shows_which_words_the_client_holds(fedomd_runs):
    cfg, setup = fedomd_runs["plain"]
    out = findings(setup, cfg)
    for k in range(3):
        m, b = out[f"client{k}"].metrics, out[f"client{k}"].baseline
        assert m["variant"] == "adam-eps"
        assert m["detected_precision"] == 1.0 > b["detected_precision"]  # an absent word's gradient is exactly 0
        assert m["overrep_auc"] > b["overrep_auc"] + 0.15  # the words the client holds more often than the population


def test_secure_fedomd_leaves_only_the_revealed_model_sum(fedomd_runs):
    cfg, setup = fedomd_runs["crypten"]
    out = findings(setup, cfg)
    assert all("no_input" in out[f"client{k}"].metrics for k in range(3))
    assert all(out[f"aggregate:client{k}"].metrics["variant"] == "deviation" for k in range(3))


def test_on_cora_fedspray_clients_lose_their_labelled_rows_and_labels(cora):
    # Issue setting (Louvain+, 10 clients, 40/30/30, one round): the plain encoder update of clients 0-2
    cfg = RunConfig(method="fedspray", dataset="cora", partition="louvain+", clients=10, rounds=1,
                    split=(0.4, 0.3, 0.3), transcript="all", progress=False)
    _, setup = run(cfg, data=cora)
    class ClientsOnly(FedSprayEncoderInversion):  # the per-client targets (scoring the pooled aggregate is slow)
        def targets(self, view, knowledge, num_clients):
            return ["client0", "client1", "client2"]
    out = {f.target: f for f in run_attacks(setup, cfg, [ClientsOnly()])}
    scores = [out[f"client{k}"].metrics for k in range(3)]
    assert sum(m["auc_per_feature"] for m in scores) / 3 >= 0.9  # marginals: 0.5
    assert all(m["label_count_error"] == 0 and m["label_acc"] >= 0.85 for m in scores)
