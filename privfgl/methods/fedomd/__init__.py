"""FedOMD (orthogonal GCN with central-moment alignment; spec ../shared/specs/fedspray_fedomd.md
part B). run.py (the rounds and their messages), cmd.py (the moment statistics and the CMD loss),
selection.py (the parties' evaluation and round selection), params.py (defaults and options)."""
from __future__ import annotations

from privfgl.methods.fedomd.run import run_fedomd

__all__ = ["run_fedomd"]
