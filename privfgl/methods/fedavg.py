"""FedAvg (McMahan et al. 2017) and FedProx (Li et al. 2020), with optional local fine-tuning.

Per round: the server's global model reaches every client; each client trains `local_epochs`
epochs (FedProx adds (mu/2)·||w − w_global||²); each client uploads n_k·w_k and n_k (n_k: its
number of training nodes) through the secure-aggregation protocol; the revealed sums give
w_global = Σ n_k w_k / Σ n_k, which the server broadcasts (every protocol reveals the sums, and
only the sums, to the server).

Evaluation (`evaluation`): "local_model" (default, OpenFGL's `local_model_on_local_data`): each
client evaluates the model it just trained, before the new global model replaces it;
"global_model": each client evaluates the new global model on its own nodes. After the last round, `finetune_epochs` of local training give personalised
models, evaluated after every epoch (stage "finetune").
"""
from __future__ import annotations

import torch

from privfgl.methods.base import Setup
from privfgl.training import init_params, make_trainers


def run_fedavg(setup: Setup, prox_mu: float = 0.0) -> None:
    m, fed = setup.method, setup.federation
    timer, K = fed.timer, len(setup.clients)
    n_train = [int(c.train_mask.sum()) for c in setup.clients]

    # server: initialise and broadcast the global model
    global_params = init_params(setup.model, setup.num_features, setup.num_classes, seed=m.seed)
    with timer.phase("broadcast"):
        received = fed.broadcast(0, "global_model", global_params)
    trainers = make_trainers(setup.clients, setup.model, [received] * K, m.engine, setup.device)

    for r in setup.rounds("fedprox" if prox_mu else "fedavg"):
        anchors = [received] * K if prox_mu else None
        with timer.phase("local_train"):
            trainers.train(m.local_epochs, prox_mu=prox_mu, anchors=anchors)
        if m.evaluation == "local_model":
            with timer.phase("evaluate"):
                setup.tracker.evaluate(r, trainers.predict())
        # clients: pre-weighted uploads (sums only; the division happens after the reveal)
        uploads = []
        for k in range(K):
            params = trainers.get_params(k)
            upload = {name: p.double() * n_train[k] for name, p in params.items()}
            upload["n"] = torch.tensor(float(n_train[k]), dtype=torch.float64)
            uploads.append(upload)
        sums = fed.aggregate(r, "model_update", uploads)
        # server: the weighted mean from the revealed sums, broadcast to every client
        total = sums.pop("n").clamp(min=1.0)
        new_global = {name: (s / total).to(global_params[name].dtype) for name, s in sums.items()}
        with timer.phase("broadcast"):
            received = fed.broadcast(r, "global_model", new_global)
        with timer.phase("set_params"):
            trainers.set_all_params(received)
        if m.evaluation == "global_model":
            with timer.phase("evaluate"):
                setup.tracker.evaluate(r, trainers.predict())

    for e in range(m.finetune_epochs):
        with timer.phase("finetune"):
            trainers.train(1)
        with timer.phase("evaluate"):
            setup.tracker.evaluate(m.rounds + e, trainers.predict(), stage="finetune")


def run_fedprox(setup: Setup) -> None:
    run_fedavg(setup, prox_mu=setup.method.mu)

