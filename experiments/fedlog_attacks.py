"""What FedLoG's uploads leak, per protocol (attacks.uploads.fedlog_uploads): `privfgl audit --attack
gradient-inversion --attack stats-reconstruction` on the same run under each protocol; the table
puts every score beside its baseline. Writes the records beside --out, a CSV and the Markdown table.

    python experiments/fedlog_attacks.py --out docs/fedlog-attacks.md
"""
from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from attacks import parse_attack, run_attacks  # noqa: E402
from privfgl.experiment import RunConfig, run  # noqa: E402
from privfgl.results import write_record  # noqa: E402

METRICS = {"gradient-inversion": ("word_auc", "detected_precision", "detected_recall"),
           "stats-reconstruction": ("label_l1", "cosine", "overrep_auc")}


def audit(dataset: str, K: int, rounds: int, protocol: str, seed: int, records: Path) -> dict:
    path = records / f"fedlog-audit-{dataset}-k{K}-r{rounds}-{protocol}-s{seed}.json"
    if path.exists():
        return json.loads(path.read_text())
    cfg = RunConfig(method="fedlog", dataset=dataset, partition="metis", clients=K, rounds=rounds,
                    split=(0.4, 0.3, 0.3), seed=seed, protocol=protocol, progress=False, transcript="all")
    record, setup = run(cfg)
    findings = run_attacks(setup, cfg, [parse_attack("gradient-inversion"), parse_attack("stats-reconstruction")])
    record["attacks"] = [f.as_record() for f in findings]
    write_record(record, path)
    return record


def rows_of(record: dict) -> list[dict]:
    out = []
    for f in record["attacks"]:
        kind = "aggregate" if f["target"].startswith("aggregate") else "client"
        for key in METRICS[f["name"]]:
            value = f["metrics"].get(key)
            out.append({"protocol": record["config"]["protocol"], "attack": f["name"], "target": kind, "metric": key,
                        "value": value, "baseline": f["baseline"].get(key),
                        "no_input": "no_input" in f["metrics"]})
    return out


def table(rows: list[dict]) -> str:
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["attack"], r["metric"], r["target"], r["protocol"]), []).append(r)
    lines = ["| attack | metric | target | protocol | value (mean over clients) | baseline |", "|---|---|---|---|---|---|"]
    for (attack, metric, target, protocol), g in groups.items():
        if all(r["no_input"] for r in g):
            lines.append(f"| {attack} | {metric} | {target} | {protocol} | no input (shares / ciphertexts only) | — |")
            continue
        vals = [r["value"] for r in g if r["value"] is not None]
        base = [r["baseline"] for r in g if r["baseline"] is not None]
        fmt = lambda v: f"{statistics.mean(v):.3f}" if v else "—"  # noqa: E731
        lines.append(f"| {attack} | {metric} | {target} | {protocol} | {fmt(vals)} | {fmt(base)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="cora")
    ap.add_argument("--clients", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--protocols", nargs="+", default=["plain", "crypten", "ckks"])
    ap.add_argument("--records", type=Path, default=Path("runs/fedlog"))
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    rows = []
    for protocol in args.protocols:
        record = audit(args.dataset, args.clients, args.rounds, protocol, args.seed, args.records)
        print(f"{protocol}: seen {record['metrics']['test_acc']:.4f}, {record['time']['total_s']:.0f} s", flush=True)
        rows += rows_of(record)
    with open(args.out.with_suffix(".csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    text = (f"# FedLoG: what the server reads from the uploads\n\n{args.dataset}, METIS, {args.clients} clients, "
            f"{args.rounds} rounds, seed {args.seed}; `python experiments/fedlog_attacks.py --out {args.out}`.\n"
            "Generator inversion reads the round-0 generator upload; the class-statistics reading reads the "
            "last round's synthetic upload and the class support.\n\n" + table(rows) + "\n")
    args.out.write_text(text)
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
