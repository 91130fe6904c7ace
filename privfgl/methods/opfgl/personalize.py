"""O-pFGL personalisation on every client at once (spec §1.7-1.8): stage 1 trains the global model
M_G on the pseudo-graph, stage 2 fine-tunes it on local data with node-adaptive distillation.

The clients' GCNs are stacked: parameters "w{i}" [K, in, out] and "b{i}" [K, out], one fused Adam
(element-wise, so K independent optimizers). Client k's stage-2 loss reads only its own block of
the block-diagonal local graph. The first layer is one sparse product of the block feature matrix
[N, K·f] (client k's features in column block k) with w0 viewed as [K·f, hidden].

Early stopping is per client, as in the authors' code: every `eval_every` steps each client
measures accuracy on its own validation nodes, keeps the parameters and logits of its best check
(strict improvement over 0) and stops after `patience` checks without one. The loop runs until
every client has stopped; in stage 2 a stopped client is dropped from the stacked computation
(its parameters and Adam moments are sliced out, the block graph is rebuilt for the others), so
the result equals K separate runs and the cost follows the clients still training. A client that
never improves keeps its last parameters (as the code does).

Stage 1 is one trajectory for the K clients: in the homogeneous setting every client trains the same
initialisation on the same pseudo-graph with the same deterministic steps (with dropout > 0, the same
masks), and each client early-stops it on its own validation nodes. Stage 2's dropout draws client k's rows
from the block graph's per-client generators when they are set (``BlockGraph.generators``), else from
torch's global generator. run.py runs stage 1 over the clients of one place (all K in process, an actor's
on Ray) and stage 2 for each client alone (K = 1), so that a client's model does not depend on which clients
share its process.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch_geometric.data import Data

from privfgl.methods.opfgl.condense import PseudoGraph, gcn_norm_dense
from privfgl.models.stacked import BlockGraph, FixedSparse, dropout as drop
from privfgl.training import Params


@dataclass(frozen=True)
class Schedule:
    """Adam learning rate, at most `max_iters` steps, a check every `eval_every`, `patience` checks.
    offset 1 (the authors' `for j in range(max_iters + 1)` loop, which checks at j ≥ eval_every,
    j % eval_every == 0 after step j + 1): up to max_iters + 1 steps, checked after steps
    eval_every + 1, 2·eval_every + 1, …; offset 0: checked after steps eval_every, 2·eval_every, …"""
    lr: float
    max_iters: int
    eval_every: int
    patience: int
    offset: int = 0


@dataclass
class Selected:
    """Per-client selection: params [K, ...] of each client's best check, logits [N, C] on the local
    graphs, best validation accuracy [K] and the step it was reached [K] (0: never improved)."""
    params: Params
    logits: torch.Tensor
    val_acc: torch.Tensor
    step: torch.Tensor


class LocalGraphs:
    """The K clients' subgraphs side by side: labels/masks [N], Â (block-diagonal), block features."""

    def __init__(self, clients: list[Data], device: torch.device):
        self.clients, self.device = clients, device
        self.block = BlockGraph([c.x for c in clients], [c.edge_index for c in clients], device)
        g = self.block
        cat = lambda name: torch.cat([getattr(c, name) for c in clients]).to(device)
        self.y, self.train_mask, self.val_mask = cat("y"), cat("train_mask"), cat("val_mask")
        self.num_clients, self.client_of, self.adj = g.num_clients, g.client_of, g.gcn_adj()
        rows, cols = g.x.nonzero(as_tuple=True)
        f = g.x.shape[1]
        self.features = FixedSparse(rows, g.client_of[rows] * f + cols, g.x[rows, cols], g.num_nodes, self.num_clients * f)

    def subset(self, ids: torch.Tensor) -> "LocalGraphs":
        """The clients `ids` (int64 [K']) alone, in that order (with their dropout generators, if set)."""
        sub = LocalGraphs([self.clients[i] for i in ids.tolist()], self.device)
        if self.block.generators is not None:
            sub.block.generators = [self.block.generators[i] for i in ids.tolist()]
        return sub

    def rows_of(self, ids: torch.Tensor) -> torch.Tensor:
        """Row indices [N'] of the clients `ids` in these graphs, client by client."""
        ptr = self.block.ptr.tolist()
        return torch.cat([torch.arange(ptr[i], ptr[i + 1]) for i in ids.tolist()]).to(self.y.device)

    def split(self, rows: torch.Tensor) -> list[torch.Tensor]:
        """Rows [N, ...] -> one tensor per client."""
        return self.block.split(rows)

    def forward(self, params: Params, layers: int, p_drop: float, training: bool) -> torch.Tensor:
        """Every client's GCN on its own subgraph: logits [N, C]."""
        w0 = params["w0"]
        k, f, hidden = w0.shape
        h = self.features @ w0.reshape(k * f, hidden)
        for i in range(layers):
            if i > 0:
                h = self.block.linear(h, params[f"w{i}"])
            h = self.adj @ h + params[f"b{i}"].index_select(0, self.client_of)
            if i < layers - 1:
                h = drop(F.relu(h), p_drop, training, self.block)
        return h

    def validation_accuracy(self, logits: torch.Tensor) -> torch.Tensor:
        """Each client's accuracy on its own validation nodes, [K] float64 (0 without any)."""
        correct = ((logits.argmax(dim=1) == self.y) & self.val_mask).double()
        hits = torch.zeros(self.num_clients, dtype=torch.float64, device=self.y.device).index_add_(
            0, self.client_of, correct)
        total = torch.zeros_like(hits).index_add_(0, self.client_of, self.val_mask.double())
        return hits / total.clamp(min=1)


def from_pyg(init: Params, layers: int, num_clients: int) -> Params:
    """PyG GCN parameters (convs.i.lin.weight [out, in], convs.i.bias) -> stacked w{i} [K, in, out], b{i}."""
    out = {}
    for i in range(layers):
        out[f"w{i}"] = init[f"convs.{i}.lin.weight"].T.expand(num_clients, -1, -1).contiguous()
        out[f"b{i}"] = init[f"convs.{i}.bias"].expand(num_clients, -1).contiguous()
    return out


def to_pyg_names(params: Params, layers: int) -> Params:
    """Stacked w{i} [K, in, out], b{i} [K, out] under the PyG GCN names of privfgl.models.stacked
    (the same layout), for `stacked_predict` on other graphs."""
    return {name: params[f"{key}{i}"] for i in range(layers)
            for name, key in ((f"convs.{i}.lin.weight", "w"), (f"convs.{i}.bias", "b"))}


def _where(mask: torch.Tensor, new: torch.Tensor, old: torch.Tensor) -> torch.Tensor:
    return torch.where(mask.view(-1, *([1] * (new.dim() - 1))), new, old)


LossFn = Callable[[Params], torch.Tensor]
EvalFn = Callable[[Params], tuple[Params, torch.Tensor]]
Problem = Callable[[torch.Tensor], tuple[LossFn, EvalFn, "LocalGraphs"]]


def _shrink_optimizer(opt: torch.optim.Adam, params: Params, keep: torch.Tensor, lr: float
                      ) -> tuple[torch.optim.Adam, Params]:
    """Rows `keep` of every stacked parameter [K, ...] and of its Adam moments: the same K' optimizers
    (Adam is element-wise), so the kept clients continue exactly where they were."""
    kept = {n: p.detach().index_select(0, keep).requires_grad_(True) for n, p in params.items()}
    new = torch.optim.Adam(list(kept.values()), lr=lr, fused=True)
    for n, p in params.items():
        state = opt.state.get(p)
        if state:
            new.state[kept[n]] = {"step": state["step"].clone(),
                                  "exp_avg": state["exp_avg"].index_select(0, keep),
                                  "exp_avg_sq": state["exp_avg_sq"].index_select(0, keep)}
    return new, kept


def train_early_stopping(params: Params, problem: Problem, graphs: "LocalGraphs", schedule: Schedule,
                         drop_stopped: bool) -> Selected:
    """Adam on the leaf tensors `params` [K', ...]. problem(active) -> (loss_fn, eval_fn, sub_graphs)
    for the clients `active` (ids, int64 [K']): eval_fn(params) gives their parameters [K', ...] and
    eval-mode logits on sub_graphs. drop_stopped: once clients stop, the loop continues on the
    others only (their steps do not depend on the stopped ones), else params stay as given (stage 1:
    one shared model, evaluated on every client). See the module docstring."""
    k_clients, dev = graphs.num_clients, graphs.y.device
    active = torch.arange(k_clients, device=dev)
    loss_fn, eval_fn, sub = problem(active)
    opt = torch.optim.Adam(list(params.values()), lr=schedule.lr, fused=True)
    with torch.no_grad():
        best, best_logits = eval_fn(params)
        best = {n: p.detach().clone() for n, p in best.items()}
    best_acc = torch.zeros(k_clients, dtype=torch.float64, device=dev)
    best_step = torch.zeros(k_clients, dtype=torch.long, device=dev)
    bad = torch.zeros(k_clients, dtype=torch.long, device=dev)
    stopped = torch.zeros(k_clients, dtype=torch.bool, device=dev)
    rows = torch.arange(graphs.y.numel(), device=dev)  # rows of `sub` in the full local graphs
    last = schedule.max_iters + schedule.offset
    for step in range(1, last + 1):
        opt.zero_grad()
        loss_fn(params).backward()
        opt.step()
        counted = step - schedule.offset
        if (counted % schedule.eval_every or counted == 0) and step != last:
            continue
        with torch.no_grad():
            current, logits = eval_fn(params)
            acc = sub.validation_accuracy(logits)
            on = ~stopped[active]                                      # [K'] among the active ids
            better = (acc > best_acc[active]) & on
            bad[active] = torch.where(better, torch.zeros_like(better, dtype=torch.long), bad[active] + on.long())
            take = on & (better | (best_step[active] == 0))  # never improved: follow the current model
            stopped[active] = stopped[active] | (on & (bad[active] >= schedule.patience))
            for n, p in current.items():
                best[n][active] = _where(take, p, best[n][active])
            best_logits[rows] = _where(take[sub.client_of], logits, best_logits[rows])
            best_acc[active] = torch.where(better, acc, best_acc[active])
            best_step[active] = torch.where(better, torch.full_like(best_step[active], step), best_step[active])
        if bool(stopped.all()):
            break
        if drop_stopped and bool(stopped[active].any()):
            keep = (~stopped[active]).nonzero().view(-1)
            opt, params = _shrink_optimizer(opt, params, keep, schedule.lr)
            active = active[keep]
            loss_fn, eval_fn, sub = problem(active)
            rows = graphs.rows_of(active)
    return Selected(best, best_logits, best_acc, best_step)


def _leaf(params: Params) -> Params:
    return {n: p.detach().clone().requires_grad_(True) for n, p in params.items()}


def stage1(init: Params, pseudo: PseudoGraph, graphs: LocalGraphs, layers: int, p_drop: float,
           schedule: Schedule) -> Selected:
    """Eq. 14: M_G trained with mean CE over all pseudo-nodes, early-stopped per client on its own
    validation nodes. init: one model's stacked parameters [1, ...] (the shared initialisation)."""
    params = _leaf(init)
    norm_adj = gcn_norm_dense(pseudo.dense_adjacency())
    k = graphs.num_clients

    def loss_fn(p: Params) -> torch.Tensor:
        h = pseudo.x
        for i in range(layers):
            h = norm_adj @ (h @ p[f"w{i}"][0]) + p[f"b{i}"][0]
            if i < layers - 1:
                h = drop(F.relu(h), p_drop, True)
        return F.cross_entropy(h, pseudo.y)

    def eval_fn(p: Params) -> tuple[Params, torch.Tensor]:
        every = {n: v.expand(k, *v.shape[1:]).contiguous() for n, v in p.items()}
        return every, graphs.forward(every, layers, p_drop, False)

    return train_early_stopping(params, lambda active: (loss_fn, eval_fn, graphs), graphs, schedule,
                                drop_stopped=False)


def stage2(teacher: Params, graphs: LocalGraphs, gamma: torch.Tensor | None, layers: int, p_drop: float,
           schedule: Schedule) -> Selected:
    """Eq. 15-17: each client fine-tunes its M_G with mean CE over its train nodes plus
    (1/N_k) Σ_i γ_i KL(p_teacher,i ‖ p_student,i) over all its nodes (gamma [N]; None: plain
    fine-tuning). Teacher logits are computed once with the frozen M_G. Stopped clients are
    dropped from the stacked computation (train_early_stopping's drop_stopped)."""
    with torch.no_grad():
        target = F.softmax(graphs.forward(teacher, layers, p_drop, False), dim=1)

    def problem(active: torch.Tensor):
        rows = graphs.rows_of(active)
        sub = graphs if active.numel() == graphs.num_clients else graphs.subset(active)
        y, owner = sub.y, sub.client_of
        train_idx = sub.train_mask.nonzero().view(-1)
        n_train = torch.bincount(owner[train_idx], minlength=sub.num_clients).clamp(min=1)
        ce_weight = 1.0 / n_train[owner[train_idx]].float()
        n_nodes = torch.bincount(owner, minlength=sub.num_clients)
        kl_weight = None if gamma is None else gamma[rows] / n_nodes[owner].float()
        teacher_probs = target[rows]

        def loss_fn(p: Params) -> torch.Tensor:
            out = sub.forward(p, layers, p_drop, True)
            loss = (F.cross_entropy(out[train_idx], y[train_idx], reduction="none") * ce_weight).sum()
            if kl_weight is not None:
                kl = F.kl_div(F.log_softmax(out, dim=1), teacher_probs, reduction="none").sum(dim=1)
                loss = loss + (kl * kl_weight).sum()
            return loss

        def eval_fn(p: Params) -> tuple[Params, torch.Tensor]:
            return p, sub.forward(p, layers, p_drop, False)

        return loss_fn, eval_fn, sub

    return train_early_stopping(_leaf(teacher), problem, graphs, schedule, drop_stopped=True)
