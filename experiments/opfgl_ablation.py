r"""O-pFGL, stage by stage against the authors' code on one partition and split (issue #43).

The authors' code (experiments/peers/opfgl_main.py with PEER_DUMP=DIR) saves, per training seed r,
DIR/run{r}.pt: each client's statistics as its get_distribution returned them, the global model's
initial parameters and the condensed pseudo-graph. On the same partition file and split file this
script compares privfgl with them:

    stats        each client's per-class counts, means and stds, privfgl's (from its uploaded sums
                 n, S1, S2) against the authors' (seed 0's dump; they do not depend on the seed)
    condense     the pseudo-graph: privfgl's condensation against the authors', both scored by
                 privfgl's alignment loss on the same pooled statistics (edges, loss)
    privfgl      privfgl as it is (the `cora-louvain+` preset), seeds 0-2
    pseudo       privfgl with the authors' pseudo-graph of the same seed in place of its own
    pseudo+init  ... and with the authors' initial global model in place of privfgl's
    replay+init  privfgl's own condensation started from the authors' X' and link predictor, and
                 their initial global model: what float rounding alone does to the score

If `pseudo+init` gives the authors' own score seed by seed, privfgl's stage 1 and stage 2 compute
what theirs do, and whatever remains between `privfgl` and the authors lies in the condensation
(`pseudo` separates the initialisation from it). Results land in WORK/ablation.json stage by stage
(a later call runs only the missing ones) and the table goes to the block `opfgl_ablation` of
docs/authors-side-by-side.md.

    OMP_NUM_THREADS=1 PRIVFGL_DATA=... python experiments/opfgl_ablation.py --work /tmp/peer-opfgl-ablation \
        --partition authors-cora-louvain+-10.txt --split authors-split.json --dump dump-own --peer-log log-dump-own.txt
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from unittest import mock

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "experiments"))

from authors_side_by_side_opfgl import PARTITION_SEED, SEEDS, parse_peer_log  # noqa: E402
from privfgl.doc_block import write_block  # noqa: E402

RUN_STAGES = ("privfgl", "pseudo", "pseudo+init", "replay+init")
TAG = "opfgl_ablation"


PARAMS: dict = {}  # --param KEY=VALUE: method params on top of the preset, for every privfgl run here


def config(partition: Path, split: Path, seed: int):
    from privfgl.experiment import config_for
    return config_for({"method": "opfgl", "dataset": "cora", "partition": f"file:{partition}", "clients": 10,
                       "split_file": str(split), "partition_seed": PARTITION_SEED, "seed": seed, "threads": 1,
                       "progress": False, "transcript": "none",
                       "method_params": {"preset": "cora-louvain+", **PARAMS}})


def load_dump(folder: Path, seed: int) -> dict:
    return torch.load(folder / f"run{seed}.pt", weights_only=False)


def compare_stats(partition: Path, split: Path, dump: dict) -> dict:
    """privfgl's per-client statistics against the authors' (get_distribution's coeff, mean, std)."""
    from privfgl.experiment import build_setup
    from privfgl.methods.opfgl.params import resolve_params
    from privfgl.methods.opfgl.stats import client_statistics
    cfg = config(partition, split, 0)
    setup = build_setup(cfg)
    p = resolve_params(cfg.method_params)
    classes_differ, count_differ, mean_diff, std_diff, reliable = 0, 0, 0.0, 0.0, 0
    for k, client in enumerate(setup.clients):
        view = client_statistics(client, setup.num_classes, p.hops, p.min_count, p.lp_iters, p.lp_alpha, p.hre_k,
                                 p.f_th, p.d_th, p.hre_ties)
        reliable += int(view.reliable.sum())
        theirs = dump["stats"][k]
        ours = {c: int(n) for c, n in enumerate(view.sums.n.tolist()) if n > 0}
        classes_differ += set(ours) != set(theirs["coeff"])
        count_differ += sum(ours.get(c) != n for c, n in theirs["coeff"].items())
        for c, n in ours.items():
            if c not in theirs["mean"]:
                continue
            mean = view.sums.s1[c] / n
            std = ((view.sums.s2[c] - n * mean * mean) / (n - 1)).clamp(min=0).sqrt()
            mean_diff = max(mean_diff, float((mean - theirs["mean"][c].double()).abs().max()))
            std_diff = max(std_diff, float((std - theirs["std"][c].double()).abs().max()))
    return {"clients": len(setup.clients), "clients_with_other_classes": classes_differ,
            "class_counts_differing": count_differ, "max_abs_mean_diff": mean_diff, "max_abs_std_diff": std_diff,
            "reliable_nodes_privfgl": reliable,
            "reliable_nodes_authors": sum(sum(d["coeff"].values()) - sum(d["origin_coeff"].get(c, 0)
                                              for c in d["coeff"]) for d in dump["stats"].values())}


def alignment_loss(pseudo, stats, hops: int, threshold: float) -> float:
    """privfgl's condensation alignment term (feat_alpha excluded) of a pseudo-graph on pooled statistics."""
    from privfgl.methods.opfgl.condense import _propagate, gcn_norm_dense
    xp = _propagate(pseudo.x.float(), gcn_norm_dense(pseudo.dense_adjacency().float()), hops)
    weight = stats.counts.double() / stats.counts.sum()
    loss = 0.0
    for c in range(stats.mean.shape[0]):
        rows = pseudo.y == c
        if rows.any():
            loss += float(weight[c]) * float(((xp[rows].mean(dim=0).double() - stats.mean[c]) ** 2).mean())
    return loss


def logged_smoothness(log_text: str) -> dict[int, dict[int, float]]:
    """The smoothness term the authors' code logs every 200 condensation loops: {seed: {loop: value}}."""
    out, seed = {}, None
    for line in log_text.splitlines():
        if line.startswith("PEER_RUN_START"):
            seed = int(line.split()[1])
        elif line.startswith("loop ") and "smoothness loss:" in line and seed is not None:
            out.setdefault(seed, {})[int(line.split()[1].rstrip(","))] = float(line.rsplit(":", 1)[1])
    return out


def compare_condensation(partition: Path, split: Path, dumps: dict[int, dict], logged: dict) -> dict:
    """Both codes' pseudo-graphs per seed: edges and privfgl's alignment loss on privfgl's pooled stats;
    with the authors' starting point dumped, privfgl's condensation from it, and its smoothness term
    against the one the authors' log prints (`logged`: logged_smoothness) at the same loops."""
    from privfgl.methods.opfgl import condense as condense_module
    from privfgl.experiment import run
    from privfgl.methods.opfgl import run as opfgl_run
    from privfgl.methods.opfgl.condense import PseudoGraph
    out = {}
    for seed, dump in dumps.items():
        captured = {}
        real_condense = opfgl_run.condense

        def capture(stats, *args, **kwargs):
            captured["stats"], captured["args"] = stats, ((stats, *args), kwargs)
            captured["pseudo"] = real_condense(stats, *args, **kwargs)
            raise _Stop

        with mock.patch.object(opfgl_run, "condense", capture):
            try:
                run(config(partition, split, seed))
            except _Stop:
                pass
        theirs = PseudoGraph.from_tensors(dump["pseudo"])
        ours, stats = captured["pseudo"], captured["stats"]
        out[str(seed)] = {"edges_privfgl": int(ours.edge_index.shape[1]),
                          "edges_authors": int(theirs.edge_index.shape[1]),
                          "loss_privfgl": alignment_loss(ours, stats, 1, 0.01),
                          "loss_authors": alignment_loss(theirs, stats, 1, 0.01)}
        if "x_init" in dump:  # privfgl's condensation from the authors' starting point
            trace, real_smoothness = [], condense_module._smoothness

            def traced(x, adj):
                value = real_smoothness(x, adj)
                trace.append(float(value.detach()))
                return value

            with mock.patch.object(condense_module, "_smoothness", traced):
                replay = replay_condensation(captured["args"], dump)
            theirs_logged = logged.get(seed, {})
            early = [abs(trace[i] - v) for i, v in theirs_logged.items() if i <= 1000 and i < len(trace)]
            late = [abs(trace[i] - v) for i, v in theirs_logged.items() if i > 1000 and i < len(trace)]
            if early:
                out[str(seed)].update({"smoothness_diff_to_loop_1000": max(early),
                                       "smoothness_diff_after": max(late) if late else None})
            dense = lambda g: g.dense_adjacency()
            out[str(seed)].update({
                "replay_max_abs_x_diff": float((replay.x - theirs.x).abs().max()),
                "replay_max_abs_adj_diff": float((dense(replay) - dense(theirs)).abs().max()),
                "replay_edges": int(replay.edge_index.shape[1]),
                "loss_replay": alignment_loss(replay, stats, 1, 0.01)})
    return out


def replay_condensation(call: tuple, dump: dict):
    """privfgl's condense(*args, **kwargs) (as the run called it) started from the authors' X' and link
    predictor (their PGE's layers.i / bns.i are privfgl's lins.i / bns.i)."""
    from privfgl.methods.opfgl import condense as condense_module
    args, kwargs = call
    x_init = dump["x_init"]
    link_state = {k.replace("layers.", "lins."): v for k, v in dump["link_init"].items()}
    real_link = condense_module.LinkPredictor

    def link_from_authors(*a, **k):
        link = real_link(*a, **k)
        link.load_state_dict(link_state)
        return link

    with mock.patch.object(condense_module, "LinkPredictor", link_from_authors), \
            mock.patch.object(condense_module.torch, "randn", lambda *a, **k: x_init.clone()):
        return condense_module.condense(*args, **kwargs)


class _Stop(Exception):
    """Ends a run once the condensation is captured."""


def run_seed(stage: str, partition: Path, split: Path, seed: int, dump: dict | None) -> dict:
    """privfgl's test accuracy and macro-F1 (%) for one seed, with the authors' parts swapped in per `stage`."""
    from privfgl.experiment import run
    from privfgl.methods.opfgl import run as opfgl_run
    from privfgl.methods.opfgl.condense import PseudoGraph
    patches = []
    if stage in ("pseudo", "pseudo+init"):
        pseudo = PseudoGraph.from_tensors(dump["pseudo"])
        patches.append(mock.patch.object(opfgl_run, "condense", lambda *a, **k: pseudo))
    if stage == "replay+init":  # privfgl's own condensation, from the authors' starting point
        patches.append(mock.patch.object(opfgl_run, "condense", lambda *a, **k: replay_condensation((a, k), dump)))
    if stage in ("pseudo+init", "replay+init"):
        init = dump["init"]
        patches.append(mock.patch.object(opfgl_run, "init_params", lambda *a, **k: {n: v.clone() for n, v in init.items()}))
    start = time.perf_counter()
    with ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch)
        record, _ = run(config(partition, split, seed))
    return {"acc": 100 * record["metrics"]["test_acc"], "f1": 100 * record["metrics"]["test_f1_macro"],
            "seconds": time.perf_counter() - start}


def mean_std(values: list[float]) -> str:
    return f"{statistics.fmean(values):.2f} ± {statistics.pstdev(values):.2f}"


def table(results: dict) -> str:
    names = {"authors": "authors' code (their pseudo-graph, their init)",
             "privfgl": "privfgl (its own condensation and initial model)",
             "pseudo": "privfgl + the authors' pseudo-graph",
             "pseudo+init": "privfgl + the authors' pseudo-graph + their initial M_G",
             "replay+init": "privfgl's condensation from the authors' X' and link predictor + their initial M_G"}
    rows = ["| run | seeds | acc % | macro-F1 % | per seed (acc) |", "|---|---|---|---|---|"]
    for stage in ("authors", *RUN_STAGES):
        per_seed = results.get(stage, {})
        if per_seed:
            seeds = sorted(per_seed, key=int)
            r = {k: [per_seed[s][k] for s in seeds] for k in ("acc", "f1")}
            rows.append(f"| {names[stage]} | {', '.join(seeds)} | {mean_std(r['acc'])} | {mean_std(r['f1'])} | "
                        f"{' / '.join(f'{a:.2f}' for a in r['acc'])} |")
    text = "\n".join(rows) + "\n"
    if "stats" in results:
        s = results["stats"]
        text += (f"\nStatistics (seed 0's dump, {s['clients']} clients): clients whose reported class set differs "
                 f"{s['clients_with_other_classes']}, per-class counts differing {s['class_counts_differing']}, "
                 f"HRE nodes added {s['reliable_nodes_privfgl']} (privfgl) / {s['reliable_nodes_authors']} "
                 f"(authors), largest |mean difference| {s['max_abs_mean_diff']:.1e}, largest |std difference| "
                 f"{s['max_abs_std_diff']:.1e}.\n")
    if "condense" in results:
        c = results["condense"]
        def replay(v):
            if "loss_replay" not in v:
                return ""
            logged = ""
            if v.get("smoothness_diff_to_loop_1000") is not None:
                logged = (f"; its smoothness term against the authors' log: within "
                          f"{v['smoothness_diff_to_loop_1000']:.0e} to loop 1000, {v['smoothness_diff_after']:.0e} "
                          "after")
            return (f", privfgl from the authors' start {v['loss_replay'] * 1e4:.3f} ({v['replay_edges']} edges; "
                    f"largest difference to theirs: X' {v['replay_max_abs_x_diff']:.3f}, an edge weight "
                    f"{v['replay_max_abs_adj_diff']:.3f}{logged})")
        text += ("\nPseudo-graphs (privfgl's alignment loss on the same pooled statistics, means only, "
                 "×1e-4; edges): " + "; ".join(
                     f"seed {s}: privfgl {v['loss_privfgl'] * 1e4:.3f} ({v['edges_privfgl']} edges), authors "
                     f"{v['loss_authors'] * 1e4:.3f} ({v['edges_authors']} edges){replay(v)}"
                     for s, v in sorted(c.items(), key=lambda kv: int(kv[0]))) + ".\n")
    return text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/peer-opfgl-ablation"))
    ap.add_argument("--partition", type=Path, required=True, help="partition file (relative to --work)")
    ap.add_argument("--split", type=Path, required=True, help="split file (relative to --work)")
    ap.add_argument("--dump", type=Path, required=True, help="the authors' PEER_DUMP folder (relative to --work)")
    ap.add_argument("--peer-log", type=Path, nargs="+", required=True,
                    help="the logs of those authors' runs (relative to --work)")
    ap.add_argument("--stages", nargs="+", choices=("stats", "condense", *RUN_STAGES),
                    default=["stats", "condense", *RUN_STAGES])
    ap.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS), help="training seeds (those with a dump)")
    ap.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                    help="an O-pFGL method param on top of the preset for every privfgl run (e.g. hre_ties=topk)")
    ap.add_argument("--store", default="ablation.json", help="results file in --work (one per --param set)")
    ap.add_argument("--tag", default=TAG, help="the docs block to write")
    ap.add_argument("--out", default="docs/authors-side-by-side.md")
    args = ap.parse_args()
    PARAMS.update(kv.split("=", 1) for kv in args.param)
    work = args.work
    partition, split, dump_dir = work / args.partition, work / args.split, work / args.dump
    store = work / args.store
    results = json.loads(store.read_text()) if store.is_file() else {}
    results["authors"] = {}
    for log in args.peer_log:
        authors = parse_peer_log((work / log).read_text())
        results["authors"].update({str(s): {"acc": a, "f1": f}
                                   for s, a, f in zip(authors["seeds"], authors["acc"], authors["f1"])})
    seeds = [s for s in args.seeds if (dump_dir / f"run{s}.pt").is_file()]
    logged = {}
    for log in args.peer_log:
        logged.update(logged_smoothness((work / log).read_text()))
    dumps = {seed: load_dump(dump_dir, seed) for seed in seeds}

    def save(stage):  # merged seed by seed: another call may run other seeds meanwhile
        stored = json.loads(store.read_text()) if store.is_file() else {}
        for key, value in results.items():
            if key in RUN_STAGES or key == "condense":
                stored[key] = {**stored.get(key, {}), **value}
                results[key] = dict(stored[key])
            else:
                stored[key] = value
        store.write_text(json.dumps(stored, indent=1))
        print(stage, json.dumps(results[stage]), flush=True)

    for stage in args.stages:
        if stage == "stats" and stage not in results and 0 in dumps:
            results[stage] = compare_stats(partition, split, dumps[0])
            save(stage)
        elif stage == "condense":
            results.setdefault(stage, {})
            for seed in seeds:
                if str(seed) not in results[stage]:
                    results[stage].update(compare_condensation(partition, split, {seed: dumps[seed]}, logged))
                    save(stage)
        elif stage in RUN_STAGES:
            results.setdefault(stage, {})
            for seed in args.seeds if stage == "privfgl" else seeds:
                if str(seed) not in results[stage]:
                    results[stage][str(seed)] = run_seed(stage, partition, split, seed, dumps.get(seed))
                    save(stage)
    write_block(args.out, args.tag, table(results))
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
