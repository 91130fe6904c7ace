"""Empirical lower bounds on ε from a membership test's errors (pure maths, stateless).

An (ε, δ)-DP mechanism M bounds every test that tells M(D) (a "member" trial) from M(D') (a
"non-member" trial), D and D' neighbours: with FPR the rate of calling a non-member a member and
FNR the rate of calling a member a non-member (Kairouz et al. 2015; Jagielski et al., NeurIPS 2020;
Nasr et al., USENIX Security 2023),

    FPR + e^ε·FNR ≥ 1 − δ   and   FNR + e^ε·FPR ≥ 1 − δ,
so  ε ≥ max( log((1 − δ − FPR)/FNR), log((1 − δ − FNR)/FPR) ).

Rates measured on finitely many trials are replaced by their one-sided Clopper–Pearson upper
bounds FPR_u, FNR_u, each at confidence 1 − α/2, so that with probability ≥ 1 − α (union bound)
both hold and the bound is a valid lower bound on the true ε. When several thresholds are tried,
either every one is tested at α/m (Bonferroni over the m thresholds: `bound_over_thresholds`) or the
threshold is picked on one half of the trials and the bound computed on the other half at α
(`split_half_bound`). The trials must be independent draws (each from M(D) or M(D')); see
docs/attacks-membership.md for what that means for one trained model and many candidate nodes.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy.stats import beta


def clopper_pearson_upper(k: int, n: int, alpha: float) -> float:
    """One-sided upper confidence bound at level 1 − alpha on a binomial rate: k successes in n
    trials (1 when k = n or n = 0)."""
    if n <= 0 or k >= n:
        return 1.0
    return float(beta.ppf(1 - alpha, k + 1, n - k))


def clopper_pearson_lower(k: int, n: int, alpha: float) -> float:
    """One-sided lower confidence bound at level 1 − alpha (0 when k = 0)."""
    if n <= 0 or k <= 0:
        return 0.0
    return float(beta.ppf(alpha, k, n - k + 1))


def epsilon_from_rates(fpr: float, fnr: float, delta: float = 0.0) -> float:
    """max(0, log((1 − δ − FPR)/FNR), log((1 − δ − FNR)/FPR)): the ε any (ε, δ)-DP mechanism
    needs for a test with these error rates (inf where a rate is 0 and the other is < 1 − δ)."""
    def side(a: float, b: float) -> float:
        num = 1 - delta - a
        if num <= 0:
            return 0.0
        return math.inf if b <= 0 else math.log(num / b)
    return max(0.0, side(fpr, fnr), side(fnr, fpr))


@dataclass(frozen=True)
class Bound:
    """One threshold's counts and bound. `epsilon_lb`: valid at `confidence`; `epsilon_point`: the
    same formula on the raw rates (no interval: an estimate, not a bound)."""
    epsilon_lb: float
    epsilon_point: float
    threshold: float
    tp: int
    fn: int
    fp: int
    tn: int
    confidence: float

    def as_dict(self) -> dict:
        return asdict(self)


def bound_from_counts(tp: int, fn: int, fp: int, tn: int, delta: float = 0.0, alpha: float = 0.05,
                      threshold: float = math.nan) -> Bound:
    """The ε lower bound of one test from its confusion counts, valid with probability ≥ 1 − alpha:
    FPR_u and FNR_u are Clopper–Pearson upper bounds at 1 − alpha/2 each."""
    fpr_u = clopper_pearson_upper(fp, fp + tn, alpha / 2)
    fnr_u = clopper_pearson_upper(fn, tp + fn, alpha / 2)
    point = epsilon_from_rates(fp / max(fp + tn, 1), fn / max(tp + fn, 1), delta)
    return Bound(epsilon_from_rates(fpr_u, fnr_u, delta), point, float(threshold), int(tp), int(fn), int(fp), int(tn),
                 1 - alpha)


def _counts(scores: np.ndarray, members: np.ndarray, t: float) -> tuple[int, int, int, int]:
    called = scores >= t
    return (int((called & members).sum()), int((~called & members).sum()), int((called & ~members).sum()),
            int((~called & ~members).sum()))


def candidate_thresholds(scores: np.ndarray, max_thresholds: int = 50) -> np.ndarray:
    """Up to `max_thresholds` thresholds at evenly spaced quantiles of the scores (a member is
    called where score ≥ threshold)."""
    scores = np.asarray(scores, dtype=float)
    if scores.size == 0:
        return np.zeros(0)
    qs = np.unique(np.quantile(scores, np.linspace(0, 1, max_thresholds + 2)[1:-1], method="nearest"))
    return qs


def bound_over_thresholds(scores, members, delta: float = 0.0, alpha: float = 0.05,
                          thresholds=None, max_thresholds: int = 50) -> Bound:
    """The largest bound over the thresholds, each tested at alpha/m (Bonferroni over the m
    thresholds), so the maximum is valid at confidence 1 − alpha."""
    s, m = np.asarray(scores, dtype=float), np.asarray(members, dtype=bool)
    ts = candidate_thresholds(s, max_thresholds) if thresholds is None else np.asarray(thresholds, dtype=float)
    if ts.size == 0:
        return Bound(0.0, 0.0, math.nan, 0, int(m.sum()), 0, int((~m).sum()), 1 - alpha)
    bounds = [bound_from_counts(*_counts(s, m, t), delta=delta, alpha=alpha / ts.size, threshold=t) for t in ts]
    best = max(bounds, key=lambda b: (b.epsilon_lb, b.epsilon_point))
    return Bound(best.epsilon_lb, best.epsilon_point, best.threshold, best.tp, best.fn, best.fp, best.tn, 1 - alpha)


def split_half_bound(scores, members, delta: float = 0.0, alpha: float = 0.05, seed: int = 0,
                     max_thresholds: int = 50) -> Bound:
    """Pick the threshold on a random half of the trials (the one whose bound is largest there,
    Bonferroni-free since it is only a choice), then bound on the other half at 1 − alpha; the
    selection half never enters the reported counts."""
    s, m = np.asarray(scores, dtype=float), np.asarray(members, dtype=bool)
    perm = np.random.default_rng(seed).permutation(s.size)
    pick, test = perm[: s.size // 2], perm[s.size // 2:]
    ts = candidate_thresholds(s[pick], max_thresholds)
    if ts.size == 0:
        return bound_from_counts(*_counts(s[test], m[test], math.inf), delta=delta, alpha=alpha)
    def quality(t: float) -> tuple[float, float]:
        bound = bound_from_counts(*_counts(s[pick], m[pick], t), delta=delta, alpha=alpha).epsilon_lb
        return bound, epsilon_from_rates(*_rates(s[pick], m[pick], t), delta)  # ties: the better estimate
    chosen = max(ts, key=quality)
    return bound_from_counts(*_counts(s[test], m[test], chosen), delta=delta, alpha=alpha, threshold=chosen)


def _rates(s: np.ndarray, m: np.ndarray, t: float) -> tuple[float, float]:
    tp, fn, fp, tn = _counts(s, m, t)
    return fp / max(fp + tn, 1), fn / max(tp + fn, 1)


def max_certifiable_epsilon(members: int, non_members: int, delta: float = 0.0, alpha: float = 0.05) -> float:
    """The largest bound these trial counts can give at all (a perfect test: no error at all): the
    ceiling of any audit of this size, whatever the mechanism's true ε."""
    return bound_from_counts(members, 0, 0, non_members, delta=delta, alpha=alpha).epsilon_lb
