"""LapGraph's `select=map`: each noisy entry is kept iff its posterior probability of being an edge is >= 1/2
(Laplace likelihood, prior T̃/m from the noisy count). It is post-processing of the same release as `top`, and
nothing after the release (selection, training, validation, test) reads the true edges: the ground for
choosing among the post-processings on validation without charging ε (experiments/lapgraph_chosen_on_validation.py)."""
import math

import numpy as np
import pytest
import torch
from scipy import stats

import privfgl.methods.lapgraph.run as lapgraph_run_module
from privfgl.experiment import RunConfig, run
from privfgl.methods.lapgraph.params import resolve_params
from privfgl.methods.lapgraph.release import map_keep, release, upper_entries
from privfgl.privacy.noise import NoiseSource




@pytest.mark.parametrize("epsilon", [0.5, 2.0, 7.92])
@pytest.mark.parametrize("prior", ["client", "even"])
def test_map_keeps_exactly_the_entries_whose_posterior_is_at_least_one_half(epsilon, prior):
    """Bayes' rule with scipy's Laplace densities, written independently: P(edge | y) = π f(y − 1) / (π f(y − 1)
    + (1 − π) f(y)), π = T̃/m, f the Laplace(0, 1/ε) density. Prior "client": T̃/m = 1.5 %, a client's sparsity
    (at ε ≤ 2 no entry reaches 1/2, so the rule must keep none); "even": prior odds e^(−ε/2), where entries
    above 0.75 reach it, so both decisions are compared."""
    rng = np.random.default_rng(0)
    m = 20000
    count = 300 if prior == "client" else round(m / (1 + math.exp(epsilon / 2)))
    y = torch.from_numpy(np.concatenate([rng.uniform(-2, 3, m - 200), rng.uniform(0.4, 1.2, 200)]))
    pi = count / m
    f = stats.laplace(scale=1 / epsilon).pdf
    posterior = pi * f(y.numpy() - 1) / (pi * f(y.numpy() - 1) + (1 - pi) * f(y.numpy()))
    kept = map_keep(y, count, epsilon).numpy()
    clear = np.abs(posterior - 0.5) > 1e-9
    assert np.array_equal(kept[clear], posterior[clear] >= 0.5)
    if prior == "even":
        assert 0.1 * clear.sum() < kept[clear].sum() < 0.9 * clear.sum()  # both decisions occur


def test_map_keeps_nothing_where_no_noisy_value_outweighs_the_prior_and_everything_at_the_extremes():
    y = torch.linspace(-50, 50, 1001, dtype=torch.float64)
    m, count = y.numel(), 10
    bar = math.log((m - count) / count)  # ε_entries below it: the likelihood ratio is at most e^ε_entries
    assert not map_keep(y, count, 0.99 * bar).any()
    assert map_keep(y, count, 1.01 * bar).any()
    assert not map_keep(y, 0, 100.0).any() and map_keep(y, m, 0.01).all()


def test_top_and_map_are_two_readings_of_one_release(client):
    """Same seed: the same noisy count and the same noisy canary entries (the audit's statistic); map's edges are
    map_keep of the same noisy triangle, redone here from a twin source."""
    n, ei = int(client.num_nodes), client.edge_index
    coins = torch.from_numpy(np.random.default_rng(1).integers(0, 2, 500)).double()
    for epsilon in (1.0, 8.0):
        top = release(ei, n, resolve_params({"epsilon": epsilon, "seed": 5}), NoiseSource(5), coins)
        p = resolve_params({"epsilon": epsilon, "seed": 5, "select": "map"})
        out = release(ei, n, p, NoiseSource(5), coins)
        assert out.count == top.count and torch.equal(out.canaries, top.canaries)
        twin = NoiseSource(5)
        entries = upper_entries(ei, n)
        values = torch.cat([entries, coins])
        noisy = (values + twin.laplace(values.shape, 1 / p.epsilon_entries))[:entries.numel()]
        rows, cols = torch.triu_indices(n, n, offset=1)
        keep = map_keep(noisy, out.count, p.epsilon_entries)
        expected = set(zip(rows[keep].tolist(), cols[keep].tolist()))
        released = set(zip(out.edge_index[0].tolist(), out.edge_index[1].tolist()))
        assert released == expected | {(j, i) for i, j in expected}


def test_map_s_prior_is_the_noisy_count_not_the_true_one(client):
    """The prior T̃/m must come from the released count: |E| itself is what ε_count protects. With a small
    count share (ε_count = 0.008, noise scale 125) the two priors keep different entries, and the release
    keeps the noisy count's."""
    n, ei = int(client.num_nodes), client.edge_index
    entries = upper_entries(ei, n)
    true_count = int(entries.sum())
    differ = 0
    for seed in range(6):
        p = resolve_params({"epsilon": 8.0, "count_share": 0.001, "seed": seed, "select": "map"})
        out = release(ei, n, p, NoiseSource(seed))
        twin = NoiseSource(seed)
        noisy = entries + twin.laplace(entries.shape, 1 / p.epsilon_entries)
        by_noisy = int(map_keep(noisy, out.count, p.epsilon_entries).sum())
        by_true = int(map_keep(noisy, true_count, p.epsilon_entries).sum())
        assert out.edge_index.shape[1] == 2 * by_noisy
        differ += by_noisy != by_true
    assert differ >= 3  # the two priors are told apart by the release on most draws


def test_map_is_empty_at_epsilon_one_and_close_to_the_true_graph_at_epsilon_eight(client):
    """Client 0 (271 nodes, 36,585 pairs): at ε = 1, ε_entries = 0.99 < log((m − T̃)/T̃) ≈ 4.4, so no entry
    can reach posterior 1/2; at ε = 8 most true edges are kept and few false ones."""
    n, ei = int(client.num_nodes), client.edge_index
    true = set(zip(*ei.tolist()))
    low = release(ei, n, resolve_params({"epsilon": 1.0, "seed": 0, "select": "map"}), NoiseSource(0))
    assert low.edge_index.shape[1] == 0
    high = release(ei, n, resolve_params({"epsilon": 8.0, "seed": 0, "select": "map"}), NoiseSource(0))
    kept = set(zip(*high.edge_index.tolist()))
    assert len(kept & true) / len(true) > 0.8 and len(kept - true) / len(kept) < 0.2
    huge = release(ei, n, resolve_params({"epsilon": 1e7, "seed": 0, "select": "map"}), NoiseSource(0))
    assert set(zip(*huge.edge_index.tolist())) == true


@pytest.mark.parametrize("settings", [{"select": "map", "epsilon": 8.0}, {"select": "top", "epsilon": 2.0}])
def test_nothing_after_the_release_reads_the_true_edges(planetoid_root, monkeypatch, settings):
    """Each client's true edge_index is replaced by a random graph right after its release: the run (every
    round's train, validation and test accuracy) is unchanged. So selection, training and the validation
    accuracy that chooses among post-processings are functions of the release, features and labels only."""
    def runs(corrupt: bool):
        real = lapgraph_run_module.release

        def release_then_corrupt(edge_index, n, p, source, canaries=None):
            out = real(edge_index, n, p, source, canaries)
            if corrupt:
                edge_index.copy_(torch.randint(0, n, edge_index.shape, generator=torch.Generator().manual_seed(n)))
            return out
        monkeypatch.setattr(lapgraph_run_module, "release", release_then_corrupt)
        cfg = RunConfig(method="lapgraph", dataset="cora", partition="louvain", clients=10, rounds=3, local_epochs=1,
                        model="sage", data_root=str(planetoid_root), download=False, progress=False,
                        method_params={"seed": 3, **settings})
        record, setup = run(cfg)
        return record, setup
    clean, _ = runs(False)
    corrupted, setup = runs(True)
    assert corrupted["metrics"]["curve"] == clean["metrics"]["curve"]
    assert corrupted["metrics"]["val_acc"] == clean["metrics"]["val_acc"]
    assert clean["privacy"]["dp"]["select"] == settings["select"]


def test_a_corrupted_true_graph_would_be_seen_by_a_run_that_read_it(planetoid_root, monkeypatch):
    """The check above can fail: corrupting the true edges *before* the release changes the run."""
    real = lapgraph_run_module.release

    def corrupt_then_release(edge_index, n, p, source, canaries=None):
        edge_index.copy_(torch.randint(0, n, edge_index.shape, generator=torch.Generator().manual_seed(n)))
        return real(edge_index, n, p, source, canaries)
    cfg = dict(method="lapgraph", dataset="cora", partition="louvain", clients=10, rounds=3, local_epochs=1,
               model="sage", data_root=str(planetoid_root), download=False, progress=False,
               method_params={"seed": 3, "select": "map", "epsilon": 8.0})
    clean, _ = run(RunConfig(**cfg))
    monkeypatch.setattr(lapgraph_run_module, "release", corrupt_then_release)
    corrupted, _ = run(RunConfig(**cfg))
    assert corrupted["metrics"]["curve"] != clean["metrics"]["curve"]
