"""Which shared run options each method ignores, so that setting one is refused instead of lost.

The training options below are RunConfig fields that the baselines read (privfgl/training.py); the
paper methods train their own models from their own `--method-param` settings and read only some of
them. `unused_option(method, option)` says why a method ignores an option (naming the method's own
parameter where it has one), or None when the method reads it. RunConfig.validate refuses an ignored
option set to anything but its default: a user asking for `--lr 0.05` with FedOMD would otherwise get
FedOMD's own lr and a record that says 0.05. `unsupported_value` names the values of an option a
method reads that it cannot run with (O-pFGL's GCN and single round), checked there too, so that a
sweep refuses such a cell before any run.

The table was read from the methods' code and is checked by running each method with each option
changed: `python experiments/method_options.py` for every method, tests/test_method_options.py for
the quick ones.
"""
from __future__ import annotations

from privfgl.methods.fedspray.params import BACKBONES

TRAINING_OPTIONS = ("local_epochs", "finetune_epochs", "mu", "model", "hidden", "layers", "dropout", "lr",
                    "weight_decay", "optimizer", "engine", "evaluation")
# A value other than RunConfig's default for each, to check the table by running a method with it.
OTHER_VALUES = {"local_epochs": 1, "finetune_epochs": 2, "mu": 0.5, "model": "sage", "hidden": 32, "layers": 3,
                "dropout": 0.1, "lr": 0.05, "weight_decay": 0.01, "optimizer": "sgd", "engine": "looped",
                "evaluation": "global_model"}


def _own(params: str) -> str:
    return "{method} sets it with its own --method-param " + params


_PROX = "it is FedProx's proximal weight (--method fedprox)"
_PAPER = "{method} trains its own model from its --method-param settings"
_LOOP = "{method} runs its own training loop (the engine is the baselines' choice)"

# method -> {option: why it is ignored}; an option not listed is read. "{method}" is filled in.
UNUSED: dict[str, dict[str, str]] = {
    "fedavg": {"mu": _PROX},
    "dp-fedavg": {"mu": _PROX},
    "fedprox": {},
    "local": {"mu": _PROX,
              "finetune_epochs": "local trains each client on its own data in every round: nothing to fine-tune",
              "evaluation": "local has no global model (each client's own model is evaluated)"},
    "dp-sgd": {"mu": _PROX, "finetune_epochs": "dp-sgd has no fine-tuning phase",
               "dropout": "dp-sgd's mean-aggregation GCN has no dropout",
               "engine": "dp-sgd computes per-node gradients on one model per client"},
    "opfgl": {"mu": _PROX, "local_epochs": _own("max_iters"),
              "finetune_epochs": _PAPER, "dropout": _own("dropout"),
              "lr": _own("lr_stage1, lr_stage2, lr_feat, lr_adj"),
              "weight_decay": _PAPER, "optimizer": _PAPER, "engine": _LOOP,
              "evaluation": "opfgl evaluates each client's personalised model"},
    "fedspray": {"mu": _PROX, "local_epochs": _own("local_epochs"),
                 "finetune_epochs": _PAPER, "dropout": _own("dropout"),
                 "lr": _own("lr_gnn, lr_encoder, lr_proxy"),
                 "weight_decay": _own("weight_decay"),
                 "optimizer": _PAPER, "engine": _LOOP,
                 "evaluation": "fedspray evaluates each client's personalised model"},
    "fedomd": {"mu": _PROX, "local_epochs": _own("local_steps"),
               "finetune_epochs": _PAPER,
               "model": "fedomd's model is its own orthogonal GCN (depth: --method-param ortho_layers)",
               "layers": "fedomd's model is GCNConv -> ortho_layers x OrthoConv -> GCNConv: set the depth with "
                         "--method-param ortho_layers=N",
               "dropout": _own("dropout"),
               "lr": _own("lr"),
               "weight_decay": _own("weight_decay"),
               "optimizer": _own("optimizer"), "engine": _LOOP,
               "evaluation": "fedomd evaluates each party's own model"},
    "fedgpl": {"mu": _own("mu (with fed=fedprox)"),
               "local_epochs": "fedgpl trains one epoch of split minibatches per round",
               "finetune_epochs": _PAPER, "model": "fedgpl's trunk is its own GraphCL-pretrained TransformerConv",
               "hidden": _own("hidden"), "layers": _PAPER,
               "dropout": _own("dropout"),
               "lr": _own("lr_prompt, lr_head, lr_trunk"),
               "weight_decay": _own("wd_prompt, wd_head"),
               "optimizer": _PAPER, "engine": _LOOP,
               "evaluation": "fedgpl evaluates each client's prompt and head"},
    "fedlog": {"mu": _PROX, "local_epochs": _own("local_epochs"),
               "finetune_epochs": _PAPER, "model": _PAPER,
               "hidden": _own("hidden"), "layers": _PAPER,
               "dropout": _own("dropout"),
               "lr": _own("lr"),
               "weight_decay": _own("weight_decay"),
               "optimizer": _PAPER, "engine": _LOOP,
               "evaluation": "fedlog evaluates each client's own model"},
    "gap": {"mu": _PROX, "finetune_epochs": "gap has no fine-tuning phase",
            "model": "gap trains its own encoder and classifier MLPs on its cached aggregations",
            "layers": _own("encoder_layers (and hops for the aggregation)"),
            "engine": _LOOP},
    "lapgraph": {"mu": _PROX},
}


# method -> {option: (the values it supports, why)}: an option it reads, but only at these values.
SUPPORTED: dict[str, dict[str, tuple[tuple, str]]] = {
    "opfgl": {"model": (("gcn",), "the paper's backbone"), "rounds": ((1,), "O-pFGL is one-shot")},
    "fedspray": {"model": (BACKBONES, "the paper's backbones")},
    "dp-sgd": {"model": (("gcn",), "dp-sgd trains a mean-aggregation GCN")},
}


def unsupported_value(method: str, option: str, value) -> str | None:
    """Why `method` cannot run with `option` = `value` (one line naming what is valid), or None."""
    valid, why = SUPPORTED.get(method, {}).get(option, (None, ""))
    if valid is None or value in valid:
        return None
    return (f"{method}: --{option.replace('_', '-')} {value!r} is not supported; valid: "
            f"{', '.join(map(str, valid))} ({why})")


def unused_option(method: str, option: str) -> str | None:
    """Why `method` ignores run option `option` (one clause), or None if it reads it."""
    why = UNUSED.get(method, {}).get(option)
    return None if why is None else why.format(method=method)
