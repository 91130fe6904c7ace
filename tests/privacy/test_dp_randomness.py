"""Where DP randomness comes from (issue #15): noise and DP-FedAvg's sampling coins come from OS
entropy unless a seed is asked for explicitly; an explicit seed reproduces them and the record warns
that ε then holds only against an adversary who does not know it; DP-FedAvg claims amplification by
sampling only where the protocol hides who took part."""
import numpy as np
import pytest
import torch
from scipy import stats

import protocols
from privfgl.data import client_subgraphs, contextual_sbm, partition_nodes, split_clients
from privfgl.errors import ConfigError
from privfgl.experiment import RunConfig, run
from privfgl.federation import SERVER, Federation, Transcript
from privfgl.federation.client_steps import ClientSteps
from privfgl.methods.opfgl import dp as opfgl_dp
from privfgl.methods.dp_fedavg import NO_AMPLIFICATION, dp_fedavg_params, draw_participation
from privfgl.methods.opfgl.params import resolve_params
from privfgl.privacy import MessageDP, NoiseSource, gaussian_epsilon, parse_dp_spec

K = 3
SPEC = "gaussian:sigma=1.0,clip=1.0,on=update,mode=central"


@pytest.fixture(autouse=True)
def _partition_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("PRIVFGL_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.fixture(scope="module")
def graph():
    return contextual_sbm(num_nodes=300, num_classes=3, num_features=20, seed=0)


def released_sum(spec: str) -> tuple[torch.Tensor, dict]:
    """The noised sum of three fixed uploads under `spec`, and the record's privacy block."""
    dp = MessageDP(parse_dp_spec(spec), K)
    fed = Federation(K, protocols.get_protocol("plain"), Transcript("none"), dp=dp)
    ups = [{"w": torch.full((64,), float(k)), "n": torch.tensor(1.0)} for k in range(K)]
    return fed.aggregate(0, "model_update", ups)["w"], dp.report()


def fedavg_run(graph, method_params=None, protocol="plain", spec=SPEC, rounds=4):
    cfg = RunConfig(method="dp-fedavg", dataset="sbm", partition="louvain", clients=4, rounds=rounds, local_epochs=1,
                    hidden=16, seed=0, protocol=protocol, dp=spec, method_params=method_params or {"q": 0.5},
                    progress=False, transcript="all")
    return run(cfg, data=graph)


def took_part(setup) -> list[list[bool]]:
    """Per round, which clients' uploads in the server's view are not all zeros."""
    t = setup.federation.transcript
    return [[any(bool(v.ne(0).any()) for v in m.tensors.values()) for m in t.view(SERVER, name="model_update", round=r)]
            for r in range(setup.method.rounds)]


# ---- message DP (--dp) ----------------------------------------------------------------------------


def test_the_default_dp_spec_draws_noise_from_os_entropy_and_says_so():
    spec = parse_dp_spec(SPEC)
    assert spec.secure and spec.seed is None
    first, record = released_sum(SPEC)
    second, _ = released_sum(SPEC)
    assert not torch.equal(first, second)  # same spec, same uploads: fresh noise every run
    assert record["dp"]["noise_source"] == "os" and record["dp"]["seed"] is None
    assert "seed_warning" not in record["dp"]


def test_an_explicit_dp_seed_reproduces_the_noise_and_the_record_warns():
    first, record = released_sum(SPEC + ",seed=7")
    second, _ = released_sum(SPEC + ",seed=7")
    assert torch.equal(first, second)
    assert record["dp"]["noise_source"] == "seeded" and record["dp"]["seed"] == 7
    assert "does not know the seed" in record["dp"]["seed_warning"]
    assert not torch.equal(first, released_sum(SPEC + ",seed=8")[0])


# ---- DP-SGD ----------------------------------------------------------------------------------------


def dp_sgd_run(graph, **params):
    cfg = RunConfig(method="dp-sgd", dataset="sbm", partition="louvain", clients=K, rounds=1, local_epochs=1,
                    hidden=16, seed=0, method_params={"degree": 2, **params}, progress=False)
    record, setup = run(cfg, data=graph)
    upload = setup.federation.transcript.view(SERVER, name="model_update", round=0)[0].tensors
    return record["privacy"]["dp"], torch.cat([v.reshape(-1) for v in upload.values()])


def test_dp_sgd_draws_noise_from_os_entropy_by_default(graph):
    dp, first = dp_sgd_run(graph)
    _, second = dp_sgd_run(graph)
    assert not torch.equal(first, second)  # same run seed, different noise
    assert dp["noise_source"] == "os" and dp["seed"] is None and "seed_warning" not in dp


def test_dp_sgd_with_an_explicit_seed_is_reproducible_and_warns(graph):
    dp, first = dp_sgd_run(graph, seed=5)
    _, second = dp_sgd_run(graph, seed=5)
    assert torch.equal(first, second)
    assert dp["noise_source"] == "seeded" and dp["seed"] == 5 and "does not know the seed" in dp["seed_warning"]
    with pytest.raises(ConfigError, match="seed must be 'os' \\(the default\\) or an integer"):
        dp_sgd_run(graph, seed="random")


# ---- DP O-pFGL ------------------------------------------------------------------------------------


def opfgl_release(graph, **params):
    clients = client_subgraphs(graph, partition_nodes(graph, "louvain", K, seed=0))
    split_clients(clients, 0.2, 0.4, 0.4, seed=0)
    p = resolve_params({"dp_epsilon": 4.0, "dp_clip": 2.0, "dp_degree": 3, **params})
    fed = Federation(K, protocols.get_protocol("plain"), Transcript("none"))
    _, sums, report = opfgl_dp.release(fed, ClientSteps(clients), 3, p, seed=0)
    return sums["S1"], report.report()["dp"]


def test_dp_opfgl_draws_noise_from_os_entropy_by_default(graph):
    first, dp = opfgl_release(graph)
    second, _ = opfgl_release(graph)
    assert not torch.equal(first, second)
    assert dp["noise_source"] == "os" and dp["seed"] is None and "seed_warning" not in dp
    assert dp["degree_bound_seed"] == 0  # the run seed still seeds the degree bounding (no noise)


def test_dp_opfgl_with_an_explicit_dp_seed_is_reproducible_and_warns(graph):
    first, dp = opfgl_release(graph, dp_seed=11)
    second, _ = opfgl_release(graph, dp_seed=11)
    assert torch.equal(first, second)
    assert dp["noise_source"] == "seeded" and dp["seed"] == 11 and "does not know the seed" in dp["seed_warning"]
    with pytest.raises(ValueError, match="dp_seed='x'; valid: 'os' \\(OS entropy, the default\\) or an integer"):
        resolve_params({"dp_seed": "x"})


# ---- DP-FedAvg: sampling and its accounting -------------------------------------------------------


def test_dp_fedavg_sampling_coins_differ_between_runs_with_the_same_seed(graph):
    record, first = fedavg_run(graph)
    _, second = fedavg_run(graph)
    assert took_part(first) != took_part(second)  # 16 coins at q = 1/2: equal with probability 2^-16
    dp = record["privacy"]["dp"]
    assert dp["sampling_source"] == "os" and dp["sampling_seed"] is None and "sampling_seed_warning" not in dp
    assert took_part(first) == first.extras["sampled_clients"]  # the auditor's truth is the coins drawn


@pytest.mark.parametrize("q", [0.01, 0.3, 0.5, 0.9])
def test_dp_fedavg_samples_each_client_at_exactly_the_rate_the_accountant_is_told(q):
    # Amplification by sampling is accounted at q, so the coins must land at q: a two-sided binomial
    # test on 200k OS-entropy coins (p > 1e-6: one false alarm in a million runs) catches a rate off by
    # 2 % of q at q = 0.3 (5 standard errors), and every participation pattern of 2 clients appears
    # at its product rate (the coins are independent).
    n = 100_000
    coins = np.array(draw_participation(NoiseSource(secure=True), 2 * n, q)).reshape(n, 2)
    assert stats.binomtest(int(coins.sum()), 2 * n, q).pvalue > 1e-6
    both = int(coins.all(axis=1).sum())
    assert stats.binomtest(both, n, q * q).pvalue > 1e-6


def test_dp_fedavg_with_a_sampling_seed_replays_the_coins_and_warns(graph):
    params = {"q": 0.5, "sampling_seed": 3}
    record, first = fedavg_run(graph, params)
    _, second = fedavg_run(graph, params)
    assert took_part(first) == took_part(second)
    dp = record["privacy"]["dp"]
    assert dp["sampling_source"] == "seeded" and dp["sampling_seed"] == 3
    assert "does not know the seed" in dp["sampling_seed_warning"]
    with pytest.raises(ConfigError, match="sampling_seed must be 'os' \\(the default\\) or an integer"):
        dp_fedavg_params({"sampling_seed": 1.5})


def test_dp_fedavg_claims_amplification_by_sampling_only_under_a_secure_protocol(graph):
    plain, _ = fedavg_run(graph, rounds=2)
    secure, _ = fedavg_run(graph, protocol="crypten", rounds=2)
    assert plain["privacy"]["epsilon"] == gaussian_epsilon([(1.0, 1.0, 2)], 1e-5)
    assert secure["privacy"]["epsilon"] == gaussian_epsilon([(1.0, 0.5, 2)], 1e-5) < plain["privacy"]["epsilon"]
    assert plain["privacy"]["dp"]["accounted_sample_rate"] == 1.0 and plain["privacy"]["dp"]["sample_rate"] == 0.5
    assert plain["privacy"]["dp"]["amplification"] == NO_AMPLIFICATION
    assert secure["privacy"]["dp"]["accounted_sample_rate"] == 0.5
    assert secure["privacy"]["dp"]["amplification"].startswith("by sampling at q=0.5: under crypten")
