"""O-pFGL hyper-parameters: defaults, per-setting presets (spec §1.3, §1.8, §1.11) and validation.

`resolve_params(method_params)` turns `--method-param KEY=VALUE` settings into an `OPFGLParams`:
defaults < the named `preset` < explicit keys. A bad key or value raises ValueError naming the key
and what is valid.

Defaults are the authors' code defaults (spec §1.11, "Code default"), except `hops` = 1 (spec §6
#9: every script uses 1). Presets are the authors' `run_main.sh` settings. The authors fix the
partition and split (seed 42) and vary only the training seed: run presets with
`RunConfig(partition_seed=PRESET_PARTITION_SEED, seed=s)` (experiments/reproduce_opfgl.py does).
"""
from __future__ import annotations

from dataclasses import dataclass

from privfgl.methods.params import bad_param, resolve

# The authors compute the partition and the per-client splits once under seed 42 (spec §4.1).
PRESET_PARTITION_SEED = 42

VAR_DENOMINATORS = ("paper", "exact")  # N^c − m_c (Eq. 9) or N^c − 1 (exact pooled variance)
ALIGN_TARGETS = ("std", "variance")  # code: match the std; paper Eq. 11: the variance
COUNTS_PROTOCOLS = ("auto", "plain", "crypten", "ckks", "bfv")
HRE_TIES = ("index", "topk")  # ties in H for HRE's top-K classes: lower class index, or the code's torch.topk
DP_MODES = ("auto", "central", "distributed")  # auto: distributed under a secure protocol, central under plain

# Protocol parameters O-pFGL needs by default, applied by privfgl.experiment only where the user did
# not set the key (and recorded in the run record's config). CrypTen's default 16 fractional bits
# quantise S2 = Σ(x^prop)² (entries ~1e-2) coarsely enough to move the condensed graph and the
# accuracy (1.67 points on Cora); 40 bits reproduce plain exactly and still hold |sum| ≤ 2^22.
PROTOCOL_DEFAULTS = {"crypten": {"precision_bits": 40}}


@dataclass(frozen=True)
class OPFGLParams:
    """Every O-pFGL setting. Units: learning rates for Adam, iterations are optimizer steps."""
    # client statistics (spec §1.2-1.3)
    hops: int = 1                      # h in Eq. 5
    min_count: int = 2                 # a class is reported only with >= min_count nodes
    lp_iters: int = 2                  # label propagation iterations
    lp_alpha: float = 0.9              # label propagation alpha
    hre_k: int = 0                     # K: top-K homophily classes; 0 switches HRE off
    f_th: float = 0.95                 # confidence threshold (C2)
    d_th: int = 0                      # degree threshold (C1); 0 switches C1 off
    hre_ties: str = "index"            # see HRE_TIES
    # upload and server (spec §1.5, §2)
    counts_protocol: str = "auto"      # auto: bfv when the run's protocol is ckks/bfv, else the run's
    var_denominator: str = "paper"     # see VAR_DENOMINATORS
    min_contributors: int = 0          # withhold a class seen by fewer clients (0 = off)
    server_efficient: bool = False     # A.5: sums revealed to clients only; clients condense
    stats_frac_bits: int = 14          # S1/S2 travel on the grid 2^-bits (0 = off; see opfgl.py)
    # pseudo-graph condensation (spec §1.6)
    pseudo_nodes_per_class: int = 1
    pseudo_node_rate: float | None = None  # n'_c = ceil(rate * N_orig^c) instead (large datasets)
    condense_iters: int = 3000
    lr_feat: float = 5e-3
    lr_adj: float = 1e-3
    link_hidden: int = 128
    edge_threshold: float = 0.01       # delta
    feat_alpha: float = 10.0           # alignment weight
    smoothness_alpha: float = 0.1      # smoothness weight
    align: str = "std"                 # see ALIGN_TARGETS
    # personalisation (spec §1.7-1.8)
    lr_stage1: float = 1e-4
    lr_stage2: float = 1e-4
    max_iters: int = 3000
    eval_every: int = 100
    patience: int = 5
    dropout: float = 0.0
    beta: float = 0.2
    gamma_min: float | None = None
    gamma_max: float | None = None
    fixed_gamma: float | None = None   # ablation: one gamma for every node
    distill: bool = True               # False: stage 2 is plain fine-tuning (ablation "ft")
    code_loops: bool = False           # the authors' `range(n + 1)` loops: condense_iters + 1 condensation
                                       # steps; stage checks after eval_every + 1, 2·eval_every + 1, … steps
                                       # (personalize.Schedule.offset); False: n steps, checks after eval_every, …
    # node-level DP on the statistics (opfgl_dp; off while dp_epsilon is unset)
    dp_epsilon: float | None = None    # target ε of the one release
    dp_delta: float = 1e-5
    dp_clip: float | None = None       # B: ||x^prop_i||₂ ≤ B (required with dp_epsilon)
    dp_degree: int | None = None       # D: degree bound of the stats' propagation graph (required when hops ≥ 1)
    dp_mode: str = "auto"              # see DP_MODES
    dp_seed: str = "os"                # noise source: "os" (OS entropy) or an integer seed (reproducible, removable
                                       # by anyone who knows it: the record carries seed_warning)
    dp_colluders: str = "auto"         # dp_mode=distributed: clients that may collude with the server; each noise
                                       # share is sized 1/(K - c) (privacy/shares.py); auto: the protocol's bound


PRESETS: dict[str, dict] = {
    "cora-louvain+": dict(hre_k=1, f_th=1.0, d_th=20, beta=0.2, gamma_max=0.15, lr_stage2=5e-5, patience=10),
    "cora-metis+": dict(hre_k=1, f_th=0.95, d_th=0, beta=0.2, gamma_max=0.2, lr_stage2=5e-5, patience=10),
    "citeseer-louvain+": dict(hre_k=1, f_th=0.95, d_th=3, beta=0.2, gamma_max=0.2, lr_stage2=5e-5, patience=10),
    "citeseer-metis+": dict(hre_k=1, f_th=0.95, d_th=3, beta=0.2, gamma_max=0.15, gamma_min=0.05,
                            lr_stage2=5e-5, patience=10),
    "pubmed-louvain+": dict(hre_k=1, f_th=0.95, d_th=0, beta=1.0, gamma_max=0.1, gamma_min=0.05, lr_stage2=1e-3,
                            lp_iters=4, lp_alpha=0.6),
    "pubmed-metis+": dict(hre_k=1, f_th=0.95, d_th=0, beta=5.0, gamma_max=0.2, gamma_min=0.05, lr_stage2=2e-3,
                          lp_iters=4, lp_alpha=0.6),
}



def _bad(key: str, value, valid: str) -> ValueError:
    return bad_param("opfgl", key, value, valid)



def _check(p: OPFGLParams) -> None:
    def need(ok: bool, key: str, valid: str):
        if not ok:
            raise _bad(key, getattr(p, key), valid)
    for key in ("hops", "lp_iters", "hre_k", "d_th", "min_contributors"):
        need(getattr(p, key) >= 0, key, "an integer >= 0")
    for key in ("min_count", "pseudo_nodes_per_class", "condense_iters", "link_hidden", "max_iters", "eval_every",
                "patience"):
        need(getattr(p, key) >= 1, key, "an integer >= 1")
    for key in ("lr_feat", "lr_adj", "lr_stage1", "lr_stage2"):
        need(getattr(p, key) > 0, key, "a number > 0")
    for key in ("feat_alpha", "smoothness_alpha", "beta"):
        need(getattr(p, key) >= 0, key, "a number >= 0")
    need(0 <= p.stats_frac_bits <= 30, "stats_frac_bits", "an integer in [0, 30] (0 switches the grid off)")
    need(0 <= p.lp_alpha <= 1, "lp_alpha", "a number in [0, 1]")
    need(0 <= p.f_th <= 1, "f_th", "a number in [0, 1]")
    need(0 <= p.edge_threshold < 1, "edge_threshold", "a number in [0, 1)")
    need(0 <= p.dropout < 1, "dropout", "a number in [0, 1)")
    need(p.pseudo_node_rate is None or 0 < p.pseudo_node_rate <= 1, "pseudo_node_rate", "a number in (0, 1]")
    for key in ("gamma_min", "gamma_max", "fixed_gamma"):
        need(getattr(p, key) is None or getattr(p, key) >= 0, key, "a number >= 0 (or unset)")
    if p.gamma_min is not None and p.gamma_max is not None:
        need(p.gamma_min <= p.gamma_max, "gamma_min", f"a number <= gamma_max ({p.gamma_max})")
    need(p.var_denominator in VAR_DENOMINATORS, "var_denominator", ", ".join(VAR_DENOMINATORS))
    need(p.align in ALIGN_TARGETS, "align", ", ".join(ALIGN_TARGETS))
    need(p.hre_ties in HRE_TIES, "hre_ties", ", ".join(HRE_TIES))
    need(p.counts_protocol in COUNTS_PROTOCOLS, "counts_protocol", ", ".join(COUNTS_PROTOCOLS))
    need(p.dp_mode in DP_MODES, "dp_mode", ", ".join(DP_MODES))
    need(0 < p.dp_delta < 1, "dp_delta", "a number in (0, 1)")
    need(p.dp_seed == "os" or p.dp_seed.lstrip("-").isdigit(), "dp_seed",
         "'os' (OS entropy, the default) or an integer seed")
    need(p.dp_colluders == "auto" or p.dp_colluders.isdigit(), "dp_colluders",
         "'auto' (the protocol's tolerated coalition, the default) or an integer >= 0")
    if p.dp_epsilon is None:
        for key in ("dp_clip", "dp_degree"):
            need(getattr(p, key) is None, key, "unset unless dp_epsilon is set")
        return
    need(p.dp_epsilon > 0, "dp_epsilon", "a number > 0")
    need(p.dp_clip is not None and p.dp_clip > 0, "dp_clip", "a number > 0 (the L2 bound B on x^prop rows; "
         "required with dp_epsilon)")
    if p.hops > 0:
        need(p.dp_degree is not None and p.dp_degree >= 1, "dp_degree",
             "an integer >= 1 (the degree bound D that limits one node's influence; required with dp_epsilon "
             "when hops >= 1)")


def resolve_params(method_params: dict) -> OPFGLParams:
    """OPFGLParams from `--method-param` settings: defaults < `preset` < explicit keys."""
    return resolve("opfgl", OPFGLParams, method_params, PRESETS, _check)
