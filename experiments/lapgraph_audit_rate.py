"""How often LapGraph's dp-audit bound exceeds ε on the correct mechanism: its false-alarm rate.

The one-run 95 % bound is valid: on a mechanism that is exactly ε_entries-DP it exceeds ε_entries with
probability ≤ 5 %. Laplace noise attains its claim exactly in the tails, where the audit's guesses fall, so the
rate should come out near (not far below) 5 % against ε_entries, and a little lower against ε. This script
redraws client 0's release (Cora or --dataset, Louvain, 10 clients) with the audit's canary pairs at many noise seeds,
scores each with the audit's own code (attacks/dp/lapgraph_audit.py) and counts the exceedances. No training:
the canaries never enter it. `--family m` also scores each draw as one of m audits read as one test (the
bound at 1 − 0.05/m, attacks/dp/dp_audit.py `family_metrics`), and counts those exceedances: at most 5 %/m of
draws if the mechanism meets its claim.

    PRIVFGL_DATA=... python experiments/lapgraph_audit_rate.py [--seeds 200] [--epsilons 0.5,1,2,8] [--dataset sbm-pubmed] [--family 12]
"""
from __future__ import annotations

import argparse

from tqdm.auto import tqdm

from attacks.dp.dp_audit import family_metrics
from attacks.dp.lapgraph_audit import CanaryPairAudit, CanaryPairs, PairAuditAux, PairAuditTruth
from privfgl.experiment import RunConfig, build_setup
from privfgl.methods.lapgraph.params import resolve_params
from privfgl.methods.lapgraph.release import release
from privfgl.privacy.noise import NoiseSource


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--epsilons", default="0.5,1,2,8")
    ap.add_argument("--canaries", type=int, default=20000)
    ap.add_argument("--dataset", default="cora", help="the sweep's dataset whose client 0 is audited (default cora)")
    ap.add_argument("--family", type=int, default=1, help="also score each draw as one of m audits (default 1: off)")
    args = ap.parse_args()
    if args.family < 1:
        ap.error(f"--family {args.family}: valid: an integer >= 1")
    client = build_setup(RunConfig(method="lapgraph", dataset=args.dataset, partition="louvain", clients=10,
                                   progress=False)).clients[0]
    pairs = CanaryPairs(args.canaries, 0, client=0)  # the sweep's audit: canary seed 0
    audit = CanaryPairAudit(canaries=args.canaries)
    family = args.family > 1
    print("| ε | ε_entries | noise seeds | bound > ε_entries | bound > ε | mean bound | max bound |"
          + (f" family of {args.family}: bound > ε | its max bound |" if family else ""))
    print("|---|---|---|---|---|---|---|" + ("---|---|" if family else ""))
    for eps in (float(e) for e in args.epsilons.split(",")):
        p = resolve_params({"epsilon": eps})
        truth = PairAuditTruth(pairs.coins, p.epsilon, p.epsilon_entries)
        aux = PairAuditAux(args.canaries, p.epsilon_entries)
        bounds, family_bounds = [], []
        for seed in tqdm(range(args.seeds), desc=f"ε={eps:g}", unit="draw", leave=False):
            out = release(client.edge_index, int(client.num_nodes), p, NoiseSource(seed).for_client(0),
                          pairs.entries())
            scores = out.canaries.numpy()
            metrics, _ = audit.score(scores, truth, aux)
            bounds.append(metrics["epsilon_lower_bound"])
            if family:
                family_bounds.append(family_metrics(audit, metrics, scores, truth, aux, args.family)
                                     ["epsilon_lower_bound_family"])
        over_entries = sum(b > p.epsilon_entries for b in bounds)
        over = sum(b > p.epsilon for b in bounds)
        over_family = sum(b > p.epsilon for b in family_bounds)
        print(f"| {eps:g} | {p.epsilon_entries:g} | {len(bounds)} | {over_entries} ({over_entries / len(bounds):.3f}) | "
              f"{over} ({over / len(bounds):.3f}) | {sum(bounds) / len(bounds):.4f} | {max(bounds):.4f} |"
              + (f" {over_family} ({over_family / len(bounds):.3f}) | {max(family_bounds):.4f} |" if family else ""),
              flush=True)


if __name__ == "__main__":
    main()
