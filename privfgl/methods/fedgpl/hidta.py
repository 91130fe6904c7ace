"""HiDTA (spec B.5, B.7): task-level transferability τ and the combination of Eq. 7 from task-group
sums only. Flat parameter vectors θ = (prompt, head) per client; tasks t = 0..T-1.

Eq. 5 on task models: τ_{t←s} = ⟨θ'_t − θ_t, θ'_s − θ_t⟩ / ||θ'_t − θ_t||, θ_t the task model the
server sent at the round's start and θ'_t the mean of task t's clients after local training (for
s = t this is ||θ'_t − θ_t||; the authors' code uses ||θ'_t|| there: mode="code"). Negative τ are
set to 0 and each row is normalised to sum to 1 (as the code does).

Eq. 6's client factors c_j = 1 − sigmoid(||θ_j − θ'_{t(j)}||) cancel in Eq. 7 (B.7): every client
of task t gets θ_t^new = Σ_q τ_{t←q} S_q / Σ_q τ_{t←q} C_q with S_q = Σ_{j∈q} c_j θ_j and
C_q = Σ_{j∈q} c_j, two secure task-group sums. Mode "code" drops c_j and uses
θ_t^new = Σ_q τ̂_{t←q} θ'_q.
"""
from __future__ import annotations

import torch


def transferability(now: torch.Tensor, start: torch.Tensor, mode: str = "paper") -> torch.Tensor:
    """now, start [T, P] (task models after / before local training) -> τ̂ [T, T], rows summing to 1."""
    delta = now - start                                          # [T, P]: θ'_t − θ_t
    norms = delta.norm(dim=1).clamp_min(1e-12)                   # [T]
    tau = ((now.unsqueeze(0) - start.unsqueeze(1)) * delta.unsqueeze(1)).sum(-1) / norms.unsqueeze(1)  # [t, s]
    if mode == "code":
        tau.diagonal().copy_(now.norm(dim=1))
    tau = tau.clamp_min(0.0)
    rows = tau.sum(1, keepdim=True)
    identity = torch.eye(len(tau), dtype=tau.dtype)
    return torch.where(rows > 0, tau / rows.clamp_min(1e-300), identity)


def client_factor(theta: torch.Tensor, task_model: torch.Tensor) -> float:
    """c_j = 1 − sigmoid(||θ_j − θ'_{t(j)}||) (Eq. 6), computed by client j on its own parameters."""
    return float(1.0 - torch.sigmoid((theta - task_model).norm()))


def combine(tau: torch.Tensor, weighted_sums: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """τ̂ [T, T], S [T, P], C [T] -> the new task models [T, P]: Σ_q τ̂_{t←q} S_q / Σ_q τ̂_{t←q} C_q."""
    return (tau @ weighted_sums) / (tau @ weights).clamp_min(1e-300).unsqueeze(1)
