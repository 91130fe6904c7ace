"""Cost of who deals CrypTen's Beaver triples, and of the 256-bit randomness (issue #40).

Settings: `rng=chacha20, dealer=party` (the default: a dealer party that is neither a client nor the
server, CrypTen's TTP provider), `rng=chacha20, dealer=client0` (CrypTen's TFP: client 0 deals) and
`rng=torch-32bit-unsafe, dealer=client0` (CrypTen 0.4.1 as it ships: the reference for the RNG's cost).

Table 1: one `secure_compute` of s·s and 1/(s·s + 1) on the K clients' summed n values (a Beaver
product, then CrypTen's reciprocal: comparisons, truncations, more products), K = 3 and 10: wall
seconds (median of --repeat runs after one warm-up), bytes over every link, bytes to and from the
dealer party, max abs error of s·s.
Table 2 (unless --no-fedgpl): FedGPL with tau_in=crypten (HiDTA's τ on CrypTen shares), the record's
metrics.tau_crypten: seconds and bytes per round of the computation, max |τ̂ CrypTen − τ̂ clear|,
and the run's test accuracy.

    python experiments/bench_crypten_dealer.py                       # K 3 and 10, n 1000; FedGPL on Cora
    python experiments/bench_crypten_dealer.py --no-fedgpl --sizes 100 10000
    python experiments/bench_crypten_dealer.py --reverse             # the same, settings in reverse order
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from protocols.crypten_backend import DEALER, secure_compute

SETTINGS = [("chacha20", "party"), ("chacha20", "client0"), ("torch-32bit-unsafe", "client0")]


def function(s):
    square = s * s
    return {"square": square, "inverse": (square + 1).reciprocal()}


def compute_row(clients: int, n: int, rng: str, dealer: str, repeat: int) -> dict:
    gen = torch.Generator().manual_seed(clients * 1000 + n)
    values = [torch.rand(n, generator=gen, dtype=torch.float64) * 2 - 1 for _ in range(clients)]
    s = sum(values)
    reveal_to = {"square": "server", "inverse": "clients"}
    secure_compute(values, function, reveal_to, rng=rng, dealer=dealer)  # warm-up
    seconds, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = secure_compute(values, function, reveal_to, rng=rng, dealer=dealer)
        seconds.append(time.perf_counter() - start)
    total = sum(t.nbytes for t in result.transfers)
    dealer_bytes = sum(t.nbytes for t in result.transfers if DEALER in (t.sender, t.receiver))
    error = float((result.outputs["square"] - s * s).abs().max())
    return {"K": clients, "n": n, "rng": rng, "dealer": dealer, "seconds": statistics.median(seconds),
            "MB": total / 1e6, "dealer_MB": dealer_bytes / 1e6, "error": error}


def fedgpl_row(rng: str, dealer: str, dataset: str, clients: int, rounds: int) -> dict:
    from privfgl.experiment import RunConfig, run  # noqa: PLC0415

    cfg = RunConfig(method="fedgpl", dataset=dataset, partition="tasks", clients=clients, rounds=rounds,
                    protocol="crypten", protocol_params={"rng": rng, "dealer": dealer}, seed=0, progress=False,
                    method_params={"tau_in": "crypten", "pretrain_epochs": 1})
    start = time.perf_counter()
    record, _ = run(cfg)
    wall = time.perf_counter() - start
    tau = record["metrics"]["tau_crypten"]
    return {"rng": rng, "dealer": dealer, "tau_s_per_round": tau["seconds_per_round"],
            "tau_MB_per_round": tau["bytes_per_round"] / 1e6, "tau_error": tau["max_abs_error"],
            "test_acc": record["metrics"]["test_acc"], "run_s": wall}


def table(rows: list[dict], columns: list[tuple[str, str]]) -> str:
    def fmt(v):
        return f"{v:.3g}" if isinstance(v, float) else str(v)
    cells = [[title for title, _ in columns]] + [[fmt(r[key]) for _, key in columns] for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(columns))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |" for row in cells]
    lines.insert(1, "| " + " | ".join("-" * w for w in widths) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, nargs="+", default=[3, 10])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--reverse", action="store_true", help="run the settings in the reverse order")
    ap.add_argument("--no-fedgpl", action="store_true")
    ap.add_argument("--fedgpl-dataset", default="cora")
    ap.add_argument("--fedgpl-clients", type=int, default=9)
    ap.add_argument("--fedgpl-rounds", type=int, default=3)
    args = ap.parse_args()
    settings = SETTINGS[::-1] if args.reverse else SETTINGS
    rows = [compute_row(k, n, rng, dealer, args.repeat) for k in args.clients for n in args.sizes
            for rng, dealer in settings]
    print(table(rows, [("K", "K"), ("n", "n"), ("rng", "rng"), ("dealer", "dealer"), ("seconds", "seconds"),
                       ("MB, all links", "MB"), ("MB to/from dealer", "dealer_MB"), ("max err s·s", "error")]))
    if args.no_fedgpl:
        return
    fed = [fedgpl_row(rng, dealer, args.fedgpl_dataset, args.fedgpl_clients, args.fedgpl_rounds)
           for rng, dealer in settings]
    print(f"\nFedGPL tau_in=crypten, {args.fedgpl_dataset}, {args.fedgpl_clients} clients, "
          f"{args.fedgpl_rounds} rounds, seed 0")
    print(table(fed, [("rng", "rng"), ("dealer", "dealer"), ("τ s/round", "tau_s_per_round"),
                      ("τ MB/round", "tau_MB_per_round"), ("max |τ̂ − τ̂ clear|", "tau_error"),
                      ("test acc", "test_acc"), ("run s", "run_s")]))


if __name__ == "__main__":
    main()
