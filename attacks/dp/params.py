"""The KEY=VALUE params every dp-audit design checks the same way (one line per bad value)."""
from __future__ import annotations


def confidence_level(confidence) -> float:
    """confidence as a float in (0.5, 1); ValueError naming it otherwise."""
    try:
        confidence = float(confidence)
    except (TypeError, ValueError):
        raise ValueError(f"dp-audit: confidence={confidence!r}: expected a number in (0.5, 1)") from None
    if not 0.5 < confidence < 1:
        raise ValueError(f"dp-audit: confidence={confidence}: valid: in (0.5, 1)")
    return confidence


def family_size(family) -> int:
    """family (how many audits of one mechanism are read as one test) as an integer ≥ 1; ValueError naming
    it otherwise."""
    if isinstance(family, bool) or not isinstance(family, int) or family < 1:
        raise ValueError(f"dp-audit: family={family!r}: the number of audits read as one test; valid: an integer >= 1")
    return family


def scale_and_confidence(scale, confidence) -> tuple[float, float]:
    """(scale, confidence) as floats: scale ≥ 1 (a canary's raw norm in units of the clip), confidence in
    (0.5, 1). ValueError naming the bad one otherwise."""
    try:
        scale, confidence = float(scale), float(confidence)
    except (TypeError, ValueError):
        raise ValueError(f"dp-audit: scale={scale!r}, confidence={confidence!r}: expected numbers") from None
    if not scale >= 1:
        raise ValueError(f"dp-audit: scale={scale}: the canary's raw norm in units of the clip; valid: >= 1")
    return scale, confidence_level(confidence)


def check_canaries_and_client(canaries, client) -> None:
    """canaries an integer ≥ 4, client an index ≥ 0 (the designs that place canaries in one client); ValueError
    naming the bad one otherwise."""
    if not isinstance(canaries, int) or canaries < 4:
        raise ValueError(f"dp-audit: canaries={canaries!r}: expected an integer >= 4")
    if not isinstance(client, int) or client < 0:
        raise ValueError(f"dp-audit: client={client!r}: expected a client index >= 0")
