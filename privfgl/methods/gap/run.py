"""GAP in the federation (`--method gap`): each client privatises its own subgraph once, then the
clients train a classifier on the cached noisy aggregations by FedAvg through `--protocol`.

1. Encoder (`encoder_rounds` FedAvg rounds of `local_epochs` full-batch steps): each client trains
   model.Encoder on its own training nodes' features and labels; uploads n·W and n (n its training
   nodes) through Federation.aggregate("encoder_update"); the server broadcasts Σ n·W / Σ n.
2. Aggregation perturbation, once per client (aggregation.py): X_0 = the final encoder's unit-norm
   embeddings, K noisy hops on the client's own edges; cached.
3. Classifier (`rounds` FedAvg rounds, "model_update"): model.Classifier on the cached [X_0..X_K].
Node-level DP (`unit=node`, node.py): the hops run on the degree-bounded graph and steps 1 and 3 are
DP-SGD (full batch, or Poisson-sampled at `sample_rate`), every step and hop composed by one accountant
(accounting.py).
Edge-level DP (unit: one edge of a client's graph; `edge=undirected|directed`): everything a client
sends after step 2 is post-processing of its noisy hops and of its features and labels, which
edge-level DP does not protect (nor the encoder's uploads, which depend on no edge). σ comes from the
target ε (accounting.py). Evaluation runs on the cached noisy aggregations of each client's own nodes.
An auditor (attacks/dp/gap_audit.py) may set `setup.extras["gap_canaries"]`: canary rows join one
client's hop sums before the noise, and that client then sends its released sums H_1..H_K to the server
("gap_release"), a disclosure made only in an audit.
At node level an auditor (attacks/dp/gap_step_audit.py) may set `setup.extras["gap_step_canaries"]`:
gradient canaries join one client's per-node gradients in every encoder and classifier DP-SGD step.
The clients' side is written as client steps (privfgl.federation.client_steps: `_prepare`, `_start`,
`_train`, `_upload`, `_load`, `_release`, `_predict`); run_gap is the server's loop, so the same run goes
in process or with the clients on Ray actors (`--engine ray`). Each client draws its dropout masks from its
own stream (training.dropout_seeds) and its noise from its own source (NoiseSource.for_client).
"""
from __future__ import annotations

import copy
from collections.abc import Iterable

import torch
import torch.nn.functional as F

from privfgl.errors import ConfigError
from privfgl.federation.client_steps import global_rng, rng_state
from privfgl.methods.base import Setup
from privfgl.methods.gap.accounting import calibrate_sigma, release_counts, spent_epsilon
from privfgl.methods.gap.aggregation import clean_edges, perturbed_hops
from privfgl.methods.gap.model import Classifier, Encoder
from privfgl.methods.gap.node import ASSUMPTION, private_step
from privfgl.methods.gap.params import GapParams, resolve_params
from privfgl.privacy.dpsgd import bound_degree
from privfgl.privacy.mechanisms import GaussianMechanism
from privfgl.privacy.noise import NoiseSource
from privfgl.training import dropout_seeds

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
                     "sampling": "full batch" if p.sample_rate == 1 else
                     "Poisson: each step takes each training node with probability sample_rate (the hops: rate 1)",
                     "assumption": ASSUMPTION}
        else:
            unit = ("one undirected edge {u, v} of a client's graph (both directions)" if p.edge == "undirected"
                    else "one directed edge u->v of a client's graph")
            extra = {"edge": p.edge, "not_protected": NOT_PROTECTED}
        dp = {"method": "gap", "unit": unit, "hops": p.hops, "releases": total, "releases_by_stage": self.releases,
              "sensitivity": p.sensitivity, "sigma": self.sigma,
              "noise_std": None if self.sigma is None else self.sigma * p.sensitivity,
              "target_epsilon": p.epsilon, "sample_rate": p.sample_rate, "delta_rule": self.delta_rule, **extra,
              **self.source.provenance()}
        eps = 0.0 if self.sigma is None else spent_epsilon(self.sigma, self.releases, p.delta, p.accountant,
                                                           p.sample_rate)
        return {"dp": dp, "epsilon": eps, "delta": p.delta, "accountant": p.accountant}


def _train_local(model: torch.nn.Module, opt: torch.optim.Optimizer, inputs, y: torch.Tensor,
                 mask: torch.Tensor, epochs: int, private: dict | None) -> None:
    """`epochs` full-batch steps on the masked nodes; `private` ({clip, mechanism, sample_rate, source[, extra]}):
    DP-SGD steps (Poisson-sampled at sample_rate < 1; `extra`: an auditor's gradient canaries, node.private_step)."""
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


# --- the client steps (privfgl.federation.client_steps); `part` is "encoder" or "classifier" ----------------
def _prepare(k: int, state: dict, data, p: GapParams, seed: int, source: NoiseSource) -> int:
    """Client k: its edges as the hops aggregate them (clean; node level: degree-bounded to D first, stable
    ids, seeded by the run's seed and k), its features, its dropout stream and its noise source. Checks the δ
    rule on its own count of privacy units (directed edges; node level: nodes), which one unit changes and
    which therefore stays with the client: returns None when δ < 1/count, else the count (the run then stops
    with one line naming it)."""
    n, ei = int(data.num_nodes), data.edge_index
    if p.unit == "node":
        ei = bound_degree(ei, n, p.degree, seed=seed * 1000 + k, node_ids=getattr(data, "global_id", None))
    edges = clean_edges(ei, n)
    state.update(edges=edges, x=data.x.float(), rng=rng_state(dropout_seeds(seed, [k])[0]),
                 source=source.for_client(k))
    count = n if p.unit == "node" else int(edges.shape[1])
    return None if p.delta < 1 / max(count, 1) else count


def _inputs(state: dict, part: str):
    """The part's input: the features [n, f] (encoder), the cached hops [X_0..X_K] (classifier)."""
    return state["x"] if part == "encoder" else state["hops"]


def _start(k: int, state: dict, data, part: str, model: torch.nn.Module, received: dict, cfg) -> None:
    """Client k's own copy of the public `model`, set to the broadcast `received`, and its optimizer."""
    own = copy.deepcopy(model)
    own.load_state_dict(received)
    state[part] = {"model": own, "opt": _optimizer(own, cfg)}


def _train(k: int, state: dict, data, part: str, r: int, epochs: int, private: dict | None, canaries=None) -> None:
    """Client k: `epochs` local steps of round `r` on its training nodes (DP-SGD from its own noise source if
    `private`; an auditor's gradient canaries, attacks/dp/gap_step_audit.py, join client canaries.client's)."""
    if not bool(data.train_mask.any()):
        return
    own = state[part]
    if private is not None:
        private = {**private, "source": state["source"]}
        if canaries is not None and canaries.client == k:
            layout = [(n, v.numel()) for n, v in own["model"].named_parameters()]
            private["extra"] = canaries.rows(part, r, layout)
    with global_rng(state):  # dropout (and vmap's per-node draws) from the client's own stream
        _train_local(own["model"], own["opt"], _inputs(state, part), data.y, data.train_mask, epochs, private)


def _predict(k: int, state: dict, data, part: str) -> torch.Tensor:
    """Client k's logits [n_k, C] (eval mode)."""
    with torch.no_grad():
        return state[part]["model"].eval()(_inputs(state, part))


def _upload(k: int, state: dict, data, part: str, private: bool) -> dict:
    """n·W and n (n: the client's training nodes; 1 under node-level DP, where the count is data-dependent)."""
    n = 1 if private else int(data.train_mask.sum())
    up = {name: v.detach().double() * n for name, v in state[part]["model"].state_dict().items()}
    up["n"] = torch.tensor(float(n), dtype=torch.float64)
    return up


def _load(k: int, state: dict, data, part: str, received: dict) -> None:
    state[part]["model"].load_state_dict(received)


def _release(k: int, state: dict, data, hops: int, mechanism: GaussianMechanism | None, canaries) -> dict | None:
    """Client k's aggregation perturbation, once: X_0 = its final encoder's embeddings, K noisy hops on its
    edges from its own noise source, cached for the classifier. The audited client (canaries.client) returns
    its released sums (the message "gap_release"); the others send nothing."""
    audited = canaries is not None and canaries.client == k
    with torch.no_grad():
        x0 = state["encoder"]["model"].eval().embed(state["x"])
        state["hops"], released = perturbed_hops(x0, state["edges"], hops, mechanism, state["source"],
                                                 canaries.rows if audited else None)
    return {f"hop{i + 1}": t for i, t in enumerate(released)} if audited else None


def federated_training(setup: Setup, clients, part: str, model: torch.nn.Module, rounds: Iterable[int],
                       evaluate: bool, private: dict | None = None) -> None:
    """FedAvg of the clients' copies of `model` (the public initial module) over the rounds `rounds`: local
    training, then n·W and n (n: the client's training nodes; 1 under node-level DP) through
    Federation.aggregate ("model_update" for the classifier, "encoder_update" for the encoder), the weighted
    mean broadcast ("global_model" / "global_encoder"). `evaluate`: the tracker gets every client's evaluation
    per round (per setup.method.evaluation). `private` ({clip, mechanism}): local steps are DP-SGD."""
    m, fed, cfg, timer = setup.method, setup.federation, setup.model, setup.federation.timer
    upload_name, global_name = ("model_update", "global_model") if part == "classifier" else \
        ("encoder_update", "global_encoder")
    with timer.phase("broadcast"):
        received = fed.broadcast(0, global_name, {n: v.detach().clone() for n, v in model.state_dict().items()})
    clients.train(_start, part, model, received, cfg)
    for r in rounds:
        with timer.phase("local_train"):
            clients.train(_train, part, r, m.local_epochs, private, setup.extras.get("gap_step_canaries"))
        if evaluate and m.evaluation == "local_model":
            with timer.phase("evaluate"):
                clients.evaluate(setup.tracker, r, _predict, part)
        with timer.phase("client_upload"):
            uploads = clients.uploads(_upload, part, private is not None)
        sums = fed.aggregate(r, upload_name, uploads)
        total = sums.pop("n").clamp(min=1.0)  # Σ n over the clients in the sum: the survivors' weights
        new_global = {n: (s / total).float() for n, s in sums.items()}
        with timer.phase("broadcast"):
            received = fed.broadcast(r, global_name, new_global)
        clients.train(_load, part, received)
        if evaluate and m.evaluation == "global_model":
            with timer.phase("evaluate"):
                clients.evaluate(setup.tracker, r, _predict, part)


def delta_rule(p: GapParams, refused: list[int | None]) -> str:
    """The δ rule, checked by each client on its own count of units (``_prepare``): a ConfigError names the
    largest count of the clients that refused."""
    what = "n (the client's nodes)" if p.unit == "node" else "|E| (the client's directed edges)"
    counts = [c for c in refused if c is not None]
    if counts:
        count = max(counts)
        raise ConfigError(f"gap: delta={p.delta:g} must be < 1/{what.split(' ')[0]} = 1/{count}; "
                          f"valid: delta < {1 / count:.3g}")
    return f"delta = {p.delta:g} < 1/{what}, checked by every client on its own count"


def run_gap(setup: Setup) -> None:
    """Server loop; every client step runs where the client is (setup.steps(): in process or on its actor)."""
    m, fed, cfg = setup.method, setup.federation, setup.model
    p = resolve_params(m.params)
    releases = release_counts(p, m.rounds, m.local_epochs)
    total = sum(releases.values())
    sigma = calibrate_sigma(p.epsilon, p.delta, releases, p.accountant, p.sample_rate) if total else None
    source = NoiseSource.from_setting(p.noise_seed)
    clients = setup.steps(allow_dead=True)  # every sum carries its own Σ n: the survivors' weights
    refused = clients.each(_prepare, p, m.seed, source)
    setup.extras["dp"] = GapReport(p, sigma, source, releases,
                                   delta_rule(p, list(refused.values())) if total else "no release")
    mechanism = GaussianMechanism(sigma, p.sensitivity) if sigma is not None and p.hops else None
    private = None
    if p.unit == "node" and sigma is not None:
        private = {"clip": p.clip, "mechanism": GaussianMechanism(sigma, p.clip), "sample_rate": p.sample_rate}

    torch.manual_seed(m.seed)  # the public initial models, built here
    encoder = Encoder(setup.num_features, cfg.hidden, setup.num_classes, p.encoder_layers, cfg.dropout)
    classifier = Classifier(cfg.hidden, setup.num_classes, p.hops, cfg.dropout)
    federated_training(setup, clients, "encoder", encoder, range(p.encoder_rounds), evaluate=False, private=private)
    with fed.timer.phase("dp_aggregate"):
        clients.messages(fed, 0, "gap_release", _release, p.hops, mechanism, setup.extras.get("gap_canaries"))
    federated_training(setup, clients, "classifier", classifier, setup.rounds("gap"), evaluate=True, private=private)
