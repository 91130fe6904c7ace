"""O-pFGL (Yan et al., one-shot personalised FGL; spec ../shared/specs/opfgl.md). run.py (the one
round and its messages), stats.py (the clients' class statistics), condense.py (the server's
pseudo-graph), personalize.py (the two local training stages), dp.py (DP on the statistics),
params.py (defaults and the per-(dataset, partition) presets)."""
from __future__ import annotations


def __getattr__(name: str):
    """`run_opfgl` loads run.py on first use, so importing params.py alone stays light."""
    if name == "run_opfgl":
        from privfgl.methods.opfgl.run import run_opfgl
        return run_opfgl
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["run_opfgl"]
