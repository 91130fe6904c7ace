"""O-pFGL with node-level differential privacy on its one upload (spec §2.6; privfgl.privacy.stats).

Enabled by `--method-param dp_epsilon=E,dp_clip=B,dp_degree=D` (opfgl_params). Client k releases,
per class c, the sums over its *labelled* nodes only
    n_c (float), S1_c = Σ x^prop_i, S2_c = Σ (x^prop_i)²,   ||x^prop_i||₂ clipped to B,
with x^prop computed on its graph after degree bounding to D (privacy.dpsgd.bound_degree).
Privacy unit: one node (features, label, incident edges) of the degree-bounded graph. Removing v
changes the GCN-normalised rows of every node within hops + 1 of v (its neighbours lose an edge,
so their degree in D̃^-1/2 changes too): influence N = Σ_{i=0..hops+1} D^i rows (1 when hops = 0),
and ClassStatsRelease turns (B, N) into the sensitivities of (n, S1, S2) and σ for the target
(ε, δ) of one release (opacus RDP, one step, sampling rate 1). Degree bounding is preprocessing
outside the guarantee, as for DP-SGD (Daigavane et al. 2021).

What changes against the non-private upload, and why:
- HRE pseudo-labels depend on neighbours' labels (outside the bound): only labelled nodes count.
- No min_count threshold: a data-dependent all-or-nothing class would break the sensitivity, so
  every client sends every class; the contributor count m_c is then the public K, and n_orig is
  the noisy n (labelled nodes only, so they coincide).
- The counts are noised, so they travel as floats with S1/S2 in one message ("class_stats"
  {n, S1, S2}) through the run's float protocol; pooled_statistics rounds N to an integer ≥ 0
  after the reveal (post-processing). There is no separate integer "class_counts" message.
Noise, by `dp_mode`: "distributed" — each client adds a share of the variance before the secure
sum (needs ckks, bfv, crypten or secagg), 1/(K − c) of it so that any K − c honest shares carry all
of it against the server with c colluding clients (`dp_colluders`, default the protocol's tolerated
coalition; privacy/shares.py), at the cost of K/(K − c) × the variance on the sum; "central" — the
server noises the revealed sum once (it is trusted with the exact sum); "auto" — distributed under a
secure protocol, else central.
The noise comes from OS entropy unless `dp_seed=N` asks for reproducible noise, which anyone who
reads the run record can regenerate and subtract (the record's `seed_warning` says so). The run
seed only seeds the degree bounding (recorded as `degree_bound_seed`).
"""
from __future__ import annotations

import torch
from torch_geometric.data import Data

from privfgl.methods.opfgl.params import OPFGLParams
from privfgl.methods.opfgl.stats import propagate_features
from privfgl.privacy.accounting import gaussian_epsilon
from privfgl.privacy.dpsgd import bound_degree, influence_count
from privfgl.privacy.noise import OS, NoiseSource
from privfgl.privacy.shares import distributed_report, share_fraction, sized_colluders
from privfgl.privacy.stats import BLOCKS, ClassStatsRelease, StatsReleaseReport, class_sums
from privfgl.privacy.trust import tolerated_colluders

UNIT = "node (features, label and incident edges) of the degree-bounded client graph, add/remove"


def dp_mode(p: OPFGLParams, protocol: str) -> str:
    """The effective noise placement; distributed noise under `plain` is refused (the server would
    see every upload with only 1/K of the variance)."""
    if p.dp_mode == "auto":
        return "central" if protocol == "plain" else "distributed"
    if p.dp_mode == "distributed" and protocol == "plain":
        raise ValueError("opfgl: dp_mode=distributed needs a secure protocol (ckks, bfv, crypten, secagg); under plain "
                         "the server sees each upload with 1/K of the noise variance. Use dp_mode=central or auto")
    return p.dp_mode


def calibrate(p: OPFGLParams) -> ClassStatsRelease:
    """The Gaussian release for (dp_epsilon, dp_delta), clip B and the influence of one node."""
    influence = 1 if p.hops == 0 else influence_count(p.dp_degree, p.hops + 1)
    return ClassStatsRelease.for_epsilon(p.dp_epsilon, p.dp_delta, p.dp_clip, influence)


def client_sums(data: Data, num_classes: int, p: OPFGLParams, seed: int) -> dict[str, torch.Tensor]:
    """One client's clipped sums over its labelled nodes: {"n": [C], "S1", "S2": [C, (hops+1)f]}, float64."""
    edges = data.edge_index if p.hops == 0 else bound_degree(data.edge_index, data.num_nodes, p.dp_degree, seed,
                                                                 node_ids=getattr(data, "global_id", None))
    xp = propagate_features(data.x, edges, p.hops)
    train = data.train_mask
    return class_sums(xp[train], data.y[train], num_classes, p.dp_clip)


def colluders(p: OPFGLParams, protocol, num_clients: int) -> tuple[int, int]:
    """(c, tolerated): the colluders the distributed shares are sized for, and the protocol's bound."""
    tolerated = tolerated_colluders(protocol, num_clients)
    requested = None if p.dp_colluders == "auto" else int(p.dp_colluders)
    return sized_colluders(requested, tolerated, num_clients), tolerated


def _dp_upload(k: int, state: dict, data, num_classes: int, p: OPFGLParams, seed: int, mech: ClassStatsRelease,
               source: NoiseSource, share: float | None) -> dict[str, torch.Tensor]:
    """Client k's step (privfgl.federation.client_steps): its clipped sums, plus its noise share (distributed
    mode: `share` of the variance, drawn from its own stream source.for_client(k), kept in its state for an
    auditor), or none (central mode: share None)."""
    upload = client_sums(data, num_classes, p, seed)
    if share is None:
        return upload
    state["dp_noise"] = noise = mech.noise({b: upload[b].shape for b in BLOCKS}, source.for_client(k), share)
    return {b: upload[b] + noise[b] for b in BLOCKS}


def release(fed, clients, num_classes: int, p: OPFGLParams, seed: int, reveal_to: str = "server"
            ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], StatsReleaseReport]:
    """Clip, noise and securely sum every client's statistics once (`clients`: where the client steps run,
    Setup.steps()). Returns the counts and sums in pooled_statistics' format ({"n", "b", "n_orig"} int64 [C];
    {"S1", "S2"} float64) and the report; the report keeps each client's noise draw for an auditor when the
    clients run in this process (on Ray actors it stays there)."""
    mode = dp_mode(p, fed.protocol.name)
    mech = calibrate(p)
    source = NoiseSource.from_setting(p.dp_seed if p.dp_seed == OS else int(p.dp_seed))
    K = clients.num_clients
    extra, share = {}, None
    if mode == "distributed":
        c, tolerated = colluders(p, fed.protocol, K)
        share = share_fraction(K, c)
        extra["distributed"] = distributed_report(
            K, c, tolerated, lambda m: gaussian_epsilon([(mech.sigma * m, 1.0, 1)], p.dp_delta))
    total = fed.aggregate(0, "class_stats", clients.uploads(_dp_upload, num_classes, p, seed, mech, source, share),
                          reveal_to=reveal_to)
    noises = () if share is None or clients.remote else tuple(state["dp_noise"] for state in clients.states)
    survivors = fed.survivors(0, "class_stats")
    if mode == "distributed" and len(survivors) < K:
        missing = sorted(set(range(K)) - set(survivors))
        raise ValueError(f"opfgl: {', '.join(f'client{k}' for k in missing)} dropped out of the distributed-noise DP "
                         f"release: the sum carries only {len(survivors)}/(K - c) of the calibrated noise "
                         "variance (each client adds a 1/(K - c) share), so the reported epsilon would not hold; use "
                         "dp_mode=central or run without dropout")
    if mode == "central":
        total = mech.release(total, source)
    n = total["n"]  # pooled_statistics rounds it to an integer >= 0
    counts = {"n": n, "b": torch.full_like(n, len(survivors)), "n_orig": n}  # the clients in the sum (all K without dropout)
    details = {"degree_bound": p.dp_degree if p.hops else None, "hops": p.hops, "degree_bound_seed": seed,
               "members": "labelled nodes only (HRE pseudo-labels are outside the bound)",
               "min_count": "not applied (every client sends every class; m_c = K, the survivors under dropout)",
               "counts": "noised with S1/S2, summed as floats, rounded to integers >= 0 after the reveal", **extra}
    return counts, {"S1": total["S1"], "S2": total["S2"]}, StatsReleaseReport(mech, p.dp_epsilon, p.dp_delta, mode,
                                                                              UNIT, details, source, noises)
