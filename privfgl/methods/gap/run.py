"""GAP in the federation (`--method gap`): each client privatises its own subgraph once, then the
clients train a classifier on the cached noisy aggregations by FedAvg through `--protocol`.

1. Encoder (`encoder_rounds` FedAvg rounds of `local_epochs` full-batch steps): each client trains
   model.Encoder on its own training nodes' features and labels; uploads n·W and n (n its training
   nodes) through Federation.aggregate("encoder_update"); the server broadcasts Σ n·W / Σ n.
2. Aggregation perturbation, once per client (aggregation.py): X_0 = the final encoder's unit-norm
   embeddings, K noisy hops on the client's own edges; cached.
3. Classifier (`rounds` FedAvg rounds, "model_update"): model.Classifier on the cached [X_0..X_K].
Edge-level DP (unit: one edge of a client's graph; `edge=undirected|directed`): everything a client
sends after step 2 is post-processing of its noisy hops and of its features and labels, which
edge-level DP does not protect (nor the encoder's uploads, which depend on no edge). σ comes from the
target ε (accounting.py). Evaluation runs on the cached noisy aggregations of each client's own nodes.
An auditor (attacks/dp/gap_audit.py) may set `setup.extras["gap_canaries"]`: canary rows join one
client's hop sums before the noise, and that client then sends its released sums H_1..H_K to the server
("gap_release"), a disclosure made only in an audit.
"""
from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.nn.functional as F

from privfgl.errors import ConfigError
from privfgl.methods.base import Setup
from privfgl.methods.gap.accounting import calibrate_sigma, spent_epsilon
from privfgl.methods.gap.aggregation import clean_edges, perturbed_hops
from privfgl.methods.gap.model import Classifier, Encoder
from privfgl.methods.gap.params import GapParams, resolve_params
from privfgl.privacy.mechanisms import GaussianMechanism
from privfgl.privacy.noise import NoiseSource

NOT_PROTECTED = ("edge-level DP protects the edges only: the encoder and the classifier train on each client's "
                 "features and labels, and their uploads reveal what FedAvg uploads reveal about them")


class GapReport:
    """The run record's privacy fields for GAP."""

    def __init__(self, p: GapParams, sigma: float | None, source: NoiseSource, max_edges: int):
        self.p, self.sigma, self.source, self.max_edges = p, sigma, source, max_edges

    def report(self) -> dict:
        p = self.p
        unit = ("one undirected edge {u, v} of a client's graph (both directions)" if p.edge == "undirected"
                else "one directed edge u->v of a client's graph")
        dp = {"method": "gap", "unit": unit, "edge": p.edge, "hops": p.hops, "releases": p.hops,
              "sensitivity": p.sensitivity, "sigma": self.sigma,
              "noise_std": None if self.sigma is None else self.sigma * p.sensitivity,
              "target_epsilon": p.epsilon, "sample_rate": 1.0,
              "delta_rule": f"delta = {p.delta:g} < 1/|E| = 1/{self.max_edges} (the largest client's directed edges)",
              "not_protected": NOT_PROTECTED, **self.source.provenance()}
        eps = 0.0 if self.sigma is None else spent_epsilon(self.sigma, p.hops, p.delta, p.accountant)
        return {"dp": dp, "epsilon": eps, "delta": p.delta, "accountant": p.accountant}


def _train_local(model: torch.nn.Module, opt: torch.optim.Optimizer, inputs, y: torch.Tensor,
                 mask: torch.Tensor, epochs: int) -> None:
    model.train()
    for _ in range(epochs):
        opt.zero_grad()
        F.cross_entropy(model(inputs)[mask], y[mask]).backward()
        opt.step()


def _optimizer(model: torch.nn.Module, cfg) -> torch.optim.Optimizer:
    kind = torch.optim.SGD if cfg.optimizer == "sgd" else torch.optim.Adam
    return kind(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)


def federated_training(setup: Setup, stage: str, models: list[torch.nn.Module], inputs: list, rounds: Iterable[int],
                       evaluate: bool) -> None:
    """FedAvg of `models` (one per client, same architecture) over the rounds `rounds`: local training, then
    n·W and n through Federation.aggregate ("model_update" for the classifier, "encoder_update" for the
    encoder), the weighted mean broadcast ("global_model" / "global_encoder"). `evaluate`: the tracker
    gets every client's logits per round (per setup.method.evaluation)."""
    m, fed, cfg, timer = setup.method, setup.federation, setup.model, setup.federation.timer
    upload_name, global_name = ("model_update", "global_model") if stage == "classifier" else \
        ("encoder_update", "global_encoder")
    n_train = [int(c.train_mask.sum()) for c in setup.clients]
    with timer.phase("broadcast"):
        received = fed.broadcast(0, global_name, {n: v.detach().clone() for n, v in models[0].state_dict().items()})
    opts = []
    for model in models:
        model.load_state_dict(received)
        opts.append(_optimizer(model, cfg))

    def predict() -> list[torch.Tensor]:
        with torch.no_grad():
            return [model.eval()(x) for model, x in zip(models, inputs)]

    for r in rounds:
        with timer.phase("local_train"):
            for model, opt, x, c in zip(models, opts, inputs, setup.clients):
                if int(c.train_mask.sum()):
                    _train_local(model, opt, x, c.y, c.train_mask, m.local_epochs)
        if evaluate and m.evaluation == "local_model":
            with timer.phase("evaluate"):
                setup.tracker.evaluate(r, predict())
        with timer.phase("client_upload"):
            uploads = []
            for k, model in enumerate(models):
                up = {n: v.detach().double() * n_train[k] for n, v in model.state_dict().items()}
                up["n"] = torch.tensor(float(n_train[k]), dtype=torch.float64)
                uploads.append(up)
        sums = fed.aggregate(r, upload_name, uploads)
        total = sums.pop("n").clamp(min=1.0)
        new_global = {n: (s / total).float() for n, s in sums.items()}
        with timer.phase("broadcast"):
            received = fed.broadcast(r, global_name, new_global)
        for model in models:
            model.load_state_dict(received)
        if evaluate and m.evaluation == "global_model":
            with timer.phase("evaluate"):
                setup.tracker.evaluate(r, predict())


def run_gap(setup: Setup) -> None:
    m, fed, cfg = setup.method, setup.federation, setup.model
    p = resolve_params(m.params)
    edges = [clean_edges(c.edge_index, int(c.num_nodes)) for c in setup.clients]
    max_edges = max(int(e.shape[1]) for e in edges)
    if p.hops and not p.delta < 1 / max(max_edges, 1):
        raise ConfigError(f"gap: delta={p.delta:g} must be < 1/|E| = 1/{max_edges} (the largest client's edges); "
                          f"valid: delta < {1 / max_edges:.3g}")
    sigma = calibrate_sigma(p.epsilon, p.delta, p.hops, p.accountant) if p.hops else None
    source = NoiseSource.from_setting(p.noise_seed)
    setup.extras["dp"] = GapReport(p, sigma, source, max_edges)
    mechanism = GaussianMechanism(sigma, p.sensitivity) if sigma is not None else None
    K, h = len(setup.clients), cfg.hidden

    torch.manual_seed(m.seed)
    encoders = [Encoder(setup.num_features, h, setup.num_classes, p.encoder_layers, cfg.dropout) for _ in range(K)]
    xs = [c.x.float() for c in setup.clients]
    federated_training(setup, "encoder", encoders, xs, range(p.encoder_rounds), evaluate=False)

    canaries = setup.extras.get("gap_canaries")
    cached = []
    with fed.timer.phase("dp_aggregate"), torch.no_grad():
        for k, (enc, x, ei) in enumerate(zip(encoders, xs, edges)):
            audited = canaries is not None and canaries.client == k
            hops, released = perturbed_hops(enc.eval().embed(x), ei, p.hops, mechanism, source,
                                            canaries.rows if audited else None)
            cached.append(hops)
            if audited:
                fed.upload(0, k, "gap_release", {f"hop{i + 1}": t for i, t in enumerate(released)})

    classifiers = [Classifier(h, setup.num_classes, p.hops, cfg.dropout) for _ in range(K)]
    for c in classifiers[1:]:
        c.load_state_dict(classifiers[0].state_dict())
    federated_training(setup, "classifier", classifiers, cached, setup.rounds("gap"), evaluate=True)
