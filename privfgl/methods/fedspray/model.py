"""FedSpray's local models of one client: its personalised GNN f(θ^(k)) and its copy of the
feature-structure encoder g(ω) = (g_e, g_c, g_p), in the stacked layout of privfgl.models.stacked with
one client (a leading dimension [1, ...]; weights transposed, [1, in, out]) over the client's BlockGraph.
Parameter names are the PyG/torch ones ("convs.0.lin.weight", "embedding.weight", ...), so
`from_stacked(name, params[name][0])` is the tensor in PyG layout.

The GNN's forward pass is privfgl.models.stacked.stacked_forward.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from privfgl.models.stacked import BlockGraph, to_stacked
from privfgl.training import ModelConfig, init_params

Params = dict[str, torch.Tensor]
ENCODER = ("embedding", "classifier", "projector")  # g_e, g_c, g_p: one linear layer each


# ---- the personalised GNN ------------------------------------------------------------------------
def init_gnn(cfg: ModelConfig, in_dim: int, num_classes: int, k: int, seed: int, kind: str,
             device: torch.device) -> Params:
    """Client k's own GNN, stacked as one client ([1, ...]). kind "glorot": PyG's initialisation (from seed
    `seed`·1000 + k); "uniform": every parameter U(0, 1) (the authors' code). The process's global RNG is
    left as it was (a client step draws from no shared stream)."""
    with torch.random.fork_rng(devices=[]):
        params = init_params(cfg, in_dim, num_classes, seed=seed * 1000 + k)
    if kind == "uniform":
        g = torch.Generator().manual_seed(seed * 1000 + k)
        params = {n: torch.rand(v.shape, generator=g) for n, v in params.items()}
    return {n: to_stacked(n, v.unsqueeze(0)).to(device).requires_grad_(True) for n, v in params.items()}


# ---- the feature-structure encoder ----------------------------------------------------------------
def init_encoder(in_dim: int, proxy_dim: int, num_classes: int, seed: int, head_init: str = "fan_in") -> Params:
    """ω_0 in PyG/torch Linear layout ([out, in] weights), every weight and bias uniform: g_e
    U(±1/√d_s) (the authors' code); g_c and g_p U(±1/√d_s) with head_init "fan_in" (torch's Linear
    default, fan-in d_s; the paper states none) or U(±1/√d_c) with "fan_out" (the authors' MLPLayer,
    whose bound is 1/√(output size))."""
    g = torch.Generator().manual_seed(seed)
    head_bound = 1.0 / math.sqrt(num_classes if head_init == "fan_out" else proxy_dim)
    shapes = {"embedding": (proxy_dim, in_dim), "classifier": (num_classes, proxy_dim),
              "projector": (num_classes, proxy_dim)}
    out = {}
    for name in ENCODER:
        o, i = shapes[name]
        bound = 1.0 / math.sqrt(proxy_dim) if name == "embedding" else head_bound
        out[f"{name}.weight"] = (torch.rand((o, i), generator=g) * 2 - 1) * bound
        out[f"{name}.bias"] = (torch.rand((o,), generator=g) * 2 - 1) * bound
    return out


def initial_proxies(num_classes: int, proxy_dim: int) -> torch.Tensor:
    """S_0[c] = 0.01·c·1 (the authors' code; identical on every party, so nothing is sent for it)."""
    return 0.01 * torch.arange(num_classes, dtype=torch.float32)[:, None].expand(num_classes, proxy_dim).clone()


def stack_encoder(omega: Params, device: torch.device) -> Params:
    """A client's trainable copy of ω, stacked as one client ([1, ...])."""
    return {n: to_stacked(n, v).to(device).unsqueeze(0).clone().requires_grad_(True) for n, v in omega.items()}


def load_encoder(stacked: Params, omega: Params) -> None:
    """Overwrite the client's copy with ω (in place: an optimizer over `stacked` keeps its state)."""
    with torch.no_grad():
        for n, v in stacked.items():
            v.copy_(to_stacked(n, omega[n]).to(v).expand_as(v))


def embed(omega: Params, graph: BlockGraph) -> torch.Tensor:
    """e_i = ReLU(g_e(x_i)) [N, d_s]."""
    return F.relu(graph.input_linear(graph.x, omega["embedding.weight"], "in:x") + graph.bias(omega["embedding.bias"]))


def head(omega: Params, name: str, h: torch.Tensor, graph: BlockGraph) -> torch.Tensor:
    """Logits of g_c ("classifier") or g_p ("projector") on rows h [N, d_s] -> [N, C]."""
    return graph.linear(h, omega[f"{name}.weight"]) + graph.bias(omega[f"{name}.bias"])
