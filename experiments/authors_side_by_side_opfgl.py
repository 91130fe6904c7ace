r"""O-pFGL side by side with its authors' code, on the same partitions and training seeds (issue #43).

Cells (Cora, Louvain+, 10 clients; the authors fix the partition and split under seed 42 and vary
the training seed 0, 1, 2 — their main.py runs exactly these three):

    peer-own            the authors' code on its own partition (python-louvain + KMeans, seed 42)
    peer-privfgl        the authors' code on privfgl's partition (`privfgl partition ... --seed 42`)
    peer-privfgl-psplit the authors' code on privfgl's partition and privfgl's split (PEER_SPLIT)
    privfgl-peer        privfgl on the authors' partition (`--partition file:`, written by the peer run)
    privfgl-own         privfgl on its own partition (the same file as peer-privfgl)
    privfgl-peer-split  privfgl on the authors' partition and the authors' split (`--split-file`)
    privfgl-own-split   privfgl on its own partition and the split the authors' code draws on it

Each side splits its clients' nodes itself (20/40/40 per client and class; the authors with
python's `random` after seed 42, privfgl with its partition seed 42) unless a split file is given:
the authors' split is exported by their own code (experiments/peers/opfgl_main.py with
PEER_SPLIT_OUT and PEER_EXPORT_ONLY, into a fresh root: it is drawn once under seed 42 and does not
depend on the training seed), privfgl's by privfgl.data.split_file.write_split. Results land in
WORK/results.json cell by cell (a later call runs only the missing cells; --stages picks some), and
the table goes to the page's block `authors_side_by_side_opfgl`.

    OMP_NUM_THREADS=1 PRIVFGL_DATA=... python experiments/authors_side_by_side_opfgl.py \
        --peer-python /tmp/peer-opfgl/venv/bin/python --peer-src /tmp/peer-opfgl/src --work /tmp/peer-opfgl/side

The peer (its own venv, outside the project) is set up as experiments/peers/opfgl_main.py says.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from privfgl.doc_block import write_block  # noqa: E402

STAGES = ("peer-own", "peer-privfgl", "peer-privfgl-psplit", "privfgl-peer", "privfgl-own", "privfgl-peer-split",
          "privfgl-own-split")
SEEDS = (0, 1, 2)  # the authors' main.py runs these three
PARTITION_SEED = 42
PAPER = {"acc": 76.43, "acc_std": 1.24, "f1": 61.58, "f1_std": 2.16}  # O-pFGL Table, Cora Louvain+
# run_main.sh's Cora Louvain+ line (without --gpu_id)
PEER_ARGS = ["--dataset", "Cora", "--num_clients", "10", "--partition", "Louvain+", "--hid_dim", "64", "--hops", "1",
             "--ipc", "1", "--personalized", "--condensing_loop", "3000", "--local_strategy", "nd_lp_reg_ft",
             "--patience", "10", "--lr_ft", "5e-5", "--reg_a", "0.2", "--reg_max", "0.15", "--lp_iter", "2",
             "--lp_alpha", "0.9", "--topk", "1", "--thres", "1.0", "--d_thres", "20"]
TAG = "authors_side_by_side_opfgl"


def privfgl_partition(work: Path) -> Path:
    """privfgl's Cora Louvain+ partition (10 clients, seed 42) in the file format."""
    from privfgl.data import load_dataset, partition_nodes, write_partition
    from privfgl.experiment import partition_cache_dir
    out = work / "privfgl-cora-louvain+-10.txt"
    if not out.is_file():
        data = load_dataset("cora")
        write_partition(partition_nodes(data, "louvain+", 10, seed=PARTITION_SEED, cache_dir=partition_cache_dir()),
                        out)
    return out


def privfgl_split(work: Path, partition: Path) -> Path:
    """The split privfgl draws on `partition` (partition seed 42), in the `--split-file` format."""
    from privfgl.data.split_file import write_split
    from privfgl.experiment import build_setup, config_for
    out = work / "privfgl-split-of-privfgl-partition.json"
    if not out.is_file():
        cfg = config_for({"method": "opfgl", "dataset": "cora", "partition": f"file:{partition}", "clients": 10,
                          "partition_seed": PARTITION_SEED, "seed": 0, "method_params": {"preset": "cora-louvain+"}})
        write_split(build_setup(cfg).clients, out)
    return out


def peer_split(args, work: Path, name: str, partition: Path | None) -> Path:
    """The split the authors' code draws (seed 42) on its own partition (None) or on `partition`, exported
    without training into a fresh root (the authors' dataset class draws it only when it is not cached)."""
    out = work / f"authors-split-{name}.json"
    if not out.is_file():
        root = work / f"root-export-{name}"
        shutil.rmtree(root, ignore_errors=True)
        env = {"PEER_SPLIT_OUT": str(out), "PEER_EXPORT_ONLY": "1"}
        if partition is not None:
            env["PEER_PARTITION"] = str(partition)
        else:
            env["PEER_PARTITION_OUT"] = str(work / "authors-cora-louvain+-10.txt")
        peer(args, root, work / f"out-export-{name}", env, work / f"log-export-{name}.txt")
    return out


def peer(args, root: Path, out: Path, extra_env: dict, log: Path) -> None:
    """Run experiments/peers/opfgl_main.py with run_main.sh's Cora Louvain+ flags in the peer's venv."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    if not (root / "Cora" / "raw").is_dir():
        shutil.copytree(Path(os.environ["PRIVFGL_DATA"]) / "Cora" / "raw", root / "Cora" / "raw")
    env = {**os.environ, "OPFGL_SRC": str(args.peer_src), "OMP_NUM_THREADS": "1", **extra_env}
    cmd = [str(args.peer_python), str(REPO / "experiments" / "peers" / "opfgl_main.py"), *PEER_ARGS,
           "--root", str(root), "--save_root_path", str(out)]
    with open(log, "w") as f:
        code = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env).returncode
    if code:
        raise SystemExit(f"peer run {log.name} failed (exit {code}); see {log}")


def run_peer(args, work: Path, name: str, partition: Path | None, split: Path | None = None) -> dict:
    """The authors' main.py in its venv: scores of runs 0-2 and each run's wall seconds."""
    env = {}
    if partition is not None:
        env["PEER_PARTITION"] = str(partition)
    else:
        env["PEER_PARTITION_OUT"] = str(work / "authors-cora-louvain+-10.txt")
    if split is not None:
        env["PEER_SPLIT"] = str(split)
    log = work / f"log-{name}.txt"
    peer(args, work / f"root-{name}", work / f"out-{name}", env, log)
    return parse_peer_log(log.read_text())


def parse_peer_log(text: str) -> dict:
    """Each finished run's score: the last "best val acc: .., best test acc: A, best val f1 macro: ..,
    best test f1 macro: F" line the authors' code logs before the run's result is appended (a run that
    has not finished is left out, so a log cut short still gives its finished runs). Each run's
    seconds: from its PEER_RUN_START stamp to the next run's, the last to PEER_RUN_END."""
    acc, f1, starts, seeds, end, best = [], [], [], [], None, None
    for line in text.splitlines():
        if line.startswith("PEER_RUN_START") and line.split()[1] != "42":
            if best is not None:
                acc.append(best[0]), f1.append(best[1])
            starts.append(float(line.split()[2]))
            seeds.append(int(line.split()[1]))
            best = None
        elif line.startswith("best val acc:"):
            fields = dict(part.strip().rsplit(": ", 1) for part in line.split(","))
            best = (float(fields["best test acc"]), float(fields["best test f1 macro"]))
        elif line.startswith("PEER_RUN_END"):
            end = float(line.split()[1])
    if best is not None and end is not None:
        acc.append(best[0]), f1.append(best[1])
    seconds = [b - a for a, b in zip(starts, [*starts[1:], *([end] if end is not None else [])])][:len(acc)]
    percent = lambda values: [100 * v if v <= 1 else v for v in values]  # noqa: E731 (acc in %, F1 a fraction)
    return {"acc": percent(acc), "f1": percent(f1), "seconds": seconds, "seeds": seeds[:len(acc)]}


def run_privfgl(partition: str, split: Path | None = None) -> dict:
    """privfgl's O-pFGL with the authors' Cora Louvain+ preset, seeds 0-2, one thread; `split`: a split file."""
    from privfgl.experiment import config_for, run
    acc, f1, seconds = [], [], []
    for seed in SEEDS:
        cfg = config_for({"method": "opfgl", "dataset": "cora", "partition": partition, "clients": 10,
                          "partition_seed": PARTITION_SEED, "seed": seed, "threads": 1, "progress": False,
                          "method_params": {"preset": "cora-louvain+"}, "transcript": "none",
                          **({"split_file": str(split)} if split is not None else {})})
        start = time.perf_counter()
        record, _ = run(cfg)
        seconds.append(time.perf_counter() - start)
        acc.append(100 * record["metrics"]["test_acc"])
        f1.append(100 * record["metrics"]["test_f1_macro"])
    return {"acc": acc, "f1": f1, "seconds": seconds}


def mean_std(values: list[float]) -> str:
    return f"{statistics.fmean(values):.2f} ± {statistics.pstdev(values):.2f}"


def table(results: dict, work: Path) -> str:
    from privfgl.data.partition_file import file_sha256
    from privfgl.data.split_file import split_sha256
    names = {"peer-own": ("authors' code", "authors' (python-louvain, KMeans ×10, seed 42)", "authors'"),
             "peer-privfgl": ("authors' code", "privfgl's (`privfgl partition --partition louvain+ --seed 42`)",
                              "authors'"),
             "peer-privfgl-psplit": ("authors' code", "privfgl's", "privfgl's (`PEER_SPLIT`)"),
             "privfgl-peer": ("privfgl", "authors' (`--partition file:`)", "privfgl's"),
             "privfgl-own": ("privfgl", "privfgl's (the same file; = `--partition louvain+ --partition-seed 42`)",
                             "privfgl's"),
             "privfgl-peer-split": ("privfgl", "authors'", "authors' (`--split-file`)"),
             "privfgl-own-split": ("privfgl", "privfgl's", "authors' (`--split-file`)")}
    rows = ["| code | partition | split | acc % | macro-F1 % | per seed (acc) | s per run |",
            "|---|---|---|---|---|---|---|",
            f"| paper | authors' | authors' | {PAPER['acc']:.2f} ± {PAPER['acc_std']:.2f} | {PAPER['f1']:.2f} ± "
            f"{PAPER['f1_std']:.2f} | | |"]
    for stage in STAGES:
        code, partition, split = names[stage]
        if stage not in results:
            rows.append(f"| {code} | {partition} | {split} | not run | | | |")
            continue
        r = results[stage]
        rows.append(f"| {code} | {partition} | {split} | {mean_std(r['acc'])} | {mean_std(r['f1'])} | "
                    f"{' / '.join(f'{a:.2f}' for a in r['acc'])} | {statistics.fmean(r['seconds']):.0f} |")
    files = [f"`{p.name}` sha256 {file_sha256('file:' + str(p))[:16]}…" for p in
             (work / "authors-cora-louvain+-10.txt", work / "privfgl-cora-louvain+-10.txt") if p.is_file()]
    splits = [f"`{p.name}` sha256 {split_sha256(str(p))[:16]}…" for p in
              (work / "authors-split-own.json", work / "authors-split-privfgl.json",
               work / "privfgl-split-of-privfgl-partition.json") if p.is_file()]
    return ("\n".join(rows) + "\n\nSeeds 0, 1, 2 (training; partition and split at seed 42); mean ± population std. "
            "Partition files: " + "; ".join(files) + ". Split files: " + "; ".join(splits) + ".\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peer-python", type=Path, default=Path("/tmp/peer-opfgl/venv/bin/python"))
    ap.add_argument("--peer-src", type=Path, default=Path("/tmp/peer-opfgl/src"))
    ap.add_argument("--work", type=Path, default=Path("/tmp/peer-opfgl/side"))
    ap.add_argument("--stages", nargs="+", choices=STAGES, default=list(STAGES))
    ap.add_argument("--out", default="docs/authors-side-by-side.md")
    ap.add_argument("--peer-log", nargs=2, metavar=("STAGE", "LOG"),
                    help="take a peer stage's result from the log of a run made by hand with experiments/peers/"
                         "opfgl_main.py (the same command run_peer makes)")
    ap.add_argument("--privfgl-from", nargs=3, metavar=("STAGE", "JSON", "KEY"),
                    help="take a privfgl stage's result from experiments/opfgl_ablation.py's results file (its KEY "
                         "'privfgl' is the same runs as privfgl-peer-split, with the default --param)")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    store = args.work / "results.json"
    results = json.loads(store.read_text()) if store.is_file() else {}
    ours = privfgl_partition(args.work)
    authors = args.work / "authors-cora-louvain+-10.txt"
    if args.peer_log:
        results[args.peer_log[0]] = parse_peer_log(Path(args.peer_log[1]).read_text())
        store.write_text(json.dumps(results, indent=1))
    if args.privfgl_from:
        stage, path, key = args.privfgl_from
        per_seed = json.loads(Path(path).read_text())[key]
        results[stage] = {k: [per_seed[str(s)][k] for s in SEEDS] for k in ("acc", "f1", "seconds")}
        store.write_text(json.dumps(results, indent=1))
    for stage in args.stages:
        if stage in results:
            continue
        if stage == "peer-own":
            results[stage] = run_peer(args, args.work, "own", None)
        elif stage == "peer-privfgl":
            results[stage] = run_peer(args, args.work, "privfgl", ours)
        elif stage == "peer-privfgl-psplit":
            results[stage] = run_peer(args, args.work, "privfgl-psplit", ours, privfgl_split(args.work, ours))
        elif stage == "privfgl-peer-split":
            if not authors.is_file():
                raise SystemExit(f"{authors}: missing; run the peer-own stage first (it writes the authors' partition)")
            results[stage] = run_privfgl(f"file:{authors}", peer_split(args, args.work, "own", None))
        elif stage == "privfgl-own-split":
            results[stage] = run_privfgl(f"file:{ours}", peer_split(args, args.work, "privfgl", ours))
        elif stage == "privfgl-peer":
            if not authors.is_file():
                raise SystemExit(f"{authors}: missing; run the peer-own stage first (it writes the authors' partition)")
            results[stage] = run_privfgl(f"file:{authors}")
        else:
            results[stage] = run_privfgl(f"file:{ours}")
        results = {**(json.loads(store.read_text()) if store.is_file() else {}), stage: results[stage]}
        store.write_text(json.dumps(results, indent=1))  # merged: another call may run other stages meanwhile
        print(stage, {k: [round(v, 2) for v in vals] for k, vals in results[stage].items()}, flush=True)
    write_block(args.out, TAG, table(results, args.work), title="Side by side with the authors' code")
    print(table(results, args.work))
    return 0


if __name__ == "__main__":
    sys.exit(main())
