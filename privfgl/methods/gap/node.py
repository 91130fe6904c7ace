"""Node-level GAP (`unit=node`): the unit is one node of a client's graph (its features, its label and its
incident edges). After the authors' `gap_ndp.py`, with privfgl's own degree bound and per-node gradients.

1. Degree bound: B = privfgl.privacy.dpsgd.bound_degree(G, D) (local rule, stable ids: every node keeps at
   most D neighbours, symmetric). The hops aggregate over B.
2. Encoder and classifier train by full-batch DP-SGD (`private_step`): per-node gradients (torch.func),
   each clipped to C, their sum plus N(0, (σC)²), divided by the client's number of training nodes (taken
   as public, as dp-sgd does; the clients' uploads are averaged with uniform weights, not by that count). A
   node's per-node gradient depends on its own features and label (encoder), or on its own row of the
   cached hops and its own label (classifier): removing it removes one gradient, sensitivity C per step.
3. Hops: removing node w from B removes X_{k-1}[w] from the sums of its ≤ D neighbours (each by norm ≤ 1):
   L2 sensitivity √D per hop, given the previous releases. w's own row H_k[w] enters only w's own
   classifier gradient (step 2, covered by its clip) and the sums of w's neighbours at hop k+1 (covered
   by the √D there); it is not counted again (the authors' argument).
Every step and hop is one Gaussian release of the same noise multiplier σ at rate 1; the
encoder_rounds·local_epochs + K + rounds·local_epochs releases are composed by one opacus accountant, σ
the smallest giving the target ε.

What the √D assumes (as dp-sgd, privfgl/privacy/dpsgd.py): that removing w adds no edge to the bounded
graph. A neighbour u of w with more than D neighbours may "refill" after w leaves (keep its (D+1)-th
neighbour instead), moving two more rows; the noise does not cover those. On a graph of max degree ≤ D
nothing refills. Xiang et al. (S&P 2024) dispute GAP's node-level guarantee; the record's `assumption`
says what this one rests on.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap

from privfgl.privacy.dpsgd import SparseRows, private_gradient
from privfgl.privacy.mechanisms import GaussianMechanism
from privfgl.privacy.noise import NoiseSource

ASSUMPTION = ("the per-hop sensitivity sqrt(D) holds for removals that add no edge to the locally degree-bounded "
              "graph (every graph of max degree <= D); a neighbour of the removed node with more than D "
              "neighbours can refill an edge, which the noise does not cover (privfgl/privacy/dpsgd.py); the "
              "removed node's own hop rows are covered by its own clipped classifier gradient only")


def per_node_grads(model: torch.nn.Module, params: dict[str, torch.Tensor], inputs, y: torch.Tensor
                   ) -> dict[str, torch.Tensor]:
    """Each node's cross-entropy gradient: inputs [T, f] (or a list of [T, h], one per hop), y [T] ->
    {name: [T, *shape]}. Dropout draws differ per node."""
    listed = isinstance(inputs, (list, tuple))

    def loss(p, x, yi):
        batch = [t[None] for t in x] if listed else x[None]
        return F.cross_entropy(functional_call(model, p, (batch,)), yi[None])
    return vmap(grad(loss), in_dims=(None, 0, 0), randomness="different")(params, list(inputs) if listed else inputs, y)


def private_step(model: torch.nn.Module, opt: torch.optim.Optimizer, inputs, y: torch.Tensor, clip: float,
                 mechanism: GaussianMechanism, source: NoiseSource, extra: SparseRows | None = None) -> None:
    """One DP-SGD step on all given nodes: per-node gradients clipped to `clip`, summed, noised by
    `mechanism` (std σ·clip), divided by the node count; then the optimizer's step on that gradient.
    `extra`: an auditor's per-node gradient canaries in the flat layout of `model.named_parameters()`
    (attacks/dp/gap_step_audit.py), clipped and summed with the real ones; not in the count."""
    model.train()
    params = dict(model.named_parameters())
    grads = per_node_grads(model, {n: p.detach() for n, p in params.items()}, inputs, y)
    noisy = private_gradient(grads, clip, mechanism, source, float(len(y)), extra)
    for n, p in params.items():
        p.grad = noisy[n].to(p.dtype)
    opt.step()
