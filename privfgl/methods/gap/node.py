"""Node-level GAP (`unit=node`): the unit is one node of a client's graph (its features, its label and its
incident edges). After the authors' `gap_ndp.py`, with privfgl's own degree bound and per-node gradients.

1. Degree bound: B = privfgl.privacy.dpsgd.bound_degree(G, D) (local rule, stable ids: every node keeps at
   most D neighbours, symmetric). The hops aggregate over B.
2. Encoder and classifier train by DP-SGD (`private_step`): per-node gradients (torch.func), each clipped
   to C, their sum plus N(0, (σC)²), divided by q·T (T the client's number of training nodes, taken as
   public, as dp-sgd does; the clients' uploads are averaged with uniform weights, not by that count). Each
   step takes every training node (q = 1, full batch, the default) or each one independently with
   probability q (`sample_rate`, Poisson sampling from the client's own coins, NoiseSource.coins: the
   subsampled Gaussian that the accountant charges at rate q; the expected batch is q·T). A
   node's per-node gradient depends on its own features and label (encoder), or on its own row of the
   cached hops and its own label (classifier): removing it removes one gradient, sensitivity C per step.
3. Hops: removing node w from B removes X_{k-1}[w] from the sums of its ≤ D neighbours (each by norm ≤ 1):
   L2 sensitivity √D per hop, given the previous releases. w's own row H_k[w] enters only w's own
   classifier gradient (step 2, covered by its clip) and the sums of w's neighbours at hop k+1 (covered
   by the √D there); it is not counted again (the authors' argument).
Every step and hop is one Gaussian release of the same noise multiplier σ (steps at rate q, hops at rate 1);
the encoder_rounds·local_epochs + K + rounds·local_epochs releases are composed by one opacus accountant, σ
the smallest giving the target ε (accounting.py).

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


def poisson_sample(inputs, y: torch.Tensor, extra: SparseRows | None, sample_rate: float, source: NoiseSource):
    """Each of the T nodes and of the R canary rows of `extra` kept independently with probability
    `sample_rate`, from `source`'s coins [T + R] (the canaries are sampled as nodes are): (inputs, y, extra)."""
    rows = 0 if extra is None else len(extra[0])
    keep = source.coins(len(y) + rows, sample_rate)
    nodes, canaries = keep[:len(y)], keep[len(y):]
    inputs = [t[nodes] for t in inputs] if isinstance(inputs, (list, tuple)) else inputs[nodes]
    return inputs, y[nodes], None if extra is None else (extra[0][canaries], extra[1][canaries])


def private_step(model: torch.nn.Module, opt: torch.optim.Optimizer, inputs, y: torch.Tensor, clip: float,
                 mechanism: GaussianMechanism, source: NoiseSource, extra: SparseRows | None = None,
                 sample_rate: float = 1.0) -> None:
    """One DP-SGD step on the given T nodes, all of them (sample_rate 1) or a Poisson sample at rate q
    (`poisson_sample`): per-node gradients clipped to `clip`, summed, noised by `mechanism` (std σ·clip),
    divided by q·T; then the optimizer's step on that gradient. `extra`: an auditor's per-node gradient
    canaries in the flat layout of `model.named_parameters()` (attacks/dp/gap_step_audit.py), sampled as
    nodes, clipped and summed with the real ones; not in T."""
    model.train()
    params = dict(model.named_parameters())
    denominator = sample_rate * len(y)
    if sample_rate < 1:
        inputs, y, extra = poisson_sample(inputs, y, extra, sample_rate, source)
    if len(y):
        grads = per_node_grads(model, {n: p.detach() for n, p in params.items()}, inputs, y)
    else:  # no node drawn: the release is the canaries' and the noise's alone
        grads = {n: torch.zeros(0, *p.shape) for n, p in params.items()}
    noisy = private_gradient(grads, clip, mechanism, source, denominator, extra)
    for n, p in params.items():
        p.grad = noisy[n].to(p.dtype)
    opt.step()
