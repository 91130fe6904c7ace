"""DP runs on real Cora: the record's privacy block, clipped uploads in the server's view,
determinism per seed, DP-SGD's node-level accounting."""
import math

import pytest

from privfgl.experiment import RunConfig, run
from privfgl.federation import SERVER
from privfgl.privacy import gaussian_epsilon


@pytest.fixture(autouse=True)
def _partition_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("PRIVFGL_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def cora_run(planetoid_root, **kw):
    settings = dict(dataset="cora", partition="louvain+", clients=10, rounds=2, data_root=str(planetoid_root),
                    download=False, progress=False)
    settings.update(kw)
    return run(RunConfig(**settings))


DP = "gaussian:sigma=1.3,clip=0.5,on=update,mode=central,seed=4"
SEEDED = {"q": 0.5, "sampling_seed": 4}  # reproducible noise and coins only when asked for


def test_dp_fedavg_record_clipped_uploads_and_determinism(planetoid_root):
    record, setup = cora_run(planetoid_root, method="dp-fedavg", dp=DP, method_params=SEEDED)
    priv = record["privacy"]
    # under plain the server sees who took part: no amplification by sampling, rounds accounted at q = 1
    assert priv["epsilon"] == gaussian_epsilon([(1.3, 1.0, 2)], 1e-5) and priv["delta"] == 1e-5
    assert priv["accountant"] == "rdp" and priv["dp"]["releases"] == 2 and priv["dp"]["noise_std"] == 1.3 * 0.5
    uploads = setup.federation.transcript.view(SERVER, name="model_update", round=1)
    norms = [math.sqrt(sum(float((t.double() ** 2).sum()) for t in m.tensors.values())) for m in uploads]
    assert max(norms) <= 0.5 + 1e-9 and min(norms) == 0.0  # clipped deltas; unsampled clients send zeros
    again, _ = cora_run(planetoid_root, method="dp-fedavg", dp=DP, method_params=SEEDED)
    other, _ = cora_run(planetoid_root, method="dp-fedavg", dp=DP.replace("seed=4", "seed=9"), method_params=SEEDED)
    assert again["metrics"]["curve"] == record["metrics"]["curve"]
    assert other["metrics"]["curve"] != record["metrics"]["curve"]  # the noise seed matters


def test_runs_without_dp_report_none(planetoid_root):
    record, _ = cora_run(planetoid_root, method="local", rounds=1)
    assert {k: record["privacy"][k] for k in ("dp", "epsilon", "delta", "accountant")} == dict.fromkeys(
        ("dp", "epsilon", "delta", "accountant"))


def test_dp_sgd_accounts_node_level_steps(planetoid_root, monkeypatch):
    import privfgl.methods.dp_sgd as dp_sgd
    used = []  # the mechanism every noisy step draws from: its std must be the record's, σ·C·(2N_D − 1)
    real = dp_sgd.private_gradient
    monkeypatch.setattr(dp_sgd, "private_gradient", lambda g, clip, mech, *a, **kw: used.append(mech) or
                        real(g, clip, mech, *a, **kw))
    record, setup = cora_run(planetoid_root, method="dp-sgd", rounds=1, local_epochs=1,
                             method_params={"sigma": 2.0, "clip": 1.0, "degree": 3})
    priv = record["privacy"]
    assert used and {m.std for m in used} == {priv["dp"]["noise_std"]} == {2.0 * 1.0 * (2 * 13 - 1)}
    assert priv["epsilon"] == gaussian_epsilon([(2.0, 1.0, 1)], 1e-5)
    assert priv["dp"]["sensitivity"] == 1.0 * (2 * 13 - 1) and priv["dp"]["unit"].startswith("node")
    assert 0 <= record["metrics"]["test_acc"] <= 1
    assert len(setup.federation.transcript.view(SERVER, name="model_update", round=0)) == 10
