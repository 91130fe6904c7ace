"""Is sbm-cora's DP-FedAvg failure at 1,000 clients its weak features? A Cora-sized stand-in whose features are
as informative as Cora's, and DP-FedAvg on it with the sweep's rule (issue #44; docs/privacy-utility.md).

sbm-cora is a CSBM with feature_signal 1 (class means of norm 1 against N(0, I) noise in 1,433 dimensions): a
FedAvg MLP reads far less from its features than from Cora's. The rule, fixed before the runs:
  1. calibrate: feature_signal = the smallest of SIGNALS at which FedAvg-MLP (Louvain, 10 clients, the run's
     defaults, seed 0) on the PUBLIC graph (graph seed 1) reaches real Cora's FedAvg-MLP test accuracy at the
     same settings (measured here first). Only the public graph is read; the graph's edges and labels do not
     depend on feature_signal (the generator draws them first), so only the features change.
  2. clip: C by experiments/dp_fedavg_public_settings.py's median rule, on the public graph at that signal.
  3. evaluate, on the graph of seed 0 (the evaluated sbm-cora's edges and labels): the sweep's DP-FedAvg cell
     (METIS, 1,000 clients, random 20/40/40, 20 rounds of 3 local Adam epochs, hidden 16, q = 1, σ for ε = 8 at
     δ = 1e-5), its clipping-only ceiling (ε = 1e5) and non-private FedAvg at its defaults (hidden 64).

    python experiments/dp_fedavg_feature_strength.py calibrate
    python experiments/dp_fedavg_feature_strength.py clip --signal S
    python experiments/dp_fedavg_feature_strength.py evaluate --signal S --clip C [--seeds 0 1 2] [--runs dp ceiling fedavg]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments.dp_fedavg_public_settings import PUBLIC_GRAPH_SEED, round_up, update_norms  # noqa: E402
from privfgl.data import contextual_sbm  # noqa: E402
from privfgl.data.synthetic import SYNTHETIC_PRESETS  # noqa: E402
from privfgl.experiment import RunConfig, run  # noqa: E402
from privfgl.sweep.config import Cell, load_sweep  # noqa: E402
from privfgl.sweep.runner import run_config  # noqa: E402

SIGNALS = (1.0, 1.5, 2.0, 2.5, 3.0, 3.1, 3.2, 3.3, 3.4, 3.5)  # 1.0: sbm-cora's own; 3.1-3.5 added after 3.0 fell short
EVALUATED_GRAPH_SEED = 0


def stand_in(signal: float, graph_seed: int):
    """sbm-cora's preset with feature_signal `signal`, drawn with `graph_seed`."""
    return contextual_sbm(**SYNTHETIC_PRESETS["sbm-cora"], feature_signal=signal, seed=graph_seed, name="sbm-cora")


def mlp_accuracy(dataset: str, graph=None) -> float:
    """FedAvg-MLP's test accuracy, Louvain, 10 clients, the run's defaults, seed 0."""
    cfg = RunConfig(method="fedavg", model="mlp", dataset=dataset, partition="louvain", clients=10, seed=0,
                    progress=False)
    return run(cfg, data=graph)[0]["metrics"]["test_acc"]


def first_reaching(accuracy_of, signals, target: float) -> float | None:
    """The first of `signals` whose accuracy_of(signal) >= target (None if none does), printing each."""
    for signal in signals:
        accuracy = accuracy_of(signal)
        print(f"feature_signal {signal:g}: FedAvg-MLP test accuracy {accuracy:.4f} on the public graph", flush=True)
        if accuracy >= target:
            return signal
    return None


def calibrate() -> None:
    target = mlp_accuracy("cora")
    print(f"Cora: FedAvg-MLP test accuracy {target:.4f} (the target)", flush=True)
    chosen = first_reaching(lambda s: mlp_accuracy("sbm-cora", stand_in(s, PUBLIC_GRAPH_SEED)), SIGNALS, target)
    print(f"feature_signal = {chosen}" if chosen is not None else f"no signal in {SIGNALS} reaches {target:.4f}")


def clip(signal: float) -> None:
    norms, _ = update_norms("sbm-cora", stand_in(signal, PUBLIC_GRAPH_SEED))
    median = float(norms.median())
    print(f"feature_signal {signal:g}: median round-0 update norm {median:.3f} -> C = {round_up(median):g}")


SWEEP = Path(__file__).resolve().parent / "dp_fedavg_many_clients.toml"
SWEEP_CELLS = {"dp": ("DP-FedAvg (C = 4)", 8), "ceiling": ("DP-FedAvg (C = 4)", 100000), "fedavg": ("FedAvg, no DP", None)}


def with_clip(dp_spec: str, clip_bound: float) -> str:
    """`dp_spec` (mechanism:key=value,...) with its clip's value replaced; a spec without `clip=` is refused."""
    mechanism, _, fields = dp_spec.partition(":")
    pairs = [field.split("=", 1) for field in fields.split(",")]
    if not any(k == "clip" for k, _ in pairs):
        raise ValueError(f"DP spec {dp_spec!r} has no clip= to replace")
    return mechanism + ":" + ",".join(f"{k}={clip_bound:g}" if k == "clip" else f"{k}={v}" for k, v in pairs)


def evaluated_config(kind: str, clip_bound: float, seed: int) -> RunConfig:
    """The sweep's own sbm-cora cell at 1,000 clients (SWEEP_CELLS: its [[cells]] name and target ε) at `seed`,
    its σ calibrated as the sweep does, with the clipping bound C = `clip_bound` in place of the sweep's."""
    name, target = SWEEP_CELLS[kind]
    cell = next(c for c in load_sweep(SWEEP).cells if c.name == name and c.options["dataset"] == "sbm-cora"
                and c.options["clients"] == 1000 and c.options.get("target_epsilon") == target)
    options = dict(cell.options)
    if "dp" in options:
        options["dp"] = with_clip(options["dp"], clip_bound)
    return run_config(Cell(cell.label, options), seed, threads=None, progress=False)[0]


def evaluate(signal: float, clip_bound: float, seeds: list[int], kinds: list[str]) -> None:
    graph = stand_in(signal, EVALUATED_GRAPH_SEED)
    names = {"dp": "DP-FedAvg, ε = 8", "ceiling": "DP-FedAvg, ε = 1e5 (clipping only)", "fedavg": "FedAvg, no DP"}
    for kind in kinds:
        for seed in seeds:
            t0 = time.time()
            record, _ = run(evaluated_config(kind, clip_bound, seed), data=graph)
            epsilon = record["privacy"].get("epsilon")
            print(f"feature_signal {signal:g}, {names[kind]}, seed {seed}: test accuracy "
                  f"{record['metrics']['test_acc']:.4f}" + (f", ε {epsilon:.4f}" if epsilon else "")
                  + f" ({time.time() - t0:.0f} s)", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("stage", choices=("calibrate", "clip", "evaluate"))
    ap.add_argument("--signal", type=float, help="clip, evaluate: the feature_signal from calibrate")
    ap.add_argument("--clip", type=float, help="evaluate: the C from clip")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--runs", nargs="+", choices=("dp", "ceiling", "fedavg"), default=["dp", "ceiling", "fedavg"])
    args = ap.parse_args()
    if args.stage != "calibrate" and (args.signal is None or args.signal <= 0):
        ap.error(f"--signal {args.signal}: {args.stage} needs the feature_signal from calibrate, a number > 0")
    if args.stage == "evaluate" and (args.clip is None or args.clip <= 0):
        ap.error(f"--clip {args.clip}: evaluate needs the C from clip, a number > 0")
    if args.stage == "calibrate":
        calibrate()
    elif args.stage == "clip":
        clip(args.signal)
    else:
        evaluate(args.signal, args.clip, args.seeds, args.runs)


if __name__ == "__main__":
    main()
