"""GAP's aggregation perturbation: the per-hop sensitivity to one edge (measured by removing edges), the
noise's width on the released sums, and σ's calibration against opacus' own accountant."""
import math

import pytest
import torch
from scipy import stats

from privfgl.methods.gap.accounting import calibrate_sigma, spent_epsilon
from privfgl.methods.gap.aggregation import clean_edges, neighbour_sum, perturbed_hops, unit_rows
from privfgl.methods.gap.params import GapParams
from privfgl.privacy import GaussianMechanism, NoiseSource
from privfgl.privacy.accounting import RDP_ALPHAS

HOPS = 3


@pytest.fixture(scope="module")
def graph(cora):
    """Cora's graph (undirected: both directions stored) and random embeddings, with a zero row."""
    n = int(cora.num_nodes)
    ei = clean_edges(cora.edge_index, n)
    x0 = torch.randn(n, 16, generator=torch.Generator().manual_seed(0))
    x0[ei[0, 0]] = 0.0  # a node whose embedding is 0: its edges move the sums by less
    return ei, x0


def drop(ei: torch.Tensor, u: int, v: int, directed: bool) -> torch.Tensor:
    gone = (ei[0] == u) & (ei[1] == v)
    if not directed:
        gone |= (ei[0] == v) & (ei[1] == u)
    assert int(gone.sum()) == (1 if directed else 2)
    return ei[:, ~gone]


@pytest.mark.parametrize("edge", ["undirected", "directed"])
def test_removing_one_edge_moves_each_hops_sum_by_at_most_the_stated_sensitivity_and_by_exactly_it_at_worst(
        graph, edge):
    ei, x0 = graph
    stated = GapParams(edge=edge).sensitivity
    xs, _ = perturbed_hops(x0, ei, HOPS, None, None)  # the hops' inputs X_0..X_{K-1} (any fixed rows of norm <= 1)
    pairs = ei[:, ei[0] < ei[1]]
    picked = pairs[:, torch.randperm(pairs.shape[1], generator=torch.Generator().manual_seed(1))[:300]]
    zero = int(x0.norm(dim=1).argmin())
    picked = torch.cat([picked, ei[:, ei[0] == zero][:, :1]], dim=1)  # an edge at the zero-embedding node
    for k in range(HOPS):
        x = xs[k]
        assert float(x.norm(dim=1).max()) <= 1 + 1e-6
        full = neighbour_sum(x, ei)
        moved = torch.tensor([float((full - neighbour_sum(x, drop(ei, u, v, edge == "directed"))).norm())
                              for u, v in picked.t().tolist()])
        assert float(moved.max()) <= stated + 1e-5
        assert float(moved.max()) == pytest.approx(stated, abs=1e-5)  # both ends non-zero: the bound is met
        if k == 0:  # an edge at the zero-embedding node moves the sum by less: 1 undirected, 0 directed
            # (the picked edge is zero -> v: directed, its source row is 0; undirected, only v's row is non-zero)
            assert float(moved[-1]) == pytest.approx(0.0 if edge == "directed" else 1.0, abs=1e-5)


def test_unit_rows_have_norm_one_and_zero_rows_stay_zero():
    x = torch.tensor([[3.0, 4.0], [0.0, 0.0], [1e-3, 0.0]])
    assert torch.allclose(unit_rows(x), torch.tensor([[0.6, 0.8], [0.0, 0.0], [1.0, 0.0]]))


@pytest.mark.parametrize("edge", ["undirected", "directed"])
def test_the_noise_on_every_released_sum_has_std_sigma_times_the_sensitivity(graph, edge):
    ei, x0 = graph
    sigma, sens = 0.7, GapParams(edge=edge).sensitivity
    zeros = lambda k: torch.zeros(2000, 16, dtype=torch.float64)  # canary rows with nothing in them: pure noise
    _, released = perturbed_hops(x0, ei, 2, GaussianMechanism(sigma, sens), NoiseSource(None, secure=True), zeros)
    n = x0.shape[0]
    for hop in released:
        noise = hop[n:].reshape(-1)
        m = noise.numel()
        lo, hi = (math.sqrt(float((noise ** 2).sum()) / stats.chi2.ppf(q, m)) for q in (0.9995, 0.0005))
        assert lo <= sigma * sens <= hi
        assert abs(float(noise.mean())) < 5 * sigma * sens / math.sqrt(m)
    # independent across hops: the two hops' noise is uncorrelated
    r = stats.pearsonr(released[0][n:].reshape(-1).numpy(), released[1][n:].reshape(-1).numpy())[0]
    assert abs(r) < 5 / math.sqrt(2000 * 16)


def test_without_noise_the_hops_are_the_normalised_neighbour_sums(graph):
    ei, x0 = graph
    xs, released = perturbed_hops(x0, ei, 2, None, None)
    assert released == [] and len(xs) == 3
    assert torch.allclose(xs[2], unit_rows(neighbour_sum(unit_rows(neighbour_sum(unit_rows(x0), ei)), ei)), atol=1e-6)


def test_clean_edges_merges_duplicates_and_drops_self_loops():
    ei = torch.tensor([[0, 0, 1, 2, 2], [1, 1, 0, 2, 0]])
    assert clean_edges(ei, 3).t().tolist() == [[0, 1], [1, 0], [2, 0]]


@pytest.mark.parametrize("epsilon,hops", [(1.0, 2), (8.0, 2), (4.0, 5), (0.5, 1)])
def test_sigma_is_opacus_smallest_noise_for_the_k_composed_hops(epsilon, hops):
    from opacus.accountants import RDPAccountant
    delta = 1e-5
    sigma = calibrate_sigma(epsilon, delta, hops, "rdp")
    acc = RDPAccountant()
    for _ in range(hops):
        acc.step(noise_multiplier=sigma, sample_rate=1.0)
    eps = acc.get_epsilon(delta=delta, alphas=RDP_ALPHAS)
    assert eps <= epsilon and eps == pytest.approx(spent_epsilon(sigma, hops, delta, "rdp"), rel=1e-12)
    assert spent_epsilon(sigma * 0.97, hops, delta, "rdp") > epsilon - 0.01  # not much more noise than needed
    assert spent_epsilon(sigma, hops + 1, delta, "rdp") > epsilon  # one more hop would overspend: composition counts


def test_prv_calibration_stays_within_the_target():
    sigma = calibrate_sigma(2.0, 1e-5, 3, "prv")
    assert spent_epsilon(sigma, 3, 1e-5, "prv") <= 2.0 + 1e-9
