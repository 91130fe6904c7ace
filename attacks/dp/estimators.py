"""Estimators of ε from a DP audit's canary statistics (pure maths, stateless).

Valid lower bounds (each holds with probability ≥ `confidence` over the mechanism's and the
canaries' randomness, under the assumption stated in its docstring):
- `one_run_epsilon`: Steinke, Nasr and Jagielski, "Privacy Auditing with One (1) Training Run",
  NeurIPS 2023 — against any (ε, δ)-DP claim.
- `one_run_fdp_epsilon`: Mahloujifar, Melis and Chaudhuri, "Auditing f-Differential Privacy in One
  Run", ICML 2025 — against the claim "the mechanism is μ-GDP" (Gaussian trade-off), reported as
  the ε at δ of the μ it refutes.
- `gdp_mu_nonparametric` (per step) and its composition in `per_round_gdp_audit` — Nasr, Hayes,
  Steinke, Balle, Tramèr, Jagielski, Carlini and Terzis, "Tight Auditing of Differentially Private
  Machine Learning", USENIX Security 2023 — against the claim "every step is μ-GDP".
- `per_step_bound`: the same per-step test at a threshold the audit's design fixes in advance (no split),
  composed as the accountant composes: √T·μ (Gaussian steps) or T·ε (pure-DP steps).

Estimates (no guarantee; a point and an interval under a Gaussian model):
- `gdp_mu_parametric` and the composed `epsilon_estimate` of `per_round_gdp_audit`.
- `gaussian_fit_epsilon`: Andrew, Kairouz, Oh, Oprea, McMahan and Suriyakumar, "One-shot Empirical
  Privacy Estimation for Federated Learning", ICLR 2024.

GDP ↔ (ε, δ) (Dong, Roth and Su, "Gaussian Differential Privacy", JRSS-B 2022, Corollary 2.13):
δ(ε) = Φ(−ε/μ + μ/2) − e^ε·Φ(−ε/μ − μ/2). ε is in nats throughout; confidence is in (0, 1).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy.optimize import brentq
from scipy.special import expit, log_ndtr, ndtr, ndtri
from scipy.stats import binom, norm

from attacks.dp.dp_audit_bound import candidate_thresholds, clopper_pearson_upper

_XTOL = 1e-9


# ---------------------------------------------------------------- checks

def _check_confidence(confidence: float) -> float:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    return 1 - confidence


def _check_delta(delta: float) -> None:
    if not 0 <= delta < 1:
        raise ValueError(f"delta must be in [0, 1), got {delta}")


def _check_game(m: int, r: int, v: int) -> None:
    if m < 1:
        raise ValueError(f"m (canaries) must be >= 1, got {m}")
    if not 0 <= r <= m:
        raise ValueError(f"r (guesses) must be in [0, m={m}], got {r}")
    if not 0 <= v <= r:
        raise ValueError(f"v (correct guesses) must be in [0, r={r}], got {v}")


def _largest_root(objective, lo: float, hi: float = 1.0) -> float:
    """The root of a function positive at `lo` and eventually ≤ 0 (hi doubled until it is)."""
    hi = max(hi, 2 * lo)
    while objective(hi) > 0:
        lo, hi = hi, 2 * hi
        if hi > 1e4:
            return math.inf
    return float(brentq(objective, lo, hi, xtol=_XTOL))


# ---------------------------------------------------------------- GDP ↔ (ε, δ)

def gdp_delta(mu: float, epsilon: float) -> float:
    """δ(ε) of a μ-GDP mechanism (Dong, Roth, Su, Cor. 2.13); 0 for μ ≤ 0. Log domain for stability."""
    if mu <= 0:
        return 0.0
    la = log_ndtr(-epsilon / mu + mu / 2)
    lb = epsilon + log_ndtr(-epsilon / mu - mu / 2)
    return float(-math.exp(la) * math.expm1(lb - la)) if lb < la else 0.0


def gdp_epsilon(mu: float, delta: float) -> float:
    """The ε at which a μ-GDP mechanism is (ε, δ)-DP (the smallest such ε ≥ 0); inf for δ = 0, μ > 0."""
    _check_delta(delta)
    if mu <= 0 or gdp_delta(mu, 0.0) <= delta:
        return 0.0
    if mu == math.inf or delta == 0:
        return math.inf
    return _largest_root(lambda e: math.log(max(gdp_delta(mu, e), 1e-300)) - math.log(delta), 0.0)


def gdp_mu(epsilon: float, delta: float) -> float:
    """The μ whose GDP curve passes through (ε, δ), i.e. sensitivity/σ of the Gaussian mechanism
    calibrated exactly to (ε, δ). δ in (0, 1), ε ≥ 0."""
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    if epsilon < 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon}")
    return float(brentq(lambda mu: gdp_delta(mu, epsilon) - delta, 1e-12, 2 * epsilon + 40, xtol=_XTOL))


def compose_gdp(mu_step: float, steps: int) -> float:
    """μ of T adaptive compositions of a μ_step-GDP step: √T·μ_step (Dong, Roth, Su, Cor. 3.3)."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    return math.sqrt(steps) * mu_step


# ---------------------------------------------------------------- the one-run guessing game

def guess_counts(scores, coins, k_plus: int, k_minus: int) -> tuple[int, int]:
    """(r, v) of the guessing game: the k₊ highest scores guessed "in", the k₋ lowest "out", the rest
    abstained; v counts guesses equal to the coin. scores [m] (higher = more likely in), coins [m]
    bool (True = included). Ties are ordered by index (stable sort), which the coins do not affect."""
    s, c = np.asarray(scores, dtype=float), np.asarray(coins, dtype=bool)
    if s.shape != c.shape or s.ndim != 1:
        raise ValueError(f"scores and coins must be 1-D of the same length, got {s.shape} and {c.shape}")
    if k_plus < 0 or k_minus < 0 or k_plus + k_minus > s.size:
        raise ValueError(f"k_plus, k_minus must be >= 0 with k_plus + k_minus <= m={s.size}, got {k_plus}, {k_minus}")
    order = np.argsort(s, kind="stable")
    out_hits = int((~c[order[:k_minus]]).sum())
    in_hits = int(c[order[s.size - k_plus:]].sum()) if k_plus else 0
    return k_plus + k_minus, out_hits + in_hits


def one_run_p_value(m: int, r: int, v: int, epsilon: float, delta: float = 0.0) -> float:
    """P-value of "the mechanism is (ε, δ)-DP" given v correct of r guesses among m canaries.

    Steinke, Nasr, Jagielski (NeurIPS 2023, Thm. 5.2 and its Algorithm): with q = e^ε/(1+e^ε) and
    W ~ Binomial(r, q), β = P[W ≥ v]; for δ > 0 the bound adds 2mδ·max_{1≤i≤v} (P[W ≥ v−i] − β)/i
    (the form used by jax_privacy's auditing.py, github.com/google-deepmind/jax_privacy).
    """
    _check_game(m, r, v)
    _check_delta(delta)
    q = float(expit(epsilon))
    beta = float(binom.sf(v - 1, r, q))
    if delta == 0 or v == 0:
        return beta
    i = np.arange(1, v + 1)
    extra = float(np.max((binom.sf(v - i - 1, r, q) - beta) / i))
    return min(1.0, beta + 2 * m * delta * extra)


def one_run_epsilon(m: int, r: int, v: int, delta: float = 0.0, confidence: float = 0.95) -> float:
    """Valid lower bound on ε (nats) at `confidence`: the largest ε whose (ε, δ)-DP claim the game's
    outcome still rejects at level 1 − confidence (0 if none). Assumes each canary's coin is an
    independent fair coin and the guesses depend only on the mechanism's output. With all r guesses
    right and δ = 0 it is log(q/(1 − q)), q = (1 − confidence)^(1/r): the cap set by r."""
    alpha = _check_confidence(confidence)
    if one_run_p_value(m, r, v, 0.0, delta) > alpha:
        return 0.0
    return _largest_root(lambda e: alpha - one_run_p_value(m, r, v, e, delta), 0.0)


def _gaussian_fdp_objective(m: int, r: int, v: int, mu: float, alpha: float) -> float:
    """> 0 iff the outcome rejects "μ-GDP" at level alpha. Mahloujifar, Melis, Chaudhuri (ICML 2025),
    the recursion of their capped reconstruction audit ('audit_rh_with_cap'; also jax_privacy's
    auditing.py) with the Gaussian trade-off: inverse blow-up x ↦ Φ(Φ⁻¹(x) − μ)."""
    tp, fp = alpha * v / m, alpha * (r - v) / m
    for i in range(v - 1, -1, -1):
        fp_new = max(fp, float(ndtr(ndtri(tp) - mu)))
        if fp_new == fp:
            break
        tp = min(tp + i / (r - i) * (fp_new - fp), 1.0)
        fp = fp_new
    return tp + fp - r / m


def one_run_fdp_mu(m: int, r: int, v: int, confidence: float = 0.95) -> float:
    """Valid lower bound on μ at `confidence` against the claim "the mechanism is μ-GDP": the largest
    μ the game's outcome rejects (0 if none). Same assumptions as `one_run_epsilon`."""
    _check_game(m, r, v)
    alpha = _check_confidence(confidence)
    if r == 0 or _gaussian_fdp_objective(m, r, v, 1e-9, alpha) <= 0:
        return 0.0
    return _largest_root(lambda mu: _gaussian_fdp_objective(m, r, v, mu, alpha), 1e-9)


def one_run_fdp_epsilon(m: int, r: int, v: int, delta: float, confidence: float = 0.95) -> float:
    """`one_run_fdp_mu` as ε at δ (`gdp_epsilon`): a valid lower bound on the ε at δ of the tightest
    Gaussian trade-off curve the mechanism can satisfy; NOT a bound on a non-Gaussian mechanism's
    (ε, δ): randomised response at ε₀ is only 2Φ⁻¹(e^ε₀/(1+e^ε₀))-GDP, whose ε at small δ exceeds ε₀."""
    return gdp_epsilon(one_run_fdp_mu(m, r, v, confidence), delta)


@dataclass(frozen=True)
class OneRunAudit:
    """Both one-run bounds over a public grid of k (k₊ = k₋ = k), Bonferroni over the grid: each
    `*_epsilon` is valid at `confidence` on its own. `*_k`: the grid point that gave it."""
    one_run_epsilon: float
    one_run_k: int
    fdp_epsilon: float
    fdp_k: int
    m: int
    confidence: float

    def as_dict(self) -> dict:
        return asdict(self)


def one_run_audit(scores, coins, grid, delta: float, confidence: float = 0.95) -> OneRunAudit:
    """Steinke's and the Gaussian f-DP bound at each k of `grid` (k₊ = k₋ = k guesses each way),
    each tested at (1 − confidence)/len(grid) so that the maximum over the grid stays valid
    (Bonferroni; the grid must be fixed before the scores are seen). scores, coins [m]."""
    alpha = _check_confidence(confidence)
    ks = [int(k) for k in grid]
    if not ks:
        raise ValueError("grid must name at least one k")
    m = int(np.asarray(scores).size)
    level = 1 - alpha / len(ks)
    one_run, fdp = [], []
    for k in ks:
        r, v = guess_counts(scores, coins, k, k)
        one_run.append(one_run_epsilon(m, r, v, delta, level))
        fdp.append(one_run_fdp_epsilon(m, r, v, delta, level))
    i, j = int(np.argmax(one_run)), int(np.argmax(fdp))
    return OneRunAudit(one_run[i], ks[i], fdp[j], ks[j], m, confidence)


# ---------------------------------------------------------------- per-step GDP (Nasr et al. 2023)

@dataclass(frozen=True)
class GdpEstimate:
    """μ of one step: `mu` the point estimate; `mu_lower`, `mu_upper` one-sided bounds each at
    `confidence` (together a 2·confidence − 1 interval)."""
    mu: float
    mu_lower: float
    mu_upper: float
    confidence: float


def _pair(stat_in, stat_out) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.ravel(np.asarray(stat_in, dtype=float)), np.ravel(np.asarray(stat_out, dtype=float))
    if a.size < 2 or b.size < 2:
        raise ValueError(f"need >= 2 in-world and >= 2 out-world observations, got {a.size} and {b.size}")
    return a, b


def gdp_mu_parametric(stat_in, stat_out, confidence: float = 0.95) -> GdpEstimate:
    """Estimate of μ = (mean_in − mean_out)/pooled std from per-step observations (arrays, any
    shape; pooled over steps). Its interval is the large-sample normal one for a standardised mean
    difference, Var ≈ 1/n_in + 1/n_out + μ²/(2(n_in + n_out)) (Hedges and Olkin 1985, Eq. 5.14):
    approximate, and only for a Gaussian shift with one variance in both worlds."""
    alpha = _check_confidence(confidence)
    a, b = _pair(stat_in, stat_out)
    df = a.size + b.size - 2
    pooled = math.sqrt(((a.size - 1) * a.var(ddof=1) + (b.size - 1) * b.var(ddof=1)) / df)
    if pooled == 0:
        raise ValueError("stat_in and stat_out have zero pooled variance")
    mu = float((a.mean() - b.mean()) / pooled)
    se = math.sqrt(1 / a.size + 1 / b.size + mu * mu / (2 * (a.size + b.size)))
    z = float(norm.isf(alpha))
    return GdpEstimate(mu, mu - z * se, mu + z * se, confidence)


def gdp_mu_nonparametric(stat_in, stat_out, confidence: float = 0.95, seed: int = 0,
                         max_thresholds: int = 50) -> float:
    """Valid lower bound at `confidence` on a step's μ (claim: the step is μ-GDP), from observations
    that are independent draws of that step in each world (pooled over steps). A seeded random half
    of each world picks the threshold (largest μ there); on the other half, with FPR_u, FNR_u the
    Clopper–Pearson upper bounds at 1 − α/2 each, μ ≥ Φ⁻¹(1 − FPR_u) − Φ⁻¹(FNR_u) (Dong, Roth, Su
    Eq. 6; Nasr et al. 2023). 0 when there is no evidence."""
    alpha = _check_confidence(confidence)
    a, b = _pair(stat_in, stat_out)
    rng = np.random.default_rng(seed)
    a, b = a[rng.permutation(a.size)], b[rng.permutation(b.size)]
    (a_pick, a_test), (b_pick, b_test) = np.array_split(a, 2), np.array_split(b, 2)

    def mu_at(t: float, ins: np.ndarray, outs: np.ndarray, level: float | None) -> float:
        fn, fp = int((ins < t).sum()), int((outs >= t).sum())
        if level is None:
            fnr, fpr = fn / ins.size, fp / outs.size
        else:
            fnr, fpr = clopper_pearson_upper(fn, ins.size, level), clopper_pearson_upper(fp, outs.size, level)
        return float(ndtri(1 - fpr) - ndtri(fnr))

    ts = candidate_thresholds(np.r_[a_pick, b_pick], max_thresholds)
    chosen = max(ts, key=lambda t: mu_at(t, a_pick, b_pick, alpha / 2))
    return max(0.0, mu_at(chosen, a_test, b_test, alpha / 2))


@dataclass(frozen=True)
class PerRoundGdpAudit:
    """Per-step μ and their composition over `steps` as ε at `delta`.
    `epsilon_lower`: valid lower bound at `confidence` against "every step is μ-GDP" (non-parametric).
    `epsilon_lower_parametric`: approximate (large-sample) bound, only for a Gaussian-shift statistic.
    `epsilon_estimate`: point estimate, no guarantee."""
    mu_step: float
    mu_step_lower: float
    mu_step_lower_parametric: float
    steps: int
    epsilon_estimate: float
    epsilon_lower: float
    epsilon_lower_parametric: float
    delta: float
    confidence: float

    def as_dict(self) -> dict:
        return asdict(self)


def per_round_gdp_audit(stat_in, stat_out, steps: int, delta: float, confidence: float = 0.95,
                        seed: int = 0) -> PerRoundGdpAudit:
    """Estimate and bound a step's μ from per-step observations stat_in [T, n_in] and stat_out
    [T, n_out] (or flat; pooled, which assumes every step is the same mechanism), compose them over
    `steps` (√T·μ) and convert to ε at δ."""
    _check_delta(delta)
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    param = gdp_mu_parametric(stat_in, stat_out, confidence)
    lower = gdp_mu_nonparametric(stat_in, stat_out, confidence, seed)

    def eps(mu: float) -> float:
        return gdp_epsilon(compose_gdp(max(mu, 0.0), steps), delta)
    return PerRoundGdpAudit(param.mu, lower, max(param.mu_lower, 0.0), steps, eps(param.mu), eps(lower),
                            eps(param.mu_lower), delta, confidence)


CLAIMS = ("gaussian", "pure")


@dataclass(frozen=True)
class PerStepBound:
    """A fixed-threshold test of the per-step claim, composed over `steps` as the accountant composes.
    `step_lower`: μ (claim "gaussian") or ε (claim "pure") per step; `epsilon_lower`: its composition,
    ε at `delta` (√T·μ, Dong-Roth-Su) or T·ε (pure DP's basic composition)."""
    claim: str
    threshold: float
    false_positives: int
    outs: int
    false_negatives: int
    ins: int
    step_lower: float
    steps: int
    epsilon_lower: float
    delta: float
    confidence: float

    def as_dict(self) -> dict:
        return asdict(self)


def per_step_bound(stat_in, stat_out, threshold: float, steps: int, delta: float, claim: str = "gaussian",
                   confidence: float = 0.95) -> PerStepBound:
    """Valid lower bound at `confidence` on ε against a claim that composes `steps` identical steps,
    each μ-GDP (claim "gaussian": DP-FedAvg / DP-SGD at sampling rate 1) or ε-DP (claim "pure":
    Laplace releases), from per-step observations of the canaries in each world (pooled over steps).

    The threshold is fixed by the audit's design before the observations are seen (e.g. half the
    canary's known shift), so no split and no multiplicity correction: "in" is called where an
    observation is >= threshold. FPR_u, FNR_u are Clopper-Pearson upper bounds at 1 − α/2 each, and
    per step μ ≥ Φ⁻¹(1 − FPR_u) − Φ⁻¹(FNR_u) (Dong, Roth, Su Eq. 6), or ε ≥ log((1 − FNR_u)/FPR_u).
    Assumes: given the past, the observations of one step are independent draws of that step's
    mechanism in their world (canaries on disjoint coordinates under i.i.d. noise), as in Nasr et
    al. (USENIX Security 2023). The composed ε bounds the claim as composed (T identical steps), not an
    arbitrary mechanism's ε."""
    alpha = _check_confidence(confidence)
    _check_delta(delta)
    if claim not in CLAIMS:
        raise ValueError(f"claim must be one of {', '.join(CLAIMS)}, got {claim!r}")
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    a, b = _pair(stat_in, stat_out)
    fn, fp = int((a < threshold).sum()), int((b >= threshold).sum())
    fnr_u = clopper_pearson_upper(fn, a.size, alpha / 2)
    fpr_u = clopper_pearson_upper(fp, b.size, alpha / 2)
    if claim == "gaussian":
        step = max(0.0, float(ndtri(1 - fpr_u) - ndtri(fnr_u))) if fpr_u < 1 and fnr_u < 1 else 0.0
        total = gdp_epsilon(compose_gdp(step, steps), delta)
    else:
        step = max(0.0, math.log((1 - fnr_u) / fpr_u)) if fnr_u < 1 else 0.0
        total = steps * step
    return PerStepBound(claim, float(threshold), fp, b.size, fn, a.size, step, steps, total, delta, confidence)


# ---------------------------------------------------------------- Andrew et al. 2024

def gaussian_pair_delta(epsilon: float, mean_p: float, std_p: float, mean_q: float, std_q: float) -> float:
    """Hockey-stick divergence sup_S P(S) − e^ε·Q(S) between P = N(mean_p, std_p²) and
    Q = N(mean_q, std_q²): S = {x : log p(x)/q(x) > ε}, a quadratic's super-level set, solved exactly."""
    if std_p <= 0 or std_q <= 0:
        raise ValueError(f"standard deviations must be > 0, got {std_p} and {std_q}")
    # log p/q − ε = a x² + b x + c
    a = 1 / (2 * std_q ** 2) - 1 / (2 * std_p ** 2)
    b = mean_p / std_p ** 2 - mean_q / std_q ** 2
    c = mean_q ** 2 / (2 * std_q ** 2) - mean_p ** 2 / (2 * std_p ** 2) + math.log(std_q / std_p) - epsilon

    def mass(lo: float, hi: float) -> tuple[float, float]:  # P and Q of the interval (lo, hi)
        def one(mean: float, std: float) -> float:
            return float(norm.cdf(hi, mean, std) - norm.cdf(lo, mean, std)) if hi > lo else 0.0
        return one(mean_p, std_p), one(mean_q, std_q)

    if abs(a) < 1e-12 * max(abs(b), 1e-300):
        if b == 0:
            p, q = (1.0, 1.0) if c > 0 else (0.0, 0.0)
        else:
            x0 = -c / b
            p, q = mass(x0, math.inf) if b > 0 else mass(-math.inf, x0)
    else:
        disc = b * b - 4 * a * c
        if disc <= 0:
            p, q = (1.0, 1.0) if a > 0 else (0.0, 0.0)
        else:
            root = -(b + math.copysign(math.sqrt(disc), b)) / 2
            x1, x2 = sorted((root / a, c / root))
            if a > 0:  # outside the roots
                p1, q1 = mass(-math.inf, x1)
                p2, q2 = mass(x2, math.inf)
                p, q = p1 + p2, q1 + q2
            else:
                p, q = mass(x1, x2)
    if q == 0:
        return p
    log_eq = epsilon + math.log(q)  # e^ε·Q(S) overflows a float long before it stops mattering: P(S) <= 1
    return max(0.0, p - math.exp(log_eq)) if log_eq < 700 else 0.0


def gaussian_fit_epsilon(statistics, dimension: int, delta: float) -> float:
    """Andrew et al. (ICLR 2024) one-shot estimate: fit N(μ̂, σ̂²) to the canaries' statistics [k]
    (cosines of each canary's unit direction with the final model delta) and return the ε at δ
    between it and the null N(0, 1/d) (a random unit direction's cosine in dimension d), the larger
    of both orders. An estimate, not a bound."""
    _check_delta(delta)
    if delta == 0:
        raise ValueError("delta must be in (0, 1) for the Gaussian-fit estimate, got 0")
    if dimension < 1:
        raise ValueError(f"dimension must be >= 1, got {dimension}")
    s = np.ravel(np.asarray(statistics, dtype=float))
    if s.size < 2:
        raise ValueError(f"need >= 2 canary statistics, got {s.size}")
    mean, std, null_std = float(s.mean()), float(s.std(ddof=1)), 1 / math.sqrt(dimension)
    if std == 0:
        raise ValueError("canary statistics have zero variance")

    def eps(p: tuple[float, float], q: tuple[float, float]) -> float:
        if gaussian_pair_delta(0.0, *p, *q) <= delta:
            return 0.0
        return _largest_root(lambda e: gaussian_pair_delta(e, *p, *q) - delta, 0.0)
    fitted, null = (mean, std), (0.0, null_std)
    return max(eps(fitted, null), eps(null, fitted))
