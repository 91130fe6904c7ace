"""Accounting: privfgl's ε is opacus' accountant for the same (q, σ, steps, δ), and at q = 1 it agrees with
the closed forms (RDP of the Gaussian, the exact Gaussian ε) computed here without opacus; Laplace composition."""
import math

import numpy as np
import pytest
from scipy import optimize, stats
from opacus.accountants import PRVAccountant, RDPAccountant

from privfgl.privacy import (PrivacyAccountant, gaussian_epsilon, laplace_advanced_composition,
                             laplace_basic_composition, noise_multiplier_for)
from privfgl.privacy.accounting import RDP_ALPHAS


@pytest.mark.parametrize("sigma,q,steps", [(1.0, 0.01, 1000), (3.5, 1.0, 30), (0.8, 0.1, 60)])
def test_rdp_epsilon_equals_opacus(sigma, q, steps):
    acc = RDPAccountant()
    for _ in range(steps):
        acc.step(noise_multiplier=sigma, sample_rate=q)
    assert gaussian_epsilon([(sigma, q, steps)], 1e-5, "rdp") == pytest.approx(
        acc.get_epsilon(delta=1e-5, alphas=RDP_ALPHAS), rel=1e-12)
    # the extended orders can only tighten opacus' default bound
    assert gaussian_epsilon([(sigma, q, steps)], 1e-5, "rdp") <= acc.get_epsilon(delta=1e-5) + 1e-12


def exact_gaussian_epsilon(mu: float, delta: float) -> float:
    """The exact ε(δ) of a Gaussian mechanism with sensitivity / σ = mu (Balle & Wang 2018, Thm. 8):
    δ = Φ(μ/2 − ε/μ) − e^ε Φ(−μ/2 − ε/μ), solved for ε."""
    gap = lambda e: stats.norm.cdf(mu / 2 - e / mu) - math.exp(e) * stats.norm.cdf(-mu / 2 - e / mu) - delta
    return optimize.brentq(gap, 0.0, 200.0)


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")  # opacus' PRV at q = 1
@pytest.mark.parametrize("sigma,steps", [(1.0, 1), (2.0, 1), (3.5, 30), (0.8, 10)])
def test_full_batch_epsilon_against_the_closed_forms_not_opacus(sigma, steps):
    # Checked without opacus: T full-batch Gaussian releases of noise multiplier σ compose to one Gaussian
    # of μ = √T/σ, whose exact ε is a closed form. RDP is T·α/(2σ²) at order α, turned into (ε, δ) by
    # Balle et al. 2020's conversion (opacus' own): it must equal ours over our orders and never fall below
    # the exact ε (an accountant under the truth would overstate privacy); PRV is within its 0.01 error.
    delta = 1e-5
    exact = exact_gaussian_epsilon(math.sqrt(steps) / sigma, delta)
    alphas = np.array(RDP_ALPHAS)
    rdp = steps * alphas / (2 * sigma ** 2)
    closed = float(np.min(rdp - (math.log(delta) + np.log(alphas)) / (alphas - 1) + np.log((alphas - 1) / alphas)))
    ours = gaussian_epsilon([(sigma, 1.0, steps)], delta, "rdp")
    assert ours == pytest.approx(closed, rel=1e-9)
    assert exact <= ours <= 1.15 * exact
    assert exact - 1e-9 <= gaussian_epsilon([(sigma, 1.0, steps)], delta, "prv") <= exact + 0.02


def test_prv_epsilon_equals_opacus_and_is_close_to_rdp():
    acc = PRVAccountant()
    for _ in range(300):
        acc.step(noise_multiplier=1.1, sample_rate=0.05)
    prv = gaussian_epsilon([(1.1, 0.05, 300)], 1e-5, "prv")
    assert prv == pytest.approx(acc.get_epsilon(delta=1e-5), rel=1e-9)
    assert prv <= gaussian_epsilon([(1.1, 0.05, 300)], 1e-5, "rdp")


def test_epsilon_grows_with_steps_and_shrinks_with_noise():
    e = lambda s, n: gaussian_epsilon([(s, 1.0, n)], 1e-5)
    assert e(2.0, 10) < e(2.0, 20) and e(4.0, 10) < e(2.0, 10)
    assert gaussian_epsilon([], 1e-5) == 0.0


@pytest.mark.parametrize("target", [1.0, 8.0])
def test_noise_multiplier_search_meets_the_target(target):
    sigma = noise_multiplier_for(target, 1e-5, sample_rate=1.0, steps=30)
    eps = gaussian_epsilon([(sigma, 1.0, 30)], 1e-5)
    assert target - 0.05 <= eps <= target


def test_laplace_composition_formulas():
    assert laplace_basic_composition([0.5, 0.25, 1.0]) == 1.75
    # Dwork–Rothblum–Vadhan: eps*sqrt(2k ln(1/δ')) + k eps (e^eps - 1)
    expected = 0.1 * math.sqrt(2 * 100 * math.log(1e5)) + 100 * 0.1 * (math.exp(0.1) - 1)
    assert laplace_advanced_composition(0.1, 100, 1e-5) == pytest.approx(expected, rel=1e-12)
    assert expected == pytest.approx(5.8502, abs=1e-4)
    acc = PrivacyAccountant(delta=1e-5)
    acc.add_laplace(0.1, count=100)
    spent = acc.spent()
    assert spent["accountant"] == "laplace-advanced" and spent["epsilon"] == pytest.approx(expected)
    few = PrivacyAccountant(delta=1e-5)
    few.add_laplace(1.0, count=3)  # advanced is worse here: basic, pure DP
    assert few.spent() == {"epsilon": 3.0, "delta": 0.0, "accountant": "laplace-basic", "epsilon_basic": 3.0,
                           "epsilon_advanced": pytest.approx(laplace_advanced_composition(1.0, 3, 1e-5))}


def test_a_count_of_gaussian_releases_is_that_many_single_releases():
    at_once, one_by_one = PrivacyAccountant(delta=1e-5), PrivacyAccountant(delta=1e-5)
    at_once.add_gaussian(1.1, 0.5, count=5)
    for _ in range(5):
        one_by_one.add_gaussian(1.1, 0.5)
    assert at_once.releases == one_by_one.releases == 5 and at_once.spent() == one_by_one.spent()
    assert at_once.spent()["epsilon"] == gaussian_epsilon([(1.1, 0.5, 5)], 1e-5)


def test_huge_laplace_epsilons_compose_without_overflow():
    acc = PrivacyAccountant(delta=1e-5)
    acc.add_laplace(1000.0, count=20)  # e^1000 overflows a float: advanced composition is inf, basic stands
    assert laplace_advanced_composition(1000.0, 20, 1e-5) == math.inf
    assert acc.spent()["epsilon"] == 20000.0 and acc.spent()["accountant"] == "laplace-basic"
