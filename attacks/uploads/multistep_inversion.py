"""Gradient inversion against the local training privfgl clients actually run: several full-batch
Adam (or SGD) steps with dropout (`gradient-inversion:variant=multistep`).

Following Dimitrov et al. ("Data Leakage in Federated Averaging", TMLR 2022) and Geiping et al.
(NeurIPS 2020, multi-step section), the server replays the client's round differentiably: from
the global model it broadcast (known), `local_epochs` full-batch steps of the public optimizer
(privfgl's Adam: torch's defaults, betas (0.9, 0.999), eps 1e-8, L2 weight decay added to the
gradient, a fresh state at the start of round 0) on candidate inputs, and fits the inputs (the
features of every node of the client's graph, soft labels of its training nodes) so that the
simulated update Δ_sim = w_E − w_0 matches the observed one in cosine (plus IG's sparsity prior).

Optimizer state across rounds: privfgl's FedAvg, FedProx and DP-FedAvg build each client's Adam
once (privfgl.training, as OpenFGL's clients) and keep its moments across rounds, and DP-SGD keeps
its per-client Adam too; so Adam's state is fresh (known to the server) only in round 0. In a later
round the moments depend on the client's earlier rounds, which the server does not know: with
Adam the variant then reports no input (plain SGD without momentum has no state: any round).

Methods: FedAvg, DP-FedAvg (the observed delta is clipped, a scale the cosine ignores; local noise
is not modelled) and FedProx (its proximal term is not replayed: it is 0 in the first step and
μ·(w − w_0) after, small at the default μ); not DP-SGD (per-sample clipping and noise inside the steps).

Dropout (inverted, p = `dropout`, on the hidden activations only): the masks are unknown and
marginalised, not fitted. `masks=0` (default) replays the expected network (no dropout: inverted
scaling keeps each activation's mean); `masks=S` averages Δ_sim over S freshly sampled masks per
iteration (a Monte-Carlo estimate of E_masks[Δ_sim], S times the cost).

Two facts of Adam's update are used before the fit:
- `vocabulary`: a first-layer weight column (a word) that no node in the training nodes' two-hop
  neighbourhood holds gets the gradient weight_decay·w only, whose Adam path the server computes
  exactly: the columns that moved otherwise are the receptive field's words (exact, up to float32),
  the rest are fixed at 0 for every node.
- labels first: with the features at the prior, soft labels alone are fitted to the update (the
  last layer's Δ reads mostly the labels), then features and labels jointly.

Measured (docs/attacks.md, "Multi-step inversion"): the vocabulary is exact, but per training node
the fit stays close to the marginals: Adam's first step is sign(g) (no magnitude, no gradient
through it), its later steps mostly ratios of gradients that dropout re-draws each step, and a word
held by a training node or by its neighbour moves the weights in nearly the same direction.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from attacks.base import Knowledge, NoInput

Params = dict[str, torch.Tensor]
ADAM_BETAS = (0.9, 0.999)  # torch.optim.Adam's defaults, which privfgl.training uses
ADAM_EPS = 1e-8
LABEL_ITERS = 60


REPLAYABLE = ("fedavg", "fedprox", "dp-fedavg")  # whose local training is privfgl.training's (not DP-SGD's)


def check_replayable(k: Knowledge, round: int, attack: str) -> None:
    """NoInput unless the server can replay this client's local training: a GCN under a REPLAYABLE method,
    and Adam only in round 0 (privfgl keeps each client's optimizer, so its moments are unknown later)."""
    if k.model != "gcn" or k.method not in REPLAYABLE:
        raise NoInput(f"{attack} replays the local training of a GCN under {', '.join(REPLAYABLE)} "
                      f"(got {k.model}, {k.method})")
    if k.optimizer == "adam" and round > 0:
        raise NoInput(f"round {round}: the clients' Adam moments carry over from earlier rounds "
                      "(privfgl keeps each client's optimizer), unknown to the server; fresh in round 0 only")


def forward(params: Params, x: torch.Tensor, adj: torch.Tensor, layers: int,
            masks: list[torch.Tensor] | None = None) -> torch.Tensor:
    """Logits [n, C] of the dense GCN (attacks.uploads.gcn.gcn_forward), with dropout masks (already scaled
    by 1/(1 − p)) on the hidden activations when given."""
    h = x
    for i in range(layers):
        h = adj @ (h @ params[f"convs.{i}.lin.weight"].T) + params[f"convs.{i}.bias"]
        if i < layers - 1:
            h = F.relu(h)
            if masks is not None:
                h = h * masks[i]
    return h


def simulate_local_training(params: Params, x: torch.Tensor, adj: torch.Tensor, y: torch.Tensor,
                            train_idx: torch.Tensor, k: Knowledge, masks: list[list[torch.Tensor]] | None = None,
                            create_graph: bool = True) -> Params:
    """Δ = w_E − w_0 after E = k.local_epochs full-batch steps of the client's optimizer (Adam from a
    fresh state, or SGD) on the mean cross-entropy of `train_idx`; `y` [n_train] ids or [n_train, C]
    probabilities; masks[t]: step t's dropout masks, one per hidden layer (None: no dropout).
    Differentiable in x and y when create_graph."""
    start = {n: p if p.requires_grad else p.detach().requires_grad_(True) for n, p in params.items()}
    names = list(start)
    w = dict(start)
    m = {n: torch.zeros_like(p) for n, p in start.items()}
    v = {n: torch.zeros_like(p) for n, p in start.items()}
    b1, b2 = ADAM_BETAS
    for t in range(1, k.local_epochs + 1):
        out = forward(w, x, adj, k.layers, None if masks is None else masks[t - 1])[train_idx]
        grads = torch.autograd.grad(F.cross_entropy(out, y), [w[n] for n in names], create_graph=create_graph)
        new = {}
        for n, g in zip(names, grads):
            g = g + k.weight_decay * w[n]
            if k.optimizer == "sgd":
                new[n] = w[n] - k.lr * g
                continue
            m[n] = b1 * m[n] + (1 - b1) * g
            v[n] = b2 * v[n] + (1 - b2) * g * g
            # sqrt of a clamped v: the derivative of sqrt at 0 is infinite (parameters with g = 0)
            new[n] = w[n] - k.lr * (m[n] / (1 - b1 ** t)) / ((v[n] / (1 - b2 ** t)).clamp(min=1e-30).sqrt() + ADAM_EPS)
        w = new if create_graph else {n: p.detach().requires_grad_(True) for n, p in new.items()}
    return {n: w[n] - start[n].detach() if create_graph else (w[n] - start[n]).detach() for n in names}


def decay_only_path(w0: torch.Tensor, k: Knowledge, earlier: Sequence[torch.Tensor] = ()) -> torch.Tensor:
    """Δ in the round that starts from w0 of a weight whose loss gradient is 0 at every step: only
    weight decay moves it. `earlier`: the weight at the start of each of the client's earlier rounds
    (oldest first), whose steps Adam's state carries over (privfgl keeps each client's Adam, and every
    client trains every round from the global model); SGD has no state, so they change nothing."""
    m, v, t = torch.zeros_like(w0), torch.zeros_like(w0), 0
    b1, b2 = ADAM_BETAS
    for start in [*earlier, w0]:
        w = start.double().clone()
        for _ in range(k.local_epochs):
            t += 1
            g = k.weight_decay * w
            if k.optimizer == "sgd":
                w = w - k.lr * g
                continue
            m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
            w = w - k.lr * (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + ADAM_EPS)
    return w - w0


def receptive_vocabulary(before: Params, delta: Params, k: Knowledge, tol: float = 1e-3,
                         earlier: Sequence[torch.Tensor] = ()) -> torch.Tensor:
    """[f] bool: the words some node within two hops of a training node holds (first-layer columns
    that did not follow the weight-decay-only path; tol relative to lr per step, float32 uploads).
    `earlier`: as decay_only_path's (a later round under Adam)."""
    w0 = before["convs.0.lin.weight"].double()
    off = (delta["convs.0.lin.weight"].double() - decay_only_path(w0, k, earlier)).abs().amax(dim=0)
    return off > tol * k.lr


def _flat(params: Params, names: list[str]) -> torch.Tensor:
    return torch.cat([params[n].reshape(-1) for n in names])


def fit_inputs(before: Params, delta: Params, adj: torch.Tensor, train_idx: torch.Tensor, k: Knowledge,
               iters: int, step_size: float = 0.05, masks: int = 0, seed: int = 0,
               sparsity: float = 0.05, labels: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Features [n, f] in [0, 1] of every node and label probabilities [n_train, C] whose simulated
    local training (simulate_local_training) best matches the observed update `delta` (cosine over
    all parameters, + sparsity·mean(x)). Words outside the receptive vocabulary are 0. `labels`
    [n_train] (declared aux, labels=known): fixed, only the features are fitted."""
    g = torch.Generator().manual_seed(seed)
    before = {n: p.float() for n, p in before.items()}
    names = sorted(before)
    target = _flat({n: d.float() for n, d in delta.items()}, names)
    n, n_train = adj.shape[0], train_idx.numel()
    keep = receptive_vocabulary(before, delta, k).float()
    prior = k.feature_prior.float().clamp(1e-4, 1 - 1e-4)

    def sampled_masks() -> list[list[torch.Tensor]]:
        scale = 1.0 / (1.0 - k.dropout)
        return [[(torch.rand(n, k.hidden, generator=g) >= k.dropout).float() * scale for _ in range(k.layers - 1)]
                for _ in range(k.local_epochs)]

    def loss_of(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if masks and k.dropout > 0:
            sim = torch.stack([_flat(simulate_local_training(before, x, adj, y, train_idx, k, sampled_masks()), names)
                               for _ in range(masks)]).mean(0)
        else:
            sim = _flat(simulate_local_training(before, x, adj, y, train_idx, k), names)
        return 1 - F.cosine_similarity(sim, target, dim=0)

    # labels first, the features at the prior (masked to the receptive vocabulary)
    x_prior = prior.expand(n, -1) * keep
    logits = (torch.log(k.label_prior.float().clamp(min=1e-3)).expand(n_train, -1)
              + 0.01 * torch.randn(n_train, k.num_classes, generator=g)).clone().requires_grad_(True)
    if labels is not None:  # known: fixed (large logits), never optimised
        logits = (20.0 * F.one_hot(labels, k.num_classes).float()).requires_grad_(False)
    else:
        opt = torch.optim.Adam([logits], lr=0.1)
        for _ in range(LABEL_ITERS if iters else 0):
            opt.zero_grad()
            loss_of(x_prior, F.softmax(logits, dim=1)).backward()
            opt.step()
    # then features and labels jointly
    z = (torch.logit(prior).expand(n, -1) + 0.01 * torch.randn(n, prior.numel(), generator=g)).clone().requires_grad_(True)
    opt = torch.optim.Adam([z] if labels is not None else [z, logits], lr=step_size)
    for _ in range(iters):
        opt.zero_grad()
        x = torch.sigmoid(z) * keep
        (loss_of(x, F.softmax(logits, dim=1)) + sparsity * x.mean()).backward()
        opt.step()
    return (torch.sigmoid(z) * keep).detach(), F.softmax(logits, dim=1).detach()
