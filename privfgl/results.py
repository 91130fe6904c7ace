"""The run record (DESIGN.md "results schema") and its short text table."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

from privfgl.privacy import privacy_block
from privfgl.privacy.trust import trust_block

SCHEMA_VERSION = 1


def make_record(config: dict, setup, total_s: float) -> dict:
    """The JSON-serialisable record of one finished run."""
    from privfgl.data.canaries import record_block
    fed = setup.federation
    cost = fed.cost()
    cost["rounds"] = config.get("rounds")
    privacy = privacy_block(setup)
    spec = fed.dp.spec if getattr(fed, "dp", None) is not None else None
    record = {
        "schema": SCHEMA_VERSION,
        "config": config,
        "metrics": {**setup.tracker.summary(), **setup.extras.get("metrics", {})},  # + a method's own metrics
        **({"partition_file": setup.extras["partition_file"]}  # --partition file:PATH: path, sha256, coverage
           if "partition_file" in setup.extras else {}),
        **({"split_file": setup.extras["split_file"]}  # --split-file PATH: path, sha256, part sizes
           if "split_file" in setup.extras else {}),
        **({"data_regime": setup.extras["data_regime"]} if "data_regime" in setup.extras else {}),  # --evaluate
        **({"canaries": record_block(setup.extras["canaries"])} if "canaries" in setup.extras else {}),  # --canaries
        **({"canary_clients": setup.extras["canary_clients"].record()}  # dp-audit's canary clients
           if "canary_clients" in setup.extras else {}),
        **({"gradient_canaries": setup.extras["gradient_canaries"].record()}  # dp-audit's DP-SGD canaries
           if "gradient_canaries" in setup.extras else {}),
        **({"canary_rows": setup.extras["split_canaries"].record()}  # dp-audit's canary rows (FedGPL split DP)
           if "split_canaries" in setup.extras else {}),
        **({"canary_nodes": setup.extras["canary_nodes"].record()}  # dp-audit's canary nodes (O-pFGL)
           if "canary_nodes" in setup.extras else {}),
        "cost": cost,
        "time": {"total_s": round(total_s, 4), "phases": fed.timer.as_dict(),
                 **({"caches": setup.extras["caches"]} if "caches" in setup.extras else {})},  # hit/miss, provenance
        "privacy": {
            "protocol": config.get("protocol"),
            "server_view": server_view_summary(fed),
            **privacy,
            "trust": {**trust_block(fed.protocol, privacy.get("dp"), spec), **setup.extras.get("trust", {})},
        },
        "attacks": [],
    }
    record["privacy"]["auditor_only"] = auditor_only(record)
    return record


# The record's fields about single clients that no message to the server carried: only the auditor
# (who evaluates every client on its private labels) sees them. JSON paths; `*` is any key. Every
# metric is the auditor's (the server receives no evaluation message); these are the per-client ones.
AUDITOR_ONLY = (
    "metrics.per_client",  # each client's node, validation and test counts, accuracies and correct predictions
    "metrics.settings.*.per_client",  # --evaluate: the same per evaluation setting
    "metrics.last.settings.*.per_client",
    "metrics.fedlog.gamma_mean",  # each FedLoG client's mean class curriculum
    "metrics.fedlog.warmup_epochs_run",
    "data_regime",  # --evaluate: which classes and nodes each client was made to lack
    "attacks",  # the findings, scored against the clients' private data (privfgl audit fills it)
)


def auditor_only(record: dict) -> list[str]:
    """The AUDITOR_ONLY paths that `record` holds, `*` spelled out (e.g. metrics.settings.seen.per_client)."""
    def expand(node, parts: list[str], path: str) -> list[str]:
        if not parts:
            return [path]
        if not isinstance(node, dict):
            return []
        keys = sorted(node) if parts[0] == "*" else [parts[0]] if parts[0] in node else []
        return [p for k in keys for p in expand(node[k], parts[1:], f"{path}.{k}" if path else k)]
    return [p for pattern in AUDITOR_ONLY for p in expand(record, pattern.split("."), "")]


def server_view_summary(fed) -> str:
    """One line on what the server observed, e.g. 'plaintext: 1000 messages; aggregate: 100'."""
    counts = fed.transcript.summary("server")
    return "; ".join(f"{k}: {v}" for k, v in sorted(counts.items())) or "nothing"


def write_record(record: dict, path: str | os.PathLike) -> Path:
    """Write atomically (temp file + rename) so an interrupted run never leaves half a record. A
    symlink is written through (its target is replaced, the link stays)."""
    path = Path(os.path.realpath(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(record, indent=2, default=_json_default))
    os.replace(tmp, path)
    return path


def _json_default(o):
    if hasattr(o, "tolist"):
        return o.tolist()
    if isinstance(o, (set, tuple)):
        return list(o)
    return str(o)


def _fmt(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.4f}" if isinstance(x, float) else str(x)


def format_table(records: list[dict]) -> str:
    """A short fixed-width table: one row per record."""
    cols = ["method", "dataset", "protocol", "test_acc", "test_f1_macro", "minority_acc", "best_round",
            "MB_up", "seconds"]
    rows = []
    for r in records:
        c, m = r["config"], r["metrics"]
        rows.append([c["method"], c.get("dataset_name", c["dataset"]), c["protocol"], m["test_acc"], m["test_f1_macro"],
                     m.get("minority_acc"), m["best_round"], r["cost"]["bytes_up"] / 1e6, r["time"]["total_s"]])
    cells = [cols] + [[_fmt(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cols))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells)
