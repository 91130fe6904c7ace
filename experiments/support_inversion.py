r"""Gradient inversion of the default training from the first layer's exact zeros
(`gradient-inversion:variant=support`, docs/attacks.md "Support dictionary"): Cora (and CiteSeer),
Louvain, round 0 unless said.
Prints one row per setting (mean and range over every client, beside the two nulls and the prior's
label), and, with --by-holders, the per-feature AUC of the plain settings by how many of the client's
nodes hold the word and by how many hidden units it moved on (where the attack loses); with --oracle,
per client, how many training nodes own an atom (a node holding words no other node holds) and the
per-feature AUC when the truth replaces the rows matched to the training nodes without an atom, or to
those with one (which rows the shortfall is in).

    PRIVFGL_DATA=... OMP_NUM_THREADS=1 python experiments/support_inversion.py [--settings NAME,...] \
        [--by-holders] [--oracle]

Settings (name: run flags): k20-s0 / k20-s1 (K = 20, seeds 0 and 1), k10 (K = 10), k20-secagg,
k20-ckks and k20-crypten (the revealed sum only), k20-dp-central (DP-FedAvg, σ 1, clip 0.1, central noise),
k20-round2 / k20-round9 (the upload of round 2 / 9: Adam's state carries the earlier rounds),
citeseer-k20 (CiteSeer, K = 20: nothing was chosen on it).
"""
from __future__ import annotations

import argparse
import os
import time
from collections import defaultdict

import numpy as np
import torch
from sklearn.metrics import roc_auc_score

from attacks import run_attacks
from attacks.audit import public_knowledge
from attacks.uploads.gradient_inversion import GradientInversion
from attacks.uploads.metrics import feature_metrics, match_rows
from attacks.uploads.multistep_inversion import receptive_vocabulary
from attacks.uploads.support_dictionary import (MOVED_TOL, _unclipped_movement, atom_rows, off_decay_movement,
                                                support_atoms, support_dictionary)
from attacks.uploads.updates import client_update
from attacks.view import adversary_view
from privfgl.data import load_dataset
from privfgl.experiment import RunConfig, run

DP_CENTRAL = dict(method="dp-fedavg", dp="gaussian:sigma=1.0,clip=0.1,on=update,mode=central")
SETTINGS = {
    "k20-s0": dict(clients=20, seed=0),
    "k20-s1": dict(clients=20, seed=1),
    "k10": dict(clients=10, seed=0),
    "k20-secagg": dict(clients=20, seed=0, protocol="secagg"),
    "k20-crypten": dict(clients=20, seed=0, protocol="crypten"),
    "k20-ckks": dict(clients=20, seed=0, protocol="ckks"),
    "k20-dp-central": dict(clients=20, seed=0, **DP_CENTRAL),
    "k20-round2": dict(clients=20, seed=0, rounds=3),
    "k20-round9": dict(clients=20, seed=0, rounds=10),
    "citeseer-k20": dict(clients=20, seed=0, dataset="citeseer"),
}
HOLDER_BINS = ((1, 2), (2, 3), (3, 5), (5, 10), (10, 10**6))
MOVED_BINS = ((0, 50), (50, 56), (56, 60), (60, 63), (63, 65))


def fmt(values: list[float]) -> str:
    v = np.array(values, dtype=float)
    return f"{v.mean():.3f} ({v.min():.3f}–{v.max():.3f})" if v.size else "-"


def per_word(setup, cfg) -> list[tuple[float, int, int]]:
    """(AUC over the training nodes, holders among the client's nodes, units moved) per scored word,
    for every client, with the rows matched as the attack's scoring matches them."""
    k = public_knowledge(setup, cfg)
    view = adversary_view(setup.federation.transcript)
    out = []
    for i, c in enumerate(setup.clients):
        update = client_update(view, i, 0)
        rows, _ = support_dictionary(update.before, update.delta(), k)
        moved = (np.abs(off_decay_movement(update.before, update.delta(), k)) > MOVED_TOL).sum(1)
        train = c.train_mask.nonzero().view(-1)
        idx = torch.from_numpy(match_rows(rows, c.x[train]))
        pred = torch.where(idx[:, None] >= 0, rows[idx.clamp(min=0)], 0.0).numpy()
        truth, holders = (c.x[train] > 0).numpy(), (c.x > 0).sum(0).numpy()
        for j in np.nonzero((truth.sum(0) > 0) & (truth.sum(0) < len(train)))[0]:
            out.append((roc_auc_score(truth[:, j], pred[:, j]), int(holders[j]), int(moved[j])))
    return out


def oracle_rows(setup, cfg) -> list[tuple[int, int, int, float, float, float]]:
    """Per client: (training nodes, of them owning an atom, atoms, per-feature AUC as attacked, with the
    truth in the rows of the training nodes without an atom, with the truth in those with one)."""
    k = public_knowledge(setup, cfg)
    view = adversary_view(setup.federation.transcript)
    out = []
    for i, c in enumerate(setup.clients):
        update = client_update(view, i, 0)
        delta, movement = _unclipped_movement(update.before, update.delta(), k, ())
        moved = np.abs(movement) > MOVED_TOL
        words = receptive_vocabulary(update.before, delta, k).nonzero().view(-1).numpy()
        atoms = support_atoms(moved, words)
        rows = atom_rows(movement, moved, words, atoms)
        x, train = (c.x > 0).numpy(), c.train_mask.nonzero().view(-1).numpy()
        owners = set()
        for _, own in atoms:  # an atom's words held by exactly one node: that node owns it
            holders = np.nonzero(x[:, own].all(1))[0]
            if holders.size == 1:
                owners.add(int(holders[0]))
        owns = np.array([t in owners for t in train])
        truth = x[train].astype(float)
        matched = rows[match_rows(rows, truth)]
        auc = lambda r: feature_metrics(r, truth)["auc_per_feature"]
        without, with_ = matched.copy(), matched.copy()
        without[~owns], with_[owns] = truth[~owns], truth[owns]
        out.append((len(train), int(owns.sum()), len(atoms), auc(matched), auc(without), auc(with_)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--settings", default=",".join(SETTINGS))
    ap.add_argument("--by-holders", action="store_true")
    ap.add_argument("--oracle", action="store_true")
    args = ap.parse_args()
    datasets: dict = {}
    print("| setting | target | training nodes | per-feature AUC | marginals / words permuted | AUC (marginals) "
          "| label acc (prior) | label acc, all nodes | rows | s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in args.settings.split(","):
        cfg = RunConfig(partition="louvain", transcript="all", progress=False, download=False,
                        **{"dataset": "cora", "method": "fedavg", "rounds": 1, **SETTINGS[name]})
        if cfg.dataset not in datasets:
            datasets[cfg.dataset] = load_dataset(cfg.dataset, root=os.environ.get("PRIVFGL_DATA"), download=False)
        _, setup = run(cfg, data=datasets[cfg.dataset])
        start = time.perf_counter()
        found = run_attacks(setup, cfg, [GradientInversion(variant="support", round=cfg.rounds - 1)])
        seconds = time.perf_counter() - start
        groups = defaultdict(list)
        for f in found:
            if "no_input" not in f.metrics:
                groups["aggregate" if f.target.startswith("aggregate") else "client"].append(f)
        for target, fs in groups.items():
            m = lambda key: [f.metrics[key] for f in fs]
            b = lambda key: [f.baseline[key] for f in fs]
            nodes = m("nodes")
            print(f"| {name} | {target} (× {len(fs)}) | {min(nodes)}–{max(nodes)} | {fmt(m('auc_per_feature'))} "
                  f"| {np.mean(b('auc_per_feature')):.3f} / {np.mean([f.baseline['words_permuted']['auc_per_feature'] for f in fs]):.3f} "
                  f"| {np.mean(m('auc')):.3f} ({np.mean(b('auc')):.3f}) | {fmt(m('label_acc'))} ({np.mean(b('label_acc')):.3f}) "
                  f"| {np.mean(m('label_acc_all_nodes')):.3f} | {min(m('recovered_rows'))}–{max(m('recovered_rows'))} "
                  f"| {seconds / len(found):.1f} per target, with scoring |")
        none = {f.metrics["no_input"].replace(f.target, "each client") for f in found if "no_input" in f.metrics}
        if none:
            print(f"| {name} | no input ({sum('no_input' in f.metrics for f in found)}) | {'; '.join(sorted(none))} | | | | | | | |")
        if args.oracle and set(SETTINGS[name]) <= {"clients", "seed"}:
            print(f"    {name}, per client: training nodes (owning an atom), atoms, per-feature AUC as attacked | "
                  "truth in the rows of the nodes without an atom | truth in those with one")
            for i, (n, owning, atoms, auc, without, with_) in enumerate(oracle_rows(setup, cfg)):
                print(f"    client {i}: {n} ({owning}), {atoms}, {auc:.3f} | {without:.3f} | {with_:.3f}")
        if args.by_holders and set(SETTINGS[name]) <= {"clients", "seed"}:
            words = np.array(per_word(setup, cfg), dtype=float)
            loss = (1 - words[:, 0]).sum()
            for col, bins, what in ((1, HOLDER_BINS, "holders in the client"), (2, MOVED_BINS, "units moved")):
                for lo, hi in bins:
                    sel = (words[:, col] >= lo) & (words[:, col] < hi)
                    print(f"    {name}: {what} in [{lo}, {hi}): {int(sel.sum())} words, per-feature AUC "
                          f"{words[sel, 0].mean():.3f}, share of the shortfall {(1 - words[sel, 0]).sum() / loss:.2f}")


if __name__ == "__main__":
    main()
