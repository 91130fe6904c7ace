"""Message DP inside Federation.aggregate: clipping before noise on what clients upload, the noise
lands where the mode says with the calibrated scale, every release is accounted."""
import math

import pytest
import torch

import protocols
from privfgl.federation import SERVER, Federation, Transcript
from privfgl.privacy import MessageDP, gaussian_epsilon, parse_dp_spec

K, D = 5, 40_000


def federation(spec: str) -> Federation:
    dp = MessageDP(parse_dp_spec(spec + ",seed=0"), K)
    return Federation(K, protocols.get_protocol("plain"), Transcript("all"), dp=dp)


def uploads(scale: float = 10.0) -> list[dict]:
    g = torch.Generator().manual_seed(0)
    return [{"w": torch.randn(D, generator=g, dtype=torch.float64) * scale, "n": torch.tensor(50.0)}
            for _ in range(K)]


def clipped_sum(contribs, clip):
    out = torch.zeros(D, dtype=torch.float64)
    for c in contribs:
        norm = math.sqrt(float((c["w"] ** 2).sum() + c["n"] ** 2))
        out += c["w"] * min(1.0, clip / norm)
    return out


def test_central_clips_each_upload_and_noises_the_sum_once():
    fed, data = federation("gaussian:sigma=2.0,clip=1.5,on=update,mode=central"), uploads()
    total = fed.aggregate(0, "model_update", data)
    seen = fed.transcript.view(SERVER, name="model_update", round=0)
    for m in seen:  # the server sees clipped (not noised) uploads: central DP trusts the server
        joint = torch.sqrt(sum((t.double() ** 2).sum() for t in m.tensors.values()))
        assert joint.item() == pytest.approx(1.5)
    noise = total["w"] - clipped_sum(data, 1.5)
    assert abs(noise.var().item() / 9.0 - 1) < 5 * math.sqrt(2 / D)  # (σ·clip)² = 9


def test_local_noises_every_upload_with_the_full_scale():
    fed, data = federation("gaussian:sigma=1.0,clip=2.0,on=update,mode=local"), uploads()
    fed.aggregate(0, "model_update", data)
    for m, c in zip(fed.transcript.view(SERVER, name="model_update", round=0), data):
        norm = math.sqrt(float((c["w"] ** 2).sum() + c["n"] ** 2))
        noise = m.tensors["w"] - c["w"] * (2.0 / norm)
        assert abs(noise.var().item() / 4.0 - 1) < 5 * math.sqrt(2 / D)


def test_distributed_shares_add_up_to_the_full_noise_in_the_sum():
    fed, data = federation("gaussian:sigma=1.0,clip=2.0,on=update,mode=distributed"), uploads()
    total = fed.aggregate(0, "model_update", data)
    views = fed.transcript.view(SERVER, name="model_update", round=0)
    share = views[0].tensors["w"] - data[0]["w"] * (2.0 / math.sqrt(float((data[0]["w"] ** 2).sum() + 2500)))
    assert abs(share.var().item() / (4.0 / K) - 1) < 5 * math.sqrt(2 / D)
    noise = total["w"] - clipped_sum(data, 2.0)
    assert abs(noise.var().item() / 4.0 - 1) < 5 * math.sqrt(2 / D)


def test_laplace_clips_in_l1_and_adds_laplace_noise():
    fed, data = federation("laplace:epsilon=0.5,clip=3.0,on=update,mode=central"), uploads()
    total = fed.aggregate(0, "model_update", data)
    for m in fed.transcript.view(SERVER, name="model_update", round=0):
        assert sum(t.abs().sum() for t in m.tensors.values()).item() == pytest.approx(3.0)
    l1 = [float(c["w"].abs().sum() + 50) for c in data]
    exact = sum(c["w"] * (3.0 / n) for c, n in zip(data, l1))
    b_hat = (total["w"] - exact).abs().mean().item()
    assert abs(b_hat - 6.0) < 5 * 6.0 / math.sqrt(D)  # b = clip / ε
    for r in range(1, 4):
        fed.aggregate(r, "model_update", data)
    assert fed.dp.report()["epsilon"] == 2.0 and fed.dp.report()["accountant"] == "laplace-basic"  # 4 × ε = 0.5


def test_other_messages_pass_untouched_and_releases_are_accounted():
    fed = federation("gaussian:sigma=1.2,clip=1.0,on=update,mode=central")
    other = fed.aggregate(0, "something_else", [{"x": torch.ones(3)}] * K)
    assert torch.equal(other["x"], torch.full((3,), 5.0, dtype=torch.float64))
    for r in range(4):
        fed.aggregate(r, "model_update", uploads(), sample_rate=0.5)
    report = fed.dp.report()
    assert report["dp"]["releases"] == 4 and report["dp"]["noise_std"] == pytest.approx(1.2)
    assert report["epsilon"] == gaussian_epsilon([(1.2, 0.5, 4)], 1e-5) and report["delta"] == 1e-5
