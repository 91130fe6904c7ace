"""Every FedGPL setting (`--method-param KEY=VALUE`), with the spec's defaults (B.8, B.10)."""
from __future__ import annotations

from dataclasses import dataclass

from privfgl.methods.params import resolve

FEDERATIONS = ("hidta", "fedavg", "fedprox", "local")
HIDTA_MODES = ("paper", "code")
TAU_IN = ("clear", "crypten")
# how split DP (--dp on=m1|m2|m3|m4|split) composes over a round's minibatches (privacy/split_dp.py):
# released: the client's prompt and head stay fixed for the round and are updated at its end from the
#   round's released messages only (fedgpl/released.py): the minibatches are disjoint releases (sound)
# sequential: the client steps on clean gradients after every minibatch; each round is one release of
#   sensitivity C + 2C(N − 1) per message (N: the round's rows of it): sound, large ε
# parallel-unsafe: the old accounting (C per round) with the clean steps: UNSOUND, kept as the
#   sensitivity audit's negative control
SPLIT_DP_COMPOSITIONS = ("released", "sequential", "parallel-unsafe")
SELECTIONS = ("val", "test")
EVALUATE_AT = ("federated", "local")


@dataclass(frozen=True)
class FedGPLParams:
    """FedGPL = fed=hidta, prompt=vpg; the baselines swap either (spec B.8 "Baselines")."""
    fed: str = "hidta"               # how prompts/heads are federated: hidta (FedGPL), fedavg, fedprox, local
    prompt: str = "vpg"              # vpg (FedGPL), gpf, prog (ProG's all-in-one prompt graph)
    candidates: int = 0              # VPG's learnable candidate nodes k' (FedGPL* uses 10)
    gamma: float = 0.5               # candidates' link threshold (B.10.4, inferred)
    tokens: int = 10                 # ProG's token count
    node_ratio: float = 0.5          # α_n: share of each graph's nodes VPG keeps ([C] option default)
    edge_ratio: float = 0.9          # α_e: share of the kept edges VPG keeps ([C], hard-coded there)
    lr_prompt: float = 0.1           # Adam, StepLR(10, 0.95) (A.8 "0.1 for all datasets"; B.10.10)
    lr_head: float = 0.1
    wd_prompt: float = 1e-6          # [C]
    wd_head: float = 1e-8            # [C]
    lr_trunk: float = 1e-3           # the server's Adam on the trunk ([C])
    freeze_trunk: bool = True        # the authors' code (and, measured, the paper's Table 1) freezes it; false fine-tunes (B.10.1)
    batch_size: int = 16             # sample graphs per split step ([C])
    mu: float = 0.01                 # FedProx's proximal weight (fed=fedprox)
    hidta_mode: str = "paper"        # paper: Eqs. 5-7 with the client factors of Eq. 6; code: the authors' task-level form
    tau_in: str = "clear"            # where HiDTA's τ is computed: clear (the server, from the opened task models)
                                     # or crypten (on secret shares: the server learns τ only; --protocol crypten)
    dim: int = 100                   # SVD feature width d0 ([C])
    hidden: int = 100                # trunk width ([C])
    dropout: float = 0.5             # trunk dropout ([C])
    max_per_class: int = 400         # samples per class and task (B.8)
    dirichlet_alpha: float | None = None  # None: IID shares (the spec default); else label-Dirichlet(α)
    pretrain_epochs: int = 50        # GraphCL epochs on the server (cached per dataset, seed and settings)
    eval_dropout: bool = False       # True: evaluate with the trunk's dropout on, as the authors' code does
    split_dp_composition: str = "released"  # under split DP only: released, sequential, parallel-unsafe (see above)
    samples: str = "own"             # own: privfgl builds the clients' samples (samples.py); file:PATH: given from
                                     # outside (samples_file.py; e.g. the authors' own, experiments/peers/fedgpl_main.py)
    evaluate_at: str = "federated"   # federated: score each round's models after the federation; local: before it
                                     # (the clients' models after their local epoch, as the authors' code logs them)
    trunk: str = "graphcl"           # graphcl: the server pretrains its trunk (pretrain.py); file:PATH: a state_dict
                                     # of the same 2-layer TransformerConv (privfgl's conv1/conv2 keys or the authors'
                                     # conv_layers.0/1, e.g. their pre_trained_gnn/*.GraphCL.TransformerConv.pth)
    selection: str = "val"           # val: train on train-support, pick the round on train-query (B.10.14);
                                     # test: the authors' code: train on train-support + query, pick the round on test


def _check(p: FedGPLParams) -> None:
    def need(ok: bool, key: str, valid: str) -> None:
        if not ok:
            raise ValueError(f"fedgpl: invalid method param {key}={getattr(p, key)!r}; valid: {valid}")
    need(p.fed in FEDERATIONS, "fed", ", ".join(FEDERATIONS))
    need(p.prompt in ("vpg", "gpf", "prog"), "prompt", "vpg, gpf, prog")
    need(p.hidta_mode in HIDTA_MODES, "hidta_mode", ", ".join(HIDTA_MODES))
    need(p.tau_in in TAU_IN, "tau_in", ", ".join(TAU_IN))
    need(p.split_dp_composition in SPLIT_DP_COMPOSITIONS, "split_dp_composition", ", ".join(SPLIT_DP_COMPOSITIONS))
    need(p.selection in SELECTIONS, "selection", ", ".join(SELECTIONS))
    need(p.evaluate_at in EVALUATE_AT, "evaluate_at", ", ".join(EVALUATE_AT))
    need(p.samples == "own" or (p.samples.startswith("file:") and len(p.samples) > 5), "samples",
         "own, or file:PATH (a FedGPL samples file, privfgl/methods/fedgpl/samples_file.py)")
    need(p.trunk == "graphcl" or (p.trunk.startswith("file:") and len(p.trunk) > 5), "trunk",
         "graphcl, or file:PATH (a state_dict of the trunk's two TransformerConv layers)")
    need(p.candidates >= 0, "candidates", "an integer >= 0")
    need(p.candidates == 0 or p.prompt == "vpg", "candidates", "0 unless prompt=vpg")
    need(p.tokens >= 1, "tokens", "an integer >= 1")
    need(0 < p.node_ratio <= 1, "node_ratio", "a number in (0, 1]")
    need(0 < p.edge_ratio <= 1, "edge_ratio", "a number in (0, 1]")
    for key in ("lr_prompt", "lr_head", "lr_trunk"):
        need(getattr(p, key) > 0, key, "a number > 0")
    for key in ("wd_prompt", "wd_head", "mu"):
        need(getattr(p, key) >= 0, key, "a number >= 0")
    for key in ("batch_size", "dim", "hidden", "max_per_class"):
        need(getattr(p, key) >= 1, key, "an integer >= 1")
    need(0 <= p.dropout < 1, "dropout", "a number in [0, 1)")
    need(p.pretrain_epochs >= 0, "pretrain_epochs", "an integer >= 0 (0: a randomly initialised trunk)")
    need(p.dirichlet_alpha is None or p.dirichlet_alpha > 0, "dirichlet_alpha", "a number > 0, or none for IID")


def samples_path(p: FedGPLParams) -> str | None:
    """The samples file's path (samples=file:PATH), or None for privfgl's own samples."""
    return p.samples[len("file:"):] if p.samples.startswith("file:") else None


def trunk_path(p: FedGPLParams) -> str | None:
    """The trunk file's path (trunk=file:PATH), or None when the server pretrains it."""
    return p.trunk[len("file:"):] if p.trunk.startswith("file:") else None


def resolve_params(method_params: dict) -> FedGPLParams:
    """FedGPLParams from `--method-param` settings; ValueError names a bad key and what is valid."""
    return resolve("fedgpl", FedGPLParams, method_params, {}, _check)


def check_protocol(p: FedGPLParams, protocol: str, protocol_params: dict) -> None:
    """Settings that depend on the run's protocol: tau_in=crypten computes τ on CrypTen shares in this
    process, so it needs --protocol crypten in its (default) in-process mode."""
    if p.tau_in == "crypten" and (protocol != "crypten" or protocol_params.get("mode", "inprocess") != "inprocess"):
        raise ValueError(f"fedgpl: invalid method param tau_in='crypten' with --protocol {protocol}"
                         f"{' mode=' + str(protocol_params['mode']) if 'mode' in protocol_params else ''}; valid: "
                         "tau_in=crypten with --protocol crypten (mode=inprocess), or tau_in=clear")
