"""FedSpray (Fu et al., structure proxy alignment, KDD'24; spec ../shared/specs/fedspray_fedomd.md
part A). run.py (the rounds and their messages), model.py (the stacked encoder, GNN and heads),
params.py (defaults and the authors' code choices as options)."""
from __future__ import annotations


def __getattr__(name: str):
    """`run_fedspray` loads run.py on first use, so importing params.py alone stays light."""
    if name == "run_fedspray":
        from privfgl.methods.fedspray.run import run_fedspray
        return run_fedspray
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["run_fedspray"]
