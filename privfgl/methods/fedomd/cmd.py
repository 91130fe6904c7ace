"""Central moment discrepancy (CMD, Zellinger et al. 2017) for FedOMD (spec B1.2, B5 #4, #6).

For one hidden layer's outputs Z [n, d] of a client and the federation's detached statistics
(global mean M [d], pooled central moments S_j [d], j = 2..K):

    d = ||mean(Z) − M||_2 + Σ_{j=2..K} ||mean((Z − mean(Z))^j) − S_j||_2

(b − a = 1: no scaling, as the standard CMD code). FedOMD sums d over the hidden layers.

Options (FedOMDParams `cmd_scale`, `cmd_norm`): with a per-dimension scale σ (detached), every
term is measured in units of σ: ||(mean(Z) − M)/σ|| + Σ_j ||(C_j − S_j)/σ^j||, i.e. the CMD of
Z/σ against the statistics of the pooled Z/σ (`cmd_scale=std`: σ = sqrt(S_2), the revealed global
standard deviation per unit; `cmd_scale=rms`: one σ per layer, sqrt(mean over units of S_2); no
extra communication). `cmd_scale=bound` clamps Z into [0, b] before any
statistic and uses σ = b (Zellinger's 1/(b − a)^j with a = 0). `norm="squared"` squares every
norm. The
uploads are SUMS, never means: Σ_m Z(m) (with n) for the global mean, and Σ_m (Z(m) − M)^j about
the revealed global mean for the moments; the server divides by Σ n after the reveal, so S_j is the
exact central moment of the union of all clients' hidden outputs.
"""
from __future__ import annotations

import torch
from torch import Tensor


def orders(max_order: int) -> range:
    """The central-moment orders 2..max_order (the mean is order 1)."""
    return range(2, max_order + 1)


def hidden_sums(hidden: list[Tensor]) -> dict[str, Tensor]:
    """Upload #1 of a client: {"z{l}": Σ_m Z^l(m)} float64 [d] per hidden layer l = 1..L−1."""
    return {f"z{l}": z.detach().double().sum(0) for l, z in enumerate(hidden, start=1)}


def moment_sums(hidden: list[Tensor], global_mean: dict[str, Tensor], max_order: int) -> dict[str, Tensor]:
    """Upload #2 of a client: {"z{l}_m{j}": Σ_m (Z^l(m) − M^l)^j} float64 [d], about the revealed
    global mean M^l, for j = 2..max_order."""
    out = {}
    for l, z in enumerate(hidden, start=1):
        centred = z.detach().double() - global_mean[f"z{l}"].double()
        power = centred
        for j in orders(max_order):
            power = power * centred
            out[f"z{l}_m{j}"] = power.sum(0)
    return out


def global_statistics(sums: dict[str, Tensor], total: float) -> dict[str, Tensor]:
    """Server side, after a reveal: every summed field divided by the total node count."""
    if total <= 0:
        raise ValueError(f"fedomd: the revealed node count is {total}; cannot form means")
    return {name: s / total for name, s in sums.items()}


NORMS = ("l2", "squared")
SCALES = ("none", "std", "rms", "bound")
STD_FLOOR = 1e-3  # σ = max(sqrt(S_2), STD_FLOOR): a unit that is (almost) dead everywhere is not blown up


def _norm(v: Tensor, norm: str) -> Tensor:
    n = torch.linalg.vector_norm(v)
    return n * n if norm == "squared" else n


def cmd_layer(z: Tensor, global_mean: Tensor, global_moments: list[Tensor], scale: Tensor | None = None,
              norm: str = "l2") -> Tensor:
    """CMD of one layer's outputs z [n, d] (gradient flows through z) against the detached global
    mean [d] and global central moments [d] of orders 2, 3, ... (one tensor per order); with
    `scale` σ ([d] or a number, detached) the order-j term is divided element-wise by σ^j."""
    mean = z.mean(0)
    centred = z - mean
    inv = None if scale is None else 1.0 / torch.as_tensor(scale).to(z).detach()
    unit = inv
    diff = mean - global_mean.to(z)
    total = _norm(diff if unit is None else diff * unit, norm)
    power = centred
    for s in global_moments:
        power = power * centred
        diff = power.mean(0) - s.to(z)
        if inv is not None:
            unit = unit * inv
            diff = diff * unit
        total = total + _norm(diff, norm)
    return total


def layer_scale(global_moments: dict[str, Tensor], layer: int, cmd_scale: str, bound: float) -> Tensor | float | None:
    """σ of layer `layer` for `cmd_scale`: None (spec), the revealed global std, or the bound b."""
    if cmd_scale == "std":
        return global_moments[f"z{layer}_m2"].detach().clamp_min(0).sqrt().clamp_min(STD_FLOOR)
    if cmd_scale == "rms":
        return global_moments[f"z{layer}_m2"].detach().clamp_min(0).mean().sqrt().clamp_min(STD_FLOOR)
    if cmd_scale == "bound":
        return float(bound)
    return None


def cmd(hidden: list[Tensor], global_mean: dict[str, Tensor], global_moments: dict[str, Tensor],
        max_order: int, cmd_scale: str = "none", norm: str = "l2", bound: float = 1.0) -> Tensor:
    """Σ over hidden layers of `cmd_layer` with the revealed statistics ("z{l}", "z{l}_m{j}")."""
    total = hidden[0].new_zeros(())
    for l, z in enumerate(hidden, start=1):
        moments = [global_moments[f"z{l}_m{j}"].detach() for j in orders(max_order)]
        total = total + cmd_layer(z, global_mean[f"z{l}"].detach(), moments,
                                  layer_scale(global_moments, l, cmd_scale, bound), norm)
    return total
