"""FedSpray (Fu et al., structure proxy alignment, KDD'24; spec ../shared/specs/fedspray_fedomd.md
part A). run.py (the rounds and their messages), model.py (the stacked encoder, GNN and heads),
params.py (defaults and the authors' code choices as options)."""
from __future__ import annotations

from privfgl.methods.fedspray.run import run_fedspray

__all__ = ["run_fedspray"]
