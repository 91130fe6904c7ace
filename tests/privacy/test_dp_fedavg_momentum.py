"""DP-FedAvg's server momentum (`server_momentum` β): v ← β·v + (noised sum)/(q·K), w ← w + η·v. It is
post-processing: every global model the server releases is a function of the noised sums it was shown
and of the public initial model, nothing else; bad values are refused in one line."""
import pytest
import torch

from privfgl.data import contextual_sbm
from privfgl.errors import ConfigError
from privfgl.experiment import RunConfig, run
from privfgl.federation import SERVER, client_name
from privfgl.methods.dp_fedavg import dp_fedavg_params

K, ROUNDS, LR, BETA = 4, 4, 0.7, 0.9
# mode=local: every upload is clipped and noised on its client, so the sum the server opens is the noised sum
# its update reads (under mode=central the server holds the exact sum and adds the noise itself).
SPEC = "gaussian:sigma=1.0,clip=0.5,on=update,mode=local,seed=3"


@pytest.fixture(autouse=True)
def _partition_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("PRIVFGL_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.fixture(scope="module")
def graph():
    return contextual_sbm(num_nodes=300, num_classes=3, num_features=20, seed=0)


def momentum_run(graph, beta: float):
    cfg = RunConfig(method="dp-fedavg", dataset="sbm", partition="louvain", clients=K, rounds=ROUNDS, local_epochs=1,
                    hidden=16, seed=0, dp=SPEC, progress=False, transcript="all",
                    method_params={"q": 1.0, "sampling_seed": 0, "server_lr": LR, "server_momentum": beta})
    return run(cfg, data=graph)[1]


def server_view(setup) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(the noised sums the server opened, per round; the global models it broadcast: the init, then one a round),
    flattened in the models' parameter order."""
    t = setup.federation.transcript
    models = [m.tensors for m in t.view(client_name(0), name="global_model")]
    names = list(models[0])
    sums = [m.tensors for m in t.view(SERVER, name="model_update:sum")]
    flat = lambda d: torch.cat([d[n].double().reshape(-1) for n in names])  # noqa: E731
    return [flat(s) for s in sums], [flat(m) for m in models]


@pytest.mark.parametrize("beta", [0.0, BETA])
def test_each_released_model_is_the_momentum_of_the_noised_sums_alone(graph, beta):
    sums, models = server_view(momentum_run(graph, beta))
    assert len(sums) == ROUNDS and len(models) == ROUNDS + 1
    w, v = models[0], torch.zeros_like(models[0])
    for r, s in enumerate(sums):
        v = beta * v + s / K  # q = 1, no dropout: the denominator is K
        w = w + LR * v
        assert torch.allclose(models[r + 1], w, atol=1e-5), r  # float32 models
    assert float((models[-1] - models[-2]).abs().max()) > 1e-3  # the steps are not trivially zero


def test_momentum_changes_the_steps_after_the_first_round(graph):
    (_, plain), (_, heavy) = (server_view(momentum_run(graph, b)) for b in (0.0, BETA))
    assert torch.allclose(plain[1], heavy[1], atol=1e-6)  # round 0: v = the first mean, whatever β
    assert not torch.allclose(plain[-1], heavy[-1], atol=1e-3)


@pytest.mark.parametrize("bad", [-0.1, 1.0, 1.5, "fast"])
def test_a_momentum_outside_zero_to_one_is_refused_naming_the_valid_range(bad):
    with pytest.raises(ConfigError, match=r"server_momentum must be (in \[0, 1\)|a number)") as e:
        dp_fedavg_params({"server_momentum": bad})
    assert "\n" not in str(e.value)


def test_the_default_momentum_is_zero():
    assert dp_fedavg_params({})["server_momentum"] == 0.0
