"""FedLoG's rounds on the federation runtime (spec A.7). Messages (every sum through `--protocol`):

once   server -> all   "global_model" φ_0 and "synthetic_seed" (common initialisation, A.12.6)
once   all -> sum      "class_support" {r: r_k [C], holders: 1[r_k > 0] [C]}
once   all -> sum      "generator_update" {ng: r_k^c·NG_k for shared classes [C, P], r: r_k^c [C]}   (Eq. 12)
once   server -> all   "class_generators" {ng: [|shared|, P], classes}
round r: clients train (r = 0: local fitting only; r >= 1: load φ, fitting + generalisation on D_g)
       all -> sum      "model_update" {w_k·φ_k, n: w_k}                             (A.4(a))
       all -> sum      "synthetic_update" {x_head: r_k^c·X_head,k (within-class permuted) [s·C, d], r: r_k^c [C]}  (Eq. 7)
       server -> all   "global_model" φ, "global_synthetic" {x: X_g, y: Y_g}

A class held by fewer than `min_contributors` clients is withheld: no client puts it in any sum,
so its rows are never revealed (with one holder, its "sum" would be that client's data, A.9).

Dropout (secagg's `dropout`, the runtime's participation mask): every sum carries its own weights
(Σ r_k^c of the generator and synthetic sums, Σ w_k of the model sum), so Eqs. 7 and 12 and the
model mean are the survivors'; a shared class that no surviving client holds gets no generator or
global synthetic rows from that sum; a model sum with no weight keeps the previous model. Every client,
a dropped one included, loads the new global model. Not covered: min_contributors counts the holders at
round 0 (class_support); a class whose holders drop below it in a later sum is still summed over the
survivors, and the server sees that smaller sum (SecAgg reveals the survivors' sum, whoever they are).
"""
from __future__ import annotations

import torch

from privfgl.methods.base import Setup
from privfgl.methods.fedlog.client import FedLoGClient, GlobalSynthetic, generator_module, initial_synthetic
from privfgl.methods.fedlog.generator import flat_params, new_generator, pretrained_generator
from privfgl.methods.fedlog.model import FedLoGModel
from privfgl.methods.fedlog.params import resolve_params
from privfgl.methods.fedlog.server import class_generators, global_model, global_synthetic, shared_classes

MESSAGES = ("class_support", "generator_update", "model_update", "synthetic_update")


def run_fedlog(setup: Setup) -> None:
    """FedLoG on `setup`; metrics to setup.tracker, bytes and views to setup.federation."""
    p = resolve_params(setup.method.params)
    fed, timer, seed = setup.federation, setup.federation.timer, setup.method.seed
    C, d = setup.num_classes, setup.num_features
    torch.manual_seed(seed)
    phi = {k: v.detach().clone() for k, v in FedLoGModel(d, p).state_dict().items()}
    with timer.phase("broadcast"):
        phi = fed.broadcast(0, "global_model", phi)
        fed.broadcast(0, "synthetic_seed", {"seed": torch.tensor(seed)})
    with timer.phase("setup"):
        synthetic0 = initial_synthetic(C, d, p, seed)
        clients = [FedLoGClient(k, data, C, p, phi, synthetic0, seed) for k, data in enumerate(setup.clients)]

    support = fed.aggregate(0, "class_support", [c.support_upload() for c in clients])
    shared = shared_classes(support, p.min_contributors)

    gen_info = []
    with timer.phase("generator_pretrain"):
        flats = []
        for c in clients:
            flat, info = pretrained_generator(c.data.x, c.data.edge_index, c.data.y, c.data.train_mask, C, p, seed)
            flats.append(flat)
            gen_info.append(info)
    weights = [c.class_rate * shared.double() for c in clients]
    ng_sums = fed.aggregate(0, "generator_update",
                            [{"ng": w[:, None] * f.double()[None, :], "r": w} for w, f in zip(weights, flats)])
    ng = class_generators(ng_sums["ng"], ng_sums, shared)  # divided by this sum's own Σ r (its survivors')
    classes = sorted(ng)
    with timer.phase("broadcast"):
        got = fed.broadcast(0, "class_generators", {
            "ng": torch.stack([ng[c] for c in classes]) if classes else torch.zeros(0, flat_params(new_generator(d, p, 0)).numel()),
            "classes": torch.tensor(classes, dtype=torch.long)})
    modules = {int(c): generator_module(d, p, f) for c, f in zip(got["classes"], got["ng"])}

    warmup = [c.warmup() for c in clients] if p.warmup_epochs else None
    dg = None
    for r in setup.rounds("fedlog"):
        with timer.phase("local_train"):
            for c in clients:
                if r > 0:
                    c.set_model(phi)
                c.train_round(dg)
        with timer.phase("evaluate"):
            setup.tracker.evaluate(r, [c.predict(scored=c.data.val_mask | c.data.test_mask) for c in clients],
                                   predict_on=lambda graphs: [c.predict(g, g.test_mask) for c, g in zip(clients, graphs)])
        with timer.phase("client_upload"):
            model_up = [c.model_upload() for c in clients]
            syn_up = [c.synthetic_upload(shared) for c in clients]
        model_sums = fed.aggregate(r, "model_update", model_up)
        syn_sums = fed.aggregate(r, "synthetic_update", syn_up)
        with timer.phase("server_update"):
            phi = global_model(model_sums, phi)
            x_g, y_g = global_synthetic(syn_sums["x_head"], syn_sums, shared, p.s)
        with timer.phase("broadcast"):
            phi = fed.broadcast(r, "global_model", phi)
            got = fed.broadcast(r, "global_synthetic", {"x": x_g, "y": y_g})
        dg = GlobalSynthetic(got["x"], got["y"], modules) if got["y"].numel() else None

    holders = support["holders"].round().long()
    single = (shared & (holders == 1)).nonzero().view(-1).tolist()
    setup.extras["trust"] = {"fedlog": {
        "single_contributor_classes": single, "min_contributors": p.min_contributors,
        "note": "a class summed over one client is that client's synthetic head nodes and generator (class rate "
                "included) in the clear, under every protocol; min_contributors >= 2 withholds such classes"
                if single else "every shared class is a sum over at least two clients"}}
    # summed over the clients: one client's pretraining time would say how much data it holds
    setup.extras["caches"] = {"generators": {
        "hit": sum(i["cache"] == "hit" for i in gen_info), "miss": sum(i["cache"] == "miss" for i in gen_info),
        "seconds": round(sum(float(i.get("seconds", 0.0)) for i in gen_info), 2)}}
    setup.extras["metrics"] = {"fedlog": {
        "class_contributors": holders.tolist(),
        "withheld_classes": (~shared).nonzero().view(-1).tolist(),
        "single_contributor_classes": single,
        "min_contributors": p.min_contributors,
        "warmup_epochs_run": warmup,
        "gamma_mean": [round(float(c.gamma.mean()), 4) for c in clients]}}
