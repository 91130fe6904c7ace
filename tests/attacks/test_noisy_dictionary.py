"""Tiny DP noise must not hide a leak: the dictionary attack reads the noise level off a noised
update and groups equal gradient rows up to that noise, so that a meaningless ε (σ = 1e-4) does
not look like protection."""
from __future__ import annotations

import math

import numpy as np
import pytest

from attacks import parse_attack, run_attacks
from attacks.audit import public_knowledge
from attacks.uploads.gradient_inversion import equal_row_groups, row_noise_norm
from privfgl.experiment import run

from attack_cases import fedavg_config


def noisy_word_rows(sigma: float, seed: int = 0, hidden: int = 64, nodes: int = 20, words_per_node: int = 8,
                    silent_words: int = 200):
    """Gradient rows [w, hidden]: each node's words share one row (its signature, norm 1-3), plus
    words no training node holds (clean row 0), plus N(0, σ²) on every entry."""
    rng = np.random.default_rng(seed)
    signatures = rng.normal(size=(nodes, hidden))
    signatures *= rng.uniform(1, 3, size=(nodes, 1)) / np.linalg.norm(signatures, axis=1, keepdims=True)
    clean = np.concatenate([np.repeat(signatures, words_per_node, axis=0), np.zeros((silent_words, hidden))])
    return clean + sigma * rng.normal(size=clean.shape), signatures


def test_the_noise_norm_is_read_off_the_rows_no_training_node_touches():
    for sigma in (1e-4, 1e-2):
        rows, _ = noisy_word_rows(sigma)
        assert row_noise_norm(rows) == pytest.approx(math.sqrt(64) * sigma, rel=0.2)


def test_noisy_copies_of_one_signature_are_grouped_once_the_noise_is_known():
    rows, signatures = noisy_word_rows(sigma=0.02)
    active = rows[np.linalg.norm(rows, axis=1) > row_noise_norm(rows)]
    assert len(equal_row_groups(active, min_cosine=0.999, norm_gap=0.011)) < 5  # exact equality: lost to noise
    groups = equal_row_groups(active, min_cosine=0.999, norm_gap=0.011, noise_norm=row_noise_norm(rows))
    assert len(groups) == len(signatures)
    best = np.max(np.stack(groups) @ signatures.T
                  / np.outer(np.linalg.norm(groups, axis=1), np.linalg.norm(signatures, axis=1)), axis=0)
    assert best.min() > 0.99  # every node's signature is recovered, denoised by the group mean


def test_without_noise_the_grouping_is_unchanged():
    rows, signatures = noisy_word_rows(sigma=0.0)
    active = rows[np.linalg.norm(rows, axis=1) > 0]
    plain = equal_row_groups(active, min_cosine=0.999, norm_gap=0.011)
    assert len(plain) == len(signatures)
    assert all(np.array_equal(a, b) for a, b in zip(plain, equal_row_groups(active, 0.999, 0.011, noise_norm=0.0)))


@pytest.fixture(scope="module")
def tiny_noise_run(bow_graph):
    # Seeded noise, so the test is the same every run (the attack does not use the seed). Over noise
    # seeds 0-11 the mean score below was 0.854-0.912 against the bar of 0.833; OS noise once gave 0.832.
    cfg = fedavg_config(method="dp-fedavg", lr=0.5, dp="gaussian:sigma=0.0001,clip=1.0,on=update,mode=local,seed=0")
    _, setup = run(cfg, data=bow_graph)
    return cfg, setup


def test_the_public_dp_spec_tells_the_attack_which_uploads_are_noised(tiny_noise_run, plain_fedavg_setup):
    assert public_knowledge(*reversed(tiny_noise_run)).noised_messages == ("model_update",)
    assert public_knowledge(*reversed(plain_fedavg_setup)).noised_messages == ()


def test_a_meaningless_epsilon_does_not_hide_the_features(tiny_noise_run, plain_fedavg_setup):
    scores = {}
    for name, (cfg, setup) in (("dp", tiny_noise_run), ("plain", plain_fedavg_setup)):
        found = run_attacks(setup, cfg, [parse_attack("gradient-inversion:variant=dictionary,clients=0+2")])
        scores[name] = [f.metrics["auc_per_feature"] for f in found if not f.target.startswith("aggregate")]
    assert min(scores["dp"]) >= 0.7  # as on plain updates (test_attacks: >= 0.7; baseline < 0.65)
    assert sum(scores["dp"]) / 2 >= sum(scores["plain"]) / 2 - 0.05


@pytest.fixture(scope="module")
def plain_fedavg_setup(bow_graph):
    cfg = fedavg_config(method="fedavg", lr=0.5)
    _, setup = run(cfg, data=bow_graph)
    return cfg, setup


def test_noise_handling_is_an_option_with_a_clear_error():
    assert parse_attack("gradient-inversion:variant=dictionary,noise=ignore").noise == "ignore"
    with pytest.raises(ValueError, match="noise 'off'.*auto, ignore"):
        parse_attack("gradient-inversion:variant=dictionary,noise=off")


def test_ignoring_the_noise_is_the_exact_equality_attack(tiny_noise_run):
    cfg, setup = tiny_noise_run
    spec = "gradient-inversion:variant=dictionary,clients=0+2"
    auto = run_attacks(setup, cfg, [parse_attack(spec)])
    blind = run_attacks(setup, cfg, [parse_attack(spec + ",noise=ignore")])
    rows = lambda found: [f.metrics["recovered_rows"] for f in found if not f.target.startswith("aggregate")]
    assert rows(auto) != rows(blind)
