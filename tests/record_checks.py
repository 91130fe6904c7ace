"""Checks on a run record shared by the tests: what only the auditor sees is named as such."""
from __future__ import annotations

# Blocks whose per-client values the server does see: the bytes it received from each client
# (cost) and the run's settings (config); privacy holds the auditor_only list itself.
SERVER_SIDE = ("config", "cost", "privacy")


def per_client_values(node, num_clients: int, path: str = ""):
    """(path, value) of every list with one entry per client (not per round), and of every entry naming a "client",
    below `node`; paths as privacy.auditor_only spells them (list entries as [i])."""
    if isinstance(node, dict):
        if "client" in node:
            yield path, node
        for key, value in node.items():
            yield from per_client_values(value, num_clients, f"{path}.{key}" if path else key)
    elif isinstance(node, list):
        per_round = bool(node) and isinstance(node[0], dict) and "round" in node[0]  # e.g. metrics.curve
        if len(node) == num_clients and not per_round:
            yield path, node
        for i, value in enumerate(node):
            yield from per_client_values(value, num_clients, f"{path}[{i}]")


def assert_per_client_values_are_auditor_only(record: dict) -> None:
    """Every per-client value outside SERVER_SIDE sits under a path that privacy.auditor_only names,
    and every path named there exists in the record."""
    listed = record["privacy"]["auditor_only"]
    for path in listed:
        node = record
        for part in path.split("."):
            node = node[part]  # KeyError: the list names a field the record lacks
    num_clients = record["config"]["clients"]
    hidden = [(p, v) for key, block in record.items() if key not in SERVER_SIDE
              for p, v in per_client_values(block, num_clients, key)]
    assert hidden, "no per-client value found: the check would pass on anything"
    unlisted = sorted({p for p, _ in hidden if not any(p == a or p.startswith((a + ".", a + "[")) for a in listed)})
    assert not unlisted, f"per-client values the record does not name as auditor-only: {unlisted}"
