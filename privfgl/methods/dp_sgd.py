"""DP-SGD for GNNs (node-level DP), each client on its own graph, optionally federated.

Every client trains a mean-aggregation GCN (privfgl.privacy.dpsgd.MeanGCN, `hidden`/`layers`
from the run config, no dropout) with full-batch node-level DP-SGD on its degree-bounded graph
(privfgl/privacy/dpsgd.py: per-node gradients on k-hop subgraphs via torch.func, clip C, noise
σ·C·(2N_D − 1), then one step of the run's `optimizer` on the noisy mean gradient: Adam, the default,
or plain SGD, whose step −lr·(ĝ + weight_decay·w) is linear in the noisy gradient ĝ). With
`federated=true` (default) the clients upload their models after every round's `local_epochs` steps and the server averages them with
uniform weights (n_k would be data-dependent) over the clients whose upload is in the sum (under dropout
the survivors: `Federation.survivors`, never K; every client, a dropped one too, starts the next round
from the new global model, as in FedAvg); uploads are post-processing of DP outputs and each
node belongs to one client, so every node gets the same ε: rounds × local_epochs Gaussian releases
of noise multiplier σ at sampling rate 1, composed by opacus' accountant.

Method params: sigma (1.0), clip (1.0), degree (D, 3), delta (1e-5), accountant (rdp|prv),
federated (true), seed (where the noise comes from: "os", the default, OS entropy; or an integer
for reproducible noise, which anyone who reads the run record can regenerate and subtract: ε then
holds only against an adversary who does not know the seed, as the record's `seed_warning` says).
Evaluation runs on the degree-bounded graph (outside the guarantee, as all evaluation is).
An auditor's gradient canaries (`setup.extras["gradient_canaries"]`, attacks/dp/gradient_canaries.py) join
one client's per-node gradients before the clip, every step; they hold no nodes and never enter accuracy.
"""
from __future__ import annotations

import torch

from privfgl.errors import ConfigError
from privfgl.methods.base import Setup
from privfgl.privacy.accounting import ACCOUNTANTS, gaussian_epsilon
from privfgl.privacy.dpsgd import (MeanGCN, bound_degree, influence_count, khop_batch, mean_adjacency,
                                   node_sensitivity, per_sample_grads, private_gradient)
from privfgl.privacy.mechanisms import GaussianMechanism
from privfgl.privacy.noise import OS, NoiseSource

DEFAULTS = {"sigma": 1.0, "clip": 1.0, "degree": 3, "delta": 1e-5, "accountant": "rdp", "federated": True,
            "seed": OS}


def dp_sgd_params(params: dict) -> dict:
    """Method params with defaults; ConfigError names a bad or unknown one."""
    unknown = sorted(set(params) - set(DEFAULTS))
    if unknown:
        raise ConfigError(f"dp-sgd: unknown method param(s) {', '.join(unknown)}; valid: {', '.join(DEFAULTS)}")
    p = {**DEFAULTS, **params}
    for key in ("sigma", "clip", "delta"):
        if not isinstance(p[key], (int, float)) or not p[key] > 0:
            raise ConfigError(f"dp-sgd: {key} must be a number > 0, got {p[key]!r}")
    if p["delta"] >= 1:
        raise ConfigError(f"dp-sgd: delta must be in (0, 1), got {p['delta']}")
    if not isinstance(p["degree"], int) or p["degree"] < 1:
        raise ConfigError(f"dp-sgd: degree must be an integer >= 1, got {p['degree']!r}")
    if p["accountant"] not in ACCOUNTANTS:
        raise ConfigError(f"dp-sgd: accountant must be one of {', '.join(ACCOUNTANTS)}, got {p['accountant']!r}")
    if not isinstance(p["federated"], bool):
        raise ConfigError(f"dp-sgd: federated must be true or false, got {p['federated']!r}")
    if p["seed"] != OS and (isinstance(p["seed"], bool) or not isinstance(p["seed"], int)):
        raise ConfigError(f"dp-sgd: seed must be 'os' (the default) or an integer, got {p['seed']!r}")
    return p


DEGREE_ASSUMPTION = ("the sensitivity holds for removals that add no edge to the locally degree-bounded graph "
                     "(every graph of max degree <= D); on other real graphs a removal can refill up to deg(w) "
                     "edges (privfgl/privacy/dpsgd.py), which the noise does not cover")


class DPSGDReport:
    """The run record's privacy fields for node-level DP-SGD."""

    def __init__(self, p: dict, hops: int, steps: int, source: NoiseSource):
        self.p, self.hops, self.steps, self.source = p, hops, steps, source

    def report(self) -> dict:
        p = self.p
        sens = node_sensitivity(p["clip"], p["degree"], self.hops)
        dp = {"method": "dp-sgd", "unit": "node (features, label, incident edges) of a client's graph of max degree D",
              "degree_bound": p["degree"], "hops": self.hops, "influence": influence_count(p["degree"], self.hops),
              "clip": p["clip"], "sensitivity": sens, "sigma": p["sigma"], "noise_std": p["sigma"] * sens,
              "steps": self.steps, "sample_rate": 1.0, **self.source.provenance(),
              "assumption": DEGREE_ASSUMPTION}
        eps = gaussian_epsilon([(p["sigma"], 1.0, self.steps)], p["delta"], p["accountant"])
        return {"dp": dp, "epsilon": eps, "delta": p["delta"], "accountant": p["accountant"]}


def initial_model(setup: Setup) -> MeanGCN:
    """The model every client starts from, seeded by the run's seed (public: anyone can rebuild it)."""
    cfg = setup.model
    torch.manual_seed(setup.method.seed)
    return MeanGCN(setup.num_features, cfg.hidden, setup.num_classes, cfg.layers)


def optimizer(params, cfg) -> torch.optim.Optimizer:
    """The run's local optimizer (`optimizer`: adam or sgd, no momentum) over one client's parameters."""
    kind = torch.optim.SGD if cfg.optimizer == "sgd" else torch.optim.Adam
    return kind(params, lr=cfg.lr, weight_decay=cfg.weight_decay)


def _prepare(k: int, state: dict, data, model: MeanGCN, p: dict, hops: int, cfg, seed: int,
             source: NoiseSource) -> None:
    """Client k (a client step): its degree-bounded graph, k-hop batch, parameters (from the public initial
    `model`, whose module only gives the forward pass), optimizer and noise source."""
    n = int(data.num_nodes)
    bounded = bound_degree(data.edge_index, n, p["degree"], seed=seed * 1000 + k,
                           node_ids=getattr(data, "global_id", None))
    train = data.train_mask.nonzero().view(-1)
    nodes, adj = khop_batch(bounded, n, train, hops, p["degree"])
    x = torch.cat([data.x.float(), torch.zeros(1, data.num_features)])
    params = {name: v.detach().clone().requires_grad_(True) for name, v in model.named_parameters()}
    state.update(x=x, adj_full=mean_adjacency(bounded, n), xb=x[nodes], adjb=adj, y=data.y[train],
                 n_train=len(train), params=params, opt=optimizer(params.values(), cfg), model=model,
                 mechanism=GaussianMechanism(p["sigma"], node_sensitivity(p["clip"], p["degree"], hops)),
                 clip=p["clip"], source=source.for_client(k))


def _train(k: int, state: dict, data, r: int, epochs: int, canaries) -> None:
    """Client k: `epochs` DP-SGD steps (an auditor's gradient canaries join client canaries.client's)."""
    if state["n_train"] == 0:
        return
    params = state["params"]
    layout = [(n, v.numel()) for n, v in params.items()]  # private_gradient's flat layout
    extra = canaries.rows(r, layout) if canaries is not None and canaries.client == k else None
    for _ in range(epochs):
        detached = {n: v.detach() for n, v in params.items()}
        g = per_sample_grads(state["model"], detached, state["xb"], state["adjb"], state["y"])
        noisy = private_gradient(g, state["clip"], state["mechanism"], state["source"], state["n_train"], extra)
        for n, v in params.items():
            v.grad = noisy[n]
        state["opt"].step()


def _predict(k: int, state: dict, data) -> torch.Tensor:
    """Client k's logits [n_k, C] on its degree-bounded graph."""
    with torch.no_grad():
        return torch.func.functional_call(state["model"], state["params"], (state["x"][:-1], state["adj_full"]))


def _upload(k: int, state: dict, data) -> dict:
    """Client k's model (float64), a post-processing of its DP-SGD steps."""
    return {n: v.detach().double() for n, v in state["params"].items()}


def _receive(k: int, state: dict, data, new_global: dict) -> None:
    with torch.no_grad():
        for n, v in state["params"].items():
            v.copy_(new_global[n])


def run_dp_sgd(setup: Setup) -> None:
    """Server loop; every client step runs where the client is (setup.steps(): in process or on its actor)."""
    m, fed, cfg = setup.method, setup.federation, setup.model
    p = dp_sgd_params(m.params)
    hops, timer = cfg.layers, fed.timer
    source = NoiseSource.from_setting(p["seed"])
    setup.extras["dp"] = DPSGDReport(p, hops, m.rounds * m.local_epochs, source)

    model = initial_model(setup)
    canaries = setup.extras.get("gradient_canaries")
    clients = setup.steps(allow_dead=True)
    with timer.phase("dp_preprocess"):
        clients.each(_prepare, model, p, hops, cfg, m.seed, source)

    for r in setup.rounds("dp-sgd"):
        with timer.phase("local_train"):
            clients.train(_train, r, m.local_epochs, canaries)
        if m.evaluation == "local_model" or not p["federated"]:
            with timer.phase("evaluate"):
                clients.evaluate(setup.tracker, r, _predict)
        if not p["federated"]:
            continue
        sums = fed.aggregate(r, "model_update", clients.uploads(_upload))
        survivors = len(fed.survivors(r, "model_update"))  # the uniform mean over the clients in the sum, not K
        new_global = {n: (v / survivors).float() for n, v in sums.items()}
        with timer.phase("broadcast"):
            new_global = fed.broadcast(r, "global_model", new_global)
        clients.train(_receive, new_global)
        if m.evaluation == "global_model":
            with timer.phase("evaluate"):
                clients.evaluate(setup.tracker, r, _predict)
