"""False positives of dp-audit's 95 % bound on the correct mechanism: over R audit runs, the share whose
`epsilon_lower_bound` exceeds the accountant's ε (at most 5 % expected).

Mechanism-only simulation (no graph): T rounds of the central Gaussian sum with σ calibrated by the
accountant (opacus RDP) to ε at δ = 1e-5; m canary clients with fair coins; per round an in-canary's
projection is 1 + N(0, σ²), an out-canary's N(0, σ²) (what the Cora runs' per-round projections are, up to
the real clients' tiny terms); scored by CanaryClientAudit.score, the attack's own code. Prints a table.

    .venv/bin/python experiments/dp_audit_validity.py [--runs 40] [--canaries 2000]
"""
from __future__ import annotations

import argparse

import numpy as np

from attacks.dp.canary_clients import CanaryDirections
from attacks.dp.fedavg_audit import AuditAux, AuditScores, AuditTruth, CanaryClientAudit
from privfgl.privacy import noise_multiplier_for
from privfgl.privacy.accounting import gaussian_epsilon


def one_audit(epsilon: float, rounds: int, canaries: int, seed: int) -> dict:
    sigma = noise_multiplier_for(epsilon, 1e-5, 1.0, rounds, "rdp")
    rng = np.random.default_rng([seed, 0xF9])
    coins = rng.random(canaries) < 0.5
    per_round = coins[None, :] + sigma * rng.standard_normal((rounds, canaries))
    possible = np.ones_like(per_round, dtype=bool)
    scores = per_round.sum(0) - rounds / 2
    cosines = np.zeros(canaries)  # unused under view=rounds
    aux = AuditAux(CanaryDirections.draw(2, 10_000, 4, seed), (), None, None, 1.0, "rounds", (), ())
    truth = AuditTruth(coins, gaussian_epsilon([(sigma, 1.0, rounds)], 1e-5), 1e-5, 1.0, rounds)
    metrics, _ = CanaryClientAudit(canaries=canaries, seed=seed).score(AuditScores(scores, per_round, possible, cosines),
                                                              truth, aux)
    return metrics


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--canaries", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    print("| accountant ε | runs | bound > ε | mean bound | max bound | mean one-run | mean f-DP |")
    print("|---|---|---|---|---|---|---|")
    for eps in (2.0, 8.0):
        found = [one_audit(eps, args.rounds, args.canaries, s) for s in range(args.runs)]
        bound = np.array([f["epsilon_lower_bound"] for f in found])
        acc = found[0]["epsilon_accountant"]
        print(f"| {acc:.3f} | {args.runs} | {int((bound > acc).sum())} ({(bound > acc).mean():.1%}) | "
              f"{bound.mean():.3f} | {bound.max():.3f} | {np.mean([f['one_run_epsilon'] for f in found]):.3f} | "
              f"{np.mean([f['one_run_fdp_epsilon'] for f in found]):.3f} |", flush=True)


if __name__ == "__main__":
    main()
