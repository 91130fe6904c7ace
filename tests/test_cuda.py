"""--device cuda: every method that accepts it runs there, agrees with the CPU, and repeats per seed.

Skipped where no CUDA device is present (CI has none); run on a GPU machine with
`pytest tests/test_cuda.py`. `PRIVFGL_TEST_DEVICE=cpu` runs the same bodies on the CPU (a check of
the tests themselves).
"""
import os

import pytest
import torch

from privfgl.experiment import CPU_ONLY_METHODS, RunConfig, run
from privfgl.methods import METHODS

DEVICE = os.environ.get("PRIVFGL_TEST_DEVICE", "cuda")
pytestmark = pytest.mark.skipif(DEVICE.startswith("cuda") and not torch.cuda.is_available(),
                                reason="no CUDA device")
GPU_METHODS = [m for m in METHODS if m not in CPU_ONLY_METHODS]
NEEDS = {"opfgl": {"rounds": 1},  # one-shot
         "dp-fedavg": {"dp": "gaussian:sigma=0.1,clip=10,on=update,mode=central"}}


@pytest.fixture(autouse=True)
def _partition_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("PRIVFGL_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def cora_run(planetoid_root, **kw):
    settings = dict(method="fedavg", dataset="cora", partition="louvain", clients=10, rounds=2,
                    data_root=str(planetoid_root), download=False, progress=False, transcript="none")
    settings.update(kw)
    return run(RunConfig(**settings))


@pytest.mark.parametrize("method", GPU_METHODS)
def test_every_method_that_accepts_a_gpu_trains_on_it(planetoid_root, method):
    record, _ = cora_run(planetoid_root, method=method, device=DEVICE, **NEEDS.get(method, {}))
    assert record["config"]["device"] == DEVICE
    assert record["metrics"]["test_acc"] > 1 / 7  # better than chance on Cora's 7 classes


def test_the_looped_engine_trains_on_the_gpu(planetoid_root):
    record, _ = cora_run(planetoid_root, model="gat", engine="looped", hidden=16, device=DEVICE)
    assert record["metrics"]["test_acc"] > 1 / 7


def test_a_secure_protocol_sums_the_gpu_clients_uploads(planetoid_root):
    plain, _ = cora_run(planetoid_root, rounds=3, device=DEVICE)
    secagg, _ = cora_run(planetoid_root, rounds=3, device=DEVICE, protocol="secagg")
    assert secagg["privacy"]["protocol"] == "secagg"
    assert secagg["metrics"]["test_acc"] == pytest.approx(plain["metrics"]["test_acc"], abs=0.005)


def test_the_gpu_and_the_cpu_reach_the_same_model_without_dropout(planetoid_root):
    # Same seed, no dropout: the only difference is the order of float sums, so the two devices'
    # accuracies agree to a few nodes of Cora's ~1,080 test nodes after 5 rounds.
    gpu, _ = cora_run(planetoid_root, rounds=5, dropout=0.0, device=DEVICE)
    cpu, _ = cora_run(planetoid_root, rounds=5, dropout=0.0, device="cpu")
    assert gpu["metrics"]["test_acc"] == pytest.approx(cpu["metrics"]["test_acc"], abs=0.005)
    for g, c in zip(gpu["metrics"]["per_client"], cpu["metrics"]["per_client"]):
        assert g["n_test"] == c["n_test"]


def test_the_same_seed_gives_the_same_run_on_the_gpu(planetoid_root):
    a, _ = cora_run(planetoid_root, rounds=5, seed=3, device=DEVICE)
    b, _ = cora_run(planetoid_root, rounds=5, seed=3, device=DEVICE)
    assert a["metrics"]["curve"] == b["metrics"]["curve"]


@pytest.mark.parametrize("swapped_grad", [False, True])
@pytest.mark.parametrize("features", ["sparse", "dense"])
@pytest.mark.parametrize("model", ["gcn", "sage"])
def test_the_stacked_engine_on_the_gpu_trains_like_the_loop_on_the_cpu(monkeypatch, model, features, swapped_grad):
    """The engine's paths that Cora does not take: a dense input propagated once, and the last layer's
    weight gradient as (gᵀh)ᵀ (forced on for these small clients), against one model per client on
    the CPU."""
    from privfgl.models import stacked
    from privfgl.training import LoopedTrainers, ModelConfig, StackedTrainers, init_params
    from tests.test_training import random_clients
    if swapped_grad:
        monkeypatch.setattr(stacked, "SWAPPED_GRAD_ROWS", 1)
    clients = random_clients(dense=features == "dense")
    cfg = ModelConfig(model=model, hidden=16, dropout=0.0)
    init = [init_params(cfg, 40, 4, seed=k) for k in range(3)]
    cpu, gpu = LoopedTrainers(clients, cfg, init), StackedTrainers(clients, cfg, init, device=DEVICE)
    for engine in (cpu, gpu):
        engine.train(5)
    for a, b in zip(cpu.predict(), gpu.predict()):
        assert torch.allclose(a, b.cpu(), atol=1e-4)
    for k in range(3):
        for name, value in cpu.get_params(k).items():
            assert torch.allclose(value, gpu.get_params(k)[name].cpu(), atol=1e-4), name
