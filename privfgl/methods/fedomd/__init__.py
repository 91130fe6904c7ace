"""FedOMD (orthogonal GCN with central-moment alignment; spec ../shared/specs/fedspray_fedomd.md
part B). run.py (the rounds and their messages), cmd.py (the moment statistics and the CMD loss),
selection.py (the parties' evaluation and round selection), params.py (defaults and options)."""
from __future__ import annotations


def __getattr__(name: str):
    """`run_fedomd` loads run.py on first use, so importing params.py alone stays light."""
    if name == "run_fedomd":
        from privfgl.methods.fedomd.run import run_fedomd
        return run_fedomd
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["run_fedomd"]
