"""Node-level DP-SGD: degree bound, exact per-node gradients on k-hop subgraphs, the stated
sensitivity C·(2N_D − 1) holds when a node is removed, calibrated noise."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.utils import erdos_renyi_graph, subgraph

from privfgl.privacy import GaussianMechanism, NoiseSource, clip_rows
from privfgl.privacy.dpsgd import (MeanGCN, bound_degree, influence_count, khop_batch, mean_adjacency,
                                   node_sensitivity, per_sample_grads, private_gradient)

N, F_IN, C, D, HOPS = 120, 12, 3, 3, 2


@pytest.fixture(scope="module")
def graph():
    torch.manual_seed(0)
    ei = bound_degree(erdos_renyi_graph(N, 0.06), N, D, seed=0)
    return ei, torch.randn(N, F_IN), torch.randint(0, C, (N,))


def grads_of(model, params, ei, x, y, targets):
    nodes, adj = khop_batch(ei, x.shape[0], targets, HOPS, D)
    xp = torch.cat([x, torch.zeros(1, x.shape[1])])
    return per_sample_grads(model, params, xp[nodes], adj, y[targets])


def test_bound_degree_keeps_a_symmetric_subgraph_of_max_degree_d(graph):
    ei, _, _ = graph
    deg = torch.bincount(ei[0], minlength=N)
    assert deg.max().item() == D and ei.shape[1] > N  # bounded, and not trivially empty
    assert set(map(tuple, ei.t().tolist())) == set(map(tuple, ei.flip(0).t().tolist()))
    assert influence_count(D, HOPS) == 13 and node_sensitivity(0.5, D, HOPS) == 0.5 * 25


def test_per_sample_grads_equal_autograd_on_the_whole_graph(graph):
    ei, x, y = graph
    torch.manual_seed(1)
    model = MeanGCN(F_IN, 8, C, HOPS)
    params = {n: p.detach() for n, p in model.named_parameters()}
    targets = torch.tensor([0, 7, 33, 119])
    g = grads_of(model, params, ei, x, y, targets)
    adj = mean_adjacency(ei, N)
    for i, t in enumerate(targets.tolist()):
        model.zero_grad()
        F.cross_entropy(model(x, adj)[t][None], y[t][None]).backward()
        for n, p in model.named_parameters():
            assert torch.allclose(g[n][i], p.grad, atol=1e-6), (t, n)


def test_removing_a_node_moves_the_clipped_sum_by_at_most_the_stated_sensitivity(graph):
    ei, x, y = graph
    torch.manual_seed(2)
    model = MeanGCN(F_IN, 8, C, HOPS)
    params = {n: p.detach() for n, p in model.named_parameters()}
    clip = 0.05  # small: every per-node gradient is clipped, the worst case
    flat = lambda g: torch.cat([v.reshape(v.shape[0], -1) for v in g.values()], dim=1)
    full = clip_rows(flat(grads_of(model, params, ei, x, y, torch.arange(N))), clip)
    deg = torch.bincount(ei[0], minlength=N)
    v = int(deg.argmax())  # a node of degree D
    keep = torch.tensor([u for u in range(N) if u != v])
    sub_ei, _ = subgraph(keep, ei, relabel_nodes=True, num_nodes=N)
    rest = clip_rows(flat(grads_of(model, params, sub_ei, x[keep], y[keep], torch.arange(N - 1))), clip)
    changed = (full[keep] - rest).norm(dim=1) > 1e-9
    assert 0 < int(changed.sum()) <= influence_count(D, HOPS) - 1
    diff = (full.sum(0) - rest.sum(0)).norm().item()
    assert diff <= node_sensitivity(clip, D, HOPS)
    assert diff > clip  # the neighbours' gradients moved too: a per-sample bound C alone would be wrong


def test_private_gradient_clips_each_nodes_gradient_before_summing():
    gen = torch.Generator().manual_seed(3)
    grads = {"w": torch.randn(6, 4, 5, generator=gen) * 10, "b": torch.randn(6, 5, generator=gen) * 10}  # norms >> C
    mech = GaussianMechanism(1e-9, node_sensitivity(1.0, D, HOPS))  # noise far below the clipping's effect
    out = private_gradient(grads, 0.5, mech, NoiseSource(seed=0), denominator=2.0)
    flat = torch.cat([grads["w"].reshape(6, -1), grads["b"]], dim=1)
    clipped = flat * (0.5 / flat.norm(dim=1, keepdim=True)).clamp(max=1.0)
    expected = clipped.sum(0) / 2.0
    assert torch.allclose(torch.cat([out["w"].reshape(-1), out["b"]]), expected, atol=1e-6)


def test_private_gradient_noise_is_sigma_times_sensitivity_over_the_denominator():
    grads = {"w": torch.zeros(10, 50_000)}
    mech = GaussianMechanism(1.5, node_sensitivity(1.0, D, HOPS))
    g = private_gradient(grads, 1.0, mech, NoiseSource(seed=0), denominator=10.0)["w"].double()
    expected = (1.5 * 25 / 10) ** 2
    assert abs(g.var().item() / expected - 1) < 5 * math.sqrt(2 / 50_000)
