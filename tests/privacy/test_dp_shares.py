"""Distributed DP against colluders (issue #40, finding 3): each client's noise share carries
σ²/(K − c) so that the shares of any K − c honest clients sum to the full σ²; c defaults to the
coalition the protocol tolerates (secagg t − 1, crypten K − 1, ckks/bfv K − 1, symmetric-key HE 0);
the record and its trust block state the shares, the cost and ε against whom."""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

import protocols
from privfgl.privacy import MessageDP, parse_dp_spec
from privfgl.privacy.shares import remaining_multiplier, share_fraction
from privfgl.privacy.spec import DPSpecError
from privfgl.privacy.trust import tolerated_colluders, trust_block

D = 20_000  # coordinates per share: enough to pin a variance to ~±5 % at the 1e-6 level
SIGMA, CLIP = 1.5, 2.0
ALPHA = 1e-6  # false-failure probability of each variance check


def distributed(num_clients: int, colluders: int | None = None, tolerated: int = 0, seed: int = 0) -> MessageDP:
    extra = "" if colluders is None else f",colluders={colluders}"
    spec = parse_dp_spec(f"gaussian:sigma={SIGMA},clip={CLIP},on=update,mode=distributed,seed={seed}{extra}")
    return MessageDP(spec, num_clients, tolerated)


def noise_shares(dp: MessageDP) -> torch.Tensor:
    """[K, D] each client's own noise (zero uploads are unchanged by clipping, so upload = noise)."""
    uploads = dp.protect([{"w": torch.zeros(D)} for _ in range(dp.num_clients)])
    return torch.stack([u["w"] for u in uploads])


def assert_variance(x: torch.Tensor, variance: float) -> None:
    """Two-sided chi-square test of zero-mean N(0, variance) on x, at level ALPHA."""
    n, ss = x.numel(), float(x.double().pow(2).sum()) / variance
    low, high = stats.chi2.ppf(ALPHA / 2, n), stats.chi2.ppf(1 - ALPHA / 2, n)
    assert low < ss < high, f"variance {ss / n * variance:.4g} is not {variance:.4g}"


@settings(max_examples=12, deadline=None, derandomize=True)
@given(st.integers(2, 10).flatmap(lambda k: st.tuples(st.just(k), st.integers(0, k - 1), st.randoms())))
def test_each_share_carries_1_over_k_minus_c_and_any_c_removed_leave_the_full_variance(case):
    K, c, rng = case
    shares = noise_shares(distributed(K, tolerated=c, seed=rng.randrange(2**31)))
    full = (SIGMA * CLIP) ** 2
    for k in range(K):
        assert_variance(shares[k], full / (K - c))
    assert_variance(shares.sum(0), full * K / (K - c))
    colluders = rng.sample(range(K), c)
    honest = [k for k in range(K) if k not in colluders]
    assert_variance(shares[honest].sum(0), full)  # the revealed sum minus the colluders' own shares


def test_shares_are_independent_across_clients_and_coordinates():
    shares = noise_shares(distributed(6, tolerated=3, seed=1))
    corr = torch.corrcoef(shares)
    off = corr[~torch.eye(6, dtype=torch.bool)]
    assert off.abs().max() < 5 / math.sqrt(D)  # no two clients' shares correlate
    lagged = torch.corrcoef(torch.stack([shares[0, :-1], shares[0, 1:]]))[0, 1]
    assert abs(lagged) < 5 / math.sqrt(D)  # nor neighbouring coordinates of one share


@given(st.integers(2, 200).flatmap(lambda k: st.tuples(st.just(k), st.integers(0, k - 1))))
def test_the_share_arithmetic_is_exact(case):
    K, c = case
    assert share_fraction(K, c) * (K - c) == pytest.approx(1.0, rel=1e-15)
    assert remaining_multiplier(K, c, c) == 1.0  # t - 1 colluders removed: exactly σ left
    assert remaining_multiplier(K, c, 0) == pytest.approx(math.sqrt(K / (K - c)))  # the server alone: more


def test_the_old_one_over_k_shares_leave_only_sqrt_of_the_honest_fraction_to_six_colluders():
    shares = noise_shares(distributed(10, colluders=0, tolerated=6, seed=2))
    assert_variance(shares[:4].sum(0), (SIGMA * CLIP) ** 2 * 0.4)  # the issue's 0.634 = √0.4


def test_colluders_must_leave_one_honest_share_and_apply_to_distributed_mode_only():
    with pytest.raises(DPSpecError, match=r"colluders=10: must be in 0..9"):
        distributed(10, colluders=10)
    with pytest.raises(DPSpecError, match="colluders applies to mode=distributed only"):
        parse_dp_spec("gaussian:sigma=1,clip=1,on=update,mode=central,colluders=2")
    with pytest.raises(DPSpecError, match="colluders must be 'auto'"):
        parse_dp_spec("gaussian:sigma=1,clip=1,on=update,mode=distributed,colluders=-1")
    assert parse_dp_spec("gaussian:sigma=1,clip=1,on=update,mode=distributed,colluders=auto").colluders is None


@pytest.mark.parametrize("name, params, K, expected", [
    ("secagg", {}, 10, 6),  # t = floor(2*10/3) + 1 = 7 of the 10 holders
    ("secagg", {"threshold": 4}, 10, 3),
    ("secagg", {"graph": "kregular"}, 20, 7),  # k = 10, m = 11 holders, t = 8
    ("crypten", {}, 10, 9),  # any coalition without one of the K + 1 share holders
    ("ckks", {}, 10, 9),  # every client but the key holder
    ("bfv", {}, 5, 4),
    ("bfv", {"preset": "sum"}, 5, 0),  # symmetric key: every client can decrypt every upload
    ("plain", {}, 5, 0),
])
def test_the_tolerated_coalition_is_the_protocols_collusion_bound(name, params, K, expected):
    assert tolerated_colluders(protocols.get_protocol(name, **params), K) == expected


def record(colluders: int | None, tolerated: int = 6, K: int = 10, releases: int = 100) -> dict:
    dp = distributed(K, colluders, tolerated)
    dp.accountant.add_gaussian(SIGMA, 1.0, releases)
    return dp.report()


def test_the_record_states_the_shares_their_cost_and_epsilon_against_whom():
    d = record(None)["dp"]["distributed"]
    assert d["colluders"] == d["colluders_tolerated_by_protocol"] == 6 and d["honest_shares"] == 4
    assert d["share_variance_fraction"] == 0.25 and d["sum_variance_factor"] == 2.5 and "2.5 x" in d["cost"]
    against = d["epsilon_against"]
    assert against["server+6 clients"] == pytest.approx(record(None)["epsilon"])  # the recorded ε holds against them
    assert against["server"] < against["server+6 clients"] and "warning" not in d


def test_the_old_shares_are_flagged_unsafe_with_epsilon_against_the_tolerated_coalition():
    old = record(0)
    d = old["dp"]["distributed"]
    assert d["share_variance_fraction"] == 0.1 and d["epsilon_against"]["server"] == pytest.approx(old["epsilon"])
    assert d["epsilon_against"]["server+6 clients"] > 1.5 * old["epsilon"]
    assert d["warning"].startswith("UNSAFE") and "tolerates 6" in d["warning"]


def test_the_issues_numbers_sigma_1_k_10_100_rounds():
    dp = MessageDP(parse_dp_spec("gaussian:sigma=1,clip=1,on=update,mode=distributed,colluders=0"), 10, 6)
    dp.accountant.add_gaussian(1.0, 1.0, 100)
    against = dp.report()["dp"]["distributed"]["epsilon_against"]
    assert round(against["server"], 1) == 96.1 and round(against["server+6 clients"], 1) == 198.5


@pytest.mark.parametrize("colluders", [None, 0])
def test_the_trust_block_says_what_holds_against_whom(colluders):
    secagg = protocols.get_protocol("secagg")
    block = trust_block(secagg, record(colluders)["dp"])["dp"]
    assert block["colluders_tolerated_by_protocol"] == 6 and block["trusted_server"] is False
    if colluders is None:
        assert block["colluders"] == 6 and "with up to 6 colluding clients" in block["why"]
        assert "colluders_warning" not in block
    else:
        assert block["colluders"] == 0 and "against the server alone" in block["why"]
        assert block["colluders_warning"].startswith("UNSAFE")
