"""Link stealing from trained models (He et al., "Stealing Links from Graph Neural Networks", USENIX
Security 2021, attack-0: unsupervised): `--attack link-stealing[:query=oracle|features,target=all|global|clients,...]`.

Nodes joined by an edge get similar GNN posteriors (the convolution mixes their neighbourhoods), so
the similarity of two nodes' posteriors predicts an edge. For client K's graph the attack scores
every node pair by the correlation (and cosine) similarity of the posteriors of
- target "global:clientK": the final global model (in the server's view under every protocol);
- target "clientK": client K's own final model (its last plaintext upload; none under a secure protocol).
Declared knowledge (aux): client K's node features (the candidate nodes, as in He et al.), and, with
`query=oracle` (default, He et al.'s threat model), black-box answers of the model deployed on the
client's graph: the posteriors the target model gives on client K's graph, computed by the runtime
from that model (the adversary never sees the edges). With `query=features` there is no query
access: the adversary runs the model from its view on the features alone (no edges, self-loops
only), i.e. what the weights alone say about links.
Scored (auditor side) as edge AUC / AP over client K's edges against as many non-edges sampled
degree-matched (for edge (u, v): a non-neighbour w of u whose degree is closest to v's), beside the
random baseline (AUC 0.5, AP 0.5) and the feature-similarity baseline (cosine of the feature rows).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.metrics import average_precision_score, roc_auc_score

from attacks.base import Attack, Knowledge, NoInput, client_index, needs_node_clients
from attacks.view import AdversaryView
from attacks.models.view_models import MODEL_METHODS, final_client_model, final_global_model, model_logits
from privfgl.federation import SERVER, client_name

QUERIES = ("oracle", "features")
TARGETS = ("all", "global", "clients")


@dataclass(frozen=True)
class LinkAux:
    target: str
    query: str
    knowledge: Knowledge
    x: torch.Tensor  # [n, f] client K's node features (a copy)
    posteriors: torch.Tensor | None  # [n, C] the deployed model's answers on the client's graph (query=oracle)
    seed: int


def pair_similarity(p: torch.Tensor, metric: str) -> torch.Tensor:
    """[n, n] similarity of the rows of p: cosine, or correlation (cosine of the centred rows)."""
    p = p.double()
    if metric == "correlation":
        p = p - p.mean(1, keepdim=True)
    p = p / p.norm(dim=1, keepdim=True).clamp(min=1e-12)
    return p @ p.T


def degree_matched_pairs(edge_index: torch.Tensor, num_nodes: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(pos [E, 2] the undirected edges u < v, neg [E, 2] one non-edge per edge): for edge (u, v)
    (u, v in random order) a non-neighbour w ≠ u of u with |deg(w) − deg(v)| smallest, ties at random."""
    rng = np.random.default_rng(seed)
    ei = edge_index.numpy()
    ei = ei[:, ei[0] != ei[1]]
    pos = np.unique(np.sort(ei.T, axis=1), axis=0)
    adj = np.zeros((num_nodes, num_nodes), dtype=bool)
    adj[pos[:, 0], pos[:, 1]] = adj[pos[:, 1], pos[:, 0]] = True
    deg = adj.sum(1)
    neg = []
    for u, v in pos:
        if rng.random() < 0.5:
            u, v = v, u
        free = np.flatnonzero(~adj[u])
        free = free[free != u]
        if free.size == 0:
            continue
        gap = np.abs(deg[free] - deg[v])
        best = free[gap == gap.min()]
        neg.append((u, int(rng.choice(best))))
    return pos, np.array(neg, dtype=int).reshape(-1, 2)


def edge_scores(sim: torch.Tensor, pos: np.ndarray, neg: np.ndarray) -> dict[str, float]:
    s = sim.numpy()
    y = np.r_[np.ones(len(pos)), np.zeros(len(neg))]
    v = np.r_[s[pos[:, 0], pos[:, 1]], s[neg[:, 0], neg[:, 1]]]
    if not 0 < y.sum() < y.size:
        return {"auc": float("nan"), "ap": float("nan")}
    return {"auc": float(roc_auc_score(y, v)), "ap": float(average_precision_score(y, v))}


class LinkStealing(Attack):
    """`link-stealing`: a pair-similarity matrix [n, n] per target graph (higher = more likely an edge)."""

    name = "link-stealing"

    def __init__(self, query: str = "oracle", target: str = "all", clients: list[int] | None = None, seed: int = 0):
        if query not in QUERIES:
            raise ValueError(f"query must be one of {', '.join(QUERIES)}, got {query!r}")
        if target not in TARGETS:
            raise ValueError(f"target must be one of {', '.join(TARGETS)}, got {target!r}")
        self.query, self.target, self.clients, self.seed = query, target, clients, seed

    def targets(self, view: AdversaryView, knowledge: Knowledge, num_clients: int) -> list[str]:
        clients = list(self.clients if self.clients is not None else range(num_clients))
        out = [f"global:client{k}" for k in clients] if self.target in ("all", "global") else []
        return out + ([f"client{k}" for k in clients] if self.target in ("all", "clients") else [])

    def declare_aux(self, setup, knowledge: Knowledge, target: str) -> LinkAux:
        needs_node_clients(self.name, knowledge.method)
        c = setup.clients[client_index(target)]
        post = None
        if self.query == "oracle" and knowledge.method in MODEL_METHODS:  # the deployed model answers queries
            t = setup.federation.transcript
            if target.startswith("global"):
                params = final_global_model(t.view(client_name(client_index(target))))
            else:
                params = final_client_model(t.view(SERVER) + t.view(client_name(client_index(target))),
                                            knowledge.method, client_index(target))
            if params is not None:
                k = knowledge
                post = F.softmax(model_logits(k.method, k.model, k.layers, k.hidden, k.num_classes, params, c.x,
                                              c.edge_index).double(), dim=1)
        return LinkAux(target, self.query, knowledge, c.x.detach().clone(), post, self.seed)

    def attack(self, view: AdversaryView, aux: LinkAux) -> dict[str, torch.Tensor]:
        k = aux.knowledge
        if k.method not in MODEL_METHODS:
            raise NoInput(f"link-stealing reads the models of {', '.join(MODEL_METHODS)}, not {k.method}")
        if aux.target.startswith("global"):
            params = final_global_model(view.messages)
        else:
            params = final_client_model(view.messages, k.method, client_index(aux.target))
        if params is None:  # the target model is not in the view: nothing to attack (nor to query)
            raise NoInput(f"no plaintext model of {aux.target.split(':')[0]} in the {view.party}'s view")
        if aux.query == "oracle":
            if aux.posteriors is None:
                raise NoInput(f"no query answers for {aux.target}")
            post = aux.posteriors
        else:
            no_edges = torch.zeros(2, 0, dtype=torch.long)
            post = F.softmax(model_logits(k.method, k.model, k.layers, k.hidden, k.num_classes, params, aux.x,
                                          no_edges).double(), dim=1)
        return {m: pair_similarity(post, m) for m in ("correlation", "cosine")}

    def truth(self, setup, target: str) -> torch.Tensor:
        c = setup.clients[client_index(target)]
        return c.edge_index.detach().clone()

    def score(self, sims: dict[str, torch.Tensor], edge_index: torch.Tensor, aux: LinkAux) -> tuple[dict, dict]:
        n = aux.x.shape[0]
        pos, neg = degree_matched_pairs(edge_index, n, aux.seed)
        corr, cos = edge_scores(sims["correlation"], pos, neg), edge_scores(sims["cosine"], pos, neg)
        feat = edge_scores(pair_similarity(aux.x, "cosine"), pos, neg)
        metrics = {"query": aux.query, "auc": corr["auc"], "ap": corr["ap"], "cosine_auc": cos["auc"],
                   "cosine_ap": cos["ap"], "edges": int(len(pos)), "non_edges": int(len(neg)), "nodes": n}
        baseline = {"auc": 0.5, "ap": len(pos) / max(len(pos) + len(neg), 1), "auc_aux": feat["auc"],
                    "ap_aux": feat["ap"],
                    "kind": "random scores (auc, ap); *_aux: the aux alone, cosine of the node features"}
        return metrics, baseline
