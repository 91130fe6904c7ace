"""Which kernels of a round grow faster than the graph at 10 clients (issue #21, docs/scale.md): why the
round grew 14x for 10x the nodes before the engine stopped gathering hidden rows, and what it runs now.

The stacked engine's per-round work is a handful of kernels over the clients' rows. This times each
kernel of a GCN layer alone, at the two sizes of bench_scale's 10-client rows (100k and 1M nodes,
so 10k and 100k nodes per client), one torch thread, glibc keeping freed memory (as runs at 1M nodes do), interleaved repetitions, and prints the time
per row (ns) at each size and the growth of the total (x, 10 = linear):

- stream: `h * 2` over [N, 64] (reads and writes every row once, in order);
- dense: the first layer's batched product [10, n, 128] @ [10, 128, 64];
- gather: Â @ h for a random graph inside each client (average degree 5 plus self-loops; the
  contextual SBM's edges inside a class are uniform), CSR with int32 indices: the first layer's
  propagation before the engine propagated dense inputs once ((Â x) W, privfgl/models/stacked.py);
- gather, 10 wide: the same Â @ h over [N, 10] rows, the last layer's propagation (10 classes);
- wgrad hᵀg: the last layer's weight gradient [10, 64, n] @ [10, n, 10] as autograd's bmm backward
  computes it; wgrad (gᵀh)ᵀ: the same sums as the engine computes them from 4096 rows per client
  (`_BatchedLinear`).

    python experiments/bench_node_growth.py            # 100k vs 1M nodes, 10 clients
    python experiments/bench_node_growth.py --repeats 7
"""
from __future__ import annotations

import argparse
import statistics
import time
import warnings

import torch

from privfgl.allocator import keep_freed_memory


def client_graph(nodes: int, clients: int, degree: float, generator: torch.Generator) -> torch.Tensor:
    """Block-diagonal CSR [nodes, nodes] (int32 indices): uniform random edges inside each client, self-loops."""
    per = nodes // clients
    edges = int(per * degree / 2)
    rows, cols = [], []
    for k in range(clients):
        src = torch.randint(0, per, (edges,), generator=generator) + k * per
        dst = torch.randint(0, per, (edges,), generator=generator) + k * per
        rows += [src, dst]
        cols += [dst, src]
    loops = torch.arange(nodes)
    index = torch.stack([torch.cat(rows + [loops]), torch.cat(cols + [loops])])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        csr = torch.sparse_coo_tensor(index, torch.rand(index.shape[1], generator=generator),
                                      (nodes, nodes)).coalesce().to_sparse_csr()
        return torch.sparse_csr_tensor(csr.crow_indices().int(), csr.col_indices().int(), csr.values(), csr.shape)


def kernels(nodes: int, clients: int, generator: torch.Generator) -> dict:
    per = nodes // clients
    h = torch.randn(nodes, 64, generator=generator)
    x = torch.randn(clients, per, 128, generator=generator)
    w = torch.randn(clients, 128, 64, generator=generator)
    adj = client_graph(nodes, clients, 5.0, generator)
    h3, g3 = h.view(clients, per, 64), torch.randn(clients, per, 10, generator=generator)
    narrow = torch.randn(nodes, 10, generator=generator)
    return {"stream": lambda: h * 2, "dense": lambda: torch.bmm(x, w), "gather": lambda: adj @ h,
            "gather, 10 wide": lambda: adj @ narrow,
            "wgrad hᵀg": lambda: torch.bmm(h3.transpose(1, 2), g3),
            "wgrad (gᵀh)ᵀ": lambda: torch.bmm(g3.transpose(1, 2), h3).transpose(1, 2)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, nargs=2, default=[100_000, 1_000_000])
    p.add_argument("--clients", type=int, default=10)
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    torch.set_num_threads(1)
    keep_freed_memory()  # as a run at these sizes does (privfgl/allocator.py): no fresh pages per result
    g = torch.Generator().manual_seed(0)
    sizes = {n: kernels(n, a.clients, g) for n in a.nodes}
    times = {(n, name): [] for n in a.nodes for name in sizes[n]}
    for _ in range(a.repeats):
        for n, ks in sizes.items():
            for name, f in ks.items():
                f()
                start = time.perf_counter()
                f()
                times[n, name].append(time.perf_counter() - start)
    small, large = a.nodes
    print(f"{a.clients} clients, one thread, median of {a.repeats} interleaved repetitions\n")
    print(f"| kernel | ns / row at {small:,} nodes | ns / row at {large:,} | time growth (x; "
          f"{large / small:g} = linear) |")
    print("|---|---|---|---|")
    for name in sizes[small]:
        t_small, t_large = statistics.median(times[small, name]), statistics.median(times[large, name])
        print(f"| {name} | {1e9 * t_small / small:.1f} | {1e9 * t_large / large:.1f} | {t_large / t_small:.1f} |")


if __name__ == "__main__":
    main()
