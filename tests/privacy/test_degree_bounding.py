"""Local degree bounding (privfgl.privacy.dpsgd.bound_degree, issue #15).

Every node u ranks its own neighbours by priorities that depend on (seed, u, v) only, and an edge is
kept iff both ends rank it among their D lowest. Removing one node w from the real graph G then
changes the bounded graph only locally: w's edges disappear, and a neighbour u of w that had w among
its D chosen edges may "refill" with its (D+1)-th, (u, x_u), if x_u also chose u. Nothing else
moves, so every changed edge touches w or a neighbour of w. The old global rule (one greedy pass over
all edges in a seeded order) fails these locality tests: a removal cascades through the graph.
"""
import networkx as nx
import numpy as np
import pytest
import torch
from torch_geometric.utils import subgraph

from privfgl.data import client_subgraphs, partition_nodes
from privfgl.privacy.clipping import clip_rows
from privfgl.privacy.dpsgd import (MeanGCN, affected_count, bound_degree, influence_count, khop_batch,
                                   node_sensitivity, pair_priorities, per_sample_grads)

N = 300


@pytest.fixture(scope="module")
def heavy_tailed():
    """A Barabási–Albert graph, both directions: 300 nodes, 596 edges, degrees 2..48 (hubs among
    the first nodes, most nodes of degree 2 or 3)."""
    e = torch.tensor(list(nx.barabasi_albert_graph(N, 2, seed=0).edges())).t()
    return torch.cat([e, e.flip(0)], dim=1)


def neighbours(edge_index: torch.Tensor, n: int) -> list[set[int]]:
    out = [set() for _ in range(n)]
    for u, v in edge_index.t().tolist():
        if u != v:
            out[u].add(v)
            out[v].add(u)
    return out


def adjacency(undirected: set[frozenset], n: int) -> list[set[int]]:
    out = [set() for _ in range(n)]
    for u, v in map(tuple, undirected):
        out[u].add(v)
        out[v].add(u)
    return out


def edges(edge_index: torch.Tensor) -> set[frozenset]:
    return {frozenset(e) for e in edge_index.t().tolist()}


def without(edge_index: torch.Tensor, w: int) -> torch.Tensor:
    """G − w with the other nodes keeping their ids: w stays as an isolated index."""
    return edge_index[:, (edge_index[0] != w) & (edge_index[1] != w)]


def ranking(u: int, nbrs: set[int], seed: int) -> list[int]:
    """u's neighbours from lowest to highest priority (ties by id)."""
    vs = sorted(nbrs)
    pr = pair_priorities(seed, np.full(len(vs), u), np.array(vs, dtype=np.int64))[0].tolist()
    return [v for _, v in sorted(zip(pr, vs))]


# ----------------------------------------------------------------------------- the output contract


@pytest.mark.parametrize("d", [1, 3, 5])
def test_every_node_keeps_at_most_d_of_its_edges_in_a_symmetric_subgraph_without_self_loops(heavy_tailed, d):
    messy = torch.cat([heavy_tailed[:, ::2], heavy_tailed[:, :40], torch.tensor([[5, 9], [5, 9]])], dim=1)
    out = bound_degree(messy, N, d, seed=3)  # one direction, duplicates and self loops in the input
    assert out.dtype == torch.long and out.shape[0] == 2
    assert (out[0] != out[1]).all()
    pairs = out.t().tolist()
    assert len(set(map(tuple, pairs))) == len(pairs)  # each directed edge once
    assert set(map(tuple, pairs)) == set(map(tuple, out.flip(0).t().tolist()))
    assert edges(out) <= edges(messy)
    deg = torch.bincount(out[0], minlength=N)
    assert deg.max().item() == d and out.shape[1] >= N // 4 * d  # bounded, and not trivially sparse


def test_the_bound_is_deterministic_per_seed_and_differs_across_seeds(heavy_tailed):
    a, b = bound_degree(heavy_tailed, N, 3, seed=7), bound_degree(heavy_tailed, N, 3, seed=7)
    assert torch.equal(a, b)
    assert edges(a) != edges(bound_degree(heavy_tailed, N, 3, seed=8))


def test_an_edge_is_kept_iff_both_ends_rank_it_among_their_d_lowest_priorities(heavy_tailed):
    d, seed = 3, 11
    g = neighbours(heavy_tailed, N)
    top = [set(ranking(u, g[u], seed)[:d]) for u in range(N)]
    expected = {frozenset((u, v)) for u in range(N) for v in g[u] if v in top[u] and u in top[v]}
    assert edges(bound_degree(heavy_tailed, N, d, seed)) == expected


def test_a_priority_depends_only_on_the_seed_and_the_two_ids_and_each_end_has_its_own():
    u, v = np.array([4, 9, 4]), np.array([9, 4, 100])
    p = pair_priorities(5, u, v)
    assert p.dtype == np.uint64 and p.shape == (2, 3)
    assert p[0, 0] == p[1, 1] and p[1, 0] == p[0, 1]  # 4's priority for 9, asked from either side
    assert p[0, 0] != p[1, 0]  # 4's ranking of 9 is not 9's ranking of 4
    assert p[0, 2] == pair_priorities(5, np.array([4]), np.array([100]))[0, 0]  # the batch does not matter
    assert (pair_priorities(6, u, v) != p).all()


def test_a_graph_already_of_max_degree_d_is_kept_whole():
    torch.manual_seed(1)
    ring = torch.stack([torch.arange(50), (torch.arange(50) + 1) % 50])
    chords = torch.stack([torch.arange(0, 50, 2), (torch.arange(0, 50, 2) + 25) % 50])  # degree ≤ 3
    g = torch.cat([ring, chords], dim=1)
    assert edges(bound_degree(g, 50, 3, seed=0)) == edges(g)


def test_empty_and_edgeless_inputs_give_an_empty_bounded_graph():
    assert bound_degree(torch.zeros(2, 0, dtype=torch.long), 4, 2, seed=0).shape == (2, 0)
    assert bound_degree(torch.tensor([[1, 2], [1, 2]]), 4, 2, seed=0).shape == (2, 0)
    with pytest.raises(ValueError, match="degree bound"):
        bound_degree(torch.tensor([[0], [1]]), 2, 0, seed=0)


# ----------------------------------------------------------------------------- removing one node


def check_removal(g_edges: torch.Tensor, n: int, w: int, d: int, seed: int) -> int:
    """Assert the module docstring's account of removing w; return |A_w|, the edges it adds."""
    g = neighbours(g_edges, n)
    b = edges(bound_degree(g_edges, n, d, seed))
    b_minus = edges(bound_degree(without(g_edges, w), n, d, seed))
    # locality: every edge that changes touches w or a neighbour of w in G
    for e in b ^ b_minus:
        assert w in e or e & g[w], (w, sorted(e))
    # nothing is lost but w's own edges: B' ⊇ B − w
    assert {e for e in b if w not in e} <= b_minus
    # every added edge is a refill {u, x_u}: u a neighbour of w that had w among its D chosen
    # neighbours and has more than D, x_u its (D+1)-th
    refill = {}
    for u in g[w]:
        order = ranking(u, g[u], seed)
        if len(order) > d and w in order[:d]:
            refill[u] = order[d]
    added = b_minus - b
    for e in added:
        assert any(u in e and refill[u] in e for u in refill), (w, sorted(e))
    assert len(added) <= len(refill) <= len(g[w])
    # nodes that are neither w's neighbours in G nor refill targets keep exactly their edges (minus w)
    movers = {w} | g[w] | set(refill.values())
    before, after = adjacency(b, n), adjacency(b_minus, n)
    for t in set(range(n)) - movers:
        assert before[t] - {w} == after[t], (w, t)
    return len(added)


@pytest.mark.parametrize("d", [3, 5])
def test_removing_a_node_changes_only_its_own_edges_and_its_neighbours_refills(heavy_tailed, d):
    added = [check_removal(heavy_tailed, N, w, d, seed=0) for w in range(0, N, 3)]
    assert max(added) > 0  # refills do happen on this heavy-tailed graph: the statement is not vacuous


def test_on_a_real_cora_client_removing_a_node_changes_only_edges_at_it_or_its_neighbours(cora):
    parts = partition_nodes(cora, "metis", 10, seed=0)
    client = max(client_subgraphs(cora, parts), key=lambda c: int(torch.bincount(c.edge_index[0]).max()))
    ei, n = client.edge_index, client.num_nodes  # ~270 nodes, a hub of degree > 100
    hubs = torch.bincount(ei[0], minlength=n).argsort(descending=True)[:15].tolist()
    added = [check_removal(ei, n, w, d=3, seed=2) for w in hubs + list(range(0, n, 25))]
    assert max(added) > 0


def test_a_real_removal_with_stable_ids_gives_the_same_bounded_graph_as_isolating_the_node(heavy_tailed):
    for w in (0, 1, 57, 299):  # hubs first (BA's oldest nodes), then ordinary nodes
        keep = torch.tensor([u for u in range(N) if u != w])
        sub, _ = subgraph(keep, heavy_tailed, relabel_nodes=True, num_nodes=N)
        real = bound_degree(sub, N - 1, 3, seed=4, node_ids=keep)
        assert edges(keep[real]) == edges(bound_degree(without(heavy_tailed, w), N, 3, seed=4))


def test_node_ids_must_be_distinct_and_one_per_node(heavy_tailed):
    with pytest.raises(ValueError, match="node_ids"):
        bound_degree(heavy_tailed, N, 3, seed=0, node_ids=torch.zeros(N, dtype=torch.long))
    with pytest.raises(ValueError, match="node_ids"):
        bound_degree(heavy_tailed, N, 3, seed=0, node_ids=torch.arange(N - 1))


# ----------------------------------------------------------------------------- what this means for DP-SGD


def test_affected_count_and_sensitivity_reduce_to_the_max_degree_d_formula_without_refills():
    assert affected_count(3, 2) == influence_count(3, 2) - 1 == 12
    assert node_sensitivity(0.5, 3, 2) == 0.5 * 25
    assert affected_count(3, 2, refills=2) == 12 + 2 * 2 * 4
    assert node_sensitivity(1.0, 3, 2, refills=2) == 25 + 4 * 4 * 2
    with pytest.raises(ValueError, match="refills"):
        affected_count(3, 2, refills=-1)


def test_refills_can_change_more_than_n_d_gradients_and_the_refill_bound_covers_them():
    """A hub w with 30 neighbours, each with D = 3 leaves of its own: most neighbours rank w among
    their D, so removing w lets them refill with their last leaf. More than N_D − 1 = 12 per-node
    gradients then change (the refills = 0 sensitivity does not cover this real graph), and no more
    than affected_count(D, k, |A_w|); the clipped sum moves by at most node_sensitivity(..., |A_w|)."""
    d, hops, m, w = 3, 2, 30, 0
    spokes = [(w, 1 + i) for i in range(m)]
    leaves = [(1 + i, 1 + m + d * i + j) for i in range(m) for j in range(d)]
    n = 1 + m + d * m
    g = torch.tensor(spokes + leaves).t()
    g = torch.cat([g, g.flip(0)], dim=1)
    b, b_minus = bound_degree(g, n, d, seed=0), bound_degree(without(g, w), n, d, seed=0)
    added = len(edges(b_minus) - edges(b))
    assert added == check_removal(g, n, w, d, seed=0) > 6

    torch.manual_seed(0)
    x, y = torch.randn(n, 6), torch.randint(0, 3, (n,))
    model = MeanGCN(6, 8, 3, hops)
    params = {k: v.detach() for k, v in model.named_parameters()}
    xp = torch.cat([x, torch.zeros(1, 6)])

    def clipped(ei):
        nodes, adj = khop_batch(ei, n, torch.arange(n), hops, d)
        grads = per_sample_grads(model, params, xp[nodes], adj, y)
        return clip_rows(torch.cat([v.reshape(n, -1) for v in grads.values()], dim=1), 0.01)

    full, rest = clipped(b), clipped(b_minus)
    others = torch.arange(n) != w
    changed = int(((full - rest).norm(dim=1) > 1e-9)[others].sum())
    assert influence_count(d, hops) - 1 < changed <= affected_count(d, hops, refills=added)
    diff = (full.sum(0) - rest[others].sum(0)).norm().item()  # w's own sample leaves the sum
    assert diff <= node_sensitivity(0.01, d, hops, refills=added)
