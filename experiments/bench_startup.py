"""Start-up and whole-process time (issue #21): what a user waits for, from typing the command to the prompt.

Each measurement is a fresh process timed from outside (wall clock, `time.perf_counter` around
`subprocess.run`), so interpreter start-up and imports count. For the job it also reads the run's
own in-run time (`time.total_s` of the record written with --out: data, partition, rounds,
evaluation) and shows both side by side; their difference is start-up (imports) and exit.

    python experiments/bench_startup.py                    # privfgl only; writes docs/speed.md
    python experiments/bench_startup.py --peer "python /path/to/OpenFGL/main.py --dataset Cora ... --seed {seed}"

Measured, interleaved `--repeats` times (one round of every command, then the next round, so slow
phases of the machine hit all commands alike):
- `privfgl --help`, and `python -c "import privfgl.cli"`;
- the floors no Python program of this kind goes below: `python -c pass`, `import torch`,
  `import torch_geometric`;
- the job (default: FedAvg, Cora, Louvain, 10 clients, 100 rounds) for each of `--seeds`, and the
  peer's command (optional; `{seed}` in it is replaced by the seed) right after it.
Before timing, the job runs once per seed untimed, so the partition cache and the OS file cache are
warm for both commands. Medians (and min-max) per command, the privfgl/peer ratio, and where the
start-up goes (`python -X importtime` of one run, self time summed per top-level package; importtime
itself adds overhead, so read it as shares) are printed as Markdown and written to --doc.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_JOB = ("privfgl run --method fedavg --dataset cora --partition louvain --clients 10 --rounds 100 "
               "--seed {seed} --no-progress --out {out}")


# `import torch_geometric` as privfgl's console script does it (cli.entry): the cyclic GC off during the imports,
# what they built frozen before it resumes (and so before exit).
GC_FLOOR = "floor: the same import, the collector paused and the result frozen (as `privfgl` does)"


def privfgl_command() -> list[str]:
    """The console script next to this interpreter (what a user types), else `python -m privfgl.cli`."""
    script = Path(sys.executable).with_name("privfgl")
    return [str(script)] if script.exists() else [sys.executable, "-m", "privfgl.cli"]


def expand(command: str, **fields) -> list[str]:
    argv = shlex.split(command.format(**fields))
    if argv and argv[0] == "privfgl":
        argv = privfgl_command() + argv[1:]
    elif argv and argv[0] == "python":
        argv = [sys.executable] + argv[1:]
    return argv


def timed(argv: list[str], expect: int = 0, cwd: Path | None = None) -> tuple[float, float]:
    """(wall s, CPU s: user + system of the child, the number that other load on the machine moves least)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd or REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != expect:
        raise SystemExit(f"{shlex.join(argv)}: exit code {done.returncode} (expected {expect})\n{done.stderr[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def import_breakdown(argv: list[str]) -> list[tuple[str, float]]:
    """Self import time per top-level package of one `python -X importtime` run of argv, descending."""
    if argv[0] != sys.executable:  # the console script: run the same entry point under -X importtime
        argv = [sys.executable, "-m", "privfgl.cli"] + argv[1:]
    done = subprocess.run([sys.executable, "-X", "importtime"] + argv[1:], cwd=REPO, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    per_package: dict[str, float] = defaultdict(float)
    for line in done.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+\d+ \|\s*(\S+)", line)
        if m:
            per_package[m.group(2).split(".")[0]] += int(m.group(1)) / 1e6
    return sorted(per_package.items(), key=lambda kv: -kv[1])


def summary(values: list[float]) -> str:
    if not values:
        return "—"
    return f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--job", default=DEFAULT_JOB, help="privfgl's command; {seed} and {out} (the record path) are "
                                                      "filled in (default: %(default)s)")
    p.add_argument("--peer", help="the peer's command for the same job, {seed} filled in, e.g. "
                                  "\"python /path/to/OpenFGL/main.py ... --seed {seed}\" (optional)")
    p.add_argument("--peer-cwd", help="working directory of the peer's command (default: the repository)")
    p.add_argument("--peer-name", default="peer")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--repeats", type=int, default=4, help="interleaved rounds over the seeds (default 4: 12 runs "
                                                          "of the job per command with 3 seeds)")
    p.add_argument("--doc", default=str(REPO / "docs" / "speed.md"), help="Markdown page to write ('' = none)")
    args = p.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="bench_startup-"))
    light = {
        "`privfgl --help`": privfgl_command() + ["--help"],
        "`privfgl run --no-such-flag` (exit 2)": privfgl_command() + ["run", "--no-such-flag"],
        "`python -c \"import privfgl.cli\"`": [sys.executable, "-c", "import privfgl.cli"],
        "floor: `python -c pass`": [sys.executable, "-c", "pass"],
        "floor: `python -c \"import torch\"`": [sys.executable, "-c", "import torch"],
        "floor: `python -c \"import torch_geometric\"`": [sys.executable, "-c", "import torch_geometric"],
        GC_FLOOR: [sys.executable, "-c", "import gc; gc.disable(); import torch_geometric; gc.freeze(); gc.enable()"],
    }
    walls: dict[str, list[float]] = defaultdict(list)
    cpus: dict[str, list[float]] = defaultdict(list)

    def record_time(label: str, measured: tuple[float, float]) -> None:
        walls[label].append(measured[0])
        cpus[label].append(measured[1])
    in_run: list[float] = []
    accuracy: dict[int, set] = defaultdict(set)
    load_before = os.getloadavg()

    for seed in args.seeds:  # warm-up: partition cache, file cache (untimed)
        timed(expand(args.job, seed=seed, out=tmp / "warm.json"))
        if args.peer:
            timed(expand(args.peer, seed=seed), cwd=Path(args.peer_cwd) if args.peer_cwd else None)
    for rep in range(args.repeats):
        for label, argv in light.items():
            record_time(label, timed(argv, expect=2 if "exit 2" in label else 0))
        for seed in args.seeds:
            out = tmp / f"run-{rep}-{seed}.json"
            record_time("privfgl", timed(expand(args.job, seed=seed, out=out)))
            record = json.loads(out.read_text())
            in_run.append(record["time"]["total_s"])
            accuracy[seed].add(round(record["metrics"]["test_acc"], 6))
            if args.peer:
                record_time(args.peer_name, timed(expand(args.peer, seed=seed),
                                                  cwd=Path(args.peer_cwd) if args.peer_cwd else None))
        print(f"round {rep + 1}/{args.repeats} done", file=sys.stderr)
    load_after = os.getloadavg()
    breakdown = import_breakdown(expand(args.job, seed=args.seeds[0], out=tmp / "importtime.json"))

    job_line = args.job.format(seed="S", out="RECORD.json")
    n_job = len(args.seeds) * args.repeats
    lines = ["| command | runs | whole process, s: median (min–max) | in-run `time.total_s`, s: median (min–max) "
             "| start-up + exit, s (medians' difference) | CPU (user + sys), s: median |",
             "|---|---|---|---|---|---|"]
    for label in light:
        lines.append(f"| {label} | {len(walls[label])} | {summary(walls[label])} | — | — "
                     f"| {statistics.median(cpus[label]):.2f} |")
    lines.append(f"| `{job_line}`, seeds {','.join(map(str, args.seeds))} | {n_job} | {summary(walls['privfgl'])} "
                 f"| {summary(in_run)} | {statistics.median(walls['privfgl']) - statistics.median(in_run):.2f} "
                 f"| {statistics.median(cpus['privfgl']):.2f} |")
    if args.peer:
        lines.append(f"| {args.peer_name}: `{args.peer.format(seed='S')}` | {n_job} | {summary(walls[args.peer_name])} "
                     f"| — | — | {statistics.median(cpus[args.peer_name]):.2f} |")
        ratio = statistics.median(walls["privfgl"]) / statistics.median(walls[args.peer_name])
        lines.append("")
        lines.append(f"privfgl / {args.peer_name}, whole process (ratio of medians): **{ratio:.3f}×**")
    table = "\n".join(lines)
    help_s, job_s = statistics.median(walls["`privfgl --help`"]), statistics.median(walls["privfgl"])
    floor_s = statistics.median(walls[GC_FLOOR])
    if args.peer:
        bar = (f"the job as a whole process ≤ 0.25× the peer's in the same benchmark: {ratio:.3f}× "
               f"({'met' if ratio <= 0.25 else 'not met'}; {job_s:.2f} s")
    else:
        bar = (f"the job as a whole process ≤ 5 s (the bar without a peer): {job_s:.2f} s "
               f"({'met' if job_s <= 5 else 'not met'}")
    targets = (f"Targets of issue #21: `privfgl --help` < 1 s: {help_s:.2f} s ({'met' if help_s < 1 else 'not met'}); "
               f"{bar}), of which start-up + exit {job_s - statistics.median(in_run):.2f} s against the "
               f"floor of {floor_s:.2f} s (`import torch_geometric` as the console script imports it).")
    accs = ", ".join(f"seed {s}: {'/'.join(f'{a:.4f}' for a in sorted(v))}" for s, v in sorted(accuracy.items()))
    total_import = sum(s for _, s in breakdown)
    top = "\n".join(f"| {name} | {s:.2f} | {100 * s / total_import:.0f}% |" for name, s in breakdown[:10])
    machine = (f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python "
               f"{platform.python_version()}; load average (1, 5, 15 min) {tuple(round(x, 2) for x in load_before)} "
               f"before, {tuple(round(x, 2) for x in load_after)} after; "
               f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}")
    command = "python experiments/bench_startup.py " + shlex.join(sys.argv[1:])
    report = (f"{table}\n\n{targets}\n\nTest accuracy of the job (the same per seed in every repetition): {accs}.\n\n"
              f"Where the start-up of one run goes (`python -X importtime`, self time per top-level package, "
              f"{total_import:.2f} s in all under importtime):\n\n| package | s | share |\n|---|---|---|\n{top}\n")
    print(report)
    print(f"machine: {machine}")
    if args.doc:
        peer_note = (f"The peer ({args.peer_name}) ran in the same interleaved rounds, its first run per seed "
                     "untimed too (it writes its partition to disk then)." if args.peer else
                     "No peer command was given: pass `--peer \"python experiments/peers/openfgl_main.py ... "
                     "--seed {seed}\"` (how to install OpenFGL beside the venv: that file) for the ratio.")
        Path(args.doc).write_text(PAGE.format(command=command.strip(), machine=machine, date=time.strftime(
            "%Y-%m-%d %H:%M UTC", time.gmtime()), report=report, peer_note=peer_note))
        print(f"written: {args.doc}")


PAGE = """# Speed: start-up and whole-process time

What a user waits for from typing a command to getting the prompt back, measured from outside the
process (issue #21). `privfgl --help` and argument errors import neither torch nor torch_geometric
(nor scikit-learn, scipy, networkx, pymetis, CrypTen, TenSEAL, opacus, matplotlib: each is imported
by the code path that uses it; `tests/test_startup.py` checks this). A plain FedAvg run imports torch
and torch_geometric and nothing else of those; the in-run time (`time.total_s` in the run record:
data, partition, rounds, evaluation) sits beside the whole-process time, and the difference is
start-up (imports) and exit.

Made by

    {command}

on {date}: {machine}. The machine is shared, so read the ranges as well as the medians, and the
CPU column (user + system time of the process; torch's threads can make it exceed the wall time),
which other load moves least. The commands are interleaved (one of each, then the next round); the
job ran once per seed untimed before (partition cache and file cache warm).

{report}
The floor of any run is `import torch_geometric` (which imports torch and, through
`torch_geometric.isinstance`, `torch._dynamo` with sympy and mpmath); privfgl cannot go below it
without changes to PyG, and `torch._dynamo` would be imported anyway by the first optimizer
(`torch.optim.Adam(...)` imports it when it is built). Those imports leave about 300k objects that
live until the process ends, and Python's cyclic garbage collector pays for them twice: dozens of
full collections rescan them while they are imported (about 1-1.5 s here), and the interpreter's
exit rescans them once more (about 1.3 s: a process that only imports torch_geometric took 1.5 s
from its last statement to its end, 0.3 s with the objects frozen). So the `privfgl` console script
(`privfgl.cli.entry`) keeps the collector paused until the command's imports are done, freezes what
they built (`gc.freeze`: never scanned again, still freed at exit), resumes it for the run, and
freezes again before exit; `privfgl.cli.main` called from Python (tests, notebooks) leaves the
collector alone. The run's records are the same (tests/test_startup.py checks the collector's
states). The last floor row is the import done that way. {peer_note}

The peer: OpenFGL 1.1.0 (`openfgl-lib` on PyPI), run through its own entry point
(experiments/peers/openfgl_main.py, which says how to install it beside the venv without touching
privfgl's pins) with its defaults, which are privfgl's FedAvg setting: GCN, 2 layers, 64 hidden,
Adam lr 0.01, weight decay 5e-4, dropout 0.5, 3 local epochs, Louvain, 10 clients, 100 rounds. It
prints every client's metrics every round and evaluates every client's model every round, as
privfgl does (privfgl prints one table at the end).

## GPU

`make install TORCH_INDEX=https://download.pytorch.org/whl/cu130` (or the index matching the
machine's CUDA driver) installs the CUDA build of the pinned torch 2.13.0 instead of the CPU wheel
(its own stamp, so a CPU venv is reinstalled once); then `--device cuda` puts the models and the
clients' graphs on the GPU. Without a GPU `--device cuda` stops with one line before the run; nothing
in the tests or `make run` needs one. What runs there, and FedAvg and O-pFGL timed on an H100 beside
the same machine's CPU (Cora is too small for a GPU; a million nodes are not): [gpu.md](gpu.md).
"""


if __name__ == "__main__":
    main()
