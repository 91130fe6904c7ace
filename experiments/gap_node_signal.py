"""Node-level GAP's per-step signal against its noise (docs/gap.md, "Why node-level GAP does not beat the DP-MLP").

For each setting, one real run (experiments/gap_node_clients.toml's settings, seed 0) with the DP-SGD step's
`private_gradient` wrapped to measure, per step and client, ‖Σ_t clip(g_t)‖ (the signal: the sum of the clipped
per-node gradients, auditor side) beside the noise's norm ‖N(0, (σC)² I_d)‖ ≈ σC√d, by part (the encoder's d and
the classifier's d differ). Prints one Markdown row per (setting, method, part): training nodes per step, the
mean signal norm, the noise norm, their ratio, and the signal's cosine with the noisy sum. No private value is
printed: only norms aggregated over every step and client.

    PRIVFGL_DATA=... python experiments/gap_node_signal.py [--epsilon 8] [--seed 0]
"""
from __future__ import annotations

import argparse
from collections import defaultdict

import torch

import privfgl.methods.gap.node as node
from privfgl.experiment import config_for, run
from privfgl.privacy.dpsgd import clipped_sum

SETTINGS = (("cora", 1), ("cora", 10), ("citeseer", 10))
METHODS = (("GAP, node level", 2), ("DP-MLP (hops=0)", 0))


def measure(dataset: str, clients: int, hops: int, epsilon: float, seed: int) -> dict[int, dict[str, float]]:
    """{d: {nodes, signal, noise, cosine}} means over every DP-SGD step of every client of one run."""
    seen: dict[int, list[tuple[float, float, float, float]]] = defaultdict(list)
    real = node.private_gradient

    def wrapped(grads, clip, mechanism, source, denominator, extra=None):
        flat = torch.cat([g.reshape(g.shape[0], -1) for g in grads.values()], dim=1)
        signal = clipped_sum(flat, clip)
        noisy = real(grads, clip, mechanism, source, denominator, extra)
        total = torch.cat([v.reshape(-1) for v in noisy.values()]).double() * denominator
        noise = total - signal
        cosine = float(signal @ total / (signal.norm() * total.norm()).clamp(min=1e-12))
        seen[flat.shape[1]].append((float(denominator), float(signal.norm()), float(noise.norm()), cosine))
        return noisy

    node.private_gradient = wrapped
    try:
        cfg = config_for({"method": "gap", "dataset": dataset, "partition": "louvain", "clients": clients,
                          "rounds": 30, "local_epochs": 1, "progress": False, "threads": 1, "seed": seed,
                          "method_params": {"unit": "node", "hops": hops, "degree": 10, "clip": 1.0,
                                            "epsilon": epsilon, "encoder_rounds": 10, "seed": seed}})
        record, _ = run(cfg)
    finally:
        node.private_gradient = real
    out = {d: {key: sum(r[i] for r in rows) / len(rows) for i, key in enumerate(("nodes", "signal", "noise", "cosine"))}
           for d, rows in seen.items()}
    for d in out:
        out[d]["steps"] = len(seen[d])
        out[d]["test_acc"] = record["metrics"]["test_acc"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epsilon", type=float, default=8.0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print(f"ε = {args.epsilon:g}, seed {args.seed}\n")
    print("| dataset, clients | method | part (d) | steps measured | training nodes a step | ‖Σ clip(g)‖ "
          "| ‖noise‖ | signal / noise | cos(signal, noisy sum) | test_acc |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for dataset, clients in SETTINGS:
        for label, hops in METHODS:
            parts = measure(dataset, clients, hops, args.epsilon, args.seed)
            for d, v in sorted(parts.items(), key=lambda kv: -kv[0]):
                part = "encoder" if d == max(parts) else "classifier"
                print(f"| {dataset}, {clients} | {label} | {part} ({d:,}) | {v['steps']} | {v['nodes']:.1f} | "
                      f"{v['signal']:.1f} | {v['noise']:.1f} | {v['signal'] / v['noise']:.3f} | {v['cosine']:.3f} | "
                      f"{v['test_acc']:.4f} |", flush=True)


if __name__ == "__main__":
    main()
