"""Each method's own defaults: the settings its paper ran, filled in where the user set nothing.

`apply_method_defaults(values)` takes the run options a user gave (a dict with RunConfig's field
names, e.g. from the CLI flags, a --config file or a sweep cell) and returns them completed by the
method's defaults, plus the dict of what it filled in (recorded as the run record's
`config.method_defaults`). A setting the user gave always wins; a method parameter the user gave
(`method_params`) wins over the method's default parameters key by key.

    opfgl     one round (one-shot); the partition fixed at seed 42 and the authors' per-(dataset,
              partition) preset where one exists (cora|citeseer|pubmed × louvain+|metis+)
    fedomd    the 1 % / 20 % / 20 % random split per client, up to 1000 rounds (early stopping)
    fedspray  the 40 / 30 / 30 split per client and class, Louvain+
    fedlog    the 40 / 30 / 30 split, METIS
    fedgpl    its own clients (partition tasks), 9 of them, 50 rounds
    the rest  RunConfig's defaults (O-pFGL's setting: 20 / 40 / 40, Louvain, 100 rounds)
"""
from __future__ import annotations

from privfgl.methods.opfgl.params import PRESET_PARTITION_SEED, PRESETS as OPFGL_PRESETS

# Plain run options per method (RunConfig field -> value).
METHOD_DEFAULTS: dict[str, dict] = {
    "opfgl": {"rounds": 1, "partition_seed": PRESET_PARTITION_SEED},
    "fedomd": {"split": (0.01, 0.2, 0.2), "split_mode": "random", "rounds": 1000},
    "fedspray": {"split": (0.4, 0.3, 0.3), "partition": "louvain+"},
    "fedlog": {"split": (0.4, 0.3, 0.3), "partition": "metis"},
    "fedgpl": {"partition": "tasks", "clients": 9, "rounds": 50},
}


def _method_params(method: str, dataset: str, partition: str) -> dict:
    """Default method parameters that depend on the dataset and partition (O-pFGL's presets)."""
    if method == "opfgl" and f"{dataset}-{partition}" in OPFGL_PRESETS:
        return {"preset": f"{dataset}-{partition}"}
    return {}


def apply_method_defaults(values: dict, fallback: dict) -> tuple[dict, dict]:
    """(values completed by the method's defaults, what was filled in). `fallback` holds the values
    used for keys absent from both (RunConfig's defaults: method, dataset, partition)."""
    method = values.get("method", fallback["method"])
    applied = {k: v for k, v in METHOD_DEFAULTS.get(method, {}).items() if k not in values}
    done = {**values, **applied}
    dataset = done.get("dataset", fallback["dataset"])
    partition = done.get("partition", fallback["partition"])
    given_params = dict(done.get("method_params") or {})
    params = {k: v for k, v in _method_params(method, dataset, partition).items() if k not in given_params}
    if params:
        applied["method_params"] = params
        done["method_params"] = {**params, **given_params}
    return done, applied
