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

The clients' side is written as client steps (privfgl.federation.client_steps: `_statistics` .. `_predict_on`),
so a run's clients can be Ray actors (`--engine ray`); run_opfgl is the server's loop. Stage 1 is a group
step: the one trajectory of M_G is trained once per place (all K clients in process, an actor's on Ray) and
each client early-stops it on its own validation nodes; its dropout masks (dropout > 0) come from one stream
seeded by the run seed, the same on every client. Stage 2 runs per client on its own graph alone (K = 1: in a
stack, the padded batched product would round a client's gradients differently with its neighbours), its
dropout from its own stream. So a client's model is the same whichever clients share its process.

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
from privfgl.federation.client_steps import client_seed
from privfgl.methods.opfgl import dp as opfgl_dp
from privfgl.methods.base import Setup
from privfgl.methods.opfgl.condense import PseudoGraph, condense
from privfgl.methods.opfgl.params import OPFGLParams, resolve_params
from privfgl.methods.opfgl.personalize import LocalGraphs, Schedule, from_pyg, stage1, stage2, to_pyg_names
from privfgl.methods.opfgl.stats import ClientView, client_statistics, pooled_statistics, pseudo_class_sizes
from privfgl.models.stacked import BlockGraph, stacked_predict
from privfgl.training import ModelConfig, Params, init_params

STAGE1_STREAM, STAGE2_STREAM = 0x0F51, 0x0F52  # client_seed purposes: stage 1's masks (one stream, k = 0), stage 2's


def _counts_protocol(p: OPFGLParams, run_protocol: str):
    """The per-call protocol for the integer counts (None: the run's protocol). BFV uses its "sum"
    preset: exact for integers, ~6x fewer bytes and ~3x faster than "default"."""
    name = counts_protocol_name(p, run_protocol)
    if name == run_protocol:
        return None
    return protocols.get_protocol(name, preset="sum") if name == "bfv" else protocols.get_protocol(name)


def counts_protocol_name(p: OPFGLParams, run_protocol: str) -> str:
    """The protocol the integer counts go through: `counts_protocol`, or under auto bfv beside ckks/bfv, else
    the run's."""
    if p.counts_protocol == "auto":
        return "bfv" if run_protocol in ("ckks", "bfv") else run_protocol
    return p.counts_protocol


def ray_refusal(method_params: dict, protocol: str) -> str | None:
    """Why O-pFGL with these params cannot run with its clients on Ray actors (one line), or None."""
    p = resolve_params(method_params)
    if p.server_efficient:
        return ("opfgl server_efficient=true opens the sums to the clients only, and every client condenses the "
                "pseudo-graph itself; with the clients on Ray actors the driver would hold the sums and condense for "
                "them; valid: server_efficient=false")
    if p.dp_epsilon is None and counts_protocol_name(p, protocol) != protocol:
        return (f"opfgl's class counts through {counts_protocol_name(p, protocol)} beside the run's {protocol}: the "
                f"client actors hold one protocol's side per run; valid: counts_protocol={protocol}")
    return None


def _gamma(view: ClientView, p: OPFGLParams) -> torch.Tensor | None:
    """Eq. 17 per node of one client [n_k]: β·(Ỹ_i · w_dist), clamped to [gamma_min, gamma_max] when set;
    `fixed_gamma` for every node; None without distillation."""
    if not p.distill:
        return None
    if p.fixed_gamma is not None:
        return torch.full((view.soft_labels.shape[0],), p.fixed_gamma)
    gamma = (p.beta * (view.soft_labels.double() @ view.w_dist)).float()
    if p.gamma_min is not None or p.gamma_max is not None:
        gamma = gamma.clamp(min=p.gamma_min, max=p.gamma_max)
    return gamma


# --- the client steps (privfgl.federation.client_steps): each reads its own client's state and data only ---
def _statistics(k: int, state: dict, data, num_classes: int, p: OPFGLParams) -> None:
    """Client k's propagated features, label propagation, homophily, HRE and class sums (stats.py), kept."""
    state["view"] = client_statistics(data, num_classes, p.hops, p.min_count, p.lp_iters, p.lp_alpha, p.hre_k, p.f_th,
                                      p.d_th, p.hre_ties)


def _stats_upload(k: int, state: dict, data, bits: int) -> dict:
    """{S1, S2} (float64 [C, D]), on the fixed-point grid 2^-bits when bits > 0."""
    floats = state["view"].sums.floats()
    return {name: to_grid(t, bits) for name, t in floats.items()} if bits else floats


def _counts_upload(k: int, state: dict, data) -> dict:
    return state["view"].sums.counts()


def _stage1(ks: list[int], states: list[dict], datas: list, pseudo: PseudoGraph, init: Params, layers: int,
            p: OPFGLParams, seed: int, device: str) -> None:
    """A group step (the clients of one place): M_G trained once on the pseudo-graph from the public `init`
    (its steps read no client data), each client early-stopping it on its own validation nodes
    (personalize.stage1); kept as its stage-2 teacher [1, ...]."""
    device = torch.device(device)
    graphs = LocalGraphs(datas, device)
    with torch.random.fork_rng():  # stage 1's masks: one stream from the run seed, the same on every client
        torch.manual_seed(client_seed(seed, 0, STAGE1_STREAM))
        teacher = stage1({n: v.to(device) for n, v in init.items()}, pseudo, graphs, layers, p.dropout,
                         _schedule(p, p.lr_stage1))
    for i, state in enumerate(states):
        state.update(teacher={n: v[i:i + 1] for n, v in teacher.params.items()}, layers=layers, device=device)


def _stage2(k: int, state: dict, data, p: OPFGLParams, seed: int) -> None:
    """Client k fine-tunes its teacher on its own graph alone with γ-weighted distillation (personalize.stage2,
    K = 1: stacked with other clients, a padded batched product would round its gradients differently), its
    dropout from its own stream; keeps its personalised GCN [1, ...] and the logits of its best check."""
    graphs, layers = LocalGraphs([data], state["device"]), state["layers"]
    graphs.block.generators = [torch.Generator(state["device"]).manual_seed(client_seed(seed, k, STAGE2_STREAM))]
    gamma = _gamma(state["view"], p)
    personal = stage2(state.pop("teacher"), graphs, None if gamma is None else gamma.to(state["device"]), layers,
                      p.dropout, _schedule(p, p.lr_stage2))
    state.update(params=to_pyg_names(personal.params, layers), logits=personal.logits.cpu())


def _schedule(p: OPFGLParams, lr: float) -> Schedule:
    return Schedule(lr, p.max_iters, p.eval_every, p.patience, int(p.code_loops))


def _predict(k: int, state: dict, data) -> torch.Tensor:
    """Its logits [n_k, C] from its best stage-2 check."""
    return state["logits"]


def _predict_on(k: int, state: dict, data, graph) -> torch.Tensor:
    """Its personalised GCN on an evaluation setting's graph [n, C] (reads the graph's x and edges only)."""
    block = BlockGraph([graph.x], [graph.edge_index], state["device"])
    return stacked_predict("gcn", state["params"], block, state["layers"])[0]


def _upload(setup: Setup, clients, p: OPFGLParams):
    """The one upload: (counts, sums) as pooled_statistics takes them, revealed by the protocols
    to the server, or to the clients only under `server_efficient`."""
    fed = setup.federation
    reveal_to = "clients" if p.server_efficient else "server"
    if p.dp_epsilon is not None:
        counts, sums, setup.extras["dp"] = opfgl_dp.release(fed, clients, setup.num_classes, p, setup.method.seed,
                                                            reveal_to=reveal_to)
        return counts, sums
    counts_protocol = _counts_protocol(p, fed.protocol.name)
    bits = p.stats_frac_bits
    try:  # client side: each sum on the fixed-point grid
        sums = fed.aggregate(0, "class_stats", clients.uploads(_stats_upload, bits), reveal_to=reveal_to)
        counts = fed.aggregate(0, "class_counts", clients.uploads(_counts_upload), protocol=counts_protocol,
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
    """One O-pFGL run on `setup` (the server's loop; the client steps run where the clients are: setup.steps());
    metrics go to setup.tracker, bytes/views to setup.federation."""
    p = resolve_params(setup.method.params)
    fed, timer, seed = setup.federation, setup.federation.timer, setup.method.seed
    num_classes, device = setup.num_classes, torch.device(setup.device)
    # A dropped client still personalises (module docstring); one whose Ray actor died cannot, so it ends the run.
    clients = setup.steps(allow_dead=False)

    with timer.phase("client_stats"):
        clients.train(_statistics, num_classes, p)
    counts, sums = _upload(setup, clients, p)

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

    cfg = ModelConfig("gcn", setup.model.hidden, setup.model.layers, p.dropout)
    init = from_pyg(init_params(cfg, setup.num_features, num_classes, seed=seed), cfg.layers, 1)  # public: the seed's
    with timer.phase("stage1"):
        clients.group(_stage1, pseudo, init, cfg.layers, p, seed, setup.device)
    with timer.phase("stage2"):
        clients.each(_stage2, p, seed)
    with timer.phase("evaluate"):
        clients.evaluate(setup.tracker, 0, _predict, stage="stage2", predict_on=_predict_on)
