"""DP class statistics (O-pFGL's n, S1, S2): clipped rows, sensitivities under add/remove-one-node,
calibrated noise and the ε of one release."""
import math

import pytest
import torch

from privfgl.privacy import NoiseSource, gaussian_epsilon
from privfgl.privacy.stats import ClassStatsRelease, StatsReleaseReport, class_sums


def test_class_sums_clip_every_row_and_sum_per_class():
    x = torch.tensor([[3.0, 4.0], [0.3, 0.4], [0.0, -2.0]])
    s = class_sums(x, torch.tensor([0, 0, 1]), 3, bound=1.0)
    assert torch.allclose(s["n"], torch.tensor([2.0, 1.0, 0.0], dtype=torch.float64))
    assert torch.allclose(s["S1"][0], torch.tensor([0.9, 1.2], dtype=torch.float64))
    assert torch.allclose(s["S2"][1], torch.tensor([0.0, 1.0], dtype=torch.float64))
    assert torch.allclose(s["S2"][0], torch.tensor([0.36 + 0.09, 0.64 + 0.16], dtype=torch.float64))


def test_adding_one_row_moves_each_block_by_at_most_its_sensitivity():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(200, 30, generator=g) * 3, torch.randint(0, 4, (200,), generator=g)
    release = ClassStatsRelease(bound=0.7, sigma=1.0)
    base = class_sums(x, y, 4, 0.7)
    worst = {k: 0.0 for k in ("n", "S1", "S2")}
    for i in range(50):  # adding row i again = the neighbouring dataset with one more node
        more = class_sums(torch.cat([x, x[i:i + 1]]), torch.cat([y, y[i:i + 1]]), 4, 0.7)
        for k in worst:
            worst[k] = max(worst[k], (more[k] - base[k]).norm().item())
    sens = release.sensitivities
    assert worst["n"] == sens["n"] == 1.0
    assert worst["S1"] == pytest.approx(sens["S1"]) and sens["S1"] == pytest.approx(0.7)  # attained: rows clipped
    assert worst["S2"] <= sens["S2"] == pytest.approx(0.49)


def test_influence_scales_the_sensitivities():
    s = ClassStatsRelease(bound=2.0, sigma=1.0, influence=4).sensitivities
    assert s == {"n": 1.0, "S1": 2.0 * 7, "S2": pytest.approx(4.0 * (1 + 3 * math.sqrt(2)))}


def test_noise_matches_the_calibration_and_epsilon_the_accountant():
    release = ClassStatsRelease.for_epsilon(4.0, 1e-5, bound=0.5)
    assert 3.95 <= release.epsilon(1e-5) <= 4.0
    assert release.epsilon(1e-5) == gaussian_epsilon([(release.sigma, 1.0, 1)], 1e-5)
    sums = {"n": torch.zeros(20_000), "S1": torch.zeros(100, 200), "S2": torch.zeros(100, 200)}
    out = release.release(sums, NoiseSource(seed=0))
    for k, std in release.noise_std.items():
        assert std == pytest.approx(release.sigma * math.sqrt(3) * release.sensitivities[k])
        assert abs(out[k].var().item() / std ** 2 - 1) < 5 * math.sqrt(2 / 20_000)
    eps = [ClassStatsRelease.for_epsilon(e, 1e-5, 0.5).sigma for e in (1.0, 4.0, 16.0)]
    assert eps[0] > eps[1] > eps[2]


def test_the_release_report_holds_epsilon_delta_and_the_calibration():
    release = ClassStatsRelease.for_epsilon(2.0, 1e-6, bound=1.5, influence=7)
    out = StatsReleaseReport(release, 2.0, 1e-6, "distributed", "node", {"degree_bound": 2}, NoiseSource(3)).report()
    assert out["epsilon"] == release.epsilon(1e-6) <= 2.0 and out["delta"] == 1e-6 and out["accountant"] == "rdp"
    dp = out["dp"]
    assert dp["sigma"] == release.sigma and dp["noise_std"] == release.noise_std and dp["releases"] == 1
    assert dp["sensitivity"]["S1"] == 1.5 * 13 and dp["degree_bound"] == 2 and dp["mode"] == "distributed"
    assert dp["noise_source"] == "seeded" and dp["seed"] == 3 and "seed_warning" in dp
