"""`split-topology`: how much of a FedGPL client's graph the server receives in M1 (a report, not an
inference: M1's edge_index and batch vector travel in the clear under every protocol and every --dp).

Per client, for the attacked round: the M1 rows and edges received, their share of the rows and
edges of the sample graphs the client put through its prompt, and the distinct real nodes whose
(prompted) features and adjacency the server saw. Baseline: 0 (a split that sent no topology).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from attacks.base import Attack, Knowledge, NoInput, client_index
from attacks.view import AdversaryView
from privfgl.federation import client_name

M1 = "prompted_graph"


@dataclass(frozen=True)
class TopologyAux:
    client: int
    round: int


class SplitTopology(Attack):
    name = "split-topology"

    def __init__(self, round: int = -1, clients: list[int] | None = None):
        self.round, self.clients = round, clients

    def targets(self, view: AdversaryView, knowledge: Knowledge, num_clients: int) -> list[str]:
        return [f"client{k}" for k in (self.clients if self.clients is not None else range(num_clients))]

    def declare_aux(self, setup, knowledge: Knowledge, target: str) -> TopologyAux:
        return TopologyAux(client_index(target), self.round)

    def attack(self, view: AdversaryView, aux: TopologyAux) -> dict:
        sent = [m for m in view.messages if m.name == M1 and m.sender == client_name(aux.client) and m.tensors]
        if not sent:
            raise NoInput(f"no plaintext {M1} from client{aux.client} in the {view.party}'s view")
        r = max(m.round for m in sent) if aux.round < 0 else aux.round
        this = [m for m in sent if m.round == r]
        return {"round": r, "rows": sum(int(m.tensors["x"].shape[0]) for m in this),
                "edges": sum(int(m.tensors["edge_index"].shape[1]) for m in this), "messages": len(this)}

    def truth(self, setup, target: str) -> dict[int, dict]:
        k = client_index(target)
        out: dict[int, dict] = {}
        for e in setup.extras.get("fedgpl_truth", []):
            if e["client"] != k:
                continue
            t = out.setdefault(e["round"], {"rows": 0, "edges": 0, "ids": []})
            t["rows"] += e["input_rows"]
            t["edges"] += e["input_edges"]
            if e["node_ids"] is not None:
                t["ids"].append(e["node_ids"][e["node_ids"] >= 0])
        return out

    def score(self, rec: dict, truth: dict, aux: TopologyAux) -> tuple[dict, dict]:
        t = truth[rec["round"]]
        metrics = {"round": rec["round"], "rows_received": rec["rows"], "edges_received": rec["edges"],
                   "row_share": rec["rows"] / max(t["rows"], 1), "edge_share": rec["edges"] / max(t["edges"], 1)}
        if t["ids"]:
            metrics["distinct_nodes_seen"] = int(torch.unique(torch.cat(t["ids"])).numel())
        return metrics, {"edges_received": 0, "row_share": 0.0, "edge_share": 0.0}
