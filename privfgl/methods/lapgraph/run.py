"""LapGraph in the federation (`--method lapgraph`): each client privatises its own subgraph's adjacency once
(release.py), then the clients train the run's model (GCN by default) by FedAvg on their released graphs,
uploads through `--protocol` as FedAvg's (privfgl/methods/fedavg.py).

The true graph enters only the release: training and evaluation (each client's own released graph, its
own masks) read the released edges. Unit: one undirected edge of a client's graph; ε = ε_entries + ε_count,
δ = 0. Everything after the release is post-processing of it and of the client's features and labels,
which edge-level DP does not protect. An auditor (attacks/dp/lapgraph_audit.py) may set
`setup.extras["lapgraph_canaries"]`: that client's noisy canary entries are then sent to the server
("lapgraph_release"), a disclosure made only in an audit. In process the FedAvg trainers are built on the
released graphs; on Ray actors (`--engine ray`) each actor's trainers take its clients' state["graph"].
"""
from __future__ import annotations

from dataclasses import replace

from privfgl.errors import ConfigError
from privfgl.methods.base import Setup
from privfgl.methods.fedavg import run_fedavg
from privfgl.methods.lapgraph.params import LapGraphParams, resolve_params
from privfgl.methods.lapgraph.release import release
from privfgl.privacy.noise import NoiseSource

MESSAGE = "lapgraph_release"
NOT_PROTECTED = ("edge-level DP protects the edges only: the model trains on each client's features and labels, "
                 "and its uploads reveal what FedAvg uploads reveal about them")


class LapGraphReport:
    """The run record's privacy fields for LapGraph."""

    def __init__(self, p: LapGraphParams, source: NoiseSource):
        self.p, self.source = p, source

    def report(self) -> dict:
        p = self.p
        dp = {"method": "lapgraph", "unit": "one undirected edge {u, v} of a client's graph",
              "mechanism": "laplace", "releases": "once per client, before training",
              "sensitivity": {"entries_l1": 1.0, "count_l1": 1.0},
              "epsilon_entries": p.epsilon_entries, "epsilon_count": p.epsilon_count, "count_share": p.count_share,
              "noise_scale_entries": 1.0 / p.epsilon_entries, "noise_scale_count": 1.0 / p.epsilon_count,
              "rank": p.rank or None, "select": p.select, "target_epsilon": p.epsilon,
              "composition": "basic composition of two pure-DP Laplace releases: ε = ε_entries + ε_count",
              "not_protected": NOT_PROTECTED, **self.source.provenance()}
        return {"dp": dp, "epsilon": p.epsilon_entries + p.epsilon_count, "delta": 0.0, "accountant": "laplace"}


def _release(k: int, state: dict, data, p: LapGraphParams, source: NoiseSource, canaries) -> dict | None:
    """Client k: its released graph (a copy of its data with the released edges) into its state; the audited
    client (canaries.client) returns its noisy canary entries, the others nothing."""
    audited = canaries is not None and canaries.client == k
    out = release(data.edge_index, int(data.num_nodes), p, source.for_client(k),
                  canaries.entries() if audited else None)
    graph = data.clone()
    graph.edge_index = out.edge_index
    state["graph"] = graph
    return {"canary_entries": out.canaries} if audited else None


def _size(k: int, state: dict, data) -> int:
    """Client k's node count (public: a size)."""
    return int(data.num_nodes)


def check_sizes(p: LapGraphParams, sizes: list[int]) -> None:
    """ConfigError (one line) when a client's dense n×n matrix exceeds max_nodes."""
    if max(sizes) > p.max_nodes:
        raise ConfigError(f"lapgraph: a client has {max(sizes)} nodes; its dense {max(sizes)}x{max(sizes)} "
                          f"adjacency is over the limit max_nodes={p.max_nodes} (valid: clients of at most "
                          f"max_nodes nodes; raise --method-param max_nodes=N if N² float64 fit in memory)")


def run_lapgraph(setup: Setup) -> None:
    """Each client's release where the client is, then FedAvg on the released graphs."""
    p = resolve_params(setup.method.params)
    clients = setup.steps()
    check_sizes(p, list(clients.each(_size).values()))
    source = NoiseSource.from_setting(p.noise_seed)
    setup.extras["dp"] = LapGraphReport(p, source)
    with setup.federation.timer.phase("dp_release"):
        clients.messages(setup.federation, 0, MESSAGE, _release, p, source, setup.extras.get("lapgraph_canaries"))
    if setup.remote is None:
        setup = replace(setup, clients=[state["graph"] for state in clients.states])
    run_fedavg(setup)
