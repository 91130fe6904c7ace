r"""FedGPL side by side with its authors' code, on the same samples and training seeds (issue #43).

Cells (--cells): Cora and CiteSeer, 9 clients (3 per task), 50 rounds. The samples are the authors':
their code's data_preprocess functions build the induced graphs and its get_dataset deals them to the
clients under seed 2023 (main.py's), exported once by experiments/peers/fedgpl_main.py into privfgl's
samples file (`--method-param samples=file:PATH`); both sides then train on exactly those samples with
training seeds 0, 1, 2. Stages (--stages) per cell:

    peer-hidta         the authors' code: README's command (VPG, HiDTA, ratio 0.1) with --epochs 50
    peer-fedavg        the same with --federated FedAvg (the paper's "without HiDTA")
    privfgl-code       privfgl on the authors' samples in the code's configuration (CODE_PARAMS: frozen trunk,
                       α_n 0.1, the round picked on test after training on support + query, dropout at
                       evaluation, the code's HiDTA and learning rates)
    privfgl-code-fedavg  the same with fed=fedavg
    privfgl-code-trunk the code's configuration on the authors' own GraphCL checkpoint (trunk=file:, the
                       pre_trained_gnn/ file their main.py loads) instead of privfgl's pretraining
    privfgl-code-trunk-fedavg  the same with fed=fedavg
    privfgl-default    privfgl's defaults on the authors' samples (round picked on validation, α_n 0.5, ...)
    privfgl-own        privfgl's defaults on its own samples (`--partition tasks`, its samples.py)

Every run is one process at one thread (OMP_NUM_THREADS=1; privfgl `--threads 1`) and leaves a file in
--work: the peer's log (PEER_EPOCH lines, its run's perf_counter stamps) or privfgl's record; a later
call reads those and runs only what is missing. The tables go to the page's block
`authors_side_by_side_fedgpl`: per cell the issue's target (privfgl-code >= peer-hidta's mean minus
one std, wall time <= theirs), HiDTA's gain over FedAvg on both sides, and every stage's row.

    OMP_NUM_THREADS=1 PRIVFGL_DATA=... python experiments/authors_side_by_side_fedgpl.py \
        --peer-python /tmp/peer-gpl/venv/bin/python --peer-src /tmp/peer-gpl/src --work /tmp/peer-gpl/side

The peer (its own venv outside the project; `prepare` builds its induced graphs once per dataset) is set
up as experiments/peers/fedgpl_main.py says.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from experiments.side_by_side import floor_check, peer_parser, time_check  # noqa: E402
from privfgl.doc_block import write_block  # noqa: E402

SEEDS = (0, 1, 2)
ROUNDS = 50
TAG = "authors_side_by_side_fedgpl"
STAGES = ("peer-hidta", "peer-fedavg", "privfgl-code", "privfgl-code-fedavg", "privfgl-code-trunk",
          "privfgl-code-trunk-fedavg", "privfgl-default", "privfgl-own")
# privfgl's configurations compared with the authors' code: (HiDTA stage, its FedAvg stage)
COMPARED = (("privfgl-code", "privfgl-code-fedavg"), ("privfgl-code-trunk", "privfgl-code-trunk-fedavg"))
# the authors' code's configuration as privfgl's method params (lib/options.py defaults, README's ratio 0.1)
CODE_PARAMS = {"node_ratio": 0.1, "selection": "test", "eval_dropout": "true", "hidta_mode": "code",
               "lr_prompt": 0.15, "lr_head": 0.2, "freeze_trunk": "true"}


@dataclass(frozen=True)
class Cell:
    dataset: str       # the authors' spelling
    num_classes: int
    paper: float       # Table 1, FedGPL ACC %
    paper_gain: float  # §5.2.2: ACC lost without HiDTA (points)


CELLS = {"cora": Cell("Cora", 7, 88.34, 1.04), "citeseer": Cell("CiteSeer", 6, 87.60, 1.55)}


def samples_file(work: Path, cell: str) -> Path:
    return work / f"authors-{cell}.pt"


def peer_command(args, cell: str, stage: str, seed: int) -> list[str]:
    spec = CELLS[cell]
    return [str(args.peer_python), str(REPO / "experiments" / "peers" / "fedgpl_main.py"), "run",
            "--dataset_name", spec.dataset, "--num_classes", str(spec.num_classes), "--algorithm", "VPG",
            "--federated", "FedAvg" if stage == "peer-fedavg" else "HiDTA", "--ratio", "0.1",
            "--epochs", str(ROUNDS), "-S", str(seed)]


def privfgl_command(args, cell: str, stage: str, seed: int, out: Path) -> list[str]:
    params = {} if stage == "privfgl-own" else {"samples": f"file:{samples_file(args.work, cell)}"}
    if stage.startswith("privfgl-code"):
        params.update(CODE_PARAMS)
    if stage.startswith("privfgl-code-trunk"):
        params["trunk"] = f"file:{Path(args.peer_src) / 'pre_trained_gnn' / f'{CELLS[cell].dataset}.GraphCL.TransformerConv.pth'}"
    if stage.endswith("-fedavg"):
        params["fed"] = "fedavg"
    cmd = [str(Path(sys.executable).parent / "privfgl"), "run", "--method", "fedgpl", "--dataset", cell,
           "--partition", "tasks", "--clients", "9", "--rounds", str(ROUNDS), "--seed", str(seed), "--threads", "1",
           "--out", str(out)]
    for key, value in params.items():
        cmd += ["--method-param", f"{key}={value}"]
    return cmd


def export_samples(args, work: Path, cell: str) -> None:
    spec, env = CELLS[cell], {**os.environ, "FEDGPL_SRC": str(args.peer_src), "OMP_NUM_THREADS": "1"}
    base = [str(args.peer_python), str(REPO / "experiments" / "peers" / "fedgpl_main.py")]
    flags = ["--dataset_name", spec.dataset, "--num_classes", str(spec.num_classes)]
    marker = Path(args.peer_src) / "data" / spec.dataset / "induced_graphs" / "PEER_DATA_SEED"
    if not marker.is_file():
        subprocess.run([*base, "prepare", *flags], env=env, check=True, stdout=subprocess.DEVNULL)
    subprocess.run([*base, "export", *flags, "--out", str(samples_file(work, cell))], env=env, check=True)


def parse_peer_log(text: str) -> dict | None:
    """A finished peer run (None if it did not finish): the epoch with the best task-mean ACC (the code's
    ModelCheckpoint(monitor='ACC', mode='max'); the first such epoch), its F1 and per-task ACC, the last
    epoch's ACC, and the seconds from PEER_RUN_START to PEER_RUN_END. Values in %."""
    epochs, start, end, sha = [], None, None, None
    for line in text.splitlines():
        f = line.split()
        if line.startswith("PEER_EPOCH"):
            epochs.append({"epoch": int(f[1]), **{f[i]: 100 * float(f[i + 1]) for i in range(2, 12, 2)}})
        elif line.startswith("PEER_RUN_START"):
            start = float(f[2])
        elif line.startswith("PEER_RUN_END"):
            end = float(f[1])
        elif line.startswith("PEER_SAMPLES_SHA"):
            sha = f[1]
    if start is None or end is None or not epochs:
        return None
    best = max(epochs, key=lambda e: e["ACC"])  # max() keeps the first of equal ACCs
    return {"acc": best["ACC"], "f1": best["F1"], "tasks": [best["N"], best["E"], best["G"]],
            "last_acc": epochs[-1]["ACC"], "best_round": best["epoch"], "seconds": end - start, "samples_sha": sha}


def parse_record(record: dict) -> dict:
    """A privfgl run: task-mean test ACC and F1 at the round its selection picked, per task, the last round's,
    the best on test, its seconds without GraphCL pretraining (the authors ship a pretrained checkpoint), and the
    privfgl commit that made it (None for a record from before commits were kept)."""
    tasks = record["metrics"]["per_task"]
    pretrain = record["time"]["caches"]["pretrain"]
    pretrain_s = pretrain["seconds"] if pretrain["cache"] == "miss" else 0.0
    return {"acc": 100 * tasks["acc"]["mean_over_tasks"], "f1": 100 * tasks["f1"]["mean_over_tasks"],
            "tasks": [100 * tasks["acc"][t] for t in ("node", "edge", "graph")],
            "last_acc": 100 * tasks["last_acc"]["mean_over_tasks"], "best_test": 100 * max(tasks["test_curve"]),
            "best_round": record["metrics"]["best_round"], "seconds": record["time"]["total_s"] - pretrain_s,
            "pretrain_s": pretrain["seconds"], "samples_sha": record["metrics"].get("samples_file", {}).get("sha256"),
            "code": record.get("config", {}).get("versions", {}).get("privfgl_commit")}


def run_one(args, work: Path, cell: str, stage: str, seed: int) -> dict | None:
    """The stage's run for one seed: read from its file in `work` if there, else run (unless --table-only)."""
    if stage.startswith("peer"):
        log = work / f"{stage}-{cell}-s{seed}.log"
        done = parse_peer_log(log.read_text()) if log.is_file() else None
        if done is None and not args.table_only:
            env = {**os.environ, "FEDGPL_SRC": str(args.peer_src), "OMP_NUM_THREADS": "1"}
            with open(log, "w") as f:
                subprocess.run(peer_command(args, cell, stage, seed), stdout=f, stderr=subprocess.STDOUT, env=env,
                               check=True)
            done = parse_peer_log(log.read_text())
        return done
    out = work / f"{stage}-{cell}-s{seed}.json"
    if not out.is_file() and not args.table_only:
        subprocess.run(privfgl_command(args, cell, stage, seed, out), env={**os.environ, "OMP_NUM_THREADS": "1"},
                       check=True)
    return parse_record(json.loads(out.read_text())) if out.is_file() else None


def mean_std(values: list[float]) -> str:
    if not values:
        return "not run"
    if len(values) == 1:
        return f"{values[0]:.2f} (1 seed)"
    return f"{statistics.fmean(values):.2f} ± {statistics.pstdev(values):.2f}"


def verdict(peer: list[dict], ours: list[dict]) -> str:
    """The issue's target: privfgl's mean ACC >= the authors' mean minus their (population) std over the same
    seeds, and privfgl's mean seconds per run <= theirs."""
    if not peer or not ours:
        return "not measured"
    acc = floor_check("acc", [r["acc"] for r in peer], [r["acc"] for r in ours])
    return f"{acc}; {time_check([r['seconds'] for r in peer], [r['seconds'] for r in ours])}"


def gain(hidta: list[dict], fedavg: list[dict]) -> str:
    """HiDTA minus FedAvg, seed by seed on the seeds both have: mean ± std of the paired differences."""
    a, b = {r["seed"]: r["acc"] for r in hidta}, {r["seed"]: r["acc"] for r in fedavg}
    return mean_std([a[s] - b[s] for s in sorted(a.keys() & b.keys())]) if a.keys() & b.keys() else "not run"


NAMES = {"peer-hidta": ("authors' code", "authors'", "`main.py --algorithm VPG --federated HiDTA --ratio 0.1 --epochs 50`"),
         "peer-fedavg": ("authors' code", "authors'", "the same, `--federated FedAvg`"),
         "privfgl-code": ("privfgl", "authors' (`samples=file:`)", "the code's configuration (CODE_PARAMS)"),
         "privfgl-code-fedavg": ("privfgl", "authors'", "the code's configuration, `fed=fedavg`"),
         "privfgl-code-trunk": ("privfgl", "authors'", "the code's configuration on the authors' checkpoint (`trunk=file:`)"),
         "privfgl-code-trunk-fedavg": ("privfgl", "authors'", "the same, `fed=fedavg`"),
         "privfgl-default": ("privfgl", "authors'", "privfgl's defaults (round on validation, α_n 0.5)"),
         "privfgl-own": ("privfgl", "privfgl's (`--partition tasks`)", "privfgl's defaults")}


def cell_rows(cell: str, runs: dict) -> list[str]:
    spec = CELLS[cell]
    rows = [f"**{spec.dataset}** (paper: FedGPL {spec.paper:.2f}; without HiDTA −{spec.paper_gain:.2f})", "",
            "| code | samples | configuration | acc % | macro-F1 % | N / E / G | per seed (acc) | last round | "
            "s per run |", "|---|---|---|---|---|---|---|---|---|"]
    for stage in STAGES:
        rs = runs.get(stage, [])
        if not rs:
            continue
        code, samples, config = NAMES[stage]
        tasks = " / ".join(f"{statistics.fmean(r['tasks'][i] for r in rs):.2f}" for i in range(3))
        per_seed = " / ".join(f"{r['acc']:.2f}" for r in rs)
        if len(rs) != len(SEEDS):
            per_seed += (" (seeds " if len(rs) > 1 else " (seed ") + ", ".join(str(r["seed"]) for r in rs) + ")"
        rows.append(f"| {code} | {samples} | {config} | {mean_std([r['acc'] for r in rs])} | "
                    f"{mean_std([r['f1'] for r in rs])} | {tasks} | {per_seed} | "
                    f"{mean_std([r['last_acc'] for r in rs])} | {statistics.fmean(r['seconds'] for r in rs):.0f} |")
    shas = {r["samples_sha"] for stage in STAGES if stage != "privfgl-own" for r in runs.get(stage, [])
            if stage.startswith("privfgl") and r.get("samples_sha")}
    pretrain = [r["pretrain_s"] for stage in STAGES if stage.startswith("privfgl") and "trunk" not in stage
                for r in runs.get(stage, [])]
    notes = []
    if shas:
        notes.append(f"samples file sha256 {', '.join(s[:16] + '…' for s in sorted(shas))}")
    if pretrain:
        notes.append(f"privfgl's GraphCL pretraining, once per samples and seed (cached; not in its seconds): "
                     f"{statistics.fmean(pretrain):.0f} s")
    note = "; ".join(notes)
    return [*rows, "", note[0].upper() + note[1:] + ".", ""] if notes else [*rows, ""]


def table(results: dict) -> str:
    lines = ["| cell | privfgl's trunk | paper acc % | authors' code acc % | privfgl acc % (code's configuration) | "
             "authors' s per run | privfgl s per run | target (privfgl ≥ authors' − 1 std; s ≤ authors') | "
             "HiDTA − FedAvg: paper / authors' code / privfgl |", "|---|---|---|---|---|---|---|---|---|"]
    for cell, spec in CELLS.items():
        runs = results.get(cell, {})
        peer = runs.get("peer-hidta", [])
        for hidta, fedavg in COMPARED:
            ours = runs.get(hidta, [])
            if not ours and hidta != "privfgl-code":
                continue
            sec = lambda rs: f"{statistics.fmean(r['seconds'] for r in rs):.0f}" if rs else ""  # noqa: E731
            trunk = "the authors' checkpoint" if "trunk" in hidta else "its own GraphCL"
            lines.append(f"| {spec.dataset} | {trunk} | {spec.paper:.2f} | {mean_std([r['acc'] for r in peer])} | "
                         f"{mean_std([r['acc'] for r in ours])} | {sec(peer)} | {sec(ours)} | {verdict(peer, ours)} | "
                         f"+{spec.paper_gain:.2f} / {gain(peer, runs.get('peer-fedavg', []))} / "
                         f"{gain(ours, runs.get(fedavg, []))} |")
    lines.append("")
    for cell in CELLS:
        if results.get(cell):
            lines += cell_rows(cell, results[cell])
    lines.append(f"Training seeds {', '.join(map(str, SEEDS))} on both sides (samples fixed at the authors' seed "
                 "2023); mean ± population std; acc: test accuracy averaged within each task, then over the three, at "
                 "the round the configuration picks (the code's: best on test); seconds: mean wall time per run at one "
                 "thread, each side's whole run (data, training, per-round evaluation)." + commits(results))
    return "\n".join(lines) + "\n"


def commits(results: dict) -> str:
    """' The privfgl runs come from privfgl commit `X`.' (privfgl.provenance.commits_sentence over the privfgl
    stages' runs), or '' when none names its commit."""
    from privfgl.provenance import commits_sentence
    sentence = commits_sentence([run.get("code") for stages in results.values() for stage, runs in stages.items()
                                 if not stage.startswith("peer") for run in runs], what="privfgl runs")
    return f" {sentence}" if sentence else ""


def collect(args, cells: list[str], stages: list[str]) -> dict:
    results: dict = {}
    for cell in cells:
        if not args.table_only and not samples_file(args.work, cell).is_file() and \
                any(s != "privfgl-own" for s in stages):
            export_samples(args, args.work, cell)
        for stage in stages:
            for seed in SEEDS:
                r = run_one(args, args.work, cell, stage, seed)
                if r is not None:
                    results.setdefault(cell, {}).setdefault(stage, []).append({**r, "seed": seed})
                    if not args.table_only:
                        print(cell, stage, seed, f"acc {r['acc']:.2f}", f"s {r['seconds']:.0f}", flush=True)
    return results


def main() -> int:
    ap = peer_parser(__doc__, "gpl", CELLS, STAGES)
    ap.add_argument("--table-only", action="store_true", help="run nothing; tabulate the runs already in --work")
    ap.add_argument("--out", default="docs/authors-side-by-side.md")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    collect(args, args.cells, args.stages)
    results = collect(argparse.Namespace(**{**vars(args), "table_only": True}), list(CELLS), list(STAGES))
    write_block(args.out, TAG, table(results), title="Side by side with the authors' code")
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
