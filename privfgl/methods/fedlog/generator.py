"""Neighbour generators (spec A.6): each client pretrains NG_k: R^d -> R^d once, on its training
nodes, to produce one neighbour feature vector that stands in for a node's neighbourhood:

    L_feat = mean_v ||NG_k(x_v) − x̄_N(v)||²                   (Eq. 9; x̄_N(v): mean 1-hop neighbour feature)
    L_grad = (1/N) Σ_n ||∇θ_n l(θ_n; G^syn) − ∇θ_n l(θ_n; G_k)||²  (Eq. 10; N random GraphSAGE + Linear)
    L_NG = L_feat + w·L_grad                                     (Eq. 11)

Each epoch evaluates L_grad on `generator_gnns_per_epoch` of the N nets, in turn (epoch e uses nets
e·m .. e·m+m−1 mod N): an unbiased estimate of Eq. 10's average over all N at m/N of the cost
(m = N is Eq. 10 exactly; measured on Cora, all 20 nets cost 0.7 s per epoch per client, and L_grad
is ~300× smaller than L_feat).

G^syn pairs every training node v with its generated neighbour (one undirected edge); the real
gradient is taken once per random GNN on the whole local graph ([C]). The pretrained weights are
cached on disk per client data, settings and seed ($PRIVFGL_CACHE/fedlog)."""
from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn.models import GraphSAGE
from torch_geometric.utils import scatter

from privfgl.methods.fedlog.params import FedLoGParams, generator_widths


class NeighbourGenerator(nn.Module):
    """MLP d -> widths... -> d, ReLU after each hidden layer, dropout before the output layer only,
    tanh output ([C]'s Gen: relu(fc1), relu(fc2), dropout, tanh(fc_flat))."""

    def __init__(self, dim: int, widths: tuple[int, ...], dropout: float):
        super().__init__()
        layers: list[nn.Module] = []
        for a, b in zip((dim, *widths[:-1]), widths):
            layers += [nn.Linear(a, b), nn.ReLU()]
        layers += [nn.Dropout(dropout), nn.Linear(widths[-1], dim), nn.Tanh()]
        self.mlp = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(x)


def new_generator(dim: int, p: FedLoGParams, seed: int) -> NeighbourGenerator:
    """Every client starts from the same generator (a server-broadcast seed; spec A.12.6). The
    global RNG is left as it was."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return NeighbourGenerator(dim, generator_widths(p), p.generator_dropout)


def untrained_class_generators(dim: int, num_classes: int, p: FedLoGParams, seed: int) -> dict[int, NeighbourGenerator]:
    """`generators=code`: the class generators the authors' clients use (spec A.12.5): one per class,
    freshly initialised (one after another from `seed`, the same on every client, as [C]'s one Client
    object is copied into each client process), never trained and left in training mode, so each use
    draws new dropout from the caller's RNG. Nothing of them crosses the network."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        gens = {c: NeighbourGenerator(dim, generator_widths(p), p.generator_dropout) for c in range(num_classes)}
    for gen in gens.values():
        gen.requires_grad_(False)
    return gens


def flat_params(module: nn.Module) -> torch.Tensor:
    return torch.cat([v.detach().reshape(-1) for v in module.state_dict().values()])


def load_flat(module: nn.Module, flat: torch.Tensor) -> None:
    state, i = module.state_dict(), 0
    for name, v in state.items():
        state[name] = flat[i:i + v.numel()].view_as(v).to(v.dtype)
        i += v.numel()
    module.load_state_dict(state)


def _random_gnn(dim: int, num_classes: int, p: FedLoGParams) -> nn.Module:
    return nn.ModuleDict({"gnn": GraphSAGE(dim, p.hidden, num_layers=2, out_channels=p.embed_dim, dropout=0.0),
                          "head": nn.Linear(p.embed_dim, num_classes)})


def _loss(net: nn.Module, x: torch.Tensor, edge_index: torch.Tensor, rows: torch.Tensor, y: torch.Tensor):
    return F.cross_entropy(net["head"](net["gnn"](x, edge_index))[rows], y)


def pretrain_generator(x: torch.Tensor, edge_index: torch.Tensor, y: torch.Tensor, train_mask: torch.Tensor,
                       num_classes: int, p: FedLoGParams, seed: int) -> tuple[torch.Tensor, dict]:
    """Client-side: NG_k's flat weights after P epochs of L_NG, and {"losses": [L_feat, L_grad] per epoch}.
    Its randomness (random nets, dropout) is seeded here and the global RNG is left as it was, so a
    run is the same whether the generator came from the cache or not."""
    with torch.random.fork_rng():
        return _pretrain(x, edge_index, y, train_mask, num_classes, p, seed)


def _pretrain(x, edge_index, y, train_mask, num_classes: int, p: FedLoGParams, seed: int) -> tuple[torch.Tensor, dict]:
    n = x.shape[0]
    gen = new_generator(x.shape[1], p, seed)
    train = train_mask.nonzero().view(-1)
    src, dst = edge_index
    nbr_mean = scatter(x[src], dst, dim=0, dim_size=n, reduce="mean")
    has_nbr = torch.bincount(dst, minlength=n)[train] > 0
    target = nbr_mean[train]
    m = train.numel()
    pair_edges = torch.stack([torch.cat([torch.arange(m), torch.arange(m) + m]),
                              torch.cat([torch.arange(m) + m, torch.arange(m)])])
    torch.manual_seed(seed + 1)
    nets = [_random_gnn(x.shape[1], num_classes, p) for _ in range(p.generator_gnns)] if p.generator_grad_weight else []
    real = [torch.autograd.grad(_loss(net, x, edge_index, train, y[train]), list(net.parameters())) for net in nets]
    opt = torch.optim.Adam(gen.parameters(), lr=p.generator_lr)
    losses = []
    for e in range(p.generator_epochs):
        opt.zero_grad()
        fake = gen(x[train])
        l_feat = ((fake - target) ** 2).sum(1)[has_nbr].mean() if bool(has_nbr.any()) else fake.sum() * 0
        l_grad = fake.sum() * 0
        pair_x = torch.cat([x[train], fake])
        chosen = [(e * p.generator_gnns_per_epoch + j) % len(nets) for j in range(p.generator_gnns_per_epoch)] \
            if nets else []
        for i in chosen:
            net, g_real = nets[i], real[i]
            g_syn = torch.autograd.grad(_loss(net, pair_x, pair_edges, torch.arange(m), y[train]),
                                        list(net.parameters()), create_graph=True)
            l_grad = l_grad + sum(((a - b) ** 2).sum() for a, b in zip(g_syn, g_real)) / len(chosen)
        (l_feat + p.generator_grad_weight * l_grad).backward()
        opt.step()
        losses.append([l_feat.item(), l_grad.item()])
    return flat_params(gen), {"losses": losses}


def cache_dir() -> Path:
    base = os.environ.get("PRIVFGL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "privfgl")
    return Path(base) / "fedlog"


def _digest(*parts) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.contiguous().numpy().tobytes() if isinstance(part, torch.Tensor) else repr(part).encode())
    return h.hexdigest()[:16]


GENERATOR_FORM = 2  # the architecture's version in the cache key (2: one dropout, before the output layer, as [C])
_GENERATOR_KEYS = ("hidden", "embed_dim", "generator_hidden", "generator_epochs", "generator_gnns", "generator_lr",
                   "generator_dropout", "generator_grad_weight", "generator_gnns_per_epoch")


def pretrained_generator(x: torch.Tensor, edge_index: torch.Tensor, y: torch.Tensor, train_mask: torch.Tensor,
                         num_classes: int, p: FedLoGParams, seed: int) -> tuple[torch.Tensor, dict]:
    """pretrain_generator, cached on disk by a digest of the client's data, the generator settings and
    the seed (a private cache of the client: it holds that client's generator only). A hit loads."""
    key = _digest(x, edge_index, y, train_mask, num_classes, seed, GENERATOR_FORM,
                  [getattr(p, k) for k in _GENERATOR_KEYS])
    path = cache_dir() / f"generator-{key}.pt"
    if path.exists():
        saved = torch.load(path)
        return saved["weights"], {**saved["info"], "cache": "hit"}
    start = time.perf_counter()
    weights, info = pretrain_generator(x, edge_index, y, train_mask, num_classes, p, seed)
    info = {**info, "seconds": time.perf_counter() - start}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    torch.save({"weights": weights, "info": info}, tmp)
    os.replace(tmp, path)
    return weights, {**info, "cache": "miss"}
