"""Why GAP's noisy hops carry little on Cora's client graphs: the hop-1 signal of a node is a sum of at most
deg(v) unit rows, the noise on its row has norm about σΔ·√d. Prints the clients' degrees (after the Louvain
partition, edges inside a client only) and the per-row noise norm at each ε (docs/gap.md).

    PRIVFGL_DATA=... python experiments/gap_snr.py [--dataset cora] [--clients 10] [--hidden 64]
"""
from __future__ import annotations

import argparse
import math

import torch

from privfgl.experiment import RunConfig, build_setup
from privfgl.methods.gap.accounting import calibrate_sigma
from privfgl.methods.gap.aggregation import clean_edges
from privfgl.methods.gap.params import GapParams


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="cora")
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--hidden", type=int, default=64)
    args = ap.parse_args()
    setup = build_setup(RunConfig(method="gap", dataset=args.dataset, partition="louvain", clients=args.clients,
                                  progress=False, transcript="none"))
    deg = torch.cat([torch.bincount(clean_edges(c.edge_index, int(c.num_nodes))[1], minlength=int(c.num_nodes))
                     for c in setup.clients]).double()
    print(f"{args.dataset}, louvain, {args.clients} clients: {deg.numel()} nodes, in-client degree mean "
          f"{float(deg.mean()):.2f}, median {float(deg.median()):.0f}, share <= 3: {float((deg <= 3).double().mean()):.3f}")
    for eps in (1.0, 8.0):
        std = calibrate_sigma(eps, 1e-5, 2, "rdp") * GapParams().sensitivity
        print(f"eps {eps:g} (K = 2, undirected edge): noise std per coordinate {std:.3f}, per-row noise norm "
              f"~ {std * math.sqrt(args.hidden):.2f} at d = {args.hidden} against a signal norm <= degree")


if __name__ == "__main__":
    main()
