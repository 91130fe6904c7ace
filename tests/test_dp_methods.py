"""--dp (client-level message DP) on FedSpray's and FedOMD's pre-weighted sums: which messages `on=`
can name, that clipping a {n·W, n} message keeps the client's ratio W and changes only its weight,
that the server's division by a noisy denominator is guarded by a floor (post-processing) and never
gives NaN/inf, that the revealed sums carry noise of std σ·clip, and that every aggregation of a
protected message is one accounted release (FedOMD: up to three per round)."""
import math

import pytest
import torch

import protocols
from privfgl.data import contextual_sbm, load_dataset
from privfgl.experiment import ConfigError, RunConfig, run
from privfgl.federation import SERVER, Federation, Transcript, client_name
from privfgl.methods.fedomd.run import _server_mean
from privfgl.methods.fedomd.cmd import global_statistics
from privfgl.methods.fedspray.run import server_update
from privfgl.privacy import (DENOMINATORS, MessageDP, check_dp_for_run, gaussian_epsilon, guard_denominators,
                             parse_dp_spec)
from privfgl.privacy.message_dp import floor_denominators
from privfgl.privacy.spec import DPSpecError

SIGMA, CLIP = 1.0, 1.0


def dp(on: str, mode: str = "central", sigma: float = SIGMA, clip: float = CLIP) -> str:
    return f"gaussian:sigma={sigma},clip={clip},on={on},mode={mode}"


@pytest.fixture(autouse=True)
def _partition_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("PRIVFGL_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.fixture(scope="module")
def sbm_fedspray():
    return load_dataset("sbm")  # 2000 nodes, 64 features, 5 classes (synthetic)


@pytest.fixture(scope="module")
def sbm_fedomd():
    return contextual_sbm(num_nodes=300, num_classes=3, num_features=40, seed=0)


def fedspray(data, spec=None, rounds=2, protocol="plain", transcript="last"):
    cfg = RunConfig(method="fedspray", dataset="sbm", partition="louvain+", clients=5, rounds=rounds,
                    split=(0.4, 0.3, 0.3), seed=0, protocol=protocol, dp=spec, progress=False, transcript=transcript)
    return run(cfg, data=data)


def fedomd(data, spec=None, rounds=3, protocol="plain", transcript="last"):
    cfg = RunConfig(method="fedomd", dataset="sbm", partition="louvain", clients=3, rounds=rounds,
                    split=(0.05, 0.2, 0.2), split_mode="random", seed=0, protocol=protocol, dp=spec,
                    progress=False, transcript=transcript, method_params={"patience": 0})
    return run(cfg, data=data)


def finite_metrics(record) -> bool:
    m = record["metrics"]
    return all(math.isfinite(m[k]) for k in ("test_acc", "val_acc")) and all(
        math.isfinite(v) for e in m["curve"] for v in e.values() if isinstance(v, float))


# ---- the spec: targets per method -------------------------------------------------------------------


@pytest.mark.parametrize("method,on,messages,unprotected", [
    ("fedspray", "encoder", ("encoder_update",), ("proxy_update",)),
    ("fedspray", "proxies", ("proxy_update",), ("encoder_update",)),
    ("fedspray", "proxy_update", ("proxy_update",), ("encoder_update",)),
    ("fedspray", "all", ("encoder_update", "proxy_update"), ()),
    ("fedomd", "update", ("model_update",), ("hidden_sums", "moment_sums")),
    ("fedomd", "moments", ("hidden_sums", "moment_sums"), ("model_update",)),
    ("fedomd", "moment_sums", ("moment_sums",), ("hidden_sums", "model_update")),
    ("fedomd", "all", ("hidden_sums", "moment_sums", "model_update"), ()),
    ("fedavg", "all", ("model_update",), ()),
])
def test_the_spec_accepts_each_methods_messages_and_aliases_and_names_what_stays_unprotected(
        method, on, messages, unprotected):
    spec = check_dp_for_run(dp(on), method, "plain")
    assert spec.messages == messages and spec.unprotected == unprotected
    RunConfig(method=method, dp=dp(on)).validate()


@pytest.mark.parametrize("method,on,valid", [
    ("fedspray", "update", "on=encoder|proxies|all|encoder_update|proxy_update"),
    ("fedspray", "moments", "on=encoder|proxies|all|encoder_update|proxy_update"),
    ("fedomd", "stats", "on=update|moments|all|hidden_sums|moment_sums|model_update"),
    ("fedomd", "encoder", "on=update|moments|all|hidden_sums|moment_sums|model_update"),
])
def test_a_message_the_method_does_not_send_is_refused_naming_the_valid_targets(method, on, valid):
    with pytest.raises(DPSpecError, match=f"method '{method}' sends no message") as e:
        check_dp_for_run(dp(on), method, "plain")
    assert valid in str(e.value)
    with pytest.raises(ConfigError):
        RunConfig(method=method, dp=dp(on)).validate()


def test_an_unknown_message_is_refused_listing_aliases_and_messages():
    with pytest.raises(DPSpecError) as e:
        parse_dp_spec(dp("weights"))
    for name in ("encoder", "proxies", "moments", "all", "encoder_update", "proxy_update", "hidden_sums",
                 "moment_sums", "model_update"):
        assert name in str(e.value)


@pytest.mark.parametrize("method", ["fedspray", "fedomd"])
def test_distributed_noise_needs_a_secure_protocol(method):
    with pytest.raises(DPSpecError, match="needs a secure protocol"):
        check_dp_for_run(dp("all", "distributed"), method, "plain")
    assert check_dp_for_run(dp("all", "distributed"), method, "crypten").mode == "distributed"


# ---- clipping pre-weighted sums ---------------------------------------------------------------------


def test_clipping_a_pre_weighted_message_keeps_the_clients_ratio_and_scales_its_weight_by_c():
    """{n·W, n} clipped jointly by c = clip/‖(n·W, n)‖: (c·n·W)/(c·n) = W exactly, weight c·n."""
    g = torch.Generator().manual_seed(0)
    W = [torch.randn(50, generator=g, dtype=torch.float64) * s for s in (0.01, 1.0, 3.0)]
    n = [40.0, 100.0, 7.0]
    ups = [{"w": w * m, "n": torch.tensor(m, dtype=torch.float64)} for w, m in zip(W, n)]
    protected = MessageDP(parse_dp_spec(dp("update", clip=2.0)), 3).protect(ups)
    for up, clipped, w, m in zip(ups, protected, W, n):
        c = min(1.0, 2.0 / math.sqrt(float((up["w"] ** 2).sum()) + m * m))
        assert c < 1  # every client is clipped here
        assert torch.allclose(clipped["w"] / clipped["n"], w, rtol=1e-12, atol=0)
        assert float(clipped["n"]) == pytest.approx(c * m, rel=1e-12)
    # the pooled mean weights client k by c_k·n_k = clip/‖(W_k, 1)‖ instead of n_k
    pooled = sum(p["w"] for p in protected) / sum(p["n"] for p in protected)
    weights = torch.tensor([2.0 / math.sqrt(float((w ** 2).sum()) + 1) for w in W], dtype=torch.float64)
    assert torch.allclose(pooled, sum(wt * w for wt, w in zip(weights, W)) / weights.sum(), rtol=1e-10)


def test_in_a_fedomd_run_each_clients_clipped_model_update_keeps_its_model(sbm_fedomd):
    """Round 0's model_update is computed before any noise reaches the clients (on=update): the DP run's
    clipped upload divided by its n is the plain run's model, and n = c·n_k."""
    _, plain = fedomd(sbm_fedomd, rounds=1, transcript="all")
    _, private = fedomd(sbm_fedomd, dp("update", clip=0.5), rounds=1, transcript="all")
    exact = plain.federation.transcript.view(SERVER, name="model_update", round=0)
    clipped = private.federation.transcript.view(SERVER, name="model_update", round=0)
    assert len(exact) == len(clipped) == 3
    for e, c in zip(exact, clipped):
        norm = math.sqrt(sum(float((t.double() ** 2).sum()) for t in e.tensors.values()))
        assert float(c.tensors["n"]) == pytest.approx(float(e.tensors["n"]) * 0.5 / norm, rel=1e-9)
        for name, t in e.tensors.items():
            assert torch.allclose(c.tensors[name] / c.tensors["n"], t.double() / e.tensors["n"], rtol=1e-9, atol=1e-12)


# ---- the guard on the division ----------------------------------------------------------------------


def test_the_denominator_floor_is_one_noise_std_of_the_revealed_sum():
    K = 4
    assert MessageDP(parse_dp_spec(dp("update", "central", 2.0, 0.5)), K).denominator_floor == 1.0
    assert MessageDP(parse_dp_spec(dp("update", "distributed", 2.0, 0.5)), K).denominator_floor == 1.0
    assert MessageDP(parse_dp_spec(dp("update", "local", 2.0, 0.5)), K).denominator_floor == pytest.approx(2.0)
    lap = MessageDP(parse_dp_spec("laplace:epsilon=0.5,clip=1,on=update,mode=central"), K)
    assert lap.denominator_floor == pytest.approx(math.sqrt(2) * 2.0)


def test_guard_floors_only_the_denominators_of_protected_messages():
    md = MessageDP(parse_dp_spec(dp("all", sigma=3.0, clip=0.5)), 3)
    sums = {"w": torch.tensor([-5.0, 0.0]), "n": torch.tensor(-2.0)}
    out = guard_denominators(md, "model_update", sums)
    assert float(out["n"]) == 1.5 and torch.equal(out["w"], sums["w"])  # numerators untouched
    assert guard_denominators(None, "model_update", sums) is sums          # no DP: unchanged
    assert guard_denominators(MessageDP(parse_dp_spec(dp("moments")), 3), "model_update", sums) is sums
    weights = floor_denominators({"proxy": torch.ones(3, 2), "weight": torch.tensor([2.0, -1.0, float("nan")])},
                                 DENOMINATORS["proxy_update"], 0.25)
    assert weights["weight"].tolist() == [2.0, 0.25, 0.25]
    with pytest.raises(ValueError):
        floor_denominators(sums, ("n",), 0.0)


def test_noise_that_makes_the_revealed_count_negative_still_gives_finite_means():
    """σ·clip far above the clipped counts: the noisy Σ n is negative; after the guard FedOMD's and
    FedSpray's server divisions are finite."""
    K, spec = 3, dp("all", sigma=50.0, clip=1.0)
    fed = Federation(K, protocols.get_protocol("plain"), Transcript("none"), dp=MessageDP(parse_dp_spec(spec), K))
    ups = [{"w": torch.full((4,), 2.0 * m, dtype=torch.float64), "n": torch.tensor(float(m), dtype=torch.float64)}
           for m in (10, 20, 30)]
    revealed = [fed.aggregate(r, "model_update", [dict(u) for u in ups]) for r in range(20)]
    assert min(float(s["n"]) for s in revealed) < 0  # the unguarded division would flip the model's sign
    for sums in revealed:
        mean, total = _server_mean(guard_denominators(fed.dp, "model_update", sums))
        assert total >= 50.0 and torch.isfinite(mean["w"]).all()
        assert torch.isfinite(torch.stack(list(global_statistics({"m2": sums["w"]}, total).values()))).all()
    # FedSpray: a zero or negative encoder count and proxy weight after the guard
    enc = guard_denominators(fed.dp, "encoder_update", {"w": torch.ones(2), "n": torch.tensor(-3.0)})
    prox = guard_denominators(fed.dp, "proxy_update",
                              {"proxy": torch.ones(2, 4), "weight": torch.tensor([0.0, -7.0])})
    omega, S = server_update(enc, prox, {"w": torch.zeros(2)}, torch.zeros(2, 4))
    assert torch.isfinite(omega["w"]).all() and torch.isfinite(S).all() and float(omega["w"][0]) == pytest.approx(1 / 50)


# ---- runs: finite metrics, calibrated noise, one release per protected aggregation --------------------


def capture_reveals(monkeypatch) -> list[tuple[dict, dict]]:
    """(sum before, sum after) of every MessageDP.reveal in the run."""
    seen, reveal = [], MessageDP.reveal

    def spy(self, total, sample_rate=1.0):
        out = reveal(self, total, sample_rate)
        seen.append(({k: v.clone() for k, v in total.items()}, out))
        return out
    monkeypatch.setattr(MessageDP, "reveal", spy)
    return seen


def noise_std(pairs, skip) -> float:
    noise = torch.cat([(after[k] - before[k].double()).reshape(-1) for before, after in pairs
                       for k in before if k not in skip])
    return float(noise.std())


def test_fedspray_with_dp_on_all_messages_finishes_with_calibrated_noise_and_two_releases_a_round(
        sbm_fedspray, monkeypatch):
    seen = capture_reveals(monkeypatch)
    record, setup = fedspray(sbm_fedspray, dp("all"), rounds=2)
    priv = record["privacy"]
    assert finite_metrics(record) and priv["dp"]["releases"] == 2 * 2 and len(seen) == 4
    assert priv["epsilon"] == gaussian_epsilon([(SIGMA, 1.0, 4)], 1e-5) and math.isfinite(priv["epsilon"])
    assert priv["dp"]["denominator_floor"] == SIGMA * CLIP and priv["dp"]["unprotected"] == ()
    encoder = [p for p in seen if "n" in p[0]]
    assert len(encoder) == 2 and sum(p[0]["n"].numel() for p in encoder) == 2
    std = noise_std(encoder, skip=("n",))  # ≈ 2 × 4.5k coordinates
    assert abs(std / (SIGMA * CLIP) - 1) < 0.05


def test_fedspray_with_distributed_noise_under_crypten_finishes(sbm_fedspray):
    record, _ = fedspray(sbm_fedspray, dp("encoder", "distributed", sigma=2.0), rounds=2, protocol="crypten")
    priv = record["privacy"]
    assert finite_metrics(record) and priv["dp"]["releases"] == 2  # the encoder only, once a round
    assert priv["dp"]["unprotected"] == ("proxy_update",)
    assert priv["epsilon"] == gaussian_epsilon([(2.0, 1.0, 2)], 1e-5)


def test_fedomd_with_dp_on_all_messages_counts_three_releases_a_round_and_noises_with_sigma_clip(
        sbm_fedomd, monkeypatch):
    seen = capture_reveals(monkeypatch)
    record, _ = fedomd(sbm_fedomd, dp("all"), rounds=3)
    priv, rounds = record["privacy"], record["metrics"]["rounds_run"]
    assert rounds == 3 and finite_metrics(record)
    assert priv["dp"]["releases"] == 3 * rounds == len(seen)
    assert priv["epsilon"] == gaussian_epsilon([(SIGMA, 1.0, 9)], 1e-5) and math.isfinite(priv["epsilon"])
    model = [p for p in seen if "n" in p[0] and not any(k.startswith("z") for k in p[0])]
    assert len(model) == 3 and abs(noise_std(model, skip=("n",)) / (SIGMA * CLIP) - 1) < 0.05  # ≈ 3 × 11k coords


@pytest.mark.parametrize("on,per_round", [("update", 1), ("moments", 2)])
def test_fedomd_counts_only_the_protected_aggregations(sbm_fedomd, on, per_round):
    record, _ = fedomd(sbm_fedomd, dp(on), rounds=2)
    assert record["privacy"]["dp"]["releases"] == per_round * 2 and finite_metrics(record)


def test_fedomd_with_distributed_noise_under_crypten_finishes(sbm_fedomd):
    record, _ = fedomd(sbm_fedomd, dp("all", "distributed"), rounds=2, protocol="crypten")
    priv = record["privacy"]
    assert finite_metrics(record) and priv["dp"]["releases"] == 3 * 2
    assert priv["epsilon"] == gaussian_epsilon([(SIGMA, 1.0, 6)], 1e-5)


def test_fedavg_with_clipped_updates_divides_by_the_clipped_count_not_by_one(sbm_fedomd):
    """FedAvg under --dp on=update with a small clip: Σ c_k·n_k is far below 1, and the new global model
    is still the c_k·n_k-weighted mean of the clients' models (noise ≈ 0 here), not that mean times Σ c_k·n_k."""
    cfg = RunConfig(method="fedavg", dataset="sbm", partition="louvain", clients=3, rounds=1, seed=0,
                    dp=dp("update", sigma=1e-9, clip=0.01), progress=False, transcript="all")
    _, setup = run(cfg, data=sbm_fedomd)
    transcript = setup.federation.transcript
    clipped = transcript.view(SERVER, name="model_update", round=0)
    n = sum(float(m.tensors["n"]) for m in clipped)
    assert n < 0.1
    new_global = transcript.view(client_name(0), name="global_model", round=0)[-1].tensors
    for name, w in new_global.items():
        pooled = sum(m.tensors[name].double() for m in clipped) / n
        assert torch.allclose(w.double(), pooled, rtol=1e-4, atol=1e-6), name


def test_fedomd_divides_the_clipped_moment_sums_by_their_own_clipped_count(sbm_fedomd):
    """moment_sums carries its own n: clipped by its own factor, each client's moments keep their
    ratio, and the global moments (noise ≈ 0) are a weighted mean of the clients' moments, inside
    their range. Divided by hidden_sums' differently clipped count they would not be."""
    # seeded: a coordinate on which the clients' ratios agree tolerates only some noise draws
    _, setup = fedomd(sbm_fedomd, dp("moments", sigma=1e-9, clip=0.01) + ",seed=0", rounds=1, transcript="all")
    transcript = setup.federation.transcript
    uploads = [m.tensors for m in transcript.view(SERVER, name="moment_sums", round=0)]
    broadcast = transcript.view(client_name(0), name="global_moments", round=0)[0].tensors
    assert len(uploads) == 3 and all(float(u["n"]) < 1 for u in uploads)  # every client clipped
    for name, g in broadcast.items():
        ratios = torch.stack([u[name] / u["n"] for u in uploads])
        span = (ratios.max(0).values - ratios.min(0).values).abs() + 1e-9
        assert bool(((g >= ratios.min(0).values - 1e-3 * span) & (g <= ratios.max(0).values + 1e-3 * span)).all()), name
