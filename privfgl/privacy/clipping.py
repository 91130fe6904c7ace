"""Norm clipping: the step that turns a declared bound into a sensitivity.

clip_vector scales a whole vector (or a dict of tensors, jointly) to norm ≤ bound; clip_rows does
the same row by row (x [n, d]: each x_i gets ||x_i|| ≤ bound). `norm` is 1 or 2 (the L1 bound is
what the Laplace mechanism needs, the L2 bound the Gaussian's). Vectors already within the bound
are returned unchanged; all results are float64.
"""
from __future__ import annotations

import torch

NORMS = (1, 2)


def _check(bound: float, norm: int) -> None:
    if not bound > 0:
        raise ValueError(f"clip bound must be > 0, got {bound}")
    if norm not in NORMS:
        raise ValueError(f"clip norm must be 1 or 2, got {norm}")


def _factor(norms: torch.Tensor, bound: float) -> torch.Tensor:
    """min(1, bound / norm), with 1 for zero vectors."""
    return torch.clamp(bound / norms.clamp(min=torch.finfo(norms.dtype).tiny), max=1.0)


def clip_vector(x: torch.Tensor, bound: float, norm: int = 2) -> torch.Tensor:
    """x (any shape) scaled so that its L`norm` norm over all entries is ≤ bound."""
    _check(bound, norm)
    x = x.double()
    return x * _factor(torch.linalg.vector_norm(x, ord=norm), bound)


def clip_rows(x: torch.Tensor, bound: float, norm: int = 2) -> torch.Tensor:
    """x [n, ...]: every row x_i scaled so that ||x_i||_norm ≤ bound."""
    _check(bound, norm)
    x = x.double()
    flat = x.reshape(x.shape[0], x.shape[1:].numel())
    factor = _factor(torch.linalg.vector_norm(flat, ord=norm, dim=1), bound)
    return (flat * factor[:, None]).reshape(x.shape)


def clip_tensors(tensors: dict[str, torch.Tensor], bound: float, norm: int = 2) -> dict[str, torch.Tensor]:
    """Named tensors clipped jointly, as one concatenated vector, to L`norm` ≤ bound."""
    _check(bound, norm)
    if not tensors:
        return {}
    total = torch.linalg.vector_norm(torch.cat([t.double().reshape(-1) for t in tensors.values()]), ord=norm)
    factor = _factor(total, bound)
    return {name: t.double() * factor for name, t in tensors.items()}
