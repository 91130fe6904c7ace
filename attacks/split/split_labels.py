"""`split-labels`: the labels behind a FedGPL client's M3 (∂L/∂H, one row per sample; spec B.3).

With a linear head, row b is Wᵀ(softmax_b − onehot(y_b))/B: rows of samples with the same label
point in similar directions. The server does not know W, so the attack clusters the rows' directions
into C groups (k-means, scikit-learn) and reports the grouping. Scores, per client, for the M3 rows of
the attacked round: the adjusted Rand index of the grouping against the true labels (baseline 0:
any grouping independent of the labels), and the label accuracy once each group is mapped to one
label (the best one-to-one mapping, as an attacker who learns one label per group would; baseline:
the same mapped accuracy for the groups shuffled at random, averaged over 200 seeded shuffles, which
is what chance gives with this many rows and these group sizes, well above 1/C for few rows).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment
from sklearn.cluster import KMeans
from sklearn.metrics import adjusted_rand_score

from attacks.base import Attack, Knowledge, NoInput, client_index
from attacks.view import AdversaryView
from privfgl.federation import client_name

M3 = "embedding_grads"
_SHUFFLES = 200


@dataclass(frozen=True)
class LabelAux:
    client: int
    round: int
    num_classes: int
    seed: int


class SplitLabels(Attack):
    name = "split-labels"

    def __init__(self, round: int = -1, clients: list[int] | None = None, seed: int = 0):
        self.round, self.clients, self.seed = round, clients, seed

    def targets(self, view: AdversaryView, knowledge: Knowledge, num_clients: int) -> list[str]:
        return [f"client{k}" for k in (self.clients if self.clients is not None else range(num_clients))]

    def declare_aux(self, setup, knowledge: Knowledge, target: str) -> LabelAux:
        return LabelAux(client_index(target), self.round, knowledge.num_classes, self.seed)

    def attack(self, view: AdversaryView, aux: LabelAux) -> dict:
        sent = [m for m in view.messages if m.name == M3 and m.sender == client_name(aux.client) and m.tensors]
        if not sent:
            raise NoInput(f"no plaintext {M3} from client{aux.client} in the {view.party}'s view")
        r = max(m.round for m in sent) if aux.round < 0 else aux.round
        rows = torch.cat([m.tensors["grad"] for m in sent if m.round == r]).double()
        if len(rows) < aux.num_classes:
            raise NoInput(f"{len(rows)} {M3} rows from client{aux.client} in round {r}: fewer than the classes")
        unit = rows / rows.norm(dim=1, keepdim=True).clamp_min(1e-12)
        groups = KMeans(aux.num_classes, n_init=10, random_state=aux.seed).fit_predict(unit.numpy())
        return {"round": r, "groups": groups}

    def truth(self, setup, target: str) -> dict[int, np.ndarray]:
        k = client_index(target)
        by_round: dict[int, list[torch.Tensor]] = {}
        for e in setup.extras.get("fedgpl_truth", []):
            if e["client"] == k:
                by_round.setdefault(e["round"], []).append(e["y"])
        return {r: torch.cat(ys).numpy() for r, ys in by_round.items()}

    def score(self, rec: dict, truth: dict, aux: LabelAux) -> tuple[dict, dict]:
        y, groups = truth[rec["round"]], rec["groups"]
        rng = np.random.default_rng(aux.seed)
        chance = np.mean([mapped_accuracy(rng.permutation(groups), y, aux.num_classes) for _ in range(_SHUFFLES)])
        metrics = {"round": rec["round"], "samples": int(len(y)), "ari": float(adjusted_rand_score(y, groups)),
                   "label_acc": mapped_accuracy(groups, y, aux.num_classes)}
        baseline = {"ari": 0.0, "label_acc": float(chance),
                    "kind": f"groups independent of the labels: the mean over {_SHUFFLES} shuffles of the groups"}
        return metrics, baseline


def mapped_accuracy(groups: np.ndarray, y: np.ndarray, num_classes: int) -> float:
    """Label accuracy once each group is mapped to one label by the best one-to-one mapping."""
    counts = np.zeros((num_classes, num_classes))
    np.add.at(counts, (groups, y), 1)
    g, label = linear_sum_assignment(-counts)
    return float(counts[g, label].sum() / len(y))
