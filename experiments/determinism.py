r"""One seed, one run: every method under plain and the secure protocols, with seeded DP, dropout and
attacks, run twice with the same command in two processes; the two run records are compared leaf by
leaf, timings aside (docs/testing.md). A third run with another seed must differ (the seed matters).

What the seed does not fix is listed per case (`varies`, regular expressions over the record's paths)
and written in docs/evaluation.md ("Determinism"): SEAL's randomness moves the CKKS/BFV byte counts
(zstd compresses random ciphertexts and keys to slightly different sizes) and he-key-recovery's scores
of its failed decryptions. (GraphCL/generator caches' hit or miss sit under the record's `time`,
which, as every wall-clock key, is not compared.) Any other difference is a failure (exit 1).

    PRIVFGL_DATA=... python experiments/determinism.py [--only fedavg,secagg-dropout] [--list]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

SMALL = ["--dataset", "cora", "--clients", "3", "--rounds", "2", "--threads", "1", "--no-progress"]
SGD = ["--optimizer", "sgd", "--lr", "0.5", "--dropout", "0"]
SEAL = [r"^cost\.(bytes_up|bytes_down|bytes_up_per_client|by_link)"]  # compressed random ciphertexts and keys
# (name, argv after `privfgl`, paths allowed to differ between two runs of one seed)
CASES: list[tuple[str, list[str], list[str]]] = [
    ("fedavg", ["run", "--method", "fedavg", *SMALL], []),
    ("fedprox", ["run", "--method", "fedprox", *SMALL], []),
    ("local", ["run", "--method", "local", *SMALL], []),
    ("dp-fedavg", ["run", "--method", "dp-fedavg", *SMALL, "--dp", "gaussian:sigma=1,clip=1,on=update,mode=central,seed=3",
                   "--method-param", "q=0.5", "--method-param", "sampling_seed=4"], []),
    ("dp-sgd", ["run", "--method", "dp-sgd", *SMALL, "--method-param", "seed=3"], []),
    ("gap", ["run", "--method", "gap", *SMALL, "--method-param", "seed=3", "--method-param", "encoder_rounds=2"], []),
    ("gap-node", ["run", "--method", "gap", *SMALL, "--method-param", "unit=node", "--method-param", "seed=3",
                  "--method-param", "encoder_rounds=2"], []),
    ("opfgl", ["run", "--method", "opfgl", *SMALL[:4], *SMALL[6:], "--method-param", "condense_iters=200",
               "--method-param", "max_iters=200"], []),
    ("fedspray", ["run", "--method", "fedspray", *SMALL], []),
    ("fedomd", ["run", "--method", "fedomd", *SMALL[:4], "--rounds", "3", *SMALL[6:]], []),
    ("fedlog", ["run", "--method", "fedlog", *SMALL, "--method-param", "generator_epochs=5",
                "--method-param", "warmup_epochs=5"], []),
    ("fedgpl", ["run", "--method", "fedgpl", "--dataset", "cora", "--rounds", "2", "--threads", "1", "--no-progress",
                "--method-param", "pretrain_epochs=2"], []),
    ("fedavg-crypten", ["run", "--method", "fedavg", *SMALL, "--protocol", "crypten"], []),
    ("fedavg-ckks", ["run", "--method", "fedavg", *SMALL, "--protocol", "ckks"], SEAL),
    ("fedavg-bfv", ["run", "--method", "fedavg", *SMALL, "--protocol", "bfv"], SEAL),
    ("fedavg-secagg", ["run", "--method", "fedavg", *SMALL, "--protocol", "secagg"], []),
    ("fedavg-secagg-kregular", ["run", "--method", "fedavg", *SMALL[:2], "--clients", "5", *SMALL[4:], "--protocol",
                                "secagg", "--protocol-param", "graph=kregular"], []),
    ("secagg-dropout", ["run", "--method", "fedavg", *SMALL[:2], "--clients", "5", *SMALL[4:], "--protocol", "secagg",
                        "--protocol-param", "dropout_rate=0.2", "--protocol-param", "threshold=3"], []),
    ("secagg-absent", ["run", "--method", "fedavg", *SMALL, "--protocol", "secagg", "--absent-rate", "0.3"], []),
    ("opfgl-ckks", ["run", "--method", "opfgl", *SMALL[:4], *SMALL[6:], "--protocol", "ckks", "--method-param",
                    "condense_iters=200", "--method-param", "max_iters=200"], SEAL),
    ("fedomd-secagg", ["run", "--method", "fedomd", *SMALL[:4], "--rounds", "3", *SMALL[6:], "--protocol", "secagg"], []),
    ("dp-fedavg-distributed-secagg", ["run", "--method", "dp-fedavg", *SMALL, "--protocol", "secagg", "--dp",
                                      "gaussian:sigma=1,clip=1,on=update,mode=distributed,seed=3"], []),
    ("fedspray-dp", ["run", "--method", "fedspray", *SMALL, "--dp", "gaussian:sigma=1,clip=1,on=all,mode=central,seed=3"], []),
    ("audit-label-inference", ["audit", "--method", "fedavg", *SMALL, *SGD, "--attack", "label-inference"], []),
    ("audit-membership", ["audit", "--method", "fedavg", *SMALL, "--attack", "membership"], []),
    ("audit-gradient-inversion", ["audit", "--method", "fedavg", *SMALL, *SGD, "--rounds", "1",
                                  "--attack", "gradient-inversion:variant=dictionary"], []),
    ("audit-he-key-recovery", ["audit", "--method", "fedavg", *SMALL, "--protocol", "ckks", "--attack", "he-key-recovery"],
     SEAL + [r"^attacks\[\d+\]\.metrics\.(cosine|max_abs_error|per_client)"]),
    ("audit-secagg-collusion", ["audit", "--method", "fedavg", *SMALL[:2], "--clients", "5", *SMALL[4:], "--protocol",
                                "secagg", "--attack", "secagg-collusion"], []),
]
TIMING = re.compile(r"(^time$|seconds|_s$|^wall)")  # key names of wall-clock measurements


def differences(a, b, path: str = "") -> list[str]:
    """Paths where two records differ, timing keys aside."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b), key=str):
            if TIMING.search(str(key)):
                continue
            sub = f"{path}.{key}" if path else str(key)
            out += [sub] if key not in a or key not in b else differences(a[key], b[key], sub)
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [path]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{path}[{i}]")]
    both_nan = isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)
    return [] if a == b or both_nan else [path]


def record(argv: list[str], seed: int, folder: Path) -> dict:
    out = folder / f"seed{seed}-{len(list(folder.iterdir()))}.json"
    done = subprocess.run([sys.executable, "-c", "import sys; from privfgl.cli import main; sys.exit(main(sys.argv[1:]))",
                           *argv, "--seed", str(seed), "--out", str(out)], capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    if done.returncode != 0:
        raise RuntimeError(f"privfgl {' '.join(argv)} --seed {seed}: exit {done.returncode}: {done.stderr.strip()[-300:]}")
    return json.loads(out.read_text())


def main() -> int:
    ap = argparse.ArgumentParser(description="Run each case twice with one seed and compare the records.")
    ap.add_argument("--only", help="comma-separated case names (default: all)")
    ap.add_argument("--list", action="store_true", help="print the cases and exit")
    args = ap.parse_args()
    cases = CASES
    if args.only:
        wanted = set(args.only.split(","))
        unknown = wanted - {c[0] for c in CASES}
        if unknown:
            ap.error(f"--only: unknown case(s) {', '.join(sorted(unknown))}; valid: {', '.join(c[0] for c in CASES)}")
        cases = [c for c in CASES if c[0] in wanted]
    print("| case | command | same seed: differing paths (allowed) | another seed differs |")
    print("|---|---|---|---|")
    failed = []
    for name, argv, varies in cases:
        if args.list:
            print(f"| {name} | privfgl {' '.join(argv)} | {', '.join(varies) or '-'} | |")
            continue
        with tempfile.TemporaryDirectory(prefix="privfgl-determinism-") as tmp:
            first, again, other = (record(argv, seed, Path(tmp)) for seed in (0, 0, 1))
        diff = differences(first, again)
        unexpected = [d for d in diff if not any(re.search(v, d) for v in varies)]
        seed_matters = bool([d for d in differences(first, other) if not d.startswith("config.seed")])
        shown = "none" if not diff else f"{len(diff)} ({len(diff) - len(unexpected)} allowed)"
        if unexpected:
            shown += ": NOT ALLOWED " + ", ".join(unexpected[:6])
        print(f"| {name} | privfgl {' '.join(argv)} | {shown} | {'yes' if seed_matters else 'NO'} |", flush=True)
        if unexpected or not seed_matters:
            failed.append(name)
    if not args.list:
        print(f"{len(cases) - len(failed)} of {len(cases)} deterministic per seed" +
              (f"; not: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
