"""FedLoG's server steps (spec A.4), from revealed sums only (A.9): the clients pre-weight."""
from __future__ import annotations

import torch


def shared_classes(support: dict, min_contributors: int) -> torch.Tensor:
    """Classes whose global synthetic rows and generator are built: held (in training) by at least
    `min_contributors` clients and with Σ_k r_k^c > 0. bool [C]."""
    return (support["holders"].round().long() >= min_contributors) & (support["r"] > 0)


def global_model(sums: dict, previous: dict) -> dict:
    """φ = Σ_k w_k φ_k / Σ_k w_k (Eq. in A.4(a)); the previous model if no client has weight."""
    total = float(sums["n"])
    if total <= 0:
        return dict(previous)
    return {name: (sums[name] / total).to(previous[name].dtype) for name in previous}


def global_synthetic(x_head_sum: torch.Tensor, support: dict, shared: torch.Tensor, s: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. 7: x_g^(c,i) = Σ_k r_k^c x_k^(c,i) / Σ_k r_k^c for the shared classes with Σ_k r_k^c > 0
    (support["r"]: the sum's own Σ r, over the clients in it). Returns (X_g [s·n, d] float32, Y_g [s·n])."""
    classes = (shared & (support["r"] > 0)).nonzero().view(-1)
    rows = (classes[:, None] * s + torch.arange(s)).view(-1)
    y = classes.repeat_interleave(s)
    return (x_head_sum[rows] / support["r"][y][:, None]).float(), y


def class_generators(ng_sum: torch.Tensor, support: dict, shared: torch.Tensor) -> dict[int, torch.Tensor]:
    """Eq. 12: NG^c = Σ_k r_k^c NG_k / Σ_k r_k^c (parameter space) for the shared classes with Σ_k r_k^c > 0
    (support["r"]: the sum's own Σ r, over the clients in it). {c: flat [P]}."""
    return {int(c): (ng_sum[c] / support["r"][c]).float() for c in (shared & (support["r"] > 0)).nonzero().view(-1)}
