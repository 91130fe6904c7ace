r"""FedLoG side by side with its authors' code, on the same clients, splits and training seeds (issue #43).

Cells (--cells): Cora and CiteSeer × 3, 5, 10 clients, the closed regime of the paper's Table 1(a)
(METIS into K + 1 parts, the last the new client; missing classes removed per client; 40/30/30 per
client). The authors' repository ships no partition code (main.py reads a pickled `local_graphs.pkl`
from a Google Drive archive, not reachable here), so privfgl makes the clients once (partition seed
0) and both sides train on them:

    export     privfgl's closed regime for the cell, written to WORK/CELL/: partition.txt (the K
               training clients' node ids, missing classes removed), split.json (`--split-file`
               format), eval.json (each client's unseen-node / missing-class graph, the new client)
    peer       the authors' main.py (experiments/peers/fedlog_main.py builds their local_graphs.pkl
               from those files), one process per training seed (`--seed s --num_seed 1`: main.py
               reseeds and rebuilds everything per seed, so this is its `--num_seed 3` run split up)
    privfgl    privfgl's fedlog on the same files (`--partition file:partition.txt --split-file
               split.json`), seeds 0, 1, 2, its defaults (the authors' flags map onto them: FLAGS);
               these are the clients and split privfgl's own pipeline builds (`--partition metis
               --partition-seed 0 --evaluate seen,unseen-node,missing-class,new-client`; a test checks
               it), so "privfgl on its own partition" is this row

Results are kept per seed (--seeds picks which to run), so calls can run seeds side by side and a
run cut off by time leaves the finished seeds. Both report the seen test accuracy at the round of
best (seen) validation accuracy, pooled over the clients' test nodes (privfgl's test_acc_micro; main.py
weighs each client's accuracy by its test count). The rounds are each code's own selection; privfgl's
runs also keep the round main.py's rule would pick (code_selection) and the accuracy there. Results land in
WORK/results.json (or --results PATH) cell by cell, stage by stage and seed by seed (a later call runs only
the missing ones), each run stamped with privfgl's commit and its files' sha256; --merge adds the results
files of calls run side by side in other work folders. The tables go to docs/authors-side-by-side.md's block
`authors_side_by_side_fedlog` (or --tag): per cell with results the paper (Table 1(a)), both codes, each
side's wall seconds per run at one thread, and the issue's target (privfgl >= the authors' mean minus one
std, seconds <= theirs), then the commits the runs came from.

    OMP_NUM_THREADS=1 PRIVFGL_DATA=... python experiments/authors_side_by_side_fedlog.py \
        --peer-python /tmp/peer-log/venv/bin/python --peer-src /tmp/peer-log/src --work /tmp/peer-log/side
"""
from __future__ import annotations

import argparse
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

from experiments.side_by_side import floor_check, peer_parser, time_check  # noqa: E402
from privfgl.doc_block import write_block  # noqa: E402

STAGES = ("peer", "privfgl")
SEEDS = (0, 1, 2)
PARTITION_SEED = 0
CLOSED = ("seen", "unseen-node", "missing-class", "new-client")
TAG = "authors_side_by_side_fedlog"
FULL = (100, 100)  # (rounds, generator epochs): the authors' --rounds and --pre_gen_epochs defaults

# The authors' argparse defaults (argument.py at 80c9792) and the constants in their model code, each with
# privfgl's fedlog method param that carries it and the value it must have (tests check these against
# privfgl's defaults). `None`: a run option, not a method param.
FLAGS = {
    "--lr 0.001": ("lr", 1e-3),
    "--lr 0.001 (the synthetic nodes' Adam)": ("lr_synthetic", 1e-3),
    "--local_epochs 1": ("local_epochs", 1),
    "--pre_epochs 100": ("warmup_epochs", 100),
    "pretrain patience 10": ("warmup_patience", 10),
    "--pre_gen_epochs 100": ("generator_epochs", 100),
    "neighbour generator Adam lr 0.01": ("generator_lr", 1e-2),
    "grad_epochs 20 (random nets in L_grad)": ("generator_gnns", 20),
    "--batch_size 64": ("batch_size", 64),
    "--hid_dim 64 (GraphSAGE out)": ("embed_dim", 64),
    "--hid_dim*2 (GraphSAGE hidden)": ("hidden", 128),
    "GraphSAGE dropout 0.5": ("dropout", 0.5),
    "Adam weight_decay 5e-4": ("weight_decay", 5e-4),
    "--head_deg_thres 3": ("tail_degree", 3),
    "--num_proto 20": ("s", 20),
    "--hyper_syn_norm 1": ("beta", 1.0),
    "--hyper_cd_metric 1": ("generalization_weight", 1.0),
    "cls_cd_scaler ± 0.001 per minibatch": ("gamma_step", 1e-3),
    "cls_cd_scaler threshold 0.8": ("gamma_threshold", 0.8),
    "cls_cd_scaler updated per minibatch": ("gamma_update", "batch"),
    "average_parameters (plain mean)": ("weighting", "uniform"),
    "clsf: LayerNorm then message passing": ("classifier", "code"),
    "NLLLoss on the log-probability mixture": ("mixture", "log"),
    "every global synthetic node in every minibatch": ("global_per_step", "all"),
}
RUN_FLAGS = {"--rounds 100": ("rounds", 100), "--n_silos K": ("clients", "K"), "--seed s": ("seed", "s")}


@dataclass(frozen=True)
class Cell:
    dataset: str     # privfgl's name
    clients: int
    paper: float     # Table 1(a), seen graph, accuracy %


CELLS = {  # paper: the spec's A.11 Table 1(a) (docs/fedlog-reproduction.md's parentheses)
    "cora-3": Cell("cora", 3, 86.01), "cora-5": Cell("cora", 5, 85.75), "cora-10": Cell("cora", 10, 84.51),
    "citeseer-3": Cell("citeseer", 3, 76.63), "citeseer-5": Cell("citeseer", 5, 77.28),
    "citeseer-10": Cell("citeseer", 10, 76.24),
}
PEER_NAMES = {"cora": "Cora", "citeseer": "CiteSeer"}


def regime_config(cell: str, seed: int = 0, **extra):
    """privfgl's config for the cell's own pipeline (the closed regime, partition seed 0)."""
    from privfgl.experiment import config_for
    spec = CELLS[cell]
    return config_for({"method": "fedlog", "dataset": spec.dataset, "clients": spec.clients,
                       "partition_seed": PARTITION_SEED, "seed": seed, "evaluate": list(CLOSED), **extra})


def export(work: Path, cell: str) -> Path:
    """privfgl's closed-regime clients for the cell in WORK/CELL/ (module docstring); returns the folder."""
    folder = work / cell
    if not (folder / "eval.json").is_file():
        export_regime(regime_config(cell), folder)
    return folder


def export_regime(cfg, folder: Path) -> None:
    """The clients a closed-regime config builds, as partition.txt, split.json and eval.json in folder."""
    from privfgl.data.partition_file import write_partition
    from privfgl.data.split_file import write_split
    from privfgl.experiment import build_clients
    folder.mkdir(parents=True, exist_ok=True)
    built = build_clients(cfg)
    write_partition([c.global_id for c in built.clients], folder / "partition.txt")
    write_split(built.clients, folder / "split.json")
    by_name = {s.name: s.graphs for s in built.settings}
    unseen, missing = by_name["unseen-node"], by_name["missing-class"]
    evals = {"clients": [{"nodes": g.global_id.tolist(), "unseen_node": g.global_id[g.test_mask].tolist(),
                          "missing_class": missing[k].global_id[missing[k].test_mask].tolist()}
                         for k, g in enumerate(unseen)],
             "new_client": by_name["new-client"][0].global_id.tolist(),
             "data_regime": built.extras["data_regime"]}
    (folder / "eval.json").write_text(json.dumps(evals) + "\n")


def file_config(folder: Path, dataset: str, clients: int, seed: int, **extra):
    """privfgl's fedlog config on an exported folder's partition and split."""
    from privfgl.experiment import config_for
    return config_for({"method": "fedlog", "dataset": dataset, "clients": clients,
                       "partition": f"file:{folder / 'partition.txt'}", "split_file": str(folder / "split.json"),
                       "partition_seed": PARTITION_SEED, "seed": seed, **extra})


def run_peer(args, work: Path, cell: str, seed: int, budget: tuple[int, int] = FULL) -> dict:
    """The authors' main.py in its venv on the exported clients, one training seed, one thread."""
    spec = CELLS[cell]
    folder = export(work, cell)
    run_dir = work / f"peer-{key(cell, budget)}-{seed}"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    env = {**os.environ, "FEDLOG_SRC": str(args.peer_src), "PEER_CLIENTS": str(folder),
           "PEER_PLANETOID": str(Path(os.environ["PRIVFGL_DATA"])), "PEER_WORKDIR": str(run_dir),
           "OMP_NUM_THREADS": "1"}
    cmd = [str(args.peer_python), str(REPO / "experiments" / "peers" / "fedlog_main.py"), "--dataset", spec.dataset,
           "--n_silos", str(spec.clients), "--unseen_setting", "closeset", "--seed", str(seed), "--num_seed", "1",
           "--rounds", str(budget[0]), "--pre_gen_epochs", str(budget[1])]
    log = work / f"log-peer-{key(cell, budget)}-{seed}.txt"
    with open(log, "w") as f:
        code = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env).returncode
    if code:
        raise SystemExit(f"peer run {log.name} failed (exit {code}); see {log}")
    return one_run(parse_peer_log(log.read_text()), seed)


def one_run(parsed: dict, seed: int) -> dict:
    """A parsed peer log's run of `seed` as {acc, seconds, best_round}."""
    if seed not in parsed["seeds"]:
        raise SystemExit(f"the peer log has no finished run of seed {seed}")
    i = parsed["seeds"].index(seed)
    return {key: parsed[key][i] for key in ("acc", "seconds", "best_round")}


BEST = re.compile(r"^\[ROUND (\d+)\] Test Acc at Best Val :\s+([0-9.]+) at (\d+) round\.")


def parse_peer_log(text: str) -> dict:
    """Each finished run's score: the last `[ROUND r] Test Acc at Best Val : A at R round.` line main.py
    prints before the next run's PEER_RUN_START (a run cut short before its last round is left out, so
    a log cut short still gives its finished runs). Seconds: from a run's PEER_RUN_START to the next
    run's, the last to PEER_RUN_END."""
    acc, best_round, starts, seeds, end, last = [], [], [], [], None, None

    def close() -> None:
        if last is not None:
            acc.append(100 * last[1]), best_round.append(last[2])

    for line in text.splitlines():
        if line.startswith("PEER_RUN_START"):
            close()
            _, seed, t = line.split()
            seeds.append(int(seed)), starts.append(float(t))
            last = None
        elif (m := BEST.match(line)):
            last = (int(m.group(1)), float(m.group(2)), int(m.group(3)))
        elif line.startswith("PEER_RUN_END"):
            end = float(line.split()[1])
    if end is not None:
        close()
    seconds = [b - a for a, b in zip(starts, [*starts[1:], *([end] if end is not None else [])])][:len(acc)]
    return {"acc": acc, "seconds": seconds, "seeds": seeds[:len(acc)], "best_round": best_round}


def run_privfgl(work: Path, cell: str, seed: int, budget: tuple[int, int] = FULL, params: dict | None = None) -> dict:
    """privfgl's fedlog on the exported files, one seed, one thread; `params`: method params over the
    defaults (an ablation)."""
    from privfgl.experiment import run
    spec = CELLS[cell]
    common = {"threads": 1, "progress": False, "transcript": "none", "rounds": budget[0],
              "method_params": {"generator_epochs": budget[1], **(params or {})}}
    cfg = file_config(export(work, cell), spec.dataset, spec.clients, seed, **common)
    start = time.perf_counter()
    record, setup = run(cfg)
    seconds = time.perf_counter() - start
    missing = [len(c["missing_class"]) for c in json.loads((work / cell / "eval.json").read_text())["clients"]]
    return {**scores(record["metrics"], setup.tracker.history, missing), "seconds": seconds}


def scores(metrics: dict, history: list[dict], missing_counts: list[int]) -> dict:
    """A privfgl run's results.json entry: acc, the test accuracy pooled over the clients' test nodes (as
    main.py weighs them) at privfgl's selected round (best_round); acc_code_selection at the round main.py's
    rule picks (code_selection); acc_node_weighted: privfgl's test_acc (clients weighted by node count), the
    score of this table before it was pooled; curve: [round, val acc %, pooled test acc %] per round."""
    code_round = code_selection(history, missing_counts)
    return {"acc": 100 * metrics["test_acc_micro"], "acc_node_weighted": 100 * metrics["test_acc"],
            "best_round": metrics["best_round"],
            "acc_code_selection": 100 * history[code_round]["test_acc_micro"],
            "best_round_code_selection": history[code_round]["round"],
            "curve": [[e["round"], round(100 * e["val_acc"], 2), round(100 * e["test_acc_micro"], 2)] for e in history]}


def code_selection(history: list[dict], missing_counts: list[int]) -> int:
    """The round the authors' main.py would select from privfgl's per-round, per-client accuracies: its
    validation accuracy weights client k by its missing-class test count (main.py reads index 6 of the
    validation tuple, `acc_score_count_unseen_cls`, as the validation count; clients without such nodes
    weigh nothing) and a later round wins a tie (`best_acc_val <= round_val_acc`). Index into history."""
    best, chosen = 0.0, 0
    total = sum(missing_counts)
    for i, entry in enumerate(history):
        val = sum(c["val_acc"] * n for c, n in zip(entry["per_client"], missing_counts, strict=True)) / total
        if best <= val:
            best, chosen = val, i
    return chosen


def per_seed(stage_results: dict | None) -> dict:
    """A stage's results ({seed: run}) as lists in seed order: acc, seconds, seeds."""
    runs = sorted((int(s), r) for s, r in (stage_results or {}).items())
    return {"acc": [r["acc"] for _, r in runs], "seconds": [r["seconds"] for _, r in runs],
            "seeds": [s for s, _ in runs]}


def mean_std(values: list[float]) -> str:
    return f"{statistics.fmean(values):.2f} ± {statistics.pstdev(values):.2f}"


def verdict(cell_results: dict) -> str:
    """The issue's target on the same clients: privfgl's mean >= the authors' mean minus their std, and
    privfgl's mean seconds per run <= theirs; only on the seeds both sides ran, two or more (one seed has no
    std). Where one side ran more seeds, the verdict says which seeds it compared."""
    peer_runs, our_runs = cell_results.get("peer") or {}, cell_results.get("privfgl") or {}
    if not peer_runs or not our_runs:
        return "not measured"
    shared = sorted(set(peer_runs) & set(our_runs), key=int)
    if len(shared) < 2:
        theirs, mine = (", ".join(sorted(runs, key=int)) for runs in (peer_runs, our_runs))
        return f"not measured (seeds: the authors' {theirs}, privfgl's {mine})"
    where = "" if set(peer_runs) == set(our_runs) else f", on the seeds both ran ({', '.join(shared)})"
    peer, ours = (per_seed({s: runs[s] for s in shared}) for runs in (peer_runs, our_runs))
    return f"{floor_check('acc', peer['acc'], ours['acc'])}; {time_check(peer['seconds'], ours['seconds'])}{where}"


def _cell(r: dict) -> str:
    if not r["acc"]:
        return "not run"
    note = f" ({len(r['acc'])} of {len(SEEDS)} seeds)" if len(r["acc"]) < len(SEEDS) else ""
    return mean_std(r["acc"]) + note


def _seconds(r: dict) -> str:
    return f"{statistics.fmean(r['seconds']):.0f}" if r["seconds"] else ""


def _per_seed(r: dict) -> str:
    return " / ".join(f"{a:.2f}" for a in r["acc"]) if r["acc"] else ""


def table(results: dict, work: Path) -> str:
    from privfgl.data.partition_file import file_sha256
    from privfgl.data.split_file import split_sha256
    rows = ["| cell | paper acc % | authors' code acc % | privfgl acc % | "
            "authors' per seed | privfgl per seed | authors' s per run | privfgl s per run | "
            "target (privfgl ≥ authors' − 1 std; s ≤ authors') |",
            "|---|---|---|---|---|---|---|---|---|"]
    hashes = []
    for cell, spec in CELLS.items():
        names = [k for k in results if k == cell or k.startswith(cell + "@")]
        if results and not names:
            continue  # a results file of some cells: only theirs (an empty one: every cell, not run)
        for name in [cell, *sorted(k for k in names if k != cell)]:
            r = {stage: per_seed(results.get(name, {}).get(stage)) for stage in STAGES}
            budget = f" ({name.split('@')[1]})" if "@" in name else ""
            label = f"{PEER_NAMES[spec.dataset]} K={spec.clients}{budget}"
            paper = f"{spec.paper:.2f}" if name == cell else "—"
            rows.append(f"| {label} | {paper} | {_cell(r['peer'])} | {_cell(r['privfgl'])} | "
                        f"{_per_seed(r['peer'])} | {_per_seed(r['privfgl'])} | {_seconds(r['peer'])} | "
                        f"{_seconds(r['privfgl'])} | {verdict(results.get(name, {}))} |")
        stored = {(run["files"]["partition"], run["files"]["split"]) for k in names
                  for runs in results[k].values() for run in runs.values() if "files" in run}
        folder = work / cell
        if not stored and (folder / "partition.txt").is_file():
            stored = {(file_sha256("file:" + str(folder / "partition.txt")), split_sha256(str(folder / "split.json")))}
        hashes += [f"{cell}: `partition.txt` {part[:12]}…, `split.json` {split[:12]}…" for part, split in sorted(stored)]
        if len(stored) > 1:
            hashes.append(f"**{cell}'s runs did not all run on the same files**")
    extra, commits = ablation_table(results), provenance(results)
    return "\n".join([*rows, *([""] + extra if extra else []), "",
                      f"Training seeds {seeds_phrase(results)}; the clients and split of privfgl's closed "
                      f"regime at partition seed {PARTITION_SEED} (files, sha256: " + "; ".join(hashes) + "); "
                      "seen test accuracy pooled over the clients' test nodes at each code's round of best seen "
                      "validation accuracy (\"at main.py's round\": privfgl's run at the round main.py's rule picks, "
                      "validation weighted by missing-class counts); mean ± population std; seconds: each side's "
                      "mean wall time per run at one thread on the shared 2-core machine, so only their order "
                      "means anything." + (" " + commits if commits else "")]) + "\n"


def seeds_phrase(results: dict) -> str:
    """The training seeds the table's runs used: "0, 1, 2 on both sides" (main.py's), saying so where a row
    ran fewer of them, or the seeds stored."""
    seeds = sorted({int(s) for stages in results.values() for runs in stages.values() for s in runs})
    if seeds not in ([], list(SEEDS)):
        return ", ".join(map(str, seeds)) + " (per seed above)"
    fewer = any(len(runs) < len(SEEDS) for stages in results.values() for runs in stages.values())
    return "0, 1, 2 on both sides" + (f' (fewer where a row says "n of {len(SEEDS)} seeds")' if fewer else "")


def seed_number(text: str) -> int:
    """A --seeds value: a training seed, an integer ≥ 0."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a training seed (an integer ≥ 0)")
    return int(text)


def key(cell: str, budget: tuple[int, int]) -> str:
    """results.json's key of a cell at a budget: the cell's name at the full budget."""
    return cell if budget == FULL else f"{cell}@rounds={budget[0]},gen={budget[1]}"


def run_stage(args, work: Path, cell: str, stage: str, seed: int, budget: tuple[int, int]) -> dict:
    """One run, stamped with privfgl's commit (privfgl.provenance.code_commit) and the sha256 of the files it
    ran on."""
    from privfgl.data.partition_file import file_sha256
    from privfgl.data.split_file import split_sha256
    from privfgl.provenance import code_commit
    code = code_commit()  # the code the run starts from (read once per process)
    result = run_peer(args, work, cell, seed, budget) if stage == "peer" else \
        run_privfgl(work, cell, seed, budget=budget, params=args.param)
    folder = work / cell
    return {**result, "code": code,
            "files": {"partition": file_sha256("file:" + str(folder / "partition.txt")),
                      "split": split_sha256(str(folder / "split.json"))}}


def merge_results(into: dict, other: dict, source: str) -> dict:
    """`other`'s runs (cell -> stage -> seed -> run) added to `into`, in place: the results of calls run
    side by side in other work folders. A seed stored in both with different accuracies is an error that
    names it, so no result is silently dropped."""
    for cell, stages in other.items():
        for stage, runs in stages.items():
            mine = into.setdefault(cell, {}).setdefault(stage, {})
            for seed, run in runs.items():
                if seed in mine and mine[seed]["acc"] != run["acc"]:
                    raise SystemExit(f"--merge {source}: {cell} {stage} seed {seed} is {run['acc']:.2f} there and "
                                     f"{mine[seed]['acc']:.2f} in the results file; keep one")
                mine.setdefault(seed, run)
    return into


def provenance(results: dict) -> str:
    """The sentence naming the commits the table's runs came from (privfgl's, whose experiments/peers/
    drives the authors' code), with the runs stored before commits were kept."""
    from privfgl.provenance import commits_sentence
    return commits_sentence([run.get("code") for stages in results.values() for runs in stages.values()
                             for run in runs.values()], what="runs")


def ablation_table(results: dict) -> list[str]:
    """privfgl's defaults and its runs with other method params (stages `privfgl+KEY=VALUE,...`) beside the
    authors' code, where any were run; with each run's accuracy at the round main.py's rule picks
    (code_selection; blank for runs stored before it was kept)."""
    rows = []
    for name, stages in results.items():
        variants = sorted(s for s in stages if s.startswith("privfgl+"))
        if not variants:
            continue
        if not rows:
            rows = ["| cell | privfgl with | acc % | per seed | at main.py's round | s per run | authors' code |",
                    "|---|---|---|---|---|---|---|"]
        peer = per_seed(stages.get("peer"))
        label = name.replace("@", " (") + (")" if "@" in name else "")
        for stage in ["privfgl", *variants]:
            r = per_seed(stages.get(stage))
            runs = (stages.get(stage) or {}).values()
            code = [run["acc_code_selection"] for run in runs if "acc_code_selection" in run]
            what = f"`{stage.split('+', 1)[1]}`" if "+" in stage else "its defaults"
            rows.append(f"| {label} | {what} | {_cell(r)} | {_per_seed(r)} | "
                        f"{mean_std(code) if len(code) == len(r['acc']) and code else ''} | {_seconds(r)} | "
                        f"{_cell(peer)} |")
    return rows


def main() -> int:
    ap = peer_parser(__doc__, "log", CELLS, STAGES, ["peer", "privfgl"])
    ap.add_argument("--seeds", nargs="+", type=seed_number, default=list(SEEDS),
                    help="training seeds (default 0 1 2, main.py's; more go beside them in the results file)")
    ap.add_argument("--budget", type=lambda v: tuple(int(x) for x in v.split(",")), default=FULL,
                    metavar="ROUNDS,GEN_EPOCHS", help="a smaller budget on both sides (their --rounds and "
                    "--pre_gen_epochs, privfgl's --rounds and generator_epochs), kept as its own rows")
    ap.add_argument("--param", type=lambda v: dict([v.split("=", 1)]), action="append", default=[],
                    metavar="KEY=VALUE", help="privfgl method params over its defaults: an ablation, kept as the "
                    "stage privfgl+KEY=VALUE,...")
    ap.add_argument("--export-only", action="store_true", help="write the cells' client files and stop")
    ap.add_argument("--write-only", action="store_true",
                    help="run nothing: write the block from the results file (after any --merge)")
    ap.add_argument("--peer-log", nargs=3, metavar=("CELL", "SEED", "LOG"),
                    help="take a cell's peer run from the log of a run made by hand (run_peer's command)")
    ap.add_argument("--out", default="docs/authors-side-by-side.md")
    ap.add_argument("--tag", default=TAG, help=f"the block's marker in --out (default {TAG})")
    ap.add_argument("--results", type=Path, help="the results file (default WORK/results.json); one kept beside "
                    "the docs lets a later call write its block again")
    ap.add_argument("--merge", type=Path, nargs="+", default=[], metavar="RESULTS",
                    help="results files of calls run side by side in other work folders, merged in first")
    args = ap.parse_args()
    args.param = {k: v for d in args.param for k, v in d.items()}
    ablation = "privfgl+" + ",".join(f"{k}={v}" for k, v in sorted(args.param.items())) if args.param else None
    args.work.mkdir(parents=True, exist_ok=True)
    store = args.results or args.work / "results.json"
    store.parent.mkdir(parents=True, exist_ok=True)

    def save(cell: str, stage: str, seed: int, result: dict) -> dict:
        merged = json.loads(store.read_text()) if store.is_file() else {}  # another call may run other cells
        merged.setdefault(cell, {}).setdefault(stage, {})[str(seed)] = result
        store.write_text(json.dumps(merged, indent=1))
        return merged

    if args.export_only:
        for cell in args.cells:
            print(cell, export(args.work, cell))
        return 0
    results = json.loads(store.read_text()) if store.is_file() else {}
    for other in args.merge:
        try:
            merge_results(results, json.loads(other.read_text()), str(other))
        except (OSError, json.JSONDecodeError) as err:
            raise SystemExit(f"--merge {other}: not a readable results file ({err})") from None
    if args.merge:
        store.write_text(json.dumps(results, indent=1))
    if args.peer_log:
        cell, seed, log = args.peer_log
        results = save(cell, "peer", int(seed), one_run(parse_peer_log(Path(log).read_text()), int(seed)))
    for cell in [] if args.write_only else args.cells:
        name = key(cell, args.budget)
        for stage in args.stages:
            for seed in args.seeds:
                stored = ablation if ablation and stage == "privfgl" else stage
                if str(seed) in results.get(name, {}).get(stored, {}):
                    continue
                results = save(name, stored, seed, run_stage(args, args.work, cell, stage, seed, args.budget))
                print(name, stored, seed, results[name][stored][str(seed)], flush=True)
    write_block(args.out, args.tag, table(results, args.work), title="Side by side with the authors' code")
    print(table(results, args.work))
    return 0


if __name__ == "__main__":
    sys.exit(main())
