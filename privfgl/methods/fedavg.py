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

from typing import Callable

import torch

from privfgl.methods.base import Setup
from privfgl.privacy.message_dp import guard_denominators
from torch_geometric.data import Data

from privfgl.training import Params, dropout_seeds, init_params


def weighted_upload(k: int, params: Params, received: Params, client: Data) -> Params:
    """Client k: its parameters pre-weighted by its training nodes n_k, and n_k (sums only; the division
    happens after the reveal). Reads only client k's own data: it runs where the client is."""
    n_train = int(client.train_mask.sum())
    out = {name: p.to(torch.float64).mul_(n_train) for name, p in params.items()}
    out["n"] = torch.tensor(float(n_train), dtype=torch.float64)
    return out


def run_fedavg(setup: Setup, prox_mu: float = 0.0) -> None:
    def update(sums: Params, received: Params) -> Params:
        """Server: the weighted mean from the revealed sums. Under --dp on the update the revealed n is
        Σ c_k·n_k + noise (c_k: client k's clip factor, often ≪ 1): floored at one noise std, never at 1
        (a floor of 1 would shrink the model towards 0 whenever Σ c_k·n_k < 1)."""
        dp = setup.federation.dp
        sums = guard_denominators(dp, "model_update", sums)
        if dp is not None and dp.applies_to("model_update"):
            total = sums.pop("n")
        else:
            total = sums.pop("n").clamp(min=1.0)  # exact counts: >= 1 unless no client has a training node
        return {name: (s / total).to(received[name].dtype) for name, s in sums.items()}

    run_rounds(setup, "fedprox" if prox_mu else "fedavg", weighted_upload, update, prox_mu=prox_mu)


def run_fedprox(setup: Setup) -> None:
    run_fedavg(setup, prox_mu=setup.method.mu)


def run_rounds(setup: Setup, label: str, upload: Callable[[int, Params, Params, Data], Params],
               update: Callable[[Params, Params], Params], prox_mu: float = 0.0,
               sample_rate: float = 1.0) -> None:
    """The FedAvg skeleton: broadcast, local training, `upload(k, local_params, received, client_k)`
    from every client through `aggregate("model_update")`, `update(sums, received)` on the server,
    evaluation per `setup.method.evaluation`, then optional local fine-tuning. `sample_rate`: the
    probability that a client takes part in a round (for DP accounting). Each client's dropout masks
    come from its own stream (training.dropout_seeds). The clients' side runs in this process, or on
    Ray actors when the setup's clients are remote (privfgl.federation.ray): `upload` then runs there."""
    m, fed = setup.method, setup.federation
    timer, K = fed.timer, fed.num_clients
    global_params = init_params(setup.model, setup.num_features, setup.num_classes, seed=m.seed)
    with timer.phase("broadcast"):
        received = fed.broadcast(0, "global_model", global_params)
    trainers = setup.trainers([received] * K, dropout_seeds(m.seed, range(K)))

    for r in setup.rounds(label):
        anchors = [received] * K if prox_mu else None
        with timer.phase("local_train"):
            trainers.train(m.local_epochs, prox_mu=prox_mu, anchors=anchors)
        if m.evaluation == "local_model":
            with timer.phase("evaluate"):
                trainers.evaluate(setup.tracker, r)
        with timer.phase("client_upload"):
            uploads = trainers.uploads(upload, received, setup.clients)
        sums = fed.aggregate(r, "model_update", uploads, sample_rate=sample_rate)
        new_global = update(sums, received)
        with timer.phase("broadcast"):
            received = fed.broadcast(r, "global_model", new_global)
        with timer.phase("set_params"):
            trainers.set_all_params(received)
        if m.evaluation == "global_model":
            with timer.phase("evaluate"):
                trainers.evaluate(setup.tracker, r)

    for e in range(m.finetune_epochs):
        with timer.phase("finetune"):
            trainers.train(1)
        with timer.phase("evaluate"):
            trainers.evaluate(setup.tracker, m.rounds + e, stage="finetune")
