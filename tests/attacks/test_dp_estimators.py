"""The DP-audit estimators (attacks.dp.estimators): exact values on small cases, the cap set by the
number of guesses, validity on mechanisms whose ε is known, power on a strong Gaussian, bad input.

Validity threshold: every valid bound here is a one-sided 95 % statement, so over N = 40 independent
simulated audits the number exceeding the truth is at most Binomial(40, 0.05) (mean 2). A test fails
only if more than 6 of 40 exceed: P[Binomial(40, 0.05) > 6] = 0.0034, so a correct estimator fails
with probability < 0.4 %, while a bound at confidence 1 − α with α ≥ 0.25 (e.g. one computed at ε/2)
exceeds in more than 6 with probability > 0.97. The simulations are seeded, so results are fixed.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binom, norm

from attacks.dp.estimators import (compose_gdp, gaussian_fit_epsilon, gaussian_pair_delta, gdp_delta, gdp_epsilon,
                                   gdp_mu, gdp_mu_nonparametric, gdp_mu_parametric, guess_counts, one_run_audit,
                                   one_run_epsilon, one_run_fdp_epsilon, one_run_fdp_mu, one_run_p_value,
                                   per_round_gdp_audit, per_step_bound)

AUDITS = 40
MAX_EXCEEDING = 6  # of 40: see the module docstring
DELTA = 1e-5


def rr_audit(epsilon: float, m: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Randomised response on m fair-coin canaries: each output equals its coin w.p. e^ε/(1+e^ε)."""
    rng = np.random.default_rng(seed)
    coins = rng.random(m) < 0.5
    keep = rng.random(m) < math.exp(epsilon) / (1 + math.exp(epsilon))
    return np.where(keep, coins, ~coins).astype(float), coins


def gaussian_audit(mu: float, m: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The idealised Gaussian mechanism: score = μ·coin + N(0, 1), exactly μ-GDP per canary."""
    rng = np.random.default_rng(seed)
    coins = rng.random(m) < 0.5
    return mu * coins + rng.standard_normal(m), coins


# ---------------------------------------------------------------- exact values

def test_gdp_delta_is_dong_roth_su_and_the_conversions_invert_each_other():
    assert gdp_delta(1.0, 2.0) == pytest.approx(norm.cdf(-1.5) - math.exp(2) * norm.cdf(-2.5), rel=1e-12)
    for mu in (0.1, 0.5, 1.0, 2.0, 4.0):
        eps = gdp_epsilon(mu, DELTA)
        assert gdp_delta(mu, eps) == pytest.approx(DELTA, rel=1e-6)
        assert gdp_mu(eps, DELTA) == pytest.approx(mu, rel=1e-6)
    assert gdp_epsilon(0.0, DELTA) == 0.0
    assert compose_gdp(0.5, 16) == pytest.approx(2.0)


def test_one_run_p_value_uses_the_full_epsilon_and_the_2m_delta_term():
    # q = e^ε/(1+e^ε) = 3/4 at ε = log 3; 4 of 4 right: β = q^4 (ε/2 would give (√3/(1+√3))^4 = 0.2)
    assert one_run_p_value(10, 4, 4, math.log(3)) == pytest.approx(0.75 ** 4, rel=1e-12)
    # r = v = 2, m = 10, δ = 0.01: β = 9/16; max over i of (P[W ≥ 2 − i] − β)/i is i = 1: 15/16 − 9/16 = 3/8;
    # p = 9/16 + 2·10·0.01·3/8 = 0.6375
    assert one_run_p_value(10, 2, 2, math.log(3), 0.01) == pytest.approx(0.6375, rel=1e-12)
    # 7 of 10 right, δ = 0: β = P[Binomial(10, 3/4) ≥ 7]
    assert one_run_p_value(100, 10, 7, math.log(3)) == pytest.approx(binom.sf(6, 10, 0.75), rel=1e-12)


def test_one_run_bound_is_where_the_p_value_meets_alpha():
    for m, r, v, delta in ((1000, 200, 180, 0.0), (1000, 200, 180, DELTA), (5000, 1000, 700, 1e-6)):
        eps = one_run_epsilon(m, r, v, delta)
        assert eps > 0
        assert one_run_p_value(m, r, v, eps, delta) == pytest.approx(0.05, abs=1e-6)
    assert one_run_epsilon(1000, 100, 50, 0.0) == 0.0  # chance accuracy: no evidence


@pytest.mark.parametrize("r", [10, 100, 1000, 10_000])
def test_all_guesses_right_reach_exactly_the_cap_set_by_r(r):
    q = 0.05 ** (1 / r)  # P[Binomial(r, q) = r] = q^r = 0.05
    assert one_run_epsilon(r, r, r, 0.0) == pytest.approx(math.log(q / (1 - q)), abs=1e-6)
    assert one_run_epsilon(r, r, r, DELTA) <= math.log(q / (1 - q)) + 1e-9


def test_one_or_two_guesses_prove_nothing_at_95_percent():
    assert one_run_epsilon(1000, 1, 1) == 0.0  # q = 0.05 < 1/2
    assert one_run_epsilon(1000, 2, 2) == 0.0  # q = 0.22


def test_guess_counts_takes_the_top_k_plus_in_and_the_bottom_k_minus_out():
    scores = np.array([0.9, 0.1, 0.5, 0.8, 0.2, 0.3])
    coins = np.array([True, False, True, False, True, False])
    assert guess_counts(scores, coins, 2, 2) == (4, 2)  # in: 0.9 ✓, 0.8 ✗; out: 0.1 ✓, 0.2 ✗
    assert guess_counts(scores, coins, 1, 0) == (1, 1)
    assert guess_counts(scores, coins, 0, 3) == (3, 2)


def test_the_grid_audit_is_the_bonferroni_maximum_over_its_grid():
    scores, coins = gaussian_audit(2.0, 1000, seed=3)
    grid = (10, 50, 100)
    audit = one_run_audit(scores, coins, grid, DELTA)
    level = 1 - 0.05 / len(grid)
    expect = max(one_run_epsilon(1000, *guess_counts(scores, coins, k, k), DELTA, level) for k in grid)
    expect_f = max(one_run_fdp_epsilon(1000, *guess_counts(scores, coins, k, k), DELTA, level) for k in grid)
    assert audit.one_run_epsilon == pytest.approx(expect)
    assert audit.fdp_epsilon == pytest.approx(expect_f)
    assert audit.one_run_epsilon < one_run_epsilon(1000, *guess_counts(scores, coins, audit.one_run_k,
                                                                       audit.one_run_k), DELTA)


def test_gaussian_pair_delta_with_equal_variances_is_the_gdp_curve():
    for shift, sd in ((1.0, 1.0), (0.3, 0.1), (2.0, 0.5)):
        for eps in (0.0, 0.5, 2.0):
            assert gaussian_pair_delta(eps, shift, sd, 0.0, sd) == pytest.approx(gdp_delta(shift / sd, eps), abs=1e-12)


# ---------------------------------------------------------------- validity on known ε

def test_one_run_bound_on_randomised_response_exceeds_the_true_epsilon_at_most_5_percent():
    # every canary guessed (in iff output 1): v ~ Binomial(m, e^ε/(1+e^ε)) exactly, so this is sharp
    eps_true, m = 1.0, 1000
    bounds = [one_run_epsilon(m, *guess_counts(s, c, int(s.sum()), m - int(s.sum())))
              for s, c in (rr_audit(eps_true, m, seed) for seed in range(AUDITS))]
    assert sum(b > eps_true for b in bounds) <= MAX_EXCEEDING
    assert np.median(bounds) > 0.8 * eps_true  # and it is tight, so the check above has teeth


def test_fdp_mu_on_randomised_response_stays_below_its_tightest_gdp_mu():
    eps_true, m = 1.0, 1000
    mu_true = 2 * norm.ppf(math.exp(eps_true) / (1 + math.exp(eps_true)))  # RR(ε) is exactly this μ-GDP at best
    bounds = [one_run_fdp_mu(m, *guess_counts(s, c, int(s.sum()), m - int(s.sum())))
              for s, c in (rr_audit(eps_true, m, seed) for seed in range(AUDITS))]
    assert sum(b > mu_true for b in bounds) <= MAX_EXCEEDING
    assert np.median(bounds) > 0


def test_one_run_bounds_on_the_gaussian_mechanism_exceed_its_epsilon_at_most_5_percent():
    mu = 2.0
    eps_true = gdp_epsilon(mu, DELTA)  # 9.99
    audits = [one_run_audit(*gaussian_audit(mu, 1000, seed), grid=(10, 50, 100), delta=DELTA)
              for seed in range(AUDITS)]
    assert sum(a.one_run_epsilon > eps_true for a in audits) <= MAX_EXCEEDING
    assert sum(a.fdp_epsilon > eps_true for a in audits) <= MAX_EXCEEDING


def test_fdp_mu_on_the_gaussian_mechanism_is_valid_and_close():
    mu, m, k = 1.0, 2000, 50  # 50 guesses each way: the tightest k here (all 2000 guesses give only 0.33)
    bounds = []
    for seed in range(AUDITS):
        scores, coins = gaussian_audit(mu, m, seed)
        bounds.append(one_run_fdp_mu(m, *guess_counts(scores, coins, k, k)))
    assert sum(b > mu for b in bounds) <= MAX_EXCEEDING
    assert np.median(bounds) > 0.5 * mu  # measured 0.65


def test_per_step_mu_bounds_on_a_gaussian_step_exceed_its_mu_at_most_5_percent():
    mu_step, n = 0.5, 1000
    nonparametric, parametric = [], []
    for seed in range(AUDITS):
        rng = np.random.default_rng(seed)
        stat_in, stat_out = mu_step + rng.standard_normal(n), rng.standard_normal(n)
        nonparametric.append(gdp_mu_nonparametric(stat_in, stat_out, seed=seed))
        parametric.append(gdp_mu_parametric(stat_in, stat_out).mu_lower)
    assert sum(b > mu_step for b in nonparametric) <= MAX_EXCEEDING
    assert sum(b > mu_step for b in parametric) <= MAX_EXCEEDING
    assert np.median(parametric) > 0.8 * mu_step  # the parametric interval is tight on a true shift


def test_without_signal_the_per_step_bound_stays_valid_despite_choosing_among_50_thresholds():
    # At confidence 0.5 a valid bound is > 0 on pure noise in at most half the audits; we fail above
    # 26 of 40 (P[Binomial(40, 0.5) > 26] = 0.019). Measured: 5 of 40. Bounding on the half that
    # picked the threshold (no split) gives 31 of 40: the maximum of 50 correlated bounds.
    positive = 0
    for seed in range(AUDITS):
        rng = np.random.default_rng(seed)
        positive += gdp_mu_nonparametric(rng.standard_normal(400), rng.standard_normal(400), 0.5, seed) > 0
    assert positive <= 26


def test_fixed_threshold_per_step_bound_on_a_gaussian_step_exceeds_the_truth_at_most_5_percent():
    mu_step, steps, n = 0.35, 20, 500
    truth = gdp_epsilon(compose_gdp(mu_step, steps), DELTA)
    bounds = []
    for seed in range(AUDITS):
        rng = np.random.default_rng(seed)
        bounds.append(per_step_bound(mu_step + rng.standard_normal((steps, n)), rng.standard_normal((steps, n)),
                                     mu_step / 2, steps, DELTA).epsilon_lower)
    assert sum(b > truth for b in bounds) <= MAX_EXCEEDING
    assert np.median(bounds) > 0.5 * truth


def test_fixed_threshold_pure_bound_on_laplace_steps_exceeds_the_truth_at_most_5_percent():
    eps_step, steps, n = 1.0, 3, 2000  # Laplace(1) shifted by ε: exactly ε-DP per step
    bounds = []
    for seed in range(AUDITS):
        rng = np.random.default_rng(seed)
        bounds.append(per_step_bound(eps_step + rng.laplace(size=(steps, n)), rng.laplace(size=(steps, n)),
                                     eps_step, steps, DELTA, claim="pure").epsilon_lower)
    assert sum(b > steps * eps_step for b in bounds) <= MAX_EXCEEDING
    assert np.median(bounds) > 0.75 * steps * eps_step


def test_fixed_threshold_bound_is_zero_without_signal_in_most_audits():
    # no shift: at confidence 0.95 a positive bound is a false positive (at most 5 %; fail above 6 of 40)
    positive = sum(per_step_bound(*np.random.default_rng(seed).standard_normal((2, 20, 300)), 0.0, 20,
                                  DELTA).epsilon_lower > 0 for seed in range(AUDITS))
    assert positive <= MAX_EXCEEDING


# ---------------------------------------------------------------- power

def test_power_on_a_strong_gaussian_fdp_beats_one_run_which_is_well_above_zero():
    audit = one_run_audit(*gaussian_audit(2.0, 1000, seed=0), grid=(10, 50, 100), delta=DELTA)
    assert audit.one_run_epsilon > 3.0  # measured 3.83 (true ε 9.99 at δ = 1e-5)
    assert audit.fdp_epsilon > audit.one_run_epsilon + 2.0  # measured 6.26


@pytest.mark.parametrize("eps_true, n", [(8.0, 1000), (2.0, 20_000)])
def test_per_round_gdp_composed_over_20_steps_reaches_three_quarters_of_the_true_epsilon(eps_true, n):
    # n observations per step in each world; at ε = 2, 1000 give the valid bound only ~0.54×
    steps = 20
    mu_step = gdp_mu(eps_true, DELTA) / math.sqrt(steps)
    rng = np.random.default_rng(0)
    audit = per_round_gdp_audit(mu_step + rng.standard_normal((steps, n)), rng.standard_normal((steps, n)),
                                steps, DELTA)
    assert audit.epsilon_lower >= 0.75 * eps_true
    assert audit.epsilon_lower <= audit.epsilon_lower_parametric <= audit.epsilon_estimate
    assert audit.epsilon_estimate == pytest.approx(eps_true, rel=0.1)


def test_gaussian_fit_estimate_recovers_the_gaussian_epsilon_of_its_canaries():
    d, shift_sigmas = 10_000, 3.0
    rng = np.random.default_rng(0)
    cosines = (shift_sigmas + rng.standard_normal(500)) / math.sqrt(d)
    assert gaussian_fit_epsilon(cosines, d, DELTA) == pytest.approx(gdp_epsilon(shift_sigmas, DELTA), rel=0.1)
    # no signal: only the fitted variance's sampling error is left (up to 1.6 with 500 canaries)
    null = rng.standard_normal(5000) / math.sqrt(d)
    assert gaussian_fit_epsilon(null, d, DELTA) < 0.25


# ---------------------------------------------------------------- bad input

@pytest.mark.parametrize("call, word", [
    (lambda: one_run_epsilon(0, 0, 0), "m (canaries)"),
    (lambda: one_run_epsilon(100, 10, 11), "v (correct guesses)"),
    (lambda: one_run_epsilon(100, 101, 1), "r (guesses)"),
    (lambda: one_run_epsilon(100, 10, 5, delta=1.0), "delta"),
    (lambda: one_run_epsilon(100, 10, 5, delta=-0.1), "delta"),
    (lambda: one_run_epsilon(100, 10, 5, confidence=1.0), "confidence"),
    (lambda: one_run_fdp_mu(100, 10, 5, confidence=0.0), "confidence"),
    (lambda: gdp_epsilon(1.0, 1.5), "delta"),
    (lambda: gdp_mu(1.0, 0.0), "delta"),
    (lambda: guess_counts([0.1, 0.2], [True, False], 2, 1), "k_plus"),
    (lambda: gdp_mu_parametric([1.0], [0.0, 1.0]), "observations"),
    (lambda: gaussian_fit_epsilon([0.1, 0.2], 0, DELTA), "dimension"),
    (lambda: per_round_gdp_audit([0.0, 1.0], [0.0, 1.0], 0, DELTA), "steps"),
    (lambda: per_step_bound([0.0, 1.0], [0.0, 1.0], 0.5, 0, DELTA), "steps"),
    (lambda: per_step_bound([0.0, 1.0], [0.0, 1.0], 0.5, 1, DELTA, claim="rdp"), "claim"),
])
def test_bad_input_raises_one_line_naming_it(call, word):
    with pytest.raises(ValueError) as err:
        call()
    assert word in str(err.value) and "\n" not in str(err.value)
