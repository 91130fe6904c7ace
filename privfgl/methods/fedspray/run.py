"""FedSpray (Fu et al., "Federated Graph Learning with Structure Proxy Alignment", KDD'24).
Spec: ../shared/specs/fedspray_fedomd.md, part A; hyper-parameters and the authors' code choices
(options) in params.py; the models in model.py.

Every client k keeps a personalised GNN f(θ^(k)) (gcn, sage or sgc; never uploaded) and trains a
copy of the global feature-structure encoder g(ω): g_e (Linear + ReLU, x -> e ∈ R^{d_s}), g_c
(classifier on e + s) and g_p (projector on e), plus one structure proxy s_i per labelled node.
Round r (Algorithm 1), from the broadcast "global_encoder" {ω_{r-1}, S_{r-1}}:

Phase 1 (GNN): e = g_e(x), q = softmax(g_p(e)); s_i = S_{r-1}[y_i] for labelled nodes (with
  `persistent_node_proxies`, the node's own proxy from the last round), q_i^T S_{r-1} otherwise;
  p = softmax(g_c(e + s)) once, detached; E Adam steps on
  L_G = mean_{V_L} CE(y, ŷ) + λ1 · mean_{KD} KL(p || ŷ)                          (Eqs. 5-7)
  with KD = every node (paper) or labelled + unlabelled with max q > kd_conf_threshold (code).
  The tracker evaluates the personalised GNN here (the model FedSpray reports).
Phase 2 (encoder, proxies): ŷ from the updated GNN, once, detached; ω^(k) = ω_{r-1} (the code:
  with g_p set to ω_{r-1}'s g_c, `projector_start=classifier`); labelled
  proxies s_i = S_{r-1}[y_i] (paper; kept under `persistent_node_proxies`); E Adam steps on
  L_F = mean_{V_L} CE(y, q) + λ2 · mean_{V_L} KL(ŷ || softmax(g_c(e + s_i)))       (Eqs. 11-13)
  on ω^(k) and the s_i (g_e, g_c, g_p act row by row and L_F reads labelled rows only, so the
  forward passes run on V_L alone); local proxies s_j^(k) = mean of s_i over labelled class-j nodes (0 if none).
Upload through `Federation.aggregate` (pre-weighted sums; divisions after the reveal):
  "encoder_update": {N^(k)·ω^(k) per tensor, n = N^(k)}      (N^(k): training nodes, spec A5 #6)
  "proxy_update":   {proxy = p_j^(k)·s_j^(k) [C, d_s], weight = p^(k) [C]}
  with p_j^(k) = n_j^(k)/|V_L^(k)| (Eq. 15, `proxy_weights=ratios`) or n_j^(k) (`counts`).
Server: ω_r = Σ N^(k)ω^(k) / Σ N^(k) (Eq. 14); s_j,r = Σ_k p_j^(k)s_j^(k) / Σ_k p_j^(k) (Eq. 15);
  a class no client holds (Σ_k p_j^(k) = 0) keeps its previous row. Broadcast "global_encoder".

Under `plain` the server's transcript holds every client's p^(k), i.e. its training-label
distribution (vanilla FedSpray's leak, spec A2) and its N^(k); under crypten/ckks/bfv it holds
shares or ciphertexts and only the sums Σ N^(k) ω^(k), Σ N^(k), Σ p^(k) s^(k), Σ p^(k).

Every client's side is a client step (privfgl.federation.client_steps) on its own FedSprayClient: in this
process, or on the client's Ray actor (`--engine ray`); run_fedspray is the server's loop.

Settings from the run config: the backbone (`--model gcn|sage|sgc`), `--hidden`, `--layers`,
`--rounds`. FedSpray's own settings are method params (`--lr`, `--dropout`, `--weight-decay` and
`--local-epochs` do not apply; see fedspray_params.py). The paper's split is 40/30/30
(`--split 0.4,0.3,0.3`, data.splits.SPLIT_DEFAULTS["fedspray"]). Model selection: the round with
the lowest pooled validation loss (`selection=val_loss`, the code's), or the run's default.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch_geometric.data import Data

from privfgl.methods.base import Setup
from privfgl.methods.fedspray.model import (ENCODER, embed, head, init_encoder, init_gnn,
                                            initial_proxies, load_encoder, stack_encoder)
from privfgl.methods.fedspray.params import FedSprayParams, resolve_params
from privfgl.models.stacked import BlockGraph, BlockGraphs, from_stacked, stacked_forward, stacked_predict
from privfgl.privacy.message_dp import guard_denominators
from privfgl.training import ModelConfig, dropout_seeds

ENCODER_MESSAGE, PROXY_MESSAGE, BROADCAST_MESSAGE = "encoder_update", "proxy_update", "global_encoder"


def _kl(target_logp: torch.Tensor, logp: torch.Tensor) -> torch.Tensor:
    """KL(target || model) per row from log-probabilities [n, C] -> [n]."""
    return (target_logp.exp() * (target_logp - logp)).sum(-1)


class FedSprayClient:
    """Client k's private state: its graph, personalised GNN, copy of the encoder, labelled nodes' proxies and
    their optimizers (the models stacked as one client, model.py). Only its two uploads leave it."""

    def __init__(self, k: int, data: Data, p: FedSprayParams, omega: dict, model: ModelConfig, num_classes: int,
                 seed: int, device: torch.device):
        self.p, self.C = p, num_classes
        self.graph = BlockGraph([data.x], [data.edge_index], device)
        if p.dropout:  # its own dropout stream, the same wherever the client runs
            self.graph.generators = [torch.Generator(device).manual_seed(dropout_seeds(seed, [k])[0])]
        self.eval_graphs = BlockGraphs(device)  # the evaluation settings' graphs (predict_on)
        # Phase 2's losses read labelled rows only, and g_e, g_c, g_p act row by row: its forward
        # passes run on the labelled nodes alone (no edges; the same weights), which is Phase 2 as
        # written (up to float rounding), at |V_L|/|V| of the cost (the first layer dominates).
        self.graph_L = BlockGraph([data.x[data.train_mask]], [torch.zeros(2, 0, dtype=torch.long)], device)
        self.arch, self.layers = model.model, model.layers
        self.train = data.train_mask.to(device)
        self.L = self.train.nonzero().view(-1)                       # labelled nodes
        self.yL = data.y.to(device)[self.L]
        self.n_train = int(self.L.numel())                           # N^(k) (training nodes)
        self.class_counts = torch.bincount(self.yL, minlength=num_classes)
        self.ce_w = 1.0 / max(self.n_train, 1)                       # mean over V_L^(k)
        cfg = ModelConfig(self.arch, model.hidden, self.layers, p.dropout)
        self.theta = init_gnn(cfg, data.num_features, num_classes, k, seed, p.gnn_init, device)
        self.opt_theta = torch.optim.Adam(self.theta.values(), lr=p.lr_gnn, weight_decay=p.weight_decay, fused=True)
        self.omega = stack_encoder(omega, device)
        self.opt_omega = torch.optim.Adam(self.omega.values(), lr=p.lr_encoder, fused=True)
        self.node_proxy = torch.full((self.n_train, p.proxy_dim), p.node_proxy_init, device=device,
                                     requires_grad=True)
        self.opt_proxy = torch.optim.Adam([self.node_proxy], lr=p.lr_proxy, fused=True)

    def _kd_weights(self, q: torch.Tensor) -> torch.Tensor:
        """Per-node weights of L_G_KD [n]: 1/|KD| on the KD nodes, 0 elsewhere."""
        if self.p.kd_conf_threshold is None:
            member = torch.ones_like(self.train)
        else:
            member = self.train | (q.max(-1).values > self.p.kd_conf_threshold)
        return member.float() / member.sum().clamp(min=1).float()

    def phase1(self, omega: dict, S: torch.Tensor) -> None:
        """The GNN's E steps of Eq. 7, distilled from the received encoder and proxies."""
        p = self.p
        with torch.no_grad():
            load_encoder(self.omega, omega)
            e = embed(self.omega, self.graph)
            q = head(self.omega, "projector", e, self.graph).softmax(-1)
            s = q @ S                                              # unlabelled: q_i^T S_{r-1}
            s[self.L] = self.node_proxy if p.persistent_node_proxies else S[self.yL]
            target = head(self.omega, "classifier", e + s, self.graph).log_softmax(-1)
            kd_w = self._kd_weights(q)
        for _ in range(p.local_epochs):
            self.opt_theta.zero_grad()
            logp = stacked_forward(self.arch, self.theta, self.graph, self.layers, p.dropout, True).log_softmax(-1)
            loss = (F.nll_loss(logp[self.L], self.yL, reduction="none") * self.ce_w).sum()
            if p.lambda1:
                loss = loss + p.lambda1 * (_kl(target, logp) * kd_w).sum()
            loss.backward()
            self.opt_theta.step()

    @torch.no_grad()
    def predict(self) -> torch.Tensor:
        """The personalised GNN's eval-mode logits [n, C]."""
        return stacked_forward(self.arch, self.theta, self.graph, self.layers, self.p.dropout, False)

    def predict_on(self, graph: Data) -> torch.Tensor:
        """The personalised GNN's eval-mode logits on another graph [n_g, C] (an evaluation setting's)."""
        return stacked_predict(self.arch, self.theta, self.eval_graphs.of([graph]), self.layers)[0]

    def phase2(self, S: torch.Tensor, gnn_logits: torch.Tensor) -> None:
        """E steps of Eq. 11 on the encoder copy (already ω_{r-1}) and the labelled proxies."""
        p = self.p
        target = gnn_logits[self.L].log_softmax(-1)
        if p.projector_start == "classifier":  # the code: its local g_p starts from the received g_c
            with torch.no_grad():
                for part in ("weight", "bias"):
                    self.omega[f"projector.{part}"].copy_(self.omega[f"classifier.{part}"])
        if not p.persistent_node_proxies:
            with torch.no_grad():
                self.node_proxy.copy_(S[self.yL])
        if not p.persistent_encoder_optimizer:
            self.opt_omega = torch.optim.Adam(self.omega.values(), lr=p.lr_encoder, fused=True)
        if not p.persistent_proxy_optimizer:
            self.opt_proxy = torch.optim.Adam([self.node_proxy], lr=p.lr_proxy, fused=True)
        for _ in range(p.local_epochs):
            self.opt_omega.zero_grad()
            self.opt_proxy.zero_grad()
            e = embed(self.omega, self.graph_L)                      # labelled rows, in self.L's order
            q_logits = head(self.omega, "projector", e, self.graph_L)
            p_logp = head(self.omega, "classifier", e + self.node_proxy, self.graph_L).log_softmax(-1)
            loss = (F.cross_entropy(q_logits, self.yL, reduction="none") * self.ce_w).sum()
            if p.lambda2:
                loss = loss + p.lambda2 * (_kl(target, p_logp) * self.ce_w).sum()
            loss.backward()
            self.opt_omega.step()
            self.opt_proxy.step()

    @torch.no_grad()
    def local_proxies(self) -> torch.Tensor:
        """s_j^(k): the mean node proxy per class [C, d_s] (0 for a class the client lacks)."""
        sums = torch.zeros(self.C, self.p.proxy_dim, device=self.node_proxy.device)
        sums.index_add_(0, self.yL, self.node_proxy.detach())
        return sums / self.class_counts.view(-1, 1).clamp(min=1)

    @torch.no_grad()
    def encoder_upload(self) -> dict[str, torch.Tensor]:
        """{N^(k)·ω^(k) per tensor (PyG layout), n = N^(k)}, float64."""
        n = float(self.n_train)
        up = {name: from_stacked(name, v[0].detach()).double().cpu().mul_(n) for name, v in self.omega.items()}
        up["n"] = torch.tensor(n, dtype=torch.float64)
        return up

    @torch.no_grad()
    def proxy_upload(self) -> dict[str, torch.Tensor]:
        """{proxy = p^(k)·S^(k) [C, d_s], weight = p^(k) [C]}, float64 (Eq. 15's weights: ratios or counts)."""
        counts = self.class_counts.double().cpu()
        weights = counts if self.p.proxy_weights == "counts" else counts / counts.sum().clamp(min=1)
        return {"proxy": weights[:, None] * self.local_proxies().double().cpu(), "weight": weights}


# ---- the client steps (privfgl.federation.client_steps) ------------------------------------------
def _start(k: int, state: dict, data: Data, omega: dict, p: FedSprayParams, model: ModelConfig, num_classes: int,
           seed: int, device: str) -> None:
    state["client"] = FedSprayClient(k, data, p, omega, model, num_classes, seed, torch.device(device))


def _phase1(k: int, state: dict, data: Data, omega: dict, S: torch.Tensor) -> None:
    """Phase 1 from the received ω, S; keeps the GNN's logits for the evaluation and Phase 2."""
    client = state["client"]
    client.phase1(omega, S)
    state["logits"] = client.predict()


def _predict(k: int, state: dict, data: Data) -> torch.Tensor:
    return state["logits"].cpu()


def _predict_on(k: int, state: dict, data: Data, graph: Data) -> torch.Tensor:
    return state["client"].predict_on(graph)


def _phase2(k: int, state: dict, data: Data, S: torch.Tensor) -> None:
    state["client"].phase2(S, state["logits"])


def _encoder_upload(k: int, state: dict, data: Data) -> dict[str, torch.Tensor]:
    return state["client"].encoder_upload()


def _proxy_upload(k: int, state: dict, data: Data) -> dict[str, torch.Tensor]:
    return state["client"].proxy_upload()


def server_update(encoder_sums: dict, proxy_sums: dict, omega_prev: dict, S_prev: torch.Tensor) -> tuple[dict, torch.Tensor]:
    """Eqs. 14-15 from the revealed sums: ω = Σ N^(k)ω^(k) / Σ N^(k); s_j = Σ p_j s_j / Σ p_j,
    keeping S_prev[j] where Σ_k p_j^(k) = 0 (no client holds class j)."""
    total = float(encoder_sums["n"])
    if total > 0:
        omega = {name: (encoder_sums[name] / total).to(omega_prev[name].dtype) for name in omega_prev}
    else:
        omega = dict(omega_prev)
    denom = proxy_sums["weight"].to(torch.float64)
    held = denom > 0
    S = S_prev.clone()
    S[held] = (proxy_sums["proxy"][held] / denom[held, None]).to(S.dtype)
    return omega, S


def run_fedspray(setup: Setup) -> None:
    """FedSpray's server loop on `setup`; every client step runs where the client is (setup.steps()). Metrics go
    to setup.tracker, bytes/views to setup.federation."""
    p = resolve_params(setup.method.params)
    fed, timer, m = setup.federation, setup.federation.timer, setup.method
    device = torch.device(setup.device)
    if p.selection == "val_loss":
        setup.tracker.select = "val_loss"
    omega = init_encoder(setup.num_features, p.proxy_dim, setup.num_classes, seed=m.seed, head_init=p.head_init)
    S = initial_proxies(setup.num_classes, p.proxy_dim)
    clients = setup.steps(allow_dead=True)  # the sums weigh the survivors (Σ N^(k), Σ p^(k) in the same message)
    with timer.phase("setup"):
        clients.train(_start, omega, p, setup.model, setup.num_classes, m.seed, setup.device)
    with timer.phase("broadcast"):
        received = fed.broadcast(0, BROADCAST_MESSAGE, {**omega, "proxies": S})

    for r in setup.rounds("fedspray"):
        omega_r = {n: v.to(device) for n, v in received.items() if n != "proxies"}
        S_r = received["proxies"].to(device)
        with timer.phase("local_train"):
            clients.train(_phase1, omega_r, S_r)
        with timer.phase("evaluate"):
            clients.evaluate(setup.tracker, r, _predict, predict_on=_predict_on)
        with timer.phase("local_train"):
            clients.train(_phase2, S_r)
        with timer.phase("client_upload"):  # in process; on actors each message is made when its sum starts
            encoder_up, proxy_up = clients.uploads(_encoder_upload), clients.uploads(_proxy_upload)
        encoder_sums = guard_denominators(fed.dp, ENCODER_MESSAGE, fed.aggregate(r, ENCODER_MESSAGE, encoder_up))
        proxy_sums = guard_denominators(fed.dp, PROXY_MESSAGE, fed.aggregate(r, PROXY_MESSAGE, proxy_up))
        with timer.phase("server_update"):
            omega, S = server_update(encoder_sums, proxy_sums, {n: received[n] for n in omega}, received["proxies"])
        with timer.phase("broadcast"):
            received = fed.broadcast(r, BROADCAST_MESSAGE, {**omega, "proxies": S})


__all__ = ["ENCODER", "ENCODER_MESSAGE", "PROXY_MESSAGE", "BROADCAST_MESSAGE", "FedSprayClient", "run_fedspray",
           "server_update"]
