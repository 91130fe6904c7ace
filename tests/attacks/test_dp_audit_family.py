"""dp-audit's `family=m`: m audits of one mechanism read as one test. The finding gives, beside the bound at
`confidence`, the design's bound from the same scores at the Bonferroni level 1 − (1 − confidence)/m."""
import numpy as np
import pytest

from attacks.dp.dp_audit import DPAudit
from attacks.dp.lapgraph_audit import CanaryPairAudit, PairAuditAux, PairAuditTruth


def laplace_game(epsilon: float, m: int = 20000, seed: int = 0):
    """scores [m] of the exactly ε-DP canary entries (coin + Lap(1/ε)), with the truth and aux to score them."""
    rng = np.random.default_rng(seed)
    coins = rng.random(m) < 0.5
    scores = coins + rng.laplace(0.0, 1.0 / epsilon, m)
    return scores, PairAuditTruth(coins, epsilon, epsilon), PairAuditAux(m, epsilon)


def scored(family: int, game, **params) -> dict:
    audit = DPAudit(family=family, **params)
    audit.design = CanaryPairAudit(**params)  # what prepare picks on a LapGraph run
    metrics, _ = audit.score(*game)
    return metrics


def test_family_of_one_reports_the_per_audit_bound_only():
    metrics = scored(1, laplace_game(1.0))
    assert not any("family" in key for key in metrics)


@pytest.mark.parametrize("family", [2, 6, 12])
def test_the_family_bound_is_the_designs_bound_at_the_bonferroni_level(family):
    game = laplace_game(1.0, seed=family)
    metrics = scored(family, game)
    level = 1 - 0.05 / family
    alone, _ = CanaryPairAudit(confidence=level).score(*game)
    assert metrics["confidence_family"] == pytest.approx(level)
    assert metrics["epsilon_lower_bound_family"] == alone["epsilon_lower_bound"]
    assert metrics["caught_family"] == alone["caught"]
    assert metrics["bound_over_accountant_family"] == alone["bound_over_accountant"]
    assert 0 < metrics["epsilon_lower_bound_family"] < metrics["epsilon_lower_bound"]
    assert metrics["confidence"] == 0.95  # the per-audit entries keep the run's level


def test_the_family_level_keeps_catching_noise_at_half_its_scale():
    """Claimed ε = 1, noise of scale 1/2 (the entries are 2-DP, as mutant LPG1): caught by a family of 12."""
    scores, truth, aux = laplace_game(2.0, seed=3)
    metrics = scored(12, (scores, PairAuditTruth(truth.coins, 1.0, 1.0), PairAuditAux(aux.count, 1.0)))
    assert metrics["caught_family"] and metrics["epsilon_lower_bound_family"] > 1.5


def test_at_the_family_level_a_correct_mechanism_exceeds_less_often():
    """40 audits of the exactly ε-DP entries (ε = 0.5): the per-audit 95 % bound goes over ε in two of them
    (a valid 95 % bound allows 5 %: these seeds' 2/40), the family-of-12 bound in none."""
    found = [scored(12, laplace_game(0.5, seed=100 + s)) for s in range(40)]
    assert sum(f["caught"] for f in found) == 2
    assert sum(f["caught_family"] for f in found) == 0
    assert np.mean([f["epsilon_lower_bound_family"] for f in found]) > 0.4  # not vacuous


@pytest.mark.parametrize("family", [0, -1, 1.5, "12", True])
def test_a_bad_family_is_a_one_line_error(family):
    with pytest.raises(ValueError, match=r"dp-audit: family=.*valid: an integer >= 1") as err:
        DPAudit(family=family)
    assert "\n" not in str(err.value)


class _LevelDesign:
    """A design whose bound grows with its level (as a level-dependent pick of guesses could make it)."""
    confidence = 0.95

    def score(self, reconstruction, truth, aux):
        bound = 10 * self.confidence
        return {"epsilon_lower_bound": bound, "caught": bound > 9.6, "bound_over_accountant": bound / 9.6}, {}


def test_the_family_bound_is_never_above_the_per_audit_bound():
    audit = DPAudit(family=12)
    audit.design = _LevelDesign()
    metrics, _ = audit.score(None, None, None)
    assert metrics["epsilon_lower_bound_family"] == metrics["epsilon_lower_bound"] == 9.5
    assert not metrics["caught_family"] and not metrics["caught"]
    assert audit.design.confidence == 0.95  # the run's design keeps its level
