"""O-pFGL (Yan et al., one-shot personalised FGL; spec ../shared/specs/opfgl.md). run.py (the one
round and its messages), stats.py (the clients' class statistics), condense.py (the server's
pseudo-graph), personalize.py (the two local training stages), dp.py (DP on the statistics),
params.py (defaults and the per-(dataset, partition) presets)."""
from __future__ import annotations

from privfgl.methods.opfgl.run import run_opfgl

__all__ = ["run_opfgl"]
