"""`split-decoder`: features decoded from FedGPL's downlink (M2 embeddings, M4 feature gradients) by a
decoder trained on declared public graphs run through the server's trunk. Without DP it beats the
population-mean baseline and re-identifies samples and nodes above chance; under strong Laplace
noise on M1 it falls to its baselines; on a noised run it does not beat the M1 attack
(post-processing); and it reads nothing but the downlink messages and its declared aux."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from attacks import AdversaryView, adversary_view, parse_attack, public_knowledge, run_attacks
from attacks.base import NoInput
from attacks.split.split_decoder import SplitDecoder, simulate
from privfgl.experiment import RunConfig, run
from privfgl.methods.fedgpl.split import M2, M4
from tests.view_checks import reachable

SMALL = {"dim": 16, "hidden": 16, "max_per_class": 24, "pretrain_epochs": 1}
CLIENTS = 3


def fedgpl(graph, dp: str | None = None):
    cfg = RunConfig(method="fedgpl", dataset="sbm", partition="tasks", clients=CLIENTS, rounds=2, dp=dp,
                    method_params=SMALL, transcript="last", progress=False)
    return cfg, run(cfg, data=graph)[1]


def mean(findings, key, side="metrics"):
    return sum(getattr(f, side)[key] for f in findings) / len(findings)


def attack(cfg, setup, spec):
    return run_attacks(setup, cfg, [parse_attack(spec)])


@pytest.fixture(scope="module")
def clear(graph):
    return fedgpl(graph)


@pytest.fixture(scope="module")
def drowned(graph):  # Laplace scale 20 on rows of L1 norm <= 1
    return fedgpl(graph, "laplace:epsilon=0.05,clip=1.0,on=m1,mode=local,seed=5")


@pytest.fixture(scope="module")
def moderate(graph):  # scale 0.1: the M1 attack still reads the samples' mean features
    return fedgpl(graph, "laplace:epsilon=10,clip=1.0,on=m1,mode=local,seed=5")


def test_the_m2_decoder_beats_the_population_mean_and_reidentifies_samples_without_dp(clear):
    found = attack(*clear, "split-decoder:message=m2")
    assert len(found) == CLIENTS and all(f.metrics["samples_scored"] > 10 for f in found)
    assert mean(found, "sample_cosine") > mean(found, "sample_cosine", "baseline") + 0.2
    assert mean(found, "sample_reid_auc") > 0.65                    # chance: 0.5
    assert mean(found, "public_cosine") > 0.7                        # it inverts the trunk on held-out public pairs


def test_the_m4_decoder_reidentifies_nodes_above_chance_without_dp(clear):
    found = attack(*clear, "split-decoder:message=m4")
    assert mean(found, "cosine") > mean(found, "cosine", "baseline")
    assert mean(found, "cosine") > mean(found, "cosine_aux", "baseline")
    assert mean(found, "reid_auc") > 0.55 and mean(found, "reid_auc") > mean(found, "reid_auc_aux", "baseline")


def test_public_prior_features_still_decode_m2(clear):
    found = attack(*clear, "split-decoder:message=m2,public=prior")
    assert mean(found, "sample_cosine") > mean(found, "sample_cosine", "baseline") + 0.1


def test_under_strong_m1_noise_the_decoders_fall_to_their_baselines(drowned):
    m2 = attack(*drowned, "split-decoder:message=m2")
    assert mean(m2, "sample_reid_auc") < 0.6
    best_constant = max(mean(m2, "sample_cosine", "baseline"), mean(m2, "sample_cosine_aux", "baseline"))
    assert mean(m2, "sample_cosine") < best_constant + 0.05
    m4 = attack(*drowned, "split-decoder:message=m4")
    assert mean(m4, "reid_auc") < 0.6


@pytest.mark.parametrize("run_name", ["drowned", "moderate"])
def test_the_m2_decoder_does_not_beat_the_m1_attack_on_the_same_noised_run(run_name, request):
    # post-processing: M2 = trunk(noised M1). The bound is on the best attack on M1, which is at least
    # as good as split-features and as the baselines (the M1 attack does not shrink towards the prior:
    # under drowning noise its cosine falls below the population mean's)
    cfg, setup = request.getfixturevalue(run_name)
    m1 = attack(cfg, setup, "split-features")
    m2 = attack(cfg, setup, "split-decoder:message=m2")
    assert mean(m2, "sample_reid_auc") <= max(mean(m1, "sample_reid_auc"), 0.5) + 0.05
    best_m1 = max(mean(m1, "sample_cosine"), mean(m2, "sample_cosine", "baseline"),
                  mean(m2, "sample_cosine_aux", "baseline"))
    assert mean(m2, "sample_cosine") <= best_m1 + 0.05
    if run_name == "moderate":  # both informative here: the comparison has content
        assert mean(m1, "sample_reid_auc") > 0.75 and mean(m2, "sample_reid_auc") < mean(m1, "sample_reid_auc")


class Spy(SplitDecoder):
    """Records what the adversary side receives, then attacks as usual."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.received = []

    def attack(self, view, aux):
        self.received.append((view, aux))
        return super().attack(view, aux)


@pytest.mark.parametrize("message, name", [("m2", M2), ("m4", M4)])
def test_the_attack_reads_only_the_downlink_and_its_declared_aux(clear, message, name):
    cfg, setup = clear
    spy = Spy(message=message, clients=[0], steps=100)
    found, = run_attacks(setup, cfg, [spy])
    (view, aux), = spy.received
    # the aux: copies only, no client's sample graph, no object of the run
    samples = setup.extras["fedgpl_samples"]
    private = {t.untyped_storage().data_ptr() for s in samples for g in s.graphs
               for t in (g.x, g.edge_index, g.node_ids)}
    server_trunk = setup.extras["fedgpl_trunk"]
    shared = {p.untyped_storage().data_ptr() for p in server_trunk.parameters()}
    for o in reachable([view, aux]):
        assert o is not setup and o is not setup.federation and o is not server_trunk and o is not samples
        if isinstance(o, torch.Tensor):
            assert o.untyped_storage().data_ptr() not in private | shared, "a tensor shares memory with the run"
    own = samples[0].graphs
    assert aux.graphs and not any(x.shape == g.x.shape and torch.equal(x, g.x) for x, _, _ in aux.graphs for g in own)
    # the downlink alone gives the same reconstruction: M1 and M3 are never read
    downlink = AdversaryView(view.party, tuple(m for m in view.messages if m.name == name))
    again = spy.attack(downlink, aux)
    first = Spy(message=message, clients=[0], steps=100).attack(view, aux)
    for key in ("sample_features",) if message == "m2" else ("features", "rows"):
        assert torch.equal(again[key], first[key])
    # and without it there is no input
    with pytest.raises(NoInput, match=f"no plaintext {name}"):
        spy.attack(AdversaryView(view.party, tuple(m for m in view.messages if m.name != name)), aux)
    assert found.details["adversary"] == "server"


def test_the_decoder_simulates_the_public_dp_noise(moderate):
    cfg, setup = moderate
    attack_ = SplitDecoder(clients=[0])
    aux = attack_.declare_aux(setup, public_knowledge(setup, cfg), "client0")
    assert set(aux.noise) == {"prompted_graph"} and aux.noise["prompted_graph"].scale == pytest.approx(0.1)
    clean = replace(aux, noise={})
    assert adversary_view(setup.federation.transcript).find(M2)  # the view holds M2 rows to decode
    with torch.random.fork_rng():  # the trunk's dropout draws from the global generator
        torch.manual_seed(0)
        noisy = simulate(aux, torch.Generator().manual_seed(0))
        torch.manual_seed(0)
        plain = simulate(clean, torch.Generator().manual_seed(0))
    assert noisy[0].shape == plain[0].shape and not torch.allclose(noisy[0], plain[0])
    assert torch.equal(noisy[1][:16], plain[1][:16])  # the first batch: the same targets, only H carries the noise


@pytest.mark.parametrize("spec, message", [
    ("split-decoder:message=m3", "message='m3'; valid: m2, m4"),
    ("split-decoder:public=mine", "public='mine'; valid: others, prior"),
    ("split-decoder:prompt=exact", "prompt='exact'; valid: mixed, initial, random"),
])
def test_bad_settings_name_what_is_valid(spec, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        parse_attack(spec)
