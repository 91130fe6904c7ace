"""FedOMD (federated orthogonal GCN with central-moment alignment; spec fedspray_fedomd.md Part B).

Every client holds one orthogonal GCN (privfgl.models.ortho_gcn); all start from the server's
global model. One round (Algorithm 1, communication interval 1):

1. every client runs one training-mode forward pass on its own subgraph: hidden outputs
   Z^1..Z^{L-1} [n_i, d_h] and logits;
2. upload #1 "hidden_sums": {z_l: Σ_m Z^l(m), n: n_i} through the run's protocol; the server divides
   the revealed sums by Σ n_i and broadcasts "global_mean" {z_l: M^l};
3. upload #2 "moment_sums": {z_l_m_j: Σ_m (Z^l(m) − M^l)^j, j = 2..K, n: n_i} about the revealed
   global mean; the server divides by its Σ n_i and broadcasts "global_moments" {z_l_m_j: S_j^l}
   (the message carries its own count so that, clipped under --dp, it is divided by its own clipped
   count);
4. every client takes `local_steps` full-batch steps on CE(train nodes) + α·L_ortho + β·CMD, with
   the global statistics detached and the gradient through its own mean and central moments (CMD
   with squared norms by default, `cmd_norm=l2` for the spec's unsquared form; `cmd_scale` and
   `stats_mode` select the other measured variants; `trace=N` logs the loss terms, their gradient
   norms and the mean hidden outputs every N rounds);
5. upload #3 "model_update": {name: n_i·W_i, n: n_i}; the server broadcasts W̄ = Σ n_i W_i / Σ n_i
   as "global_model".

Only sums cross to the server, and divisions happen after the reveal: under a secure protocol the
server sees the pooled statistics and the global model, never one client's. With β = 0 (no CMD,
the paper's ablation) steps 2-3 are skipped. After every round each client evaluates the global
model on its own nodes; the run stops after `patience` rounds without a better validation
criterion (`select`: the macro validation accuracy by default, or the pooled validation loss), and
the record reports the macro average over parties at the selected round (fedomd_eval).

Statistics use all nodes of a client's subgraph (n_i = |V_i|; `stats_nodes=train`: its training
nodes) from the same training-mode forward pass (dropout on) as the loss (spec B5 #5). Dropout
masks come from one torch.Generator per client, seeded from (seed, client), so runs under
different protocols draw the same masks, and a client draws the same masks wherever it runs.
The clients' side is written as client steps (privfgl.federation.client_steps: `_join`, `_forward`,
`_hidden_sums`, ...); run_fedomd is the server's loop, in process or with the clients on Ray actors
(`--engine ray`; `trace` is in process only).
"""
from __future__ import annotations

import copy
import sys

import numpy as np
import torch
import torch.nn.functional as F

from privfgl.methods.base import Setup
from privfgl.methods.fedomd.cmd import cmd, cmd_layer, global_statistics, hidden_sums, layer_scale, moment_sums
from privfgl.methods.fedomd.selection import PartyMacroTracker
from privfgl.methods.fedomd.params import FedOMDParams, resolve_params
from privfgl.models.ortho_gcn import OrthoGCN, SparseFeatures, normalized_adjacency, ortho_penalty
from privfgl.privacy.message_dp import guard_denominators

Tensors = dict[str, torch.Tensor]
SPARSE_BELOW = 0.1  # features with fewer non-zeros than this (bag-of-words) are kept sparse


def row_normalize(x: torch.Tensor) -> torch.Tensor:
    """x [N, F] >= 0 with every row divided by its sum (an all-zero row stays zero): [11]'s feature
    preprocessing, done by each client on its own rows (nothing is communicated)."""
    return x / x.sum(1, keepdim=True).clamp(min=torch.finfo(x.dtype).tiny)


def _scale_after_forward(p: FedOMDParams) -> str:
    """The CMD scale still to apply to the statistics `Client.forward` kept: `bound` divided by b there."""
    return "none" if p.cmd_scale == "bound" else p.cmd_scale


class Client:
    """One party: its subgraph, its model, optimizer and dropout generator (client-side state)."""

    def __init__(self, k: int, data, model: OrthoGCN, p: FedOMDParams, seed: int, device: torch.device):
        self.k, self.device = k, device
        x = row_normalize(data.x.float()) if p.features == "row" else data.x.float()
        sparse = x.numel() and float((x != 0).float().mean()) < SPARSE_BELOW
        self.x = SparseFeatures(x).to(device) if sparse else x.to(device)
        self.adj = normalized_adjacency(data.edge_index, int(data.num_nodes)).to(device)
        self.y = data.y.to(device)
        self.train_mask = data.train_mask.to(device)
        self.stats_mask = self.train_mask if p.stats_nodes == "train" else None
        self.n_stats = int(self.train_mask.sum()) if p.stats_nodes == "train" else int(data.num_nodes)
        self.n_weight = int(self.train_mask.sum()) if p.weights == "train" else int(data.num_nodes)
        self.p = p
        self.model = model.to(device)
        self.activation: list[float] = []          # mean hidden output per layer (trace)
        self.activation_max: list[float] = []      # max hidden output per layer (trace)
        self.clamped: list[float] = []             # fraction of statistics inputs above cmd_bound (trace)
        self.terms: tuple[float, float] = (0.0, 0.0)  # (CE, β·CMD) of the latest step (trace)
        self.grad_norms: tuple[float, float] = (0.0, 0.0)  # |∇CE|, |∇β·CMD| (trace)
        self.per_order = np.zeros(p.max_order)  # unweighted CMD by order (trace)
        if p.optimizer == "adam":
            self.optim = torch.optim.Adam(self.model.parameters(), lr=p.lr, weight_decay=p.weight_decay)
        else:
            self.optim = torch.optim.SGD(self.model.parameters(), lr=p.lr, weight_decay=p.weight_decay)
        client_seed = int(np.random.SeedSequence([int(seed), k]).generate_state(1)[0])
        self.generator = torch.Generator(device=device).manual_seed(client_seed)
        self._hidden: list[torch.Tensor] = []
        self._logits: torch.Tensor | None = None

    def forward(self) -> None:
        """Training-mode forward pass; keeps the graph for the step that follows the exchange. The
        statistics (and the CMD) use its hidden outputs, or with `stats_mode=eval` those of a
        no-dropout pass of the same weights (gradient through both); with `cmd_scale=bound` they
        are clamped into [0, cmd_bound] and divided by it first (the spec's pre-scaling by (b − a)^-j:
        CMD of Z/b = CMD of Z with the order-j term / b^j, and sums of ((Z − M)/b)^j stay within
        n_i, inside CKKS's |sum| <= 2^20 and CrypTen's range)."""
        p = self.p
        self.optim.zero_grad()
        if p.stats_mode == "eval":
            self.model.eval()
            _, hidden = self.model(self.x, self.adj)
        self.model.train()
        self._logits, train_hidden = self.model(self.x, self.adj, self.generator)
        if p.stats_mode == "train":
            hidden = train_hidden
        if p.trace:
            self.activation = [float(h.detach().mean()) for h in train_hidden]
            self.activation_max = [float(h.detach().max()) for h in train_hidden]
            self.clamped = [float((h.detach() > p.cmd_bound).float().mean()) for h in hidden]
        if p.cmd_scale == "bound":  # statistics of clamp(Z, 0, b)/b: the CMD's 1/b^j, and every uploaded sum
            hidden = [h.clamp(0.0, p.cmd_bound) / p.cmd_bound for h in hidden]  # is at most n_i in size
        self._hidden = hidden if self.stats_mask is None else [h[self.stats_mask] for h in hidden]

    def _on_device(self, received: Tensors | None) -> Tensors | None:
        """A broadcast's tensors (they arrive on the CPU) on this client's device."""
        return None if received is None else {n: v.to(self.device) for n, v in received.items()}

    def upload_hidden_sums(self) -> Tensors:
        return {**hidden_sums(self._hidden), "n": torch.tensor(float(self.n_stats), dtype=torch.float64)}

    def upload_moment_sums(self, global_mean: Tensors, max_order: int) -> Tensors:
        """The moment sums with their own count n_i: under --dp each message is clipped by its own
        factor, so the server must divide these sums by their own (clipped) count, not hidden_sums'."""
        return {**moment_sums(self._hidden, self._on_device(global_mean), max_order),
                "n": torch.tensor(float(self.n_stats), dtype=torch.float64)}

    def diagnose(self, ce, d, global_mean: Tensors, global_moments: Tensors) -> None:
        """Trace only: gradient norms of CE and β·CMD w.r.t. the parameters, and the (unweighted)
        CMD split by order (1 = mean, j = central moment j), summed over layers."""
        p, params = self.p, [q for q in self.model.parameters() if q.requires_grad]
        g_ce = torch.autograd.grad(ce, params, retain_graph=True, allow_unused=True)
        g_d = torch.autograd.grad(d, params, retain_graph=True, allow_unused=True)
        norm = lambda gs: float(torch.sqrt(sum((g * g).sum() for g in gs if g is not None)))
        self.grad_norms = (norm(g_ce), norm(g_d))
        with torch.no_grad():
            per_order = np.zeros(p.max_order)
            for l, z in enumerate(self._hidden, start=1):
                moments = [global_moments[f"z{l}_m{j}"] for j in range(2, p.max_order + 1)]
                scale = layer_scale(global_moments, l, _scale_after_forward(p), p.cmd_bound)
                for j in range(1, p.max_order + 1):
                    per_order[j - 1] += float(cmd_layer(z, global_mean[f"z{l}"], moments[:j - 1], scale, p.cmd_norm)) \
                        - (float(cmd_layer(z, global_mean[f"z{l}"], moments[:j - 2], scale, p.cmd_norm)) if j > 1 else 0.0)
            self.per_order = per_order

    def step(self, p: FedOMDParams, global_mean: Tensors | None, global_moments: Tensors | None,
             diagnose: bool = False) -> float:
        """`local_steps` steps on Eq. 12 (the first reuses the forward pass of the exchange)."""
        global_mean, global_moments = self._on_device(global_mean), self._on_device(global_moments)
        for s in range(p.local_steps):
            if s:
                self.forward()
            ce = F.cross_entropy(self._logits[self.train_mask], self.y[self.train_mask])
            loss = ce
            if p.alpha:
                loss = loss + p.alpha * ortho_penalty(self.model)
            d = 0.0
            if p.beta and global_mean is not None:
                d = p.beta * cmd(self._hidden, global_mean, global_moments, p.max_order, _scale_after_forward(p),
                                 p.cmd_norm, p.cmd_bound)
                loss = loss + d
            self.terms = (float(ce.detach()), float(d.detach()) if torch.is_tensor(d) else 0.0)
            if diagnose and p.beta and global_mean is not None:
                self.diagnose(ce, d, global_mean, global_moments)
            loss.backward()
            self.optim.step()
        self._hidden, self._logits = [], None
        return loss.item()

    def upload_model(self) -> Tensors:
        """n_i·W_i per parameter (float64) and n_i: sums only, the division follows the reveal."""
        out = {name: v.detach().double().mul(self.n_weight) for name, v in self.model.state_dict().items()}
        out["n"] = torch.tensor(float(self.n_weight), dtype=torch.float64)
        return out

    def load(self, params: Tensors) -> None:
        self.model.load_state_dict({name: v.float() for name, v in params.items()})

    @torch.no_grad()
    def predict(self) -> torch.Tensor:
        self.model.eval()
        return self.model(self.x, self.adj)[0].cpu()


def _trace(r: int, values: list[dict], entry: dict) -> None:
    """One stderr line: mean hidden output per layer, CE and β·CMD (averaged over clients), pooled
    validation loss and macro validation/test accuracy of the global model. values: each client's
    ``_trace_values``."""
    mean = lambda key: np.mean([v[key] for v in values], axis=0)
    act, (ce, d), (gce, gd), orders = mean("activation"), mean("terms"), mean("grad_norms"), mean("per_order")
    top = np.max([v["activation_max"] for v in values], axis=0)
    above = mean("clamped")
    print(f"fedomd round {r}: mean Z {' '.join(f'{a:.4g}' for a in act)} max Z {' '.join(f'{a:.3g}' for a in top)} "
          f"above b {' '.join(f'{a:.2g}' for a in above)} | CE {ce:.4f} beta*CMD {d:.4f} "
          f"|grad| {gce:.3g} {gd:.3g} CMD by order {' '.join(f'{o:.3g}' for o in orders)} | "
          f"val_loss {entry['val_loss']:.4f} val_acc {100 * entry['val_acc']:.2f} test_acc {100 * entry['test_acc']:.2f}",
          file=sys.stderr, flush=True)


def build_model(setup: Setup, p: FedOMDParams) -> OrthoGCN:
    return OrthoGCN(setup.num_features, setup.model.hidden, setup.num_classes, p.ortho_layers, p.dropout,
                    p.oni_iters, p.beta_mix, p.oni_init_first)


# --- the client steps (privfgl.federation.client_steps); state["client"] is the party's Client -----------------
def _check(k: int, state: dict, data, p: FedOMDParams) -> dict[str, bool]:
    """Client k's flags for the setup checks: negative features (under features=row), no training node."""
    return {"negative": p.features == "row" and bool((data.x < 0).any()), "empty": not bool(data.train_mask.any())}


def _join(k: int, state: dict, data, model: OrthoGCN, received: Tensors, p: FedOMDParams, seed: int,
          device: str) -> None:
    """Client k: its Client, with its own copy of the public `model` set to the broadcast `received`."""
    own = copy.deepcopy(model)
    own.load_state_dict(received)
    state["client"] = Client(k, data, own, p, seed, torch.device(device))


def _forward(k: int, state: dict, data) -> None:
    state["client"].forward()


def _hidden_sums(k: int, state: dict, data) -> Tensors:
    return state["client"].upload_hidden_sums()


def _moment_sums(k: int, state: dict, data, global_mean: Tensors, max_order: int) -> Tensors:
    return state["client"].upload_moment_sums(global_mean, max_order)


def _step(k: int, state: dict, data, p: FedOMDParams, global_mean: Tensors | None, global_moments: Tensors | None,
          diagnose: bool) -> None:
    state["client"].step(p, global_mean, global_moments, diagnose)


def _upload_model(k: int, state: dict, data) -> Tensors:
    return state["client"].upload_model()


def _load(k: int, state: dict, data, received: Tensors) -> None:
    state["client"].load(received)


def _predict(k: int, state: dict, data) -> torch.Tensor:
    return state["client"].predict()


def _trace_values(k: int, state: dict, data) -> dict:
    """Client k's diagnostics for `trace` (in process only: they derive from its data; --engine ray refuses
    trace)."""
    c = state["client"]
    return {"activation": c.activation, "activation_max": c.activation_max, "clamped": c.clamped,
            "terms": c.terms, "grad_norms": c.grad_norms, "per_order": c.per_order}


def _check_setup(clients, p: FedOMDParams) -> None:
    flags = clients.each(_check, p)  # public flags: a check of the run's settings against the data
    if any(f["negative"] for f in flags.values()):
        raise ValueError("fedomd: features=row row-normalises non-negative (bag-of-words) features, but this dataset "
                         "has negative feature values; use features=raw")
    empty = sorted(k for k, f in flags.items() if f["empty"])
    if empty:
        raise ValueError(f"fedomd: client(s) {empty} have no training node; use --split-mode random (at least one "
                         "training node per client) or a larger training ratio in --split")


def _server_mean(sums: Tensors) -> tuple[Tensors, float]:
    """Server: the revealed sums divided by the revealed node count."""
    total = float(sums.pop("n"))
    return global_statistics(sums, total), total


def run_fedomd(setup: Setup) -> None:
    """A FedOMD run on `setup`: metrics to setup.tracker (replaced by PartyMacroTracker), bytes and
    views to setup.federation. The server's loop; every client step runs where the client is (setup.steps():
    in process or on its Ray actor)."""
    p = resolve_params(setup.method.params)
    clients = setup.steps(allow_dead=True)  # every sum carries its own count n: the survivors' weights
    _check_setup(clients, p)
    fed, timer, seed = setup.federation, setup.federation.timer, setup.method.seed
    if clients.remote:  # the clients evaluate themselves: their node counts (public sizes) only
        tracker = PartyMacroTracker.from_counts(setup.tracker.node_counts, setup.num_classes, p.patience, p.select)
    else:
        tracker = PartyMacroTracker(setup.clients, setup.num_classes, p.patience, p.select)
    setup.tracker = tracker

    torch.manual_seed(seed)
    init = build_model(setup, p)
    with timer.phase("broadcast"):
        received = fed.broadcast(0, "global_model", {n: v.detach().clone() for n, v in init.state_dict().items()})
    clients.train(_join, init, received, p, seed, setup.device)

    for r in setup.rounds("fedomd"):
        with timer.phase("local_train"):
            clients.train(_forward)
        gmean = gmom = None
        if p.beta:
            with timer.phase("client_upload"):
                up = clients.uploads(_hidden_sums)
            gmean, _ = _server_mean(guard_denominators(fed.dp, "hidden_sums", fed.aggregate(r, "hidden_sums", up)))
            with timer.phase("broadcast"):
                gmean = fed.broadcast(r, "global_mean", gmean)
            with timer.phase("client_upload"):
                up = clients.uploads(_moment_sums, gmean, p.max_order)
            gmom, _ = _server_mean(guard_denominators(fed.dp, "moment_sums", fed.aggregate(r, "moment_sums", up)))
            with timer.phase("broadcast"):
                gmom = fed.broadcast(r, "global_moments", gmom)
        with timer.phase("local_train"):
            clients.train(_step, p, gmean, gmom, bool(p.trace) and r % p.trace == 0)
        with timer.phase("client_upload"):
            up = clients.uploads(_upload_model)
        new_global, _ = _server_mean(guard_denominators(fed.dp, "model_update", fed.aggregate(r, "model_update", up)))
        with timer.phase("broadcast"):
            received = fed.broadcast(r, "global_model", new_global)
        with timer.phase("set_params"):
            clients.train(_load, received)
        with timer.phase("evaluate"):
            entry = clients.evaluate(tracker, r, _predict)
        if p.trace and r % p.trace == 0:
            _trace(r, [v for _, v in sorted(clients.each(_trace_values).items())], entry)
        if tracker.should_stop():
            break
