"""Label distribution from FedOMD's "model_update" (n_i·W_i and n_i; privfgl.methods.fedomd).

FedOMD clients take one Adam step per round from the global model. In round 0 the optimizer is
fresh and the last GCNConv's bias starts at zero, so the bias moves by Δb_c ≈ −lr·sign(g_c) with
g_c = mean over the training nodes of (softmax_c − 1[y = c]) (the CMD and L_ortho terms do not
reach that bias): Δb_c > 0 exactly for the classes whose training-label fraction exceeds the
model's mean prediction. Adam's first step leaks only these signs, so the estimate is uniform over
the classes with Δb_c > 0 (all classes when none is). On the revealed aggregate (a secure
protocol), Δb is the n-weighted mean of the clients' signs and clamp(Δb, 0) gives the global
estimate. Later rounds mix Adam's moment estimates; the same rule is then only a heuristic.
"""
from __future__ import annotations

import torch

from attacks.uploads.updates import ObservedUpdate

LAST_BIAS = "last.bias"  # privfgl.models.ortho_gcn.OrthoGCN: GCNConv(hidden -> classes) as `last`


def fedomd_label_distribution(update: ObservedUpdate) -> torch.Tensor:
    """Estimated label distribution [C] (sums to 1) from one FedOMD update."""
    if LAST_BIAS not in update.before:
        raise KeyError(f"no {LAST_BIAS} in the observed FedOMD model")
    step = (update.after[LAST_BIAS] - update.before[LAST_BIAS]).double().clamp(min=0)
    if float(step.sum()) <= 0:
        return torch.full_like(step, 1.0 / step.numel())
    return step / step.sum()
