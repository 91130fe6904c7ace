"""Protocol fixtures: one instance per backend/preset for the whole session (HE key generation and
CrypTen import happen once)."""

from __future__ import annotations

import pytest

from protocol_cases import BACKENDS

from protocols import get_protocol

@pytest.fixture(scope="session")
def protocol_cache():
    """Builds each backend of BACKENDS once; call it with a BACKENDS key."""
    built = {}

    def get(key: str):
        if key not in built:
            name, params, _, _ = BACKENDS[key]
            built[key] = get_protocol(name, **params)
        return built[key]

    yield get
    for protocol in built.values():
        protocol.close()
