"""FedLoG (Kim et al., "Subgraph Federated Learning for Local Generalization"; spec
../shared/specs/fedlog_fedgpl.md part A). model.py (GraphSAGE embedder, prototype classifiers,
degree-gated mixture), generator.py (neighbour generators, pretrained once and cached),
client.py (local fitting and generalisation, the pre-weighted uploads), server.py (aggregation
from revealed sums), params.py, run.py (the rounds and their messages)."""
from __future__ import annotations

from privfgl.methods.fedlog.run import run_fedlog

__all__ = ["run_fedlog"]
