"""Validity and power of attacks/dp/estimators.py on simulated mechanisms with a known ε.

Prints the markdown tables of docs/dp-audit-estimators.md (seeded, deterministic):
    OMP_NUM_THREADS=1 .venv/bin/python experiments/dp_estimators_table.py
"""
from __future__ import annotations

import math

import numpy as np
from scipy.stats import norm

from attacks.dp.estimators import (gaussian_fit_epsilon, gdp_epsilon, gdp_mu, gdp_mu_nonparametric,
                                   gdp_mu_parametric, guess_counts, one_run_audit, one_run_epsilon,
                                   one_run_fdp_epsilon, one_run_fdp_mu, per_round_gdp_audit)

DELTA = 1e-5


def gaussian_game(mu: float, m: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    coins = rng.random(m) < 0.5
    return mu * coins + rng.standard_normal(m), coins


def rr_game(eps: float, m: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    coins = rng.random(m) < 0.5
    keep = rng.random(m) < math.exp(eps) / (1 + math.exp(eps))
    return np.where(keep, coins, ~coins).astype(float), coins


def validity(audits: int = 200) -> None:
    print(f"| estimator | mechanism | truth | exceeding (of {audits}) | median bound |")
    print("|---|---|---|---|---|")
    rows = []
    b = [one_run_epsilon(1000, *guess_counts(s, c, int(s.sum()), 1000 - int(s.sum())))
         for s, c in (rr_game(1.0, 1000, i) for i in range(audits))]
    rows.append(("one-run ε (δ = 0), all 1000 guessed", "RR ε = 1, m = 1000", 1.0, b))
    mu_rr = 2 * float(norm.ppf(math.exp(1) / (1 + math.exp(1))))
    b = [one_run_fdp_mu(1000, *guess_counts(s, c, int(s.sum()), 1000 - int(s.sum())))
         for s, c in (rr_game(1.0, 1000, i) for i in range(audits))]
    rows.append(("f-DP μ, all 1000 guessed", "RR ε = 1 (μ = 2Φ⁻¹(e/(1+e)))", mu_rr, b))
    eps_g = gdp_epsilon(2.0, DELTA)
    a = [one_run_audit(*gaussian_game(2.0, 1000, i), grid=(10, 50, 100), delta=DELTA) for i in range(audits)]
    rows.append(("one-run ε, grid k ∈ {10, 50, 100}", "Gaussian μ = 2, m = 1000", eps_g,
                 [x.one_run_epsilon for x in a]))
    rows.append(("f-DP ε, grid k ∈ {10, 50, 100}", "Gaussian μ = 2, m = 1000", eps_g, [x.fdp_epsilon for x in a]))
    b = [one_run_fdp_mu(2000, *guess_counts(*gaussian_game(1.0, 2000, i), 50, 50)) for i in range(audits)]
    rows.append(("f-DP μ, k = 50", "Gaussian μ = 1, m = 2000", 1.0, b))
    nonpar, par = [], []
    for i in range(audits):
        rng = np.random.default_rng(i)
        x_in, x_out = 0.5 + rng.standard_normal(1000), rng.standard_normal(1000)
        nonpar.append(gdp_mu_nonparametric(x_in, x_out, seed=i))
        par.append(gdp_mu_parametric(x_in, x_out).mu_lower)
    rows.append(("per-step μ, non-parametric", "Gaussian step μ = 0.5, 1000 + 1000 obs.", 0.5, nonpar))
    rows.append(("per-step μ, parametric (approx.)", "Gaussian step μ = 0.5, 1000 + 1000 obs.", 0.5, par))
    for name, mech, truth, bounds in rows:
        print(f"| {name} | {mech} | {truth:.3f} | {sum(x > truth for x in bounds)} | {np.median(bounds):.3f} |")


def one_run_power(seeds: int = 10) -> None:
    eps_true = gdp_epsilon(2.0, DELTA)
    print(f"\nIdealised Gaussian mechanism μ = 2 (ε = {eps_true:.2f} at δ = 1e-5), median over {seeds} seeds:\n")
    print("| m | grid k (each way) | one-run ε | f-DP ε | cap at r = 2·max k (δ = 0) |")
    print("|---|---|---|---|---|")
    for m, grid in ((1000, (10, 50, 100, 200)), (10_000, (10, 50, 100, 500, 1000))):
        a = [one_run_audit(*gaussian_game(2.0, m, i), grid=grid, delta=DELTA) for i in range(seeds)]
        r = 2 * max(grid)
        q = 0.05 ** (1 / r)
        print(f"| {m} | {', '.join(map(str, grid))} | {np.median([x.one_run_epsilon for x in a]):.2f} | "
              f"{np.median([x.fdp_epsilon for x in a]):.2f} | {math.log(q / (1 - q)):.2f} |")


def one_run_fixed_k(seeds: int = 5) -> None:
    print(f"\nSame mechanism, one k fixed in advance (no grid), median over {seeds} seeds:\n")
    print("| m | k₊ = k₋ | one-run ε | f-DP ε |")
    print("|---|---|---|---|")
    for m, k in ((1000, 100), (10_000, 500), (100_000, 100), (100_000, 500)):
        counts = [guess_counts(*gaussian_game(2.0, m, i), k, k) for i in range(seeds)]
        print(f"| {m} | {k} | {np.median([one_run_epsilon(m, r, v, DELTA) for r, v in counts]):.2f} | "
              f"{np.median([one_run_fdp_epsilon(m, r, v, DELTA) for r, v in counts]):.2f} |")


def per_round_power(seeds: int = 10) -> None:
    print(f"\nPer-step GDP composed over T = 20 steps, ratio to the true ε (δ = 1e-5), median over {seeds} seeds:\n")
    print("| true ε | obs. per step per world | non-parametric bound | parametric bound (approx.) | estimate |")
    print("|---|---|---|---|---|")
    for eps in (8.0, 2.0):
        mu_step = gdp_mu(eps, DELTA) / math.sqrt(20)
        for n in (1000, 5000, 20_000):
            out = []
            for i in range(seeds):
                rng = np.random.default_rng(i)
                a = per_round_gdp_audit(mu_step + rng.standard_normal((20, n)), rng.standard_normal((20, n)), 20,
                                        DELTA, seed=i)
                out.append((a.epsilon_lower / eps, a.epsilon_lower_parametric / eps, a.epsilon_estimate / eps))
            med = np.median(out, axis=0)
            print(f"| {eps:g} | {n} | {med[0]:.2f} | {med[1]:.2f} | {med[2]:.2f} |")


def gaussian_fit(seeds: int = 10) -> None:
    d = 10_000
    print(f"\nAndrew et al. Gaussian-fit estimate (d = {d}, δ = 1e-5), median [max] over {seeds} seeds:\n")
    print("| canaries | null (no signal) | shift 3/√d (true ε " f"{gdp_epsilon(3.0, DELTA):.2f}) |")
    print("|---|---|---|")
    for k in (100, 500, 5000):
        null = [gaussian_fit_epsilon(np.random.default_rng(i).standard_normal(k) / math.sqrt(d), d, DELTA)
                for i in range(seeds)]
        sig = [gaussian_fit_epsilon((3 + np.random.default_rng(i).standard_normal(k)) / math.sqrt(d), d, DELTA)
               for i in range(seeds)]
        print(f"| {k} | {np.median(null):.2f} [{max(null):.2f}] | {np.median(sig):.2f} [{max(sig):.2f}] |")


if __name__ == "__main__":
    validity()
    one_run_power()
    one_run_fixed_k()
    per_round_power()
    gaussian_fit()
