"""Local training engines: every client's own model and optimizer, trained on its own subgraph.

Two engines with one interface (`LocalTrainers`):
- `LoopedTrainers`: one PyG model and one Adam per client, trained in a Python loop. Any backbone.
- `StackedTrainers`: all clients at once with stacked parameters over a block-diagonal graph
  (privfgl.models.stacked). Same mathematics, one kernel per layer instead of K; GCN/SAGE/SGC/MLP.

Client k's parameters are read and written only through index k, and a client's loss depends only
on its own nodes, so the engines are interchangeable (tests/test_training.py checks they agree).
"""
from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch_geometric.data import Data

from privfgl.federation.client_steps import global_rng
from privfgl.models import build_model
from privfgl.models.stacked import (STACKABLE, BlockGraph, BlockGraphs, from_stacked, stacked_forward, stacked_predict,
                                    to_stacked)

Params = dict[str, torch.Tensor]
ENGINES = ("auto", "stacked", "looped")
OPTIMIZERS = ("adam", "sgd")


@dataclass(frozen=True)
class ModelConfig:
    """The local model and its optimizer: Adam (default) or plain SGD (no momentum; one SGD step
    moves the weights by −lr·(∇ + weight_decay·w), which gradient-inversion audits rely on)."""
    model: str = "gcn"
    hidden: int = 64
    layers: int = 2
    dropout: float = 0.5
    lr: float = 0.01
    weight_decay: float = 5e-4
    optimizer: str = "adam"


def init_params(cfg: ModelConfig, in_dim: int, num_classes: int, seed: int) -> Params:
    """Freshly initialised parameters of one model (PyG's own initialisation), seeded."""
    torch.manual_seed(seed)
    model = build_model(cfg.model, in_dim, cfg.hidden, num_classes, cfg.layers, cfg.dropout)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


class LocalTrainers(ABC):
    """The clients' local models. Shapes: Params map PyG parameter names to tensors."""

    num_clients: int

    @abstractmethod
    def get_params(self, k: int) -> Params:
        """A detached copy of client k's parameters."""

    @abstractmethod
    def set_params(self, k: int, params: Params) -> None:
        """Overwrite client k's parameters (optimizer state is kept, as in OpenFGL's clients)."""

    def set_all_params(self, params: Params) -> None:
        """Every client receives the same parameters (a broadcast)."""
        for k in range(self.num_clients):
            self.set_params(k, params)

    @abstractmethod
    def train(self, epochs: int, prox_mu: float = 0.0, anchors: list[Params] | None = None) -> None:
        """`epochs` full-batch steps on every client's training nodes; optional FedProx term
        (prox_mu / 2) * ||w_k - anchors[k]||^2."""

    @abstractmethod
    def predict(self) -> list[torch.Tensor]:
        """Eval-mode logits of every client's model on its own nodes: list of [n_k, C]."""

    @abstractmethod
    def predict_on(self, graphs: list[Data]) -> list[torch.Tensor]:
        """Eval-mode logits of client k's model on graphs[k] (x, edge_index; len K): list of [n_k, C]."""

    def evaluate(self, tracker, round: int, stage: str = "train") -> dict:
        """Every client's model evaluated on its own nodes into the tracker (privfgl.evaluation)."""
        return tracker.evaluate(round, self.predict(), stage=stage, predict_on=self.predict_on)

    def uploads(self, upload, received: Params, clients: list[Data]) -> list[Params]:
        """Every client's message: upload(k, its parameters, received, its data), client by client."""
        return [upload(k, self.get_params(k), received, clients[k]) for k in range(self.num_clients)]


def _optimizer(params, cfg: ModelConfig) -> torch.optim.Optimizer:
    """Adam with the fused kernel, or SGD (both element-wise, so one optimizer over stacked
    tensors is K optimizers)."""
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    if cfg.optimizer != "adam":
        raise ValueError(f"unknown optimizer {cfg.optimizer!r}; valid: {', '.join(OPTIMIZERS)}")
    return torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay, fused=True)


def dropout_seeds(seed: int, clients) -> list[int]:
    """Client k's own dropout stream seed, from the run's seed and k alone: a client draws the same masks
    whichever clients share its process (in-process, or a Ray actor hosting some of them)."""
    return [int(np.random.SeedSequence([seed, int(k), 0xD20]).generate_state(1)[0]) for k in clients]


def _client_losses_weights(clients: list[Data]) -> torch.Tensor:
    return torch.tensor([1.0 / max(int(c.train_mask.sum()), 1) for c in clients])


class LoopedTrainers(LocalTrainers):
    """One PyG model + Adam per client."""

    def __init__(self, clients: list[Data], cfg: ModelConfig, init: list[Params], device: str = "cpu",
                 seeds: list[int] | None = None):
        self.num_clients = len(clients)
        self.device = torch.device(device)
        # Per-client RNG states (CPU generator) for dropout; None: the global stream, client after client.
        self.rng = None if seeds is None else [torch.Generator().manual_seed(s).get_state() for s in seeds]
        num_classes = init[0][[n for n in init[0] if n.endswith("bias")][-1]].shape[-1]
        self.clients = [c.clone().to(self.device) for c in clients]  # Data.to is in-place
        self.models, self.optims = [], []
        for c, p in zip(self.clients, init):
            m = build_model(cfg.model, c.num_features, cfg.hidden, num_classes, cfg.layers, cfg.dropout).to(self.device)
            m.load_state_dict(p)
            self.models.append(m)
            self.optims.append(_optimizer(m.parameters(), cfg))

    def get_params(self, k: int) -> Params:
        return {n: v.detach().clone() for n, v in self.models[k].state_dict().items()}

    def set_params(self, k: int, params: Params) -> None:
        self.models[k].load_state_dict(params)

    def train(self, epochs: int, prox_mu: float = 0.0, anchors: list[Params] | None = None) -> None:
        for k, (c, m, opt) in enumerate(zip(self.clients, self.models, self.optims)):
            if not bool(c.train_mask.any()):
                continue
            m.train()
            with _client_rng(self.rng, k):
                self._train_one(k, c, m, opt, epochs, prox_mu, anchors)

    def _train_one(self, k, c, m, opt, epochs, prox_mu, anchors) -> None:
        for _ in range(epochs):
            opt.zero_grad()
            out = m(c.x, c.edge_index)
            loss = F.cross_entropy(out[c.train_mask], c.y[c.train_mask])
            if prox_mu and anchors is not None:
                loss = loss + 0.5 * prox_mu * sum(((p - anchors[k][n].to(p)) ** 2).sum()
                                                   for n, p in m.named_parameters())
            loss.backward()
            opt.step()

    @torch.no_grad()
    def predict(self) -> list[torch.Tensor]:
        outs = []
        for c, m in zip(self.clients, self.models):
            m.eval()
            outs.append(m(c.x, c.edge_index).cpu())
        return outs

    @torch.no_grad()
    def predict_on(self, graphs: list[Data]) -> list[torch.Tensor]:
        outs = []
        for g, m in zip(graphs, self.models, strict=True):
            m.eval()
            outs.append(m(g.x.to(self.device), g.edge_index.to(self.device)).cpu())
        return outs


@contextlib.contextmanager
def _client_rng(states: list[torch.Tensor] | None, k: int):
    """torch's global CPU generator set to client k's own state for the block, then restored (states: None:
    no change)."""
    if states is None:
        yield
        return
    with global_rng(states, k):
        yield


class StackedTrainers(LocalTrainers):
    """All clients at once: parameters [K, ...] over a block-diagonal graph, one Adam."""

    def __init__(self, clients: list[Data], cfg: ModelConfig, init: list[Params], device: str = "cpu",
                 seeds: list[int] | None = None):
        if cfg.model not in STACKABLE:
            raise ValueError(f"engine 'stacked' supports models {', '.join(STACKABLE)}, not {cfg.model!r}; "
                             "use --engine looped")
        self.num_clients = len(clients)
        self.cfg = cfg
        self.device = torch.device(device)
        self.graph = BlockGraph([c.x for c in clients], [c.edge_index for c in clients], self.device)
        if seeds is not None:  # client k's dropout masks from its own stream
            self.graph.generators = [torch.Generator(self.device).manual_seed(s) for s in seeds]
        cat = lambda name: torch.cat([getattr(c, name) for c in clients]).to(self.device)
        self.y, self.train_mask = cat("y"), cat("train_mask")
        self.train_idx = self.train_mask.nonzero().view(-1)
        self.loss_weight = _client_losses_weights(clients).to(self.device)[self.graph.client_of[self.train_idx]]
        self.params = {n: to_stacked(n, torch.stack([p[n] for p in init])).to(self.device).requires_grad_(True)
                       for n in init[0]}
        self.optim = _optimizer(self.params.values(), cfg)
        self.eval_graphs = BlockGraphs(self.device)

    def get_params(self, k: int) -> Params:
        return {n: from_stacked(n, v[k].detach()) if n.endswith("weight") else v[k].detach().clone()
                for n, v in self.params.items()}

    def set_params(self, k: int, params: Params) -> None:
        with torch.no_grad():
            for n, v in self.params.items():
                v[k].copy_(to_stacked(n, params[n]))

    def set_all_params(self, params: Params) -> None:
        with torch.no_grad():
            for n, v in self.params.items():
                v.copy_(to_stacked(n, params[n]).to(v).expand_as(v))

    def _forward(self, training: bool) -> torch.Tensor:
        return stacked_forward(self.cfg.model, self.params, self.graph, self.cfg.layers, self.cfg.dropout, training)

    def train(self, epochs: int, prox_mu: float = 0.0, anchors: list[Params] | None = None) -> None:
        if self.train_idx.numel() == 0:
            return
        anchor = None
        if prox_mu and anchors is not None:
            anchor = {n: to_stacked(n, torch.stack([a[n] for a in anchors])).to(self.device) for n in self.params}
        for _ in range(epochs):
            self.optim.zero_grad()
            out = self._forward(True)[self.train_idx]
            loss = (F.cross_entropy(out, self.y[self.train_idx], reduction="none") * self.loss_weight).sum()
            if anchor is not None:
                loss = loss + 0.5 * prox_mu * sum(((p - anchor[n]) ** 2).sum() for n, p in self.params.items())
            loss.backward()
            self.optim.step()

    @torch.no_grad()
    def predict(self) -> list[torch.Tensor]:
        out = self._forward(False).cpu()
        return self.graph.split(out)

    def predict_on(self, graphs: list[Data]) -> list[torch.Tensor]:
        if len(graphs) != self.num_clients:
            raise ValueError(f"predict_on: {len(graphs)} graphs for {self.num_clients} clients")
        return stacked_predict(self.cfg.model, self.params, self.eval_graphs.of(graphs), self.cfg.layers)


def make_trainers(clients: list[Data], cfg: ModelConfig, init: list[Params], engine: str = "auto",
                  device: str = "cpu", seeds: list[int] | None = None) -> LocalTrainers:
    """The engine `engine` (auto = stacked when the backbone allows it, else looped). seeds: each client's
    own dropout stream (``dropout_seeds``; None: torch's global generator, shared by the clients)."""
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; valid: {', '.join(ENGINES)}")
    if engine == "stacked" or (engine == "auto" and cfg.model in STACKABLE):
        return StackedTrainers(clients, cfg, init, device, seeds)
    return LoopedTrainers(clients, cfg, init, device, seeds)
