"""GAP in the federation (`--method gap`): each client privatises its own subgraph once, then the
clients train a classifier on the cached noisy aggregations by FedAvg through `--protocol`.

1. Encoder (`encoder_rounds` FedAvg rounds of `local_epochs` full-batch steps): each client trains
   model.Encoder on its own training nodes' features and labels; uploads n·W and n (n its training
   nodes) through Federation.aggregate("encoder_update"); the server broadcasts Σ n·W / Σ n.
2. Aggregation perturbation, once per client (aggregation.py): X_0 = the final encoder's unit-norm
   embeddings, K noisy hops on the client's own edges; cached.
3. Classifier (`rounds` FedAvg rounds, "model_update"): model.Classifier on the cached [X_0..X_K].
Node-level DP (`unit=node`, node.py): the hops run on the degree-bounded graph and steps 1 and 3 are
DP-SGD, every step and hop composed by one accountant (accounting.py).
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
from privfgl.methods.gap.accounting import calibrate_sigma, release_counts, spent_epsilon
from privfgl.methods.gap.aggregation import clean_edges, perturbed_hops
from privfgl.methods.gap.model import Classifier, Encoder
from privfgl.methods.gap.node import ASSUMPTION, private_step
from privfgl.methods.gap.params import GapParams, resolve_params
from privfgl.privacy.dpsgd import bound_degree
from privfgl.privacy.mechanisms import GaussianMechanism
from privfgl.privacy.noise import NoiseSource

NOT_PROTECTED = ("edge-level DP protects the edges only: the encoder and the classifier train on each client's "
                 "features and labels, and their uploads reveal what FedAvg uploads reveal about them")


class GapReport:
    """The run record's privacy fields for GAP."""

    def __init__(self, p: GapParams, sigma: float | None, source: NoiseSource, releases: dict[str, int],
                 delta_rule: str):
        self.p, self.sigma, self.source, self.releases, self.delta_rule = p, sigma, source, releases, delta_rule

    def report(self) -> dict:
        p, total = self.p, sum(self.releases.values())
        if p.unit == "node":
            unit = "one node (features, label, incident edges) of a client's graph, degree-bounded to D"
            extra = {"degree_bound": p.degree, "clip": p.clip, "sgd_noise_std": self.sigma * p.clip,
                     "assumption": ASSUMPTION}
        else:
            unit = ("one undirected edge {u, v} of a client's graph (both directions)" if p.edge == "undirected"
                    else "one directed edge u->v of a client's graph")
            extra = {"edge": p.edge, "not_protected": NOT_PROTECTED}
        dp = {"method": "gap", "unit": unit, "hops": p.hops, "releases": total, "releases_by_stage": self.releases,
              "sensitivity": p.sensitivity, "sigma": self.sigma,
              "noise_std": None if self.sigma is None else self.sigma * p.sensitivity,
              "target_epsilon": p.epsilon, "sample_rate": 1.0, "delta_rule": self.delta_rule, **extra,
              **self.source.provenance()}
        eps = 0.0 if self.sigma is None else spent_epsilon(self.sigma, total, p.delta, p.accountant)
        return {"dp": dp, "epsilon": eps, "delta": p.delta, "accountant": p.accountant}


def _train_local(model: torch.nn.Module, opt: torch.optim.Optimizer, inputs, y: torch.Tensor,
                 mask: torch.Tensor, epochs: int, private: dict | None) -> None:
    """`epochs` full-batch steps on the masked nodes; `private` ({clip, mechanism, source}): DP-SGD steps."""
    model.train()
    for _ in range(epochs):
        if private is not None:
            rows = [t[mask] for t in inputs] if isinstance(inputs, list) else inputs[mask]
            private_step(model, opt, rows, y[mask], **private)
            continue
        opt.zero_grad()
        F.cross_entropy(model(inputs)[mask], y[mask]).backward()
        opt.step()


def _optimizer(model: torch.nn.Module, cfg) -> torch.optim.Optimizer:
    kind = torch.optim.SGD if cfg.optimizer == "sgd" else torch.optim.Adam
    return kind(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)


def federated_training(setup: Setup, stage: str, models: list[torch.nn.Module], inputs: list, rounds: Iterable[int],
                       evaluate: bool, private: dict | None = None) -> None:
    """FedAvg of `models` (one per client, same architecture) over the rounds `rounds`: local training, then
    n·W and n (n: the client's training nodes; 1 under node-level DP) through Federation.aggregate ("model_update" for the classifier, "encoder_update" for the
    encoder), the weighted mean broadcast ("global_model" / "global_encoder"). `evaluate`: the tracker
    gets every client's logits per round (per setup.method.evaluation). `private`: local steps are DP-SGD."""
    m, fed, cfg, timer = setup.method, setup.federation, setup.model, setup.federation.timer
    upload_name, global_name = ("model_update", "global_model") if stage == "classifier" else \
        ("encoder_update", "global_encoder")
    # FedAvg weights: the training-node counts; uniform under node-level DP, where a count is data-dependent
    n_train = [int(c.train_mask.sum()) if private is None else 1 for c in setup.clients]
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
                if bool(c.train_mask.any()):
                    _train_local(model, opt, x, c.y, c.train_mask, m.local_epochs, private)
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


def client_edges(setup: Setup, p: GapParams) -> list[torch.Tensor]:
    """Each client's edges as the hops aggregate them: clean (edge level), or degree-bounded to D first
    (node level; stable ids, seeded by the run's seed and the client)."""
    out = []
    for k, c in enumerate(setup.clients):
        n, ei = int(c.num_nodes), c.edge_index
        if p.unit == "node":
            ei = bound_degree(ei, n, p.degree, seed=setup.method.seed * 1000 + k, node_ids=getattr(c, "global_id", None))
        out.append(clean_edges(ei, n))
    return out


def delta_rule(setup: Setup, p: GapParams, edges: list[torch.Tensor]) -> str:
    """The δ rule, checked: δ < 1/(the largest client's count of units). ConfigError otherwise."""
    if p.unit == "node":
        count, what = max(int(c.num_nodes) for c in setup.clients), "n (the largest client's nodes)"
    else:
        count, what = max(int(e.shape[1]) for e in edges), "|E| (the largest client's directed edges)"
    if not p.delta < 1 / max(count, 1):
        raise ConfigError(f"gap: delta={p.delta:g} must be < 1/{what.split(' ')[0]} = 1/{count}; "
                          f"valid: delta < {1 / count:.3g}")
    return f"delta = {p.delta:g} < 1/{what} = 1/{count}"


def run_gap(setup: Setup) -> None:
    m, fed, cfg = setup.method, setup.federation, setup.model
    p = resolve_params(m.params)
    edges = client_edges(setup, p)
    releases = release_counts(p, m.rounds, m.local_epochs)
    total = sum(releases.values())
    sigma = calibrate_sigma(p.epsilon, p.delta, total, p.accountant) if total else None
    source = NoiseSource.from_setting(p.noise_seed)
    setup.extras["dp"] = GapReport(p, sigma, source, releases, delta_rule(setup, p, edges) if total else "no release")
    mechanism = GaussianMechanism(sigma, p.sensitivity) if sigma is not None and p.hops else None
    private = None
    if p.unit == "node" and sigma is not None:
        private = {"clip": p.clip, "mechanism": GaussianMechanism(sigma, p.clip), "source": source}
    K, h = len(setup.clients), cfg.hidden

    torch.manual_seed(m.seed)
    encoders = [Encoder(setup.num_features, h, setup.num_classes, p.encoder_layers, cfg.dropout) for _ in range(K)]
    xs = [c.x.float() for c in setup.clients]
    federated_training(setup, "encoder", encoders, xs, range(p.encoder_rounds), evaluate=False, private=private)

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
    federated_training(setup, "classifier", classifiers, cached, setup.rounds("gap"), evaluate=True, private=private)
