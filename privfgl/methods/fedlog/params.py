"""Every FedLoG setting (`--method-param KEY=VALUE`), with the spec's defaults (A.8, A.12)."""
from __future__ import annotations

from dataclasses import dataclass

from privfgl.methods.params import resolve

CLASSIFIERS = ("paper", "code")      # Eqs. 14-18 at the query (paper) | the code's effective LayerNorm(h) (A.12.3)
MIXTURES = ("prob", "log")           # p = α p_head + (1-α) p_tail (paper) | the code's log-probability mixture
GAMMA_UPDATES = ("batch", "round")   # γ step after every minibatch ±step (code) | once per round, +step only (paper)
WEIGHTINGS = ("train_nodes", "uniform")  # model averaging: by |V_k| (paper, training nodes) | plain mean (code)
WARMUP_FORMS = ("full", "code")      # one full-batch step per epoch, best kept | the code's minibatches, last kept
WARMUP_MONITORS = ("val", "test")    # the warm-up's early stopping reads the validation | test labels (the code's)
GENERATORS = ("paper", "code")       # load the aggregated NG^c (Eq. 12) | the code's untrained ones, dropout on
BATCHES = ("ceil", "floor")          # ceil(n/b) minibatches per epoch | the code's floor(n/b), remainder unused
WARMUP_HEADS = ("torch", "code")    # the warm-up's Linear head: torch's initialisation | the code's U(±1/√C)
OPTIMIZER_STATES = ("keep", "round")  # Adam's moments carry over rounds | fresh Adam every round (the code's)


@dataclass(frozen=True)
class FedLoGParams:
    """Defaults: the authors' code where it and the paper differ (it reproduces the paper's numbers;
    preset=paper for the paper's equations), the paper where the code follows it."""
    s: int = 20                      # synthetic nodes per class (head and tail sets each s·C)
    tail_degree: int = 3             # λ: a node is tail-degree when deg <= λ; α = σ(deg − (λ+1))
    beta: float = 1.0                # weight of L_norm = 0.5·||X_head||_F + 0.5·||X_tail||_F ([C] hyper_syn_norm)
    hidden: int = 128                # GraphSAGE hidden width (paper App L: 2·64)
    embed_dim: int = 64              # GraphSAGE output / prototype width
    dropout: float = 0.5
    lr: float = 1e-3                 # Adam on the weights (paper App L)
    weight_decay: float = 5e-4       # [C]
    lr_synthetic: float = 1e-3       # separate Adam on X_head, X_tail ([C])
    batch_size: int = 64             # target nodes per step; the full-graph embedding is recomputed each step ([C])
    local_epochs: int = 1            # [P]
    classifier: str = "code"         # the authors' code (reproduces Table 1(a)); paper: Eqs. 14-18 (preset=paper)
    classifier_layers: int = 2       # Eqs. 14-18 stacked twice ("2-layer classifiers")
    mixture: str = "log"             # the code's loss mixes log-probabilities; prob: the paper's
    generalization_weight: float = 1.0  # weight on L_g ([C] hyper_cd_metric)
    global_per_step: str = "all"     # D_g nodes in L_g per minibatch: all ([C]) | share (each once per epoch)
    gamma_update: str = "batch"
    gamma_step: float = 1e-3
    gamma_threshold: float = 0.8     # [C]; the paper gives none
    weighting: str = "uniform"       # the code's plain mean; train_nodes: the paper's |V_k| weights
    min_contributors: int = 1        # classes held (in training) by fewer clients are withheld before the sum
    generator_hidden: str = "256,512"  # NG_k: MLP d -> 256 -> 512 -> d, ReLU, dropout, tanh out ([C])
    generator_epochs: int = 100      # P [P]
    generator_gnns: int = 20         # N random GNNs in L_grad [P]
    generator_gnns_per_epoch: int = 1  # nets per epoch, in turn (N: Eq. 10 exactly; see generator.py)
    generator_lr: float = 1e-2       # [C]
    generator_dropout: float = 0.5   # [C]
    generator_grad_weight: float = 1.0  # weight of L_grad in L_NG (1: Eq. 11)
    warmup_epochs: int = 100         # [C]'s round-0 pretraining of φ_E + a Linear head (early stop on validation, not test)
    warmup_patience: int = 10
    warmup_form: str = "full"        # full: one full-batch step per epoch, best kept | code: [C]'s minibatches
    warmup_head: str = "torch"       # torch: nn.Linear's U(±1/√D) | code: [C]'s Linear, U(±1/√C) weight and bias
    warmup_monitor: str = "val"      # val | test: [C] stops its warm-up on the test nodes (reads test labels)
    generators: str = "paper"        # paper: NG^c loaded, frozen | code: [C]'s untrained generators (A.12.5)
    batches: str = "ceil"            # ceil: every training node each epoch | floor: [C]'s floor(n/b) batches
    optimizer_state: str = "keep"    # keep: one Adam per client for the run | round: [C]'s fresh Adam per round


# The defaults are the authors' code's choices where it and the paper differ (spec A.12): they reproduce
# Table 1(a) (docs/fedlog.md). `--method-param preset=paper` takes the paper's equations instead.
# `preset=code` follows the authors' code also where privfgl's defaults keep the paper or a sound choice:
# every departure found by reading it (docs/authors-side-by-side.md, "FedLoG"), test-mask early stopping included.
PRESETS = {"paper": {"classifier": "paper", "mixture": "prob", "weighting": "train_nodes", "global_per_step": "share",
                     "warmup_epochs": 0},
           "code": {"warmup_form": "code", "warmup_monitor": "test", "warmup_head": "code", "generators": "code", "batches": "floor",
                    "optimizer_state": "round"}}


def generator_widths(p: FedLoGParams) -> tuple[int, ...]:
    return tuple(int(w) for w in str(p.generator_hidden).split(",") if w.strip())


def _check(p: FedLoGParams) -> None:
    def need(ok: bool, key: str, valid: str) -> None:
        if not ok:
            raise ValueError(f"fedlog: invalid method param {key}={getattr(p, key)!r}; valid: {valid}")
    need(p.classifier in CLASSIFIERS, "classifier", ", ".join(CLASSIFIERS))
    need(p.mixture in MIXTURES, "mixture", ", ".join(MIXTURES))
    need(p.gamma_update in GAMMA_UPDATES, "gamma_update", ", ".join(GAMMA_UPDATES))
    need(p.global_per_step in ("all", "share"), "global_per_step", "all, share")
    need(p.weighting in WEIGHTINGS, "weighting", ", ".join(WEIGHTINGS))
    need(p.warmup_form in WARMUP_FORMS, "warmup_form", ", ".join(WARMUP_FORMS))
    need(p.warmup_head in WARMUP_HEADS, "warmup_head", ", ".join(WARMUP_HEADS))
    need(p.warmup_monitor in WARMUP_MONITORS, "warmup_monitor", ", ".join(WARMUP_MONITORS))
    need(p.generators in GENERATORS, "generators", ", ".join(GENERATORS))
    need(p.batches in BATCHES, "batches", ", ".join(BATCHES))
    need(p.optimizer_state in OPTIMIZER_STATES, "optimizer_state", ", ".join(OPTIMIZER_STATES))
    for key in ("s", "hidden", "embed_dim", "batch_size", "local_epochs", "classifier_layers", "min_contributors",
                "generator_gnns", "generator_gnns_per_epoch"):
        need(getattr(p, key) >= 1, key, "an integer >= 1")
    for key in ("tail_degree", "generator_epochs", "warmup_epochs", "warmup_patience"):
        need(getattr(p, key) >= 0, key, "an integer >= 0")
    for key in ("lr", "lr_synthetic", "generator_lr"):
        need(getattr(p, key) > 0, key, "a number > 0")
    for key in ("beta", "weight_decay", "generalization_weight", "gamma_step", "generator_grad_weight"):
        need(getattr(p, key) >= 0, key, "a number >= 0")
    need(p.generator_gnns_per_epoch <= p.generator_gnns, "generator_gnns_per_epoch", "an integer in [1, generator_gnns]")
    need(0 <= p.gamma_threshold <= 1, "gamma_threshold", "a number in [0, 1]")
    for key in ("dropout", "generator_dropout"):
        need(0 <= getattr(p, key) < 1, key, "a number in [0, 1)")
    try:
        widths = generator_widths(p)
    except ValueError:
        widths = ()
    need(len(widths) >= 1 and all(w >= 1 for w in widths), "generator_hidden",
         "comma-separated positive widths, e.g. 256,512")


def resolve_params(method_params: dict) -> FedLoGParams:
    """FedLoGParams from `--method-param` settings; ValueError names a bad key and what is valid."""
    return resolve("fedlog", FedLoGParams, method_params, PRESETS, _check)
