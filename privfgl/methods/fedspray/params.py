"""FedSpray hyper-parameters: defaults (the paper), the authors' code choices as options, validation.

`resolve_params(method_params)` turns `--method-param KEY=VALUE` settings into a `FedSprayParams`;
an unknown key or a bad value raises ValueError naming the key and what is valid.

Defaults follow the paper where it and the authors' code (`xbfu/FedSpray` d3e591a) disagree
(spec ../shared/specs/fedspray_fedomd.md, table A5); each code choice is one option:

| option                          | paper default          | authors' code                     |
|---------------------------------|------------------------|-----------------------------------|
| persistent_node_proxies         | false (reset from S)   | true (labelled proxies persist)   |
| kd_conf_threshold               | unset (KD on all nodes)| 0.7 (labelled + confident nodes)  |
| proxy_weights                   | ratios (Eq. 15)        | ratios (counts is an extra option)|
| lambda1                         | 5                      | 1.0                               |
| gnn_init                        | glorot (PyG default)   | uniform (U(0, 1))                 |
| persistent_encoder_optimizer    | false (fresh each round)| true (per-client Adam persists)  |
| persistent_proxy_optimizer      | true                   | true                              |
| head_init (g_c, g_p)            | fan_in (not stated; torch) | fan_out (U(±1/√d_c))          |
| projector_start                 | projector (g_p from ω) | classifier (g_p from ω's g_c)     |

`preset=code` sets every code choice at once. The number of rounds is the run's `--rounds` (paper 300, code 500, the issue's setting 100).
"""
from __future__ import annotations

from dataclasses import dataclass

from privfgl.methods.params import bad_param, resolve

PROXY_WEIGHTS = ("ratios", "counts")  # Eq. 15: p_j^(k) = n_j^(k) / |V_L^(k)| (paper, code), or n_j^(k)
HEAD_INITS = ("fan_in", "fan_out")  # g_c/g_p init bound 1/√d_s (torch's Linear) or 1/√d_c (the code's MLPLayer)
GNN_INITS = ("glorot", "uniform")  # PyG's default initialisation, or the code's uniform_(0, 1)
PROJECTOR_STARTS = ("projector", "classifier")  # Phase 2's local g_p starts from ω's g_p, or from ω's g_c (code)
SELECTIONS = ("val_loss", "val_acc")  # model selection: pooled validation loss (code), or weighted val acc
BACKBONES = ("gcn", "sage", "sgc")  # the paper's backbones


@dataclass(frozen=True)
class FedSprayParams:
    """Every FedSpray setting (Adam learning rates; epochs are full-batch steps per phase)."""
    lambda1: float = 5.0                # weight of the GNN's KD loss, Eq. 7 (paper §5.1.3; code 1.0)
    lambda2: float = 1.0                # weight of the encoder's KD loss, Eq. 11
    local_epochs: int = 5               # E: steps of Phase 1 and of Phase 2 per round
    lr_gnn: float = 0.003               # eta_f
    lr_encoder: float = 0.003           # eta_g
    lr_proxy: float = 0.02              # eta_s
    proxy_dim: int = 64                 # d_s: proxy and embedding dimension (Combine is addition)
    dropout: float = 0.0                # GNN dropout (code: none)
    weight_decay: float = 0.0           # GNN weight decay (code: none)
    gnn_init: str = "glorot"            # see GNN_INITS
    head_init: str = "fan_in"           # see HEAD_INITS
    persistent_node_proxies: bool = False  # code: labelled nodes keep their own proxies across rounds
    node_proxy_init: float = 0.1        # code: initial value of persistent per-node proxies
    kd_conf_threshold: float | None = None  # code 0.7: Phase-1 KD on labelled nodes + unlabelled with max q > it
    proxy_weights: str = "ratios"       # see PROXY_WEIGHTS
    persistent_encoder_optimizer: bool = False  # code: one Adam per client for omega across rounds
    persistent_proxy_optimizer: bool = True     # code: one Adam per client for the node proxies
    selection: str = "val_loss"         # see SELECTIONS
    projector_start: str = "projector"  # see PROJECTOR_STARTS (client.py: classifier2.load_state_dict(classifier...))


# `preset=code`: every choice of the authors' code at once (rounds: pass --rounds 500 for full parity).
PRESETS: dict[str, dict] = {
    "paper": {},
    "code": dict(lambda1=1.0, kd_conf_threshold=0.7, persistent_node_proxies=True, gnn_init="uniform",
                 persistent_encoder_optimizer=True, persistent_proxy_optimizer=True, head_init="fan_out",
                 projector_start="classifier"),
}



def _bad(key: str, value, valid: str) -> ValueError:
    return bad_param("fedspray", key, value, valid)



def _check(p: FedSprayParams) -> None:
    def need(ok: bool, key: str, valid: str):
        if not ok:
            raise _bad(key, getattr(p, key), valid)
    for key in ("lambda1", "lambda2", "weight_decay"):
        need(getattr(p, key) >= 0, key, "a number >= 0")
    for key in ("lr_gnn", "lr_encoder", "lr_proxy"):
        need(getattr(p, key) > 0, key, "a number > 0")
    for key in ("local_epochs", "proxy_dim"):
        need(getattr(p, key) >= 1, key, "an integer >= 1")
    need(0 <= p.dropout < 1, "dropout", "a number in [0, 1)")
    need(p.kd_conf_threshold is None or 0 <= p.kd_conf_threshold <= 1, "kd_conf_threshold",
         "a number in [0, 1] (the code's 0.7), or none for KD on all nodes (the paper)")
    need(p.proxy_weights in PROXY_WEIGHTS, "proxy_weights", ", ".join(PROXY_WEIGHTS))
    need(p.gnn_init in GNN_INITS, "gnn_init", ", ".join(GNN_INITS))
    need(p.head_init in HEAD_INITS, "head_init", ", ".join(HEAD_INITS))
    need(p.selection in SELECTIONS, "selection", ", ".join(SELECTIONS))
    need(p.projector_start in PROJECTOR_STARTS, "projector_start", ", ".join(PROJECTOR_STARTS))


def resolve_params(method_params: dict) -> FedSprayParams:
    """FedSprayParams from `--method-param` settings: defaults (the paper) < `preset` < explicit keys."""
    return resolve("fedspray", FedSprayParams, method_params, PRESETS, _check)
