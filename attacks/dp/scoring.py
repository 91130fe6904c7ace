"""From canary scores to the bounds every dp-audit design reports (auditor side; pure maths over the
scores, the coins and the claim). The designs differ in their canaries and statistics, not in this."""
from __future__ import annotations

import math

import numpy as np

from attacks.dp.dp_audit_bound import bound_over_thresholds, split_half_bound
from attacks.dp.estimators import (PerStepBound, gdp_mu, guess_counts, one_run_epsilon, one_run_fdp_epsilon,
                                   per_round_gdp_audit)

K_FRACTIONS = (0.0005, 0.001, 0.002, 0.003, 0.005, 0.007, 0.01, 0.015, 0.02, 0.03, 0.05, 0.1, 0.2, 0.5)
BASELINE = {"epsilon_lower_bound": 0.0, "kind": "guessing without the view: each guess right with "
                                                "probability 1/2, whose bound at any k is 0"}


def pick_k(m: int, mu: float, bound) -> int:
    """The k (guesses each way) maximising `bound(m, r, v)` at the mean correct count of four simulated
    games of a μ-GDP mechanism (scores μ·b + N(0, 1), seeded: public, chosen before any real score is seen);
    v(k) as `guess_counts` counts it, from one stable sort per game."""
    ks = sorted({max(1, int(m * f)) for f in K_FRACTIONS if 2 * max(1, int(m * f)) <= m}) or [max(1, m // 2)]
    rng = np.random.default_rng(0x4B)
    cums = []
    for _ in range(4):
        c = rng.random(m) < 0.5
        cums.append(np.cumsum(c[np.argsort(mu * c + rng.standard_normal(m), kind="stable")]))

    def expected(k: int) -> float:  # out-guesses right: the bottom k's outs; in-guesses right: the top k's ins
        v = round(float(np.mean([(k - cum[k - 1]) + (cum[-1] - cum[m - k - 1]) for cum in cums])))
        return bound(m, 2 * k, v)
    return max(ks, key=expected)


def score_bounds(scores: np.ndarray, coins: np.ndarray, epsilon_accountant: float, delta: float,
                 confidence: float, seed: int) -> tuple[dict[str, float], dict]:
    """The valid bounds on one score per canary: the one-run bound and its f-DP refinement (k each fixed by
    `pick_k` on the claimed μ), the split-half and Bonferroni membership bounds. Returns ({name: ε}, the
    finding's metrics for them)."""
    m = len(coins)
    mu_claim = gdp_mu(epsilon_accountant, delta) if math.isfinite(epsilon_accountant) else 10.0
    k_one = pick_k(m, mu_claim, lambda m, r, v: one_run_epsilon(m, r, v, delta, confidence))
    k_fdp = pick_k(m, mu_claim, lambda m, r, v: one_run_fdp_epsilon(m, r, v, delta, confidence))
    one, fdp = guess_counts(scores, coins, k_one, k_one), guess_counts(scores, coins, k_fdp, k_fdp)
    bounds = {"one_run": one_run_epsilon(m, *one, delta, confidence),
              "one_run_fdp": one_run_fdp_epsilon(m, *fdp, delta, confidence),
              "split_half": split_half_bound(scores, coins, delta, 1 - confidence, seed).epsilon_lb,
              "bonferroni": bound_over_thresholds(scores, coins, delta, 1 - confidence).epsilon_lb}
    metrics = {"one_run_epsilon": bounds["one_run"], "one_run_k": k_one, "one_run_correct": f"{one[1]}/{one[0]}",
               "one_run_fdp_epsilon": bounds["one_run_fdp"], "one_run_fdp_k": k_fdp,
               "one_run_fdp_correct": f"{fdp[1]}/{fdp[0]}",
               "split_half_epsilon": bounds["split_half"], "bonferroni_epsilon": bounds["bonferroni"]}
    return bounds, metrics


def per_round_metrics(per_step: PerStepBound, stat_in: np.ndarray, stat_out: np.ndarray, rounds: int,
                      delta: float, confidence: float, seed: int) -> dict:
    """The finding's per-round entries: the per-round bound and its per-step μ, and the per-round GDP
    estimate (no guarantee) from the same observations."""
    gdp = per_round_gdp_audit(stat_in, stat_out, rounds, delta, confidence, seed)
    return {"per_round_epsilon": per_step.epsilon_lower, "per_round_mu_step_lower": per_step.step_lower,
            "per_round_observations": f"{per_step.ins}+{per_step.outs}", "gdp_mu_step_estimate": gdp.mu_step,
            "gdp_epsilon_estimate": gdp.epsilon_estimate,
            "gdp_epsilon_parametric_lower_estimate": gdp.epsilon_lower_parametric}


def verdict(bound: float, epsilon_accountant: float) -> dict:
    """`caught` (the valid bound above the claimed ε) and the bound's ratio to it."""
    return {"caught": bound > epsilon_accountant, "bound_over_accountant": bound / epsilon_accountant}
