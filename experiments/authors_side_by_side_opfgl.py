r"""O-pFGL side by side with its authors' code, on the same partitions and training seeds (issue #43).

Cells (--cells): Cora and CiteSeer × Louvain+ and Metis+, 10 clients, each run with its line of the
authors' run_main.sh and privfgl's preset of the same name (privfgl/methods/opfgl/params.py). The
authors fix the partition and split under seed 42 and vary the training seed 0, 1, 2 — their main.py
runs exactly these three. Stages (--stages) per cell:

    peer-own            the authors' code on its own partition (python-louvain or pymetis, then KMeans; seed 42)
    peer-privfgl        the authors' code on privfgl's partition (`privfgl partition ... --seed 42`)
    peer-privfgl-psplit the authors' code on privfgl's partition and privfgl's split (PEER_SPLIT)
    privfgl-peer        privfgl on the authors' partition (`--partition file:`, written by the peer run)
    privfgl-own         privfgl on its own partition (the same file as peer-privfgl)
    privfgl-peer-split  privfgl on the authors' partition and the authors' split (`--split-file`)
    privfgl-own-split   privfgl on its own partition and the split the authors' code draws on it

Each side splits its clients' nodes itself (20/40/40 per client and class; the authors with
python's `random` after seed 42, privfgl with its partition seed 42) unless a split file is given:
the authors' split is exported by their own code (experiments/peers/opfgl_main.py with
PEER_SPLIT_OUT, into a fresh root: it is drawn once under seed 42 and does not depend on the
training seed; peer-own exports it as it trains, other stages with PEER_EXPORT_ONLY), privfgl's by
privfgl.data.split_file.write_split. Results land in WORK/results.json, cell by cell and stage by
stage (a later call runs only the missing ones), and the tables go to the page's block
`authors_side_by_side_opfgl`: a summary of the issue's target per cell (privfgl >= the authors'
code minus one std on the authors' partition and split, and wall time <= theirs), then each cell's
rows.

    OMP_NUM_THREADS=1 PRIVFGL_DATA=... python experiments/authors_side_by_side_opfgl.py \
        --peer-python /tmp/peer-opfgl/venv/bin/python --peer-src /tmp/peer-opfgl/src --work /tmp/peer-opfgl/side

The peer (its own venv, outside the project, with pymetis for Metis+) is set up as
experiments/peers/opfgl_main.py says.
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from experiments.side_by_side import floor_check, peer_parser, results_commits, save_result, time_check  # noqa: E402
from privfgl.doc_block import write_block  # noqa: E402
from privfgl.provenance import code_commit  # noqa: E402

STAGES = ("peer-own", "peer-privfgl", "peer-privfgl-psplit", "privfgl-peer", "privfgl-own", "privfgl-peer-split",
          "privfgl-own-split")
SEEDS = (0, 1, 2)  # the authors' main.py runs these three
PARTITION_SEED = 42
CLIENTS = 10
TAG = "authors_side_by_side_opfgl"


@dataclass(frozen=True)
class Cell:
    """One dataset × partition: the paper's score (acc, its std, macro-F1, its std; %) and the authors'
    run_main.sh line for it (without --gpu_id). The cell's name is privfgl's preset."""
    dataset: str
    partition: str
    paper: tuple[float, float, float, float]
    peer_args: str


CELLS = {  # paper: O-pFGL's Table (spec §4); peer_args: run_main.sh, verbatim
    "cora-louvain+": Cell("Cora", "Louvain+", (76.43, 1.24, 61.58, 2.16),
                          "--dataset Cora --num_clients 10 --partition Louvain+ --hid_dim 64 --hops 1 --ipc 1 "
                          "--personalized --condensing_loop 3000 --local_strategy nd_lp_reg_ft --patience 10 "
                          "--lr_ft 5e-5 --reg_a 0.2 --reg_max 0.15 --lp_iter 2 --lp_alpha 0.9 --topk 1 --thres 1.0 "
                          "--d_thres 20"),
    "cora-metis+": Cell("Cora", "Metis+", (81.79, 0.23, 50.85, 1.27),
                        "--dataset Cora --num_clients 10 --partition Metis+ --hid_dim 64 --hops 1 --ipc 1 "
                        "--personalized --condensing_loop 3000 --local_strategy nd_lp_reg_ft --patience 10 "
                        "--lr_ft 5e-5 --reg_a 0.2 --reg_max 0.2 --lp_iter 2 --lp_alpha 0.9 --topk 1"),
    "citeseer-louvain+": Cell("CiteSeer", "Louvain+", (71.61, 0.40, 58.24, 0.96),
                              "--dataset CiteSeer --num_clients 10 --partition Louvain+ --hid_dim 64 --hops 1 --ipc 1 "
                              "--personalized --local_strategy nd_lp_reg_ft --patience 10 --condensing_loop 3000 "
                              "--lr_ft 5e-5 --reg_a 0.2 --reg_max 0.2 --topk 1 --d_thres 3"),
    "citeseer-metis+": Cell("CiteSeer", "Metis+", (72.76, 0.24, 50.94, 0.80),
                            "--dataset CiteSeer --num_clients 10 --partition Metis+ --hid_dim 64 --hops 1 --ipc 1 "
                            "--personalized --local_strategy nd_lp_reg_ft --patience 10 --condensing_loop 3000 "
                            "--lr_ft 5e-5 --reg_a 0.2 --reg_max 0.15 --reg_min 0.05 --topk 1 --d_thres 3"),
}


def files(work: Path, cell: str) -> dict[str, Path]:
    """The cell's partition and split files in WORK."""
    return {"authors": work / f"authors-{cell}-10.txt", "privfgl": work / f"privfgl-{cell}-10.txt",
            "split-own": work / f"authors-split-own-{cell}.json",
            "split-privfgl": work / f"authors-split-privfgl-{cell}.json",
            "privfgl-split": work / f"privfgl-split-{cell}.json"}


def privfgl_partition(work: Path, cell: str) -> Path:
    """privfgl's partition for the cell (10 clients, seed 42) in the file format."""
    from privfgl.data import load_dataset, partition_nodes, write_partition
    from privfgl.experiment import partition_cache_dir
    out = files(work, cell)["privfgl"]
    if not out.is_file():
        data = load_dataset(CELLS[cell].dataset.lower())
        write_partition(partition_nodes(data, CELLS[cell].partition.lower(), CLIENTS, seed=PARTITION_SEED,
                                        cache_dir=partition_cache_dir()), out)
    return out


def privfgl_split(work: Path, cell: str) -> Path:
    """The split privfgl draws on its own partition (partition seed 42), in the `--split-file` format."""
    from privfgl.data.split_file import write_split
    from privfgl.experiment import build_setup, config_for
    out = files(work, cell)["privfgl-split"]
    if not out.is_file():
        cfg = config_for({"method": "opfgl", "dataset": CELLS[cell].dataset.lower(),
                          "partition": f"file:{privfgl_partition(work, cell)}", "clients": CLIENTS,
                          "partition_seed": PARTITION_SEED, "seed": 0, "method_params": {"preset": cell}})
        write_split(build_setup(cfg).clients, out)
    return out


def peer_split(args, work: Path, cell: str, on_privfgl: bool) -> Path:
    """The split the authors' code draws (seed 42) on its own partition or on privfgl's, exported without
    training into a fresh root (the authors' dataset class draws it only when it is not cached)."""
    out = files(work, cell)["split-privfgl" if on_privfgl else "split-own"]
    if not out.is_file():
        name = f"export-{'privfgl' if on_privfgl else 'own'}-{cell}"
        env = {"PEER_SPLIT_OUT": str(out), "PEER_EXPORT_ONLY": "1"}
        if on_privfgl:
            env["PEER_PARTITION"] = str(privfgl_partition(work, cell))
        else:
            env["PEER_PARTITION_OUT"] = str(files(work, cell)["authors"])
        peer(args, cell, work / f"root-{name}", work / f"out-{name}", env, work / f"log-{name}.txt")
    return out


def peer(args, cell: str, root: Path, out: Path, extra_env: dict, log: Path) -> None:
    """Run experiments/peers/opfgl_main.py with the cell's run_main.sh flags in the peer's venv, in a fresh
    root (so the authors' code draws its partition and split rather than reading cached client files)."""
    dataset = CELLS[cell].dataset
    for folder in (root, out):
        shutil.rmtree(folder, ignore_errors=True)
    out.mkdir(parents=True)
    shutil.copytree(Path(os.environ["PRIVFGL_DATA"]) / dataset / "raw", root / dataset / "raw")
    env = {**os.environ, "OPFGL_SRC": str(args.peer_src), "OMP_NUM_THREADS": "1", **extra_env}
    cmd = [str(args.peer_python), str(REPO / "experiments" / "peers" / "opfgl_main.py"),
           *CELLS[cell].peer_args.split(), "--root", str(root), "--save_root_path", str(out)]
    with open(log, "w") as f:
        code = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env).returncode
    if code:
        raise SystemExit(f"peer run {log.name} failed (exit {code}); see {log}")


def run_peer(args, work: Path, cell: str, name: str, partition: Path | None, split: Path | None = None) -> dict:
    """The authors' main.py in its venv: scores of runs 0-2 and each run's wall seconds. On its own
    partition (`partition` None) it writes that partition and its split to the cell's files."""
    env = {}
    if partition is not None:
        env["PEER_PARTITION"] = str(partition)
    else:
        env["PEER_PARTITION_OUT"] = str(files(work, cell)["authors"])
        env["PEER_SPLIT_OUT"] = str(files(work, cell)["split-own"])
    if split is not None:
        env["PEER_SPLIT"] = str(split)
    log = work / f"log-{name}-{cell}.txt"
    peer(args, cell, work / f"root-{name}-{cell}", work / f"out-{name}-{cell}", env, log)
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


def run_privfgl(cell: str, partition: str, split: Path | None = None) -> dict:
    """privfgl's O-pFGL with the cell's preset, seeds 0-2, one thread; `split`: a split file."""
    from privfgl.experiment import config_for, run
    acc, f1, seconds = [], [], []
    for seed in SEEDS:
        cfg = config_for({"method": "opfgl", "dataset": CELLS[cell].dataset.lower(), "partition": partition,
                          "clients": CLIENTS, "partition_seed": PARTITION_SEED, "seed": seed, "threads": 1,
                          "progress": False, "method_params": {"preset": cell}, "transcript": "none",
                          **({"split_file": str(split)} if split is not None else {})})
        start = time.perf_counter()
        record, _ = run(cfg)
        seconds.append(time.perf_counter() - start)
        acc.append(100 * record["metrics"]["test_acc"])
        f1.append(100 * record["metrics"]["test_f1_macro"])
    return {"acc": acc, "f1": f1, "seconds": seconds}


def run_stage(args, work: Path, cell: str, stage: str) -> dict:
    f = files(work, cell)
    if stage.startswith("privfgl-peer") and not f["authors"].is_file():
        raise SystemExit(f"{f['authors']}: missing; run the cell's peer-own stage first (it writes the authors' "
                         "partition)")
    if stage == "peer-own":
        return run_peer(args, work, cell, "own", None)
    if stage == "peer-privfgl":
        return run_peer(args, work, cell, "privfgl", privfgl_partition(work, cell))
    if stage == "peer-privfgl-psplit":
        return run_peer(args, work, cell, "privfgl-psplit", privfgl_partition(work, cell), privfgl_split(work, cell))
    if stage == "privfgl-peer":
        return run_privfgl(cell, f"file:{f['authors']}")
    if stage == "privfgl-own":
        return run_privfgl(cell, f"file:{privfgl_partition(work, cell)}")
    if stage == "privfgl-peer-split":
        return run_privfgl(cell, f"file:{f['authors']}", peer_split(args, work, cell, on_privfgl=False))
    return run_privfgl(cell, f"file:{privfgl_partition(work, cell)}", peer_split(args, work, cell, on_privfgl=True))


def mean_std(values: list[float]) -> str:
    return f"{statistics.fmean(values):.2f} ± {statistics.pstdev(values):.2f}"


def verdict(cell_results: dict) -> str:
    """The issue's target on the authors' partition and split: privfgl's mean >= the authors' mean minus
    their std, and privfgl's mean seconds per run <= theirs."""
    if "peer-own" not in cell_results or "privfgl-peer-split" not in cell_results:
        return "not measured"
    peer, ours = cell_results["peer-own"], cell_results["privfgl-peer-split"]
    return f"{floor_check('acc', peer['acc'], ours['acc'])}; {time_check(peer['seconds'], ours['seconds'])}"


def seconds(r: dict | None) -> str:
    return f"{statistics.fmean(r['seconds']):.0f}" if r else ""


def summary(results: dict) -> list[str]:
    """One row per cell: the paper, both codes on the authors' partition and split, the target."""
    rows = ["| cell | paper acc % | authors' code acc % | privfgl acc % | authors' s per run | privfgl s per run | "
            "target (privfgl ≥ authors' − 1 std; s ≤ authors') |", "|---|---|---|---|---|---|---|"]
    for cell, spec in CELLS.items():
        peer, ours = results.get(cell, {}).get("peer-own"), results.get(cell, {}).get("privfgl-peer-split")
        rows.append(f"| {spec.dataset} {spec.partition} | {spec.paper[0]:.2f} ± {spec.paper[1]:.2f} | "
                    f"{mean_std(peer['acc']) if peer else 'not run'} | {mean_std(ours['acc']) if ours else 'not run'} | "
                    f"{seconds(peer)} | {seconds(ours)} | {verdict(results.get(cell, {}))} |")
    return rows


NAMES = {"peer-own": ("authors' code", "authors' ({method}, KMeans ×10, seed 42)", "authors'"),
         "peer-privfgl": ("authors' code", "privfgl's (`privfgl partition --partition {partition} --seed 42`)",
                          "authors'"),
         "peer-privfgl-psplit": ("authors' code", "privfgl's", "privfgl's (`PEER_SPLIT`)"),
         "privfgl-peer": ("privfgl", "authors' (`--partition file:`)", "privfgl's"),
         "privfgl-own": ("privfgl", "privfgl's (the same file; = `--partition {partition} --partition-seed 42`)",
                         "privfgl's"),
         "privfgl-peer-split": ("privfgl", "authors'", "authors' (`--split-file`)"),
         "privfgl-own-split": ("privfgl", "privfgl's", "authors' (`--split-file`)")}


def cell_table(cell: str, cell_results: dict, work: Path) -> list[str]:
    """The cell's measured stages (the ones not run are left out), with its files' hashes."""
    from privfgl.data.partition_file import file_sha256
    from privfgl.data.split_file import split_sha256
    spec = CELLS[cell]
    fill = {"method": "python-louvain" if spec.partition == "Louvain+" else "pymetis",
            "partition": spec.partition.lower()}
    rows = [f"**{spec.dataset}, {spec.partition}** (preset `{cell}`)", "",
            "| code | partition | split | acc % | macro-F1 % | per seed (acc) | s per run |",
            "|---|---|---|---|---|---|---|",
            f"| paper | authors' | authors' | {spec.paper[0]:.2f} ± {spec.paper[1]:.2f} | {spec.paper[2]:.2f} ± "
            f"{spec.paper[3]:.2f} | | |"]
    for stage in STAGES:
        if stage not in cell_results:
            continue
        code, partition, split = NAMES[stage]
        r = cell_results[stage]
        rows.append(f"| {code} | {partition.format(**fill)} | {split} | {mean_std(r['acc'])} | {mean_std(r['f1'])} | "
                    f"{' / '.join(f'{a:.2f}' for a in r['acc'])} | {seconds(r)} |")
    f = files(work, cell)
    hashes = [f"`{p.name}` {file_sha256('file:' + str(p))[:16]}…" for p in (f["authors"], f["privfgl"])
              if p.is_file()]
    hashes += [f"`{p.name}` {split_sha256(str(p))[:16]}…" for p in (f["split-own"], f["split-privfgl"],
                                                                     f["privfgl-split"]) if p.is_file()]
    return [*rows, "", "Files (sha256): " + "; ".join(hashes) + ".", ""]


def table(results: dict, work: Path) -> str:
    blocks = summary(results) + [""]
    for cell in CELLS:
        if results.get(cell):
            blocks += cell_table(cell, results[cell], work)
    blocks.append(" ".join(filter(None, [
        "Training seeds 0, 1, 2 (partition and split at seed 42); mean ± population std; seconds: each side's "
        "mean wall time per run at one torch thread.", results_commits(results)])))
    return "\n".join(blocks) + "\n"


def main() -> int:
    ap = peer_parser(__doc__, "opfgl", CELLS, STAGES)
    ap.add_argument("--out", default="docs/authors-side-by-side.md")
    ap.add_argument("--peer-log", nargs=3, metavar=("CELL", "STAGE", "LOG"),
                    help="take a peer stage's result from the log of a run made by hand with experiments/peers/"
                         "opfgl_main.py (the same command run_peer makes)")
    ap.add_argument("--privfgl-from", nargs=4, metavar=("CELL", "STAGE", "JSON", "KEY"),
                    help="take a privfgl stage's result from experiments/opfgl_ablation.py's results file (its KEY "
                         "'privfgl' is the same runs as privfgl-peer-split, with the default --param)")
    args = ap.parse_args()
    code_commit()  # read now: save_result stamps each stage with the code the call started from
    args.work.mkdir(parents=True, exist_ok=True)
    store = args.work / "results.json"

    results = json.loads(store.read_text()) if store.is_file() else {}
    if args.peer_log:
        cell, stage, log = args.peer_log
        results = save_result(store, cell, stage, parse_peer_log(Path(log).read_text()))
    if args.privfgl_from:
        cell, stage, path, key = args.privfgl_from
        per_seed = json.loads(Path(path).read_text())[key]
        results = save_result(store, cell, stage, {k: [per_seed[str(s)][k] for s in SEEDS] for k in ("acc", "f1", "seconds")})
    for cell in args.cells:
        for stage in args.stages:
            if stage in results.get(cell, {}):
                continue
            results = save_result(store, cell, stage, run_stage(args, args.work, cell, stage))
            print(cell, stage, {k: [round(v, 2) for v in vals] for k, vals in results[cell][stage].items()
                                if isinstance(vals, list)}, flush=True)
    write_block(args.out, TAG, table(results, args.work), title="Side by side with the authors' code")
    print(table(results, args.work))
    return 0


if __name__ == "__main__":
    sys.exit(main())
