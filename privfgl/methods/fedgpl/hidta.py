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

`transferability_shared` is the same τ̂ computed on CrypTen secret shares of the task models
(`--method-param tau_in=crypten`, B.7 option (b)); only τ̂ is opened to the server.
"""
from __future__ import annotations

import torch

from protocols import crypten_compat


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


# Secure τ̂ (`transferability_shared`). Fixed point has a narrow range (2^-16 resolution), so every positive
# quantity that CrypTen's Newton-Raphson sqrt or reciprocal sees is first scaled into [1, 4) by a power of 4
# found with secure comparisons against 4^e, e in a range of exponents: the code-mode diagonal from 4^-8 =
# 2^-16 up, the row sums from 4^-4 = 2^-8 up (a row below that is taken as empty, the identity row: an
# unchanged task's row is 0 up to the truncation noise of a few fixed-point steps per entry).
DIAGONAL_POW4 = tuple(range(-8, 16))
ROW_POW4 = tuple(range(-4, 16))
MPC_CONFIG = {"functions.sqrt_nr_iters": 6, "functions.reciprocal_nr_iters": 12,
              "functions.reciprocal_all_pos": True}  # on [1, 4): well inside both methods' ranges


def _exponent(x, exps: tuple[int, ...], precision_bits: int = 16):
    """x shared [n] >= 0 -> (ind [n, m]: one-hot over exps of the e with 4^e <= x < 4^(e+1) (the last e for
    anything larger), all zero where x < 4^exps[0]; below [n]: 1 there, else 0). One batch of secure
    comparisons against the powers of two 4^e (crypten_compat.at_least_powers_of_two)."""
    b = crypten_compat.at_least_powers_of_two(x, [precision_bits + 2 * e for e in exps])  # x >= 4^e: a prefix of ones
    ind = torch.cat([b[:, :-1] - b[:, 1:], b[:, -1:]], dim=1)
    return ind, 1 - b[:, 0]


def _times_pow4(values, ind, exps: tuple[int, ...]):
    """values shared [n, k], ind [n, m] from `_exponent` -> values[i] · 4^-e(i) (0 where ind's row is 0).
    Each candidate values·4^-e is exact-scale fixed point (× an integer, or ÷ one by CrypTen's truncation);
    a candidate that overflows is multiplied by an exact 0."""
    v = values.unsqueeze(2)
    parts = []
    up = [e for e in exps if e < 0]
    if up:
        parts.append(v * torch.tensor([4.0 ** -e for e in up], dtype=torch.float64))
    if 0 in exps:
        parts.append(v)
    down = [e for e in exps if e > 0]
    if down:
        parts.append(v.div(torch.tensor([4 ** e for e in down], dtype=torch.int64)))
    candidates = torch.cat(parts, dim=2)                       # [n, k, m]
    return (candidates * ind.unsqueeze(1)).sum(2)


def _pow2(ind, exps: tuple[int, ...]):
    """2^e(i) [n] as a shared value (exact: a public power of two times a 0/1 indicator)."""
    return (ind * torch.tensor([2.0 ** e for e in exps], dtype=torch.float64)).sum(1)


def transferability_shared(now, start, mode: str = "paper", precision_bits: int = 16):
    """`transferability` on secret shares, run by every party (CrypTen is SPMD). now: the task models θ'_t as
    a CrypTen shared tensor [T, P] (the secure sum of the clients' pre-weighted uploads); start: θ_t [T, P],
    a public torch tensor when the server knows it (paper mode: it computed it), else shared too (code
    mode: only the clients hold it). Returns τ̂ [T, T] as a shared tensor.

    Row t of Eq. 5 is computed times ||θ'_t − θ_t|| (the normalisation cancels any positive factor of a
    row): d_ts = ⟨θ'_t − θ_t, θ'_s − θ_t⟩ by one Beaver matmul, and in code mode the diagonal
    ||θ'_t|| · ||θ'_t − θ_t|| by CrypTen's sqrt of each square, scaled into [1, 4) by a secure power of 4
    (never their product: CrypTen's truncation fails with probability about |x|·2^(2p-64) on a product x,
    so no intermediate is made larger than the norms themselves). Then the clip (relu, a secure
    comparison) and the row normalisation by CrypTen's reciprocal of the row sum, scaled into [1, 4) the
    same way; a row summing below 4^-4 = 2^-8 (in paper
    mode ||θ'_t − θ_t|| < 1/16: no change beyond the fixed-point noise) becomes the identity row, as an
    all-zero row does in the clear."""
    T = now.size(0)
    idx = torch.arange(T)
    if torch.is_tensor(start):
        scale = float(1 << precision_bits)
        start = torch.round(start.to(torch.float64) * scale) / scale  # on the fixed-point grid (CrypTen truncates)
        delta = now - start                                           # θ'_t − θ_t
        base = delta.matmul(start.t())[idx, idx]                      # ⟨θ'_t − θ_t, θ_t⟩ [t]
        d = delta.matmul(now.t()) - base.unsqueeze(1)                 # ⟨θ'_t − θ_t, θ'_s − θ_t⟩ [t, s]
        start_sq = start.pow(2).sum(1)                                # ||θ_t||², public
    else:
        delta = now - start
        g = torch.cat([delta, start]).matmul(torch.cat([now, start]).t())  # one Beaver matmul [2T, 2T]
        base = g[idx, T + idx]
        d = g[:T, :T] - base.unsqueeze(1)
        start_sq = g[T + idx, T + idx]
    if mode == "code":
        sq = d[idx, idx]                                              # ||θ'_t − θ_t||²
        squares = torch.cat([sq + base * 2 + start_sq, sq])           # ||θ'_t||², ||θ'_t − θ_t||² [2T]
        ind, _ = _exponent(squares, DIAGONAL_POW4, precision_bits)
        roots = (_times_pow4(squares.unsqueeze(1), ind, DIAGONAL_POW4).squeeze(1).sqrt()
                 * _pow2(ind, DIAGONAL_POW4))                         # ||θ'_t||, ||θ'_t − θ_t||
        d[idx, idx] = roots[:T] * roots[T:]
    tau = d.relu()
    rows = tau.sum(1)
    ind, empty = _exponent(rows, ROW_POW4, precision_bits)
    tau = _times_pow4(tau, ind, ROW_POW4)                             # rows now sum to [1, 4), or 0 if empty
    out = tau * (tau.sum(1) + empty).reciprocal().unsqueeze(1)
    out[idx, idx] = out[idx, idx] + empty
    return out
