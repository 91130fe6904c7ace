"""The run record's DP fields, from whichever part of a run spent privacy."""
from __future__ import annotations

NO_DP = {"dp": None, "epsilon": None, "delta": None, "accountant": None}


def privacy_block(setup) -> dict:
    """{"dp", "epsilon", "delta", "accountant", ...}: from a method's own DP (setup.extras["dp"],
    e.g. DP-SGD) or the federation's message DP; all None for a run without DP."""
    source = setup.extras.get("dp") or getattr(setup.federation, "dp", None)
    return source.report() if source is not None else dict(NO_DP)
