"""O-pFGL (Yan et al., "Towards Federated Graph Learning in One-shot Communication"): one upload of
class statistics under secure aggregation, one download of a condensed pseudo-graph, then
two-stage personalised training on every client. Spec: ../shared/specs/opfgl.md.

One round:
1. client k (own subgraph only; stats.py): propagated features, label propagation, homophily,
   HRE, and per-class sums n, b, S1 = Σx^prop, S2 = Σ(x^prop)², n_orig.
2. upload through `Federation.aggregate`: "class_stats" {S1, S2} (float64 [C, (h+1)f]) through the
   run's protocol, "class_counts" {n, b, n_orig} (int64 [C]) through BFV preset "sum" (exact for
   integers) when the run's protocol is ckks or bfv (`counts_protocol=auto`), else through the
   run's protocol. Only sums are revealed. S1/S2 travel on the fixed-point grid 2^-stats_frac_bits
   (default 14): each client rounds its sums onto it, whoever opens the aggregate rounds it back,
   which is exact while the protocol's documented error is below half a grid step (checked; an
   error says what to lower). So plain, crypten, ckks and bfv reveal bit-identical statistics and
   the same seed gives the same model under every protocol; without the grid it would not: the
   condensation and early stopping amplify a 1e-12 relative change of the statistics into ±1
   accuracy point. With `dp_epsilon` set, the upload is instead one
   node-level DP release of {n, S1, S2} (opfgl_dp) and the record's privacy block reports ε, δ.
3. server: μ, s² after the reveal (stats.py.pooled_statistics), pseudo-graph condensation
   (condense.py), broadcast "pseudo_graph" {x, edge_index, edge_weight, y}.
   `server_efficient=true` (paper A.5): the sums are opened by the clients only; every client
   runs the same condensation from the shared seed, and nothing is broadcast. [simulation] The
   shared-seed condensation is bitwise identical on every client, so it is computed once.
4. clients (personalize.py): stage 1 on the pseudo-graph, stage 2 fine-tuning with γ-weighted
   distillation, per-client early stopping on local validation accuracy.
5. `setup.tracker.evaluate(0, logits, stage="stage2")` once, with each client's logits from its own
   best stage-2 check, so the record's test_acc is the paper's protocol (spec §4.1). On the
   evaluation settings' graphs (`--evaluate`) each client runs those same personalised GCNs; they
   read only the graph's x and edges (γ and the soft labels enter only the stage-2 loss).

Model: the run's backbone must be `gcn` (the paper's; `hidden`/`layers` from the run config).
Optimisation settings are O-pFGL's own method params (stage learning rates, dropout 0, no weight
decay: spec §1.7-1.8); `--lr`, `--weight-decay`, `--dropout` and the epoch counts are not used.
All clients start M_G from one initialisation drawn from the run seed (the code sends it from the
server; here it is a shared seed, so no model bytes move). `--rounds` must be 1.

Dropout (secagg's `dropout`, the runtime's participation mask) in the one upload: the counts n, b,
n_orig and the sums S1, S2 are all sums, so μ and s² are the survivors' pooled statistics and the
contributor count b is the survivors' (each client adds 1 per class it sends); the two sums must
hold the same clients (else a clear error: `check_same_survivors`). A dropped client still receives
the pseudo-graph and trains its personalised model; only its statistics are missing from it.
Under `dp_epsilon` with dp_mode=distributed a dropout is refused (the sum would carry less noise
than calibrated, so the reported ε would not hold); dp_mode=central is unaffected.
"""
from __future__ import annotations

import torch

import protocols
from privfgl.methods.opfgl import dp as opfgl_dp
from privfgl.methods.base import Setup
from privfgl.methods.opfgl.condense import PseudoGraph, condense
from privfgl.methods.opfgl.params import OPFGLParams, resolve_params
from privfgl.methods.opfgl.personalize import LocalGraphs, Schedule, from_pyg, stage1, stage2, to_pyg_names
from privfgl.methods.opfgl.stats import ClientView, client_statistics, pooled_statistics, pseudo_class_sizes
from privfgl.models.stacked import BlockGraph, stacked_predict
from privfgl.training import ModelConfig, init_params


def _counts_protocol(p: OPFGLParams, run_protocol: str):
    """The per-call protocol for the integer counts (None: the run's protocol). BFV uses its "sum"
    preset: exact for integers, ~6x fewer bytes and ~3x faster than "default"."""
    name = p.counts_protocol
    if name == "auto":
        name = "bfv" if run_protocol in ("ckks", "bfv") else run_protocol
    if name == run_protocol:
        return None
    return protocols.get_protocol(name, preset="sum") if name == "bfv" else protocols.get_protocol(name)


def _gamma(views: list[ClientView], p: OPFGLParams) -> torch.Tensor | None:
    """Eq. 17 per node, concatenated over clients [N]: β·(Ỹ_i · w_dist), clamped to
    [gamma_min, gamma_max] when set; `fixed_gamma` for every node; None without distillation."""
    if not p.distill:
        return None
    if p.fixed_gamma is not None:
        return torch.cat([torch.full((v.soft_labels.shape[0],), p.fixed_gamma) for v in views])
    gamma = torch.cat([p.beta * (v.soft_labels.double() @ v.w_dist) for v in views]).float()
    if p.gamma_min is not None or p.gamma_max is not None:
        gamma = gamma.clamp(min=p.gamma_min, max=p.gamma_max)
    return gamma


def _upload(setup: Setup, views: list[ClientView], p: OPFGLParams):
    """The one upload: (counts, sums) as pooled_statistics takes them, revealed by the protocols
    to the server, or to the clients only under `server_efficient`."""
    fed = setup.federation
    reveal_to = "clients" if p.server_efficient else "server"
    if p.dp_epsilon is not None:
        counts, sums, setup.extras["dp"] = opfgl_dp.release(fed, setup.clients, setup.num_classes, p,
                                                            setup.method.seed, reveal_to=reveal_to)
        return counts, sums
    counts_protocol = _counts_protocol(p, fed.protocol.name)
    bits = p.stats_frac_bits
    try:
        floats = [v.sums.floats() for v in views]
        if bits:  # client side: each sum on the fixed-point grid
            floats = [{name: to_grid(t, bits) for name, t in f.items()} for f in floats]
        sums = fed.aggregate(0, "class_stats", floats, reveal_to=reveal_to)
        counts = fed.aggregate(0, "class_counts", [v.sums.counts() for v in views], protocol=counts_protocol,
                               reveal_to=reveal_to)
    finally:
        if counts_protocol is not None:
            counts_protocol.close()
    check_same_survivors(fed, ("class_stats", "class_counts"))
    if bits:  # whoever opens the sum: back onto the grid, exact while the protocol's error < half a step
        bound, half_step = fed.error_bounds["class_stats"], 2.0 ** -(bits + 1)
        if bound >= half_step:
            raise ValueError(f"opfgl: the {fed.protocol.name} error bound on the class statistics is not "
                             f"below half the grid step 2^-{bits + 1} = {half_step:.3g}, so rounding could not "
                             f"recover the exact sum; lower stats_frac_bits (valid: 1..{bits - 1}) or set it to 0 "
                             "(no grid: the protocol's error reaches the condensation)")
        sums = {name: to_grid(t, bits) for name, t in sums.items()}
    return counts, sums


def check_same_survivors(fed, names: tuple[str, ...]) -> list[int]:
    """The clients in the one-shot upload's sums: the statistics are pooled from several sums, which must hold
    the same clients (a client whose counts are in one sum and its feature sums missing from the other would
    skew μ and s²). ValueError names who is in which sum when they differ (e.g. secagg's dropout_rate drew
    a client out of one sum only)."""
    survivors = {name: fed.survivors(0, name) for name in names}
    first = survivors[names[0]]
    if any(s != first for s in survivors.values()):
        listing = "; ".join(f"{name}: {', '.join(f'client{k}' for k in s)}" for name, s in survivors.items())
        raise ValueError(f"opfgl: the one-shot upload's sums hold different clients ({listing}); the pooled "
                         "statistics need the same clients in every sum: rerun, or drop clients at the same "
                         "point of every sum (secagg dropout={round: [...]}, the runtime's participation mask)")
    return first


def to_grid(t: torch.Tensor, bits: int) -> torch.Tensor:
    """t (float64) rounded to the nearest multiple of 2^-bits. Exact in float64 while |t| < 2^(52-bits),
    and so is any sum of such values: every protocol then reveals the same statistics, bit for bit."""
    scale = 2.0 ** bits
    return torch.round(t.to(torch.float64) * scale) / scale


def run_opfgl(setup: Setup) -> None:
    """One O-pFGL run on `setup`; metrics go to setup.tracker, bytes/views to setup.federation."""
    p = resolve_params(setup.method.params)
    fed, timer, seed = setup.federation, setup.federation.timer, setup.method.seed
    clients, num_classes, device = setup.clients, setup.num_classes, torch.device(setup.device)

    with timer.phase("client_stats"):
        views = [client_statistics(c, num_classes, p.hops, p.min_count, p.lp_iters, p.lp_alpha, p.hre_k, p.f_th, p.d_th,
                                   p.hre_ties) for c in clients]
    counts, sums = _upload(setup, views, p)

    with timer.phase("condense"):  # the server; under server_efficient every client (same seed)
        stats = pooled_statistics(counts, sums, p.var_denominator, p.min_contributors)
        sizes = pseudo_class_sizes(stats, p.pseudo_nodes_per_class, p.pseudo_node_rate)
        if int(sizes.sum()) < 2:
            raise ValueError(f"opfgl: {int(sizes.sum())} pseudo-node(s) to condense, need >= 2 (the link predictor's "
                             "BatchNorm needs more than one pair); classes were withheld or empty: lower min_count or "
                             "min_contributors, or raise pseudo_nodes_per_class")
        pseudo = condense(stats, sizes, setup.num_features, p.hops, iters=p.condense_iters + int(p.code_loops), lr_feat=p.lr_feat,
                          lr_adj=p.lr_adj, hidden=p.link_hidden, threshold=p.edge_threshold,
                          feat_alpha=p.feat_alpha, smoothness_alpha=p.smoothness_alpha, align=p.align, seed=seed,
                          device=device)
    if not p.server_efficient:
        with timer.phase("broadcast"):
            pseudo = PseudoGraph.from_tensors(fed.broadcast(0, "pseudo_graph", pseudo.tensors()))

    graphs = LocalGraphs(clients, device)
    cfg = ModelConfig("gcn", setup.model.hidden, setup.model.layers, p.dropout)
    init = from_pyg(init_params(cfg, setup.num_features, num_classes, seed=seed), cfg.layers, 1)

    with timer.phase("stage1"):
        global_models = stage1({n: v.to(device) for n, v in init.items()}, pseudo, graphs, cfg.layers, p.dropout,
                               Schedule(p.lr_stage1, p.max_iters, p.eval_every, p.patience, int(p.code_loops)))
    with timer.phase("stage2"):
        gamma = _gamma(views, p)
        personal = stage2(global_models.params, graphs, None if gamma is None else gamma.to(device), cfg.layers,
                          p.dropout, Schedule(p.lr_stage2, p.max_iters, p.eval_every, p.patience,
                                                int(p.code_loops)))

    def predict_on(eval_graphs: list) -> list[torch.Tensor]:
        """Client k's personalised GCN on eval_graphs[k]: list of [n_k, C]."""
        block = BlockGraph([g.x for g in eval_graphs], [g.edge_index for g in eval_graphs], device)
        return stacked_predict("gcn", to_pyg_names(personal.params, cfg.layers), block, cfg.layers)

    with timer.phase("evaluate"):
        setup.tracker.evaluate(0, graphs.split(personal.logits.cpu()), stage="stage2", predict_on=predict_on)
