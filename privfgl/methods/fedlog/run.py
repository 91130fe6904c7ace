"""FedLoG's rounds on the federation runtime (spec A.7). Messages (every sum through `--protocol`):

once   server -> all   "global_model" φ_0 and "synthetic_seed" (common initialisation, A.12.6)
once   all -> sum      "class_support" {r: r_k [C], holders: 1[r_k > 0] [C]}
once   all -> sum      "generator_update" {ng: r_k^c·NG_k for shared classes [C, P], r: r_k^c [C]}   (Eq. 12)
once   server -> all   "class_generators" {ng: [|shared|, P], classes}
       (generators=code: neither generator message; each client makes the code's untrained generators)
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

The clients' side is written as client steps (privfgl.federation.client_steps: `_start` .. `_gamma_mean`, each
client's FedLoGClient in its state), so a run's clients can be Ray actors (`--engine ray`); run_fedlog is the
server's loop. A client whose actor dies is left out of every later sum (the survivors' weights, as above).
"""
from __future__ import annotations

import torch

from privfgl.methods.base import Setup
from privfgl.methods.fedlog.client import FedLoGClient, GlobalSynthetic, generator_module, initial_synthetic
from privfgl.methods.fedlog.generator import flat_params, new_generator, pretrained_generator, untrained_class_generators
from privfgl.methods.fedlog.model import FedLoGModel
from privfgl.methods.fedlog.params import FedLoGParams, resolve_params
from privfgl.methods.fedlog.server import class_generators, global_model, global_synthetic, shared_classes

MESSAGES = ("class_support", "generator_update", "model_update", "synthetic_update")


# --- the client steps (privfgl.federation.client_steps): each reads its own client's state and data only ---
def _start(k: int, state: dict, data, num_classes: int, p: FedLoGParams, phi: dict,
           synthetic0: tuple[torch.Tensor, torch.Tensor], seed: int) -> None:
    """Client k from the broadcast φ_0 and the common synthetic initialisation."""
    state["client"] = FedLoGClient(k, data, num_classes, p, phi, synthetic0, seed)


def _support_upload(k: int, state: dict, data) -> dict:
    return state["client"].support_upload()


def _pretrain_generator(k: int, state: dict, data, num_classes: int, p: FedLoGParams, seed: int) -> dict:
    """NG_k pretrained (or loaded from the client's cache), kept in its state. Returns {"cache": hit|miss,
    "seconds"}: nothing of its data beyond its size, which the server knows (a Ray driver has every client's
    node count); the record keeps only their sums."""
    flat, info = pretrained_generator(data.x, data.edge_index, data.y, data.train_mask, num_classes, p, seed)
    state["generator"] = flat
    return {"cache": info["cache"], "seconds": float(info.get("seconds", 0.0))}


def _generator_upload(k: int, state: dict, data, shared: torch.Tensor) -> dict:
    """Eq. 12's terms: {ng: r_k^c·NG_k for the shared classes [C, P], r: r_k^c [C]}."""
    w = state["client"].class_rate * shared.double()
    return {"ng": w[:, None] * state.pop("generator").double()[None, :], "r": w}


def _load_generators(k: int, state: dict, data, dim: int, p: FedLoGParams, ng: torch.Tensor,
                     classes: torch.Tensor) -> None:
    state["generators"] = {int(c): generator_module(dim, p, f) for c, f in zip(classes, ng)}


def _untrained_generators(k: int, state: dict, data, dim: int, num_classes: int, p: FedLoGParams, seed: int) -> None:
    """`generators=code`: the code's untrained class generators, the same on every client (a broadcast seed)."""
    state["generators"] = untrained_class_generators(dim, num_classes, p, seed)


def _warmup(k: int, state: dict, data) -> int:
    """Epochs of the warm-up run (in the record already: metrics.fedlog.warmup_epochs_run, auditor-only)."""
    return state["client"].warmup()


def _train(k: int, state: dict, data, phi: dict | None, x_g: torch.Tensor, y_g: torch.Tensor) -> None:
    """One round: load φ (rounds >= 1), then local fitting (+ generalisation on D_g = (x_g, y_g) when it
    has rows)."""
    client = state["client"]
    if phi is not None:
        client.set_model(phi)
    client.train_round(GlobalSynthetic(x_g, y_g, state["generators"]) if y_g.numel() else None)


def _predict(k: int, state: dict, data) -> torch.Tensor:
    """log p(c | v) [n_k, C] on its own graph (the validation and test rows scored)."""
    return state["client"].predict(scored=data.val_mask | data.test_mask)


def _predict_on(k: int, state: dict, data, graph) -> torch.Tensor:
    """log p(c | v) [n, C] on an evaluation setting's graph (its test rows scored), in this process."""
    return state["client"].predict(graph, graph.test_mask)


def _model_upload(k: int, state: dict, data) -> dict:
    return state["client"].model_upload()


def _synthetic_upload(k: int, state: dict, data, shared: torch.Tensor) -> dict:
    return state["client"].synthetic_upload(shared)


def _gamma_mean(k: int, state: dict, data) -> float:
    """Mean of its curriculum γ_k (in the record already: metrics.fedlog.gamma_mean, auditor-only)."""
    return round(float(state["client"].gamma.mean()), 4)


def run_fedlog(setup: Setup) -> None:
    """FedLoG on `setup` (the server's loop; the client steps run where the clients are: setup.steps());
    metrics to setup.tracker, bytes and views to setup.federation."""
    p = resolve_params(setup.method.params)
    fed, timer, seed = setup.federation, setup.federation.timer, setup.method.seed
    C, d = setup.num_classes, setup.num_features
    torch.manual_seed(seed)
    phi = {k: v.detach().clone() for k, v in FedLoGModel(d, p).state_dict().items()}
    with timer.phase("broadcast"):
        phi = fed.broadcast(0, "global_model", phi)
        fed.broadcast(0, "synthetic_seed", {"seed": torch.tensor(seed)})
    clients = setup.steps(allow_dead=True)  # every sum weighs the clients in it (module docstring)
    K = clients.num_clients
    with timer.phase("setup"):
        clients.train(_start, C, p, phi, initial_synthetic(C, d, p, seed), seed)

    support = fed.aggregate(0, "class_support", clients.uploads(_support_upload))
    shared = shared_classes(support, p.min_contributors)

    if p.generators == "code":  # the code's clients never receive NG^c (A.12.5): nothing pretrained or sent
        gen_info = []
        clients.train(_untrained_generators, d, C, p, seed)
    else:
        with timer.phase("generator_pretrain"):
            gen_info = list(clients.each(_pretrain_generator, C, p, seed).values())
        ng_sums = fed.aggregate(0, "generator_update", clients.uploads(_generator_upload, shared))
        ng = class_generators(ng_sums["ng"], ng_sums, shared)  # divided by this sum's own Σ r (its survivors')
        classes = sorted(ng)
        with timer.phase("broadcast"):
            got = fed.broadcast(0, "class_generators", {
                "ng": torch.stack([ng[c] for c in classes]) if classes
                else torch.zeros(0, flat_params(new_generator(d, p, 0)).numel()),
                "classes": torch.tensor(classes, dtype=torch.long)})
        clients.train(_load_generators, d, p, got["ng"], got["classes"])

    warmup = clients.each(_warmup) if p.warmup_epochs else None
    received, x_g, y_g = None, torch.zeros(0, d), torch.zeros(0, dtype=torch.long)
    for r in setup.rounds("fedlog"):
        with timer.phase("local_train"):
            clients.train(_train, received, x_g, y_g)
        with timer.phase("evaluate"):
            clients.evaluate(setup.tracker, r, _predict, predict_on=_predict_on)
        with timer.phase("client_upload"):
            model_up = clients.uploads(_model_upload)
            syn_up = clients.uploads(_synthetic_upload, shared)
        model_sums = fed.aggregate(r, "model_update", model_up)
        syn_sums = fed.aggregate(r, "synthetic_update", syn_up)
        with timer.phase("server_update"):
            phi = global_model(model_sums, phi)
            x_g, y_g = global_synthetic(syn_sums["x_head"], syn_sums, shared, p.s)
        with timer.phase("broadcast"):
            phi = fed.broadcast(r, "global_model", phi)
            got = fed.broadcast(r, "global_synthetic", {"x": x_g, "y": y_g})
        received, x_g, y_g = phi, got["x"], got["y"]

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
    gamma = clients.each(_gamma_mean)
    setup.extras["metrics"] = {"fedlog": {
        "class_contributors": holders.tolist(),
        "withheld_classes": (~shared).nonzero().view(-1).tolist(),
        "single_contributor_classes": single,
        "min_contributors": p.min_contributors,
        "warmup_epochs_run": None if warmup is None else [warmup.get(k) for k in range(K)],
        "gamma_mean": [gamma.get(k) for k in range(K)]}}
