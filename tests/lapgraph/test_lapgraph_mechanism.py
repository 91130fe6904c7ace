"""LapGraph's release on one client's real Cora subgraph: one undirected edge moves exactly one entry and the
count by 1 (the stated L1 sensitivity), the noise has the stated Laplace scale 1/ε_entries and independent
draws, the released edges are the T̃ largest noisy entries (rank-k truncated when asked)."""
import numpy as np
import torch
from scipy import stats

from privfgl.methods.lapgraph.params import resolve_params
from privfgl.methods.lapgraph.release import low_rank, release, upper_entries
from privfgl.privacy.noise import NoiseSource




def test_removing_one_undirected_edge_changes_exactly_one_entry_and_the_count_by_one(client):
    n, ei = int(client.num_nodes), client.edge_index
    full = upper_entries(ei, n)
    u, v = (int(t) for t in ei[:, 0])
    without = ei[:, ~(((ei[0] == u) & (ei[1] == v)) | ((ei[0] == v) & (ei[1] == u)))]
    fewer = upper_entries(without, n)
    diff = (full - fewer).abs()
    assert int((diff > 0).sum()) == 1 and float(diff.sum()) == 1.0  # L1 sensitivity 1 on the entries
    assert float(full.sum() - fewer.sum()) == 1.0  # and 1 on the edge count
    assert float(full.sum()) == ei.shape[1] / 2  # Cora's client graphs store both directions once


def test_the_entries_noise_has_scale_one_over_epsilon_entries_and_independent_draws(client):
    """count_share=0.5 (ε = 2: ε_entries = 1): the 20,000 noise draws that ride with the release (zero canary
    entries) fit Laplace(1/ε_entries) and not Laplace(1/ε) (which a split that charged nothing to the count
    would use); lag-1 correlation ≈ 0; two clients' sources are uncorrelated."""
    p = resolve_params({"epsilon": 2.0, "count_share": 0.5, "seed": 1})
    source = NoiseSource(1)
    n = int(client.num_nodes)
    noise = release(client.edge_index, n, p, source.for_client(0), torch.zeros(20000)).canaries.numpy()
    assert stats.kstest(noise, "laplace", args=(0, 1 / p.epsilon_entries)).pvalue > 0.01
    assert stats.kstest(noise, "laplace", args=(0, 1 / p.epsilon)).pvalue < 1e-6
    assert abs(np.corrcoef(noise[:-1], noise[1:])[0, 1]) < 0.03
    other = release(client.edge_index, n, p, source.for_client(1), torch.zeros(20000)).canaries.numpy()
    assert abs(np.corrcoef(noise, other)[0, 1]) < 0.03


def test_the_released_edges_are_the_top_count_noisy_entries(client):
    """The same seeded draws, redone here: the entries' noise, then the count's; T̃ = round(|E| + count noise)
    and the T̃ largest noisy entries are the released undirected edges, both directions."""
    n, ei = int(client.num_nodes), client.edge_index
    for rank in (0, 20):
        p = resolve_params({"epsilon": 4.0, "rank": rank, "seed": 2})
        out = release(ei, n, p, NoiseSource(7))
        twin = NoiseSource(7)
        entries = upper_entries(ei, n)
        noisy = entries + twin.laplace(entries.shape, 1 / p.epsilon_entries)
        count = round(float(entries.sum()) + float(twin.laplace((1,), 1 / p.epsilon_count)[0]))
        assert out.count == count and out.edge_index.shape == (2, 2 * count)
        scores = low_rank(noisy, n, rank) if rank else noisy
        rows, cols = torch.triu_indices(n, n, offset=1)
        chosen = set(zip(rows[torch.topk(scores, count).indices].tolist(), cols[torch.topk(scores, count).indices].tolist()))
        released = set(zip(out.edge_index[0].tolist(), out.edge_index[1].tolist()))
        assert released == chosen | {(j, i) for i, j in chosen}


def test_at_huge_epsilon_the_release_is_the_true_graph(client):
    n, ei = int(client.num_nodes), client.edge_index
    out = release(ei, n, resolve_params({"epsilon": 1e7, "seed": 0}), NoiseSource(0))
    assert set(zip(*out.edge_index.tolist())) == set(zip(*ei.tolist()))


def test_rank_k_truncation_is_the_top_k_svd_of_the_symmetric_noisy_matrix():
    n = 30
    entries = NoiseSource(3).laplace((n * (n - 1) // 2,), 1.0)
    rows, cols = torch.triu_indices(n, n, offset=1)
    sym = torch.zeros(n, n, dtype=torch.float64)
    sym[rows, cols] = entries
    sym = sym + sym.T
    u, s, vh = torch.linalg.svd(sym)
    top5 = (u[:, :5] * s[:5]) @ vh[:5]
    assert int(torch.linalg.matrix_rank(top5)) == 5
    assert torch.allclose(low_rank(entries, n, 5), top5[rows, cols])
    assert torch.allclose(low_rank(entries, n, n), entries)  # rank n: nothing truncated
