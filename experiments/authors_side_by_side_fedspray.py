r"""FedSpray side by side with its authors' code, on the same partition, splits and training seeds (issue #43).

The authors' repository (github.com/xbfu/FedSpray, d3e591a) ships its partitions as
``partition/{Dataset}_{NN}.txt`` (one file per client, one node id per line, ``np.savetxt``'s
format) for PubMed, WikiCS, Physics and Flickr only, whose features are not on this machine (the
shared dataset folder has Cora and CiteSeer). So each cell here is Cora or CiteSeer with privfgl's
Louvain+ partition (10 clients, partition seed 0) written in the repository's format (the converter
is `write_client_files`); both sides read those files: the authors' code from its ``partition/``
folder, privfgl with ``--partition file:WORK/partition/Cora_*.txt``. The authors' load_data draws
the 40/30/30 split per client (np.random under the training seed, after shuffling the client
order), so the split changes with the seed: each seed's split is exported by the authors' own run
(experiments/peers/fedspray_main.py, PEER_SPLIT_OUT) and read by privfgl with ``--split-file``.
Training seeds 0, 1, 2 on both sides. Stages (--stages) per cell:

    peer                the authors' main.py: its hyper-parameters, SAGE, 500 rounds (--rounds R: R on both
                        sides), its split
    privfgl             privfgl `--method fedspray --model sage --rounds 500 --method-param preset=code`
                        on the same files and the authors' split of the same seed
    privfgl-projector   as privfgl, with `projector_start=projector` (the preset before issue #43 found client.py's
                        projector start; the ablation of that choice)
    privfgl-paper       as privfgl, with the paper's defaults (no preset): λ1 = 5, no gate, ... (context)
    privfgl-own         privfgl with preset=code on its own partition and split (`--partition louvain+`,
                        both following the seed: `--method fedspray`'s defaults)

Each stage reports the pooled test accuracy and minority accuracy (test nodes whose label is not their
client's majority training class) at the round with the lowest pooled validation loss, as the
authors' code does, and each run's wall seconds at one thread. Results land in
WORK/results-r{ROUNDS}.json (a later call runs only the missing stages); the tables, one per round budget
in WORK with the most rounds first, go to the page's block `authors_side_by_side_fedspray`, with the
issue's target per cell: privfgl >= the authors' code minus one std (accuracy and minority accuracy), and
wall time <= theirs.

    OMP_NUM_THREADS=1 PRIVFGL_DATA=... python experiments/authors_side_by_side_fedspray.py \
        --peer-python /tmp/peer-spray/venv/bin/python --peer-src /tmp/peer-spray/src --work /tmp/peer-spray/side
"""
from __future__ import annotations

import json
import os
import re
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

STAGES = ("peer", "privfgl", "privfgl-projector", "privfgl-paper", "privfgl-own")
SEEDS = (0, 1, 2)
PARTITION, PARTITION_SEED, CLIENTS = "louvain+", 0, 10
TAG = "authors_side_by_side_fedspray"
# main.py's __main__ block and run(): the authors' setting -> privfgl's flag or method param (`preset=code`
# sets the code's choices that are not a number in main.py: params.py's table)
AUTHORS_SETTINGS = {"epochs": ("local_epochs", 5), "lr": (("lr_gnn", "lr_encoder"), 0.003),
                    "lambda_1": ("lambda1", 1.0), "proxy_dim": ("proxy_dim", 64), "hidden": ("--hidden", 64),
                    "rounds": ("--rounds", 500), "gnn": ("--model", "sage"), "proxy lr": ("lr_proxy", 0.02)}
PRIVFGL_ARGS = {"model": "sage", "hidden": 64, "rounds": 500}
AUTHORS_ROUNDS = 500  # main.py's run(): server.train(rounds=500)


METHOD_PARAMS = {"privfgl": {"preset": "code"},
                 "privfgl-projector": {"preset": "code", "projector_start": "projector"},
                 "privfgl-paper": {}, "privfgl-own": {"preset": "code"}}


@dataclass(frozen=True)
class Cell:
    """One dataset: its name in the authors' code (file prefix, Planetoid name) and privfgl's."""
    name: str
    privfgl: str


CELLS = {"cora": Cell("Cora", "cora"), "citeseer": Cell("CiteSeer", "citeseer")}


def write_client_files(parts: list, folder: Path, prefix: str) -> list[Path]:
    """The repository's partition format: ``folder/{prefix}_{k:02d}.txt`` per client, one node id per
    line as ``np.savetxt`` writes it (``%.18e``). Returns the files in client order."""
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for k, ids in enumerate(parts):
        path = folder / f"{prefix}_{k:02d}.txt"
        path.write_text("".join(f"{float(int(v)):.18e}\n" for v in ids))
        out.append(path)
    return out


def partition_glob(work: Path, cell: str) -> str:
    return str(work / "partition" / f"{CELLS[cell].name}_*.txt")


def split_file(work: Path, cell: str, seed: int) -> Path:
    return work / f"authors-split-{cell}-seed{seed}.json"


def prepare(work: Path, cell: str) -> None:
    """WORK/partition/{Name}_NN.txt (privfgl's partition) and WORK/data/{Name}/{Name}/raw (a Planetoid root)."""
    from privfgl.data import load_dataset, partition_nodes
    from privfgl.experiment import partition_cache_dir
    name = CELLS[cell].name
    if not list((work / "partition").glob(f"{name}_*.txt")):
        data = load_dataset(CELLS[cell].privfgl)
        parts = partition_nodes(data, PARTITION, CLIENTS, seed=PARTITION_SEED, cache_dir=partition_cache_dir())
        write_client_files([p.tolist() for p in parts], work / "partition", name)
    raw = work / "data" / name / name / "raw"
    if not raw.is_dir():
        shutil.copytree(Path(os.environ["PRIVFGL_DATA"]) / name / "raw", raw)


def run_peer(args, work: Path, cell: str) -> dict:
    """The authors' main.py for seeds 0-2 in its venv (args.rounds rounds); writes each seed's split."""
    log = work / f"log-peer-{cell}-r{args.rounds}.txt"
    env = {**os.environ, "FEDSPRAY_SRC": str(args.peer_src), "OMP_NUM_THREADS": "1",
           "PEER_SPLIT_OUT": str(work / f"authors-split-{cell}-seed{{seed}}.json"),
           **({"PEER_ROUNDS": str(args.rounds)} if args.rounds != AUTHORS_ROUNDS else {})}
    cmd = [str(args.peer_python), str(REPO / "experiments" / "peers" / "fedspray_main.py"), "--work", str(work),
           "--dataset", CELLS[cell].name, "--seeds", *map(str, SEEDS)]
    with open(log, "w") as f:
        code = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env).returncode
    if code:
        raise SystemExit(f"peer run failed (exit {code}); see {log}")
    return parse_peer_log(log.read_text())


FINAL = re.compile(r"seed:\s*(\d+) \| best_test_acc: ([0-9.]+) \| acc_minority: ([0-9.]+)")
ROUND = re.compile(r"Round:\s*(\d+) \| train_loss:\s*\S+ \| val_loss:\s*([0-9.eE+-]+)")


def parse_peer_log(text: str) -> dict:
    """Each finished run's seed, test and minority accuracy (%, main.py's final line), the round it
    selected (the first with the lowest val_loss, main.py's strict `<`), and its seconds (PEER_RUN_START
    to PEER_RUN_END). A run cut short is left out."""
    out = {"seeds": [], "acc": [], "minority": [], "round": [], "seconds": []}
    start, best, final = None, None, None
    for line in text.splitlines():
        if line.startswith("PEER_RUN_START"):
            start, best = float(line.split()[2]), None
        elif m := ROUND.search(line):
            r, loss = int(m.group(1)), float(m.group(2))
            if best is None or loss < best[1]:
                best = (r, loss)
        elif m := FINAL.search(line):
            final = (int(m.group(1)), 100 * float(m.group(2)), 100 * float(m.group(3)))
        elif line.startswith("PEER_RUN_END") and start is not None and final is not None:
            out["seeds"].append(final[0]), out["acc"].append(final[1]), out["minority"].append(final[2])
            out["round"].append(best[0] if best else None)
            out["seconds"].append(float(line.split()[1]) - start)
            start, final = None, None
    return out


def privfgl_config(work: Path, cell: str, stage: str, seed: int, rounds: int = AUTHORS_ROUNDS) -> dict:
    """privfgl's run settings for a stage and seed (a `privfgl run` config)."""
    cfg = {"method": "fedspray", "dataset": CELLS[cell].privfgl, "clients": CLIENTS, "seed": seed, "threads": 1,
           "progress": False, "transcript": "none", **PRIVFGL_ARGS, "rounds": rounds,
           "method_params": METHOD_PARAMS[stage]}
    if stage != "privfgl-own":
        cfg.update(partition=f"file:{partition_glob(work, cell)}", split_file=str(split_file(work, cell, seed)))
    return cfg


def run_privfgl(work: Path, cell: str, stage: str, rounds: int) -> dict:
    from privfgl.experiment import config_for, run
    out = {"seeds": [], "acc": [], "minority": [], "round": [], "seconds": []}
    for seed in SEEDS:
        start = time.perf_counter()
        record, _ = run(config_for(privfgl_config(work, cell, stage, seed, rounds)))
        out["seconds"].append(time.perf_counter() - start)
        m = record["metrics"]
        out["seeds"].append(seed), out["acc"].append(100 * m["test_acc_micro"])
        out["minority"].append(100 * m["minority_acc"]), out["round"].append(m["best_round"])
    return out


def mean_std(values: list[float]) -> str:
    return f"{statistics.fmean(values):.2f} ± {statistics.pstdev(values):.2f}"


def verdict(cell_results: dict) -> str:
    """The issue's target: privfgl's mean >= the authors' mean minus their std, for test and minority
    accuracy, on the same partition and splits; privfgl's mean seconds per run <= theirs."""
    if "peer" not in cell_results or "privfgl" not in cell_results:
        return "not measured"
    peer, ours = cell_results["peer"], cell_results["privfgl"]
    parts = [floor_check(key, peer[key], ours[key]) for key in ("acc", "minority")]
    return "; ".join([*parts, time_check(peer["seconds"], ours["seconds"])])


NAMES = {"peer": ("authors' code (main.py: λ1 = 1, SAGE, {rounds} rounds)", "privfgl's Louvain+ (files)", "authors'"),
         "privfgl": ("privfgl `preset=code`, SAGE, {rounds} rounds", "the same files (`--partition file:`)",
                     "authors' (`--split-file`)"),
         "privfgl-projector": ("privfgl `preset=code projector_start=projector`, SAGE, {rounds} rounds",
                               "the same files", "authors' (`--split-file`)"),
         "privfgl-paper": ("privfgl, the paper's defaults (λ1 = 5), SAGE, {rounds} rounds", "the same files",
                           "authors' (`--split-file`)"),
         "privfgl-own": ("privfgl `preset=code`, SAGE, {rounds} rounds", "privfgl's Louvain+, seed = run seed",
                         "privfgl's")}


def table(results: dict, work: Path, rounds: int) -> str:
    from privfgl.data.partition_file import file_sha256
    rows = ["| cell | authors' code acc % | privfgl acc % | authors' minority % | privfgl minority % | "
            "authors' s per run | privfgl s per run | target (privfgl ≥ authors' − 1 std; s ≤ authors') |",
            "|---|---|---|---|---|---|---|---|"]
    for cell, spec in CELLS.items():
        r = results.get(cell, {})
        peer, ours = r.get("peer"), r.get("privfgl")
        fmt = lambda res, key: mean_std(res[key]) if res else "not run"  # noqa: E731
        sec = lambda res: f"{statistics.fmean(res['seconds']):.0f}" if res else ""  # noqa: E731
        rows.append(f"| {spec.name} Louvain+ 10, {rounds} rounds | {fmt(peer, 'acc')} | {fmt(ours, 'acc')} | "
                    f"{fmt(peer, 'minority')} | "
                    f"{fmt(ours, 'minority')} | {sec(peer)} | {sec(ours)} | {verdict(r)} |")
    blocks = rows + [""]
    for cell, spec in CELLS.items():
        r = results.get(cell)
        if not r:
            continue
        blocks += [f"**{spec.name}, Louvain+, 10 clients**", "",
                   "| code | partition | split | acc % | minority % | per seed (acc / minority; selected round, from 1) | "
                   "s per run |", "|---|---|---|---|---|---|---|"]
        for stage in STAGES:
            if stage not in r:
                continue
            res, (code, partition, split) = r[stage], NAMES[stage]
            code = code.format(rounds=rounds)
            first = 0 if stage == "peer" else 1  # main.py counts rounds from 1, privfgl's record from 0
            per_seed = ", ".join(f"{a:.2f} / {m:.2f}; r{rd + first}" for a, m, rd in zip(res["acc"], res["minority"],
                                                                                          res["round"]))
            blocks.append(f"| {code} | {partition} | {split} | {mean_std(res['acc'])} | {mean_std(res['minority'])} | "
                          f"{per_seed} | {statistics.fmean(res['seconds']):.0f} |")
        glob = partition_glob(work, cell)
        splits = [f"`{split_file(work, cell, s).name}` {_sha(split_file(work, cell, s))[:16]}…" for s in SEEDS
                  if split_file(work, cell, s).is_file()]
        blocks += ["", f"Files (sha256): `partition/{spec.name}_*.txt` {file_sha256('file:' + glob)[:16]}…"
                   + "".join(f"; {s}" for s in splits) + ".", ""]
    blocks.append(" ".join(filter(None, [
        f"{rounds} rounds on both sides; training seeds 0, 1, 2; mean ± population std; accuracy pooled over the "
        "clients' test nodes at the round of lowest pooled validation loss (both codes); seconds: each side's mean "
        "wall time per run at one thread.", results_commits(results)])))
    return "\n".join(blocks) + "\n"


def _sha(path: Path) -> str:
    from privfgl.data.split_file import split_sha256
    return split_sha256(str(path))


def main() -> int:
    ap = peer_parser(__doc__, "spray", CELLS, STAGES)
    ap.add_argument("--rounds", type=int, default=AUTHORS_ROUNDS,
                    help="rounds on both sides (default 500, main.py's; the peer gets PEER_ROUNDS)")
    ap.add_argument("--out", default="docs/authors-side-by-side.md")
    args = ap.parse_args()
    code_commit()  # read now: save_result stamps each stage with the code the call started from
    args.work = args.work.resolve()
    args.work.mkdir(parents=True, exist_ok=True)
    store = args.work / f"results-r{args.rounds}.json"

    results = json.loads(store.read_text()) if store.is_file() else {}
    for cell in args.cells:
        prepare(args.work, cell)
        for stage in args.stages:
            if stage in results.get(cell, {}):
                continue
            needs_split = stage in ("privfgl", "privfgl-projector", "privfgl-paper")
            if needs_split and not split_file(args.work, cell, SEEDS[-1]).is_file():
                raise SystemExit(f"{split_file(args.work, cell, SEEDS[-1])}: missing; run the cell's peer stage "
                                 "first (it writes the authors' splits)")
            result = (run_peer(args, args.work, cell) if stage == "peer"
                      else run_privfgl(args.work, cell, stage, args.rounds))
            results = save_result(store, cell, stage, result)
            print(cell, stage, {k: [round(v, 2) if isinstance(v, float) else v for v in vals]
                                for k, vals in result.items()}, flush=True)
    block = all_tables(args.work)
    write_block(args.out, TAG, block, title="Side by side with the authors' code")
    print(block)
    return 0


def all_tables(work: Path) -> str:
    """One table per round budget measured in WORK (results-r{R}.json), the most rounds first."""
    stores = {int(p.stem.removeprefix("results-r")): p for p in work.glob("results-r*.json")}
    return "\n".join(table(json.loads(stores[r].read_text()), work, r) for r in sorted(stores, reverse=True))


if __name__ == "__main__":
    sys.exit(main())
