"""FedLoG (Kim et al., "Subgraph Federated Learning for Local Generalization"; spec
../shared/specs/fedlog_fedgpl.md part A). model.py (GraphSAGE embedder, prototype classifiers,
degree-gated mixture), generator.py (neighbour generators, pretrained once and cached),
client.py (local fitting and generalisation, the pre-weighted uploads), server.py (aggregation
from revealed sums), params.py, run.py (the rounds and their messages)."""
from __future__ import annotations


def __getattr__(name: str):
    """`run_fedlog` loads run.py on first use, so importing params.py alone stays light."""
    if name == "run_fedlog":
        from privfgl.methods.fedlog.run import run_fedlog
        return run_fedlog
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["run_fedlog"]
