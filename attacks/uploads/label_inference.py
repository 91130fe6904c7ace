"""Label-distribution inference: each client's training-label distribution from what it uploads.

- FedAvg/FedProx (iLRG/EC-LDA style): the last bias's update is −lr·mean_i(p_i − y_i) (one SGD
  step), so class counts are n·(p̄ − g) with p̄ the model's mean prediction on prior-valued
  features (attacks.uploads.gradient_inversion.label_counts; no graph needed). Needs `--optimizer sgd`.
- O-pFGL: the uploaded `class_counts` hold the counts themselves (n_orig: labelled nodes per class).
- FedSpray: the proxy upload's weights p^(k) (Eq. 15) are the training-label fractions themselves.
- FedOMD: the last bias's first Adam step (attacks.uploads.fedomd_labels; signs only).
Under a secure protocol only the revealed sum exists: the attack on it yields the global
distribution, scored against each client's own ("aggregate:clientK").
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from attacks.base import Attack, Knowledge, NoInput, client_index
from attacks.uploads.fedomd_labels import fedomd_label_distribution
from attacks.uploads.gradient_inversion import label_counts
from attacks.uploads.metrics import distribution_metrics
from attacks.uploads.updates import aggregate_update, client_update
from attacks.view import AdversaryView
from privfgl.federation import SERVER, client_name


@dataclass(frozen=True)
class LabelAux:
    target: str
    round: int
    knowledge: Knowledge


class LabelInference(Attack):
    """`label-inference`: a distribution [C] per target."""

    name = "label-inference"

    def __init__(self, round: int = 0, clients: list[int] | None = None):
        self.round, self.clients = round, clients

    def targets(self, view: AdversaryView, knowledge: Knowledge, num_clients: int) -> list[str]:
        clients = self.clients if self.clients is not None else range(num_clients)
        return [f"client{k}" for k in clients] + [f"aggregate:client{k}" for k in clients]

    def declare_aux(self, setup, knowledge: Knowledge, target: str) -> LabelAux:
        return LabelAux(target, self.round, knowledge)

    def attack(self, view: AdversaryView, aux: LabelAux) -> torch.Tensor:
        k, aggregate = aux.knowledge, aux.target.startswith("aggregate")
        if k.method == "opfgl":
            name, sender = ("class_counts:sum", SERVER) if aggregate else ("class_counts", client_name(client_index(aux.target)))
            payload = view.payload(name, 0, sender)
            if payload is None:
                raise NoInput(f"no plaintext {name} from {sender} in the {view.party}'s view")
            return payload["n_orig"].double()
        if k.method == "fedspray":  # the proxy aggregation's weights: class fractions (or counts) of the labels
            name, sender = ("proxy_update:sum", SERVER) if aggregate else ("proxy_update", client_name(client_index(aux.target)))
            payload = view.payload(name, aux.round, sender)
            if payload is None:
                raise NoInput(f"no plaintext {name} from {sender} in round {aux.round} in the {view.party}'s view")
            return payload["weight"].double()
        if k.method == "fedomd":  # one Adam step from the global model: signs of the last bias's gradient
            update = aggregate_update(view, aux.round) if aggregate else client_update(view, client_index(aux.target), aux.round)
            if update is None:
                raise NoInput(f"no plaintext update of {aux.target} in round {aux.round} in the {view.party}'s view")
            return fedomd_label_distribution(update)
        if k.method not in ("fedavg", "fedprox", "dp-fedavg"):
            raise NoInput(f"label-inference reads fedavg/fedprox/dp-fedavg/fedomd updates, opfgl counts or fedspray proxy weights, "
                          f"not {k.method}")
        if k.optimizer != "sgd" or k.dropout != 0:
            raise NoInput("the update-based estimate needs --optimizer sgd and --dropout 0 (Adam's first step leaks only signs)")
        update = aggregate_update(view, aux.round) if aggregate else client_update(view, client_index(aux.target), aux.round)
        if update is None:
            raise NoInput(f"no plaintext update of {aux.target} in round {aux.round} in the {view.party}'s view")
        n = update.n if update.n is not None else 1.0  # DP-FedAvg's deltas: a distribution (n is not sent)
        return label_counts(update, k, None, max(int(round(n)), 1), None, n).double()

    def truth(self, setup, target: str) -> torch.Tensor:
        c = setup.clients[client_index(target)]
        return torch.bincount(c.y[c.train_mask], minlength=setup.num_classes).double()

    def score(self, rec: torch.Tensor, truth: torch.Tensor, aux: LabelAux) -> tuple[dict, dict]:
        k = aux.knowledge
        uniform = torch.full((k.num_classes,), 1.0 / k.num_classes)
        baseline = {f"uniform_{m}": v for m, v in distribution_metrics(uniform, truth).items()}
        baseline.update({f"prior_{m}": v for m, v in distribution_metrics(k.label_prior, truth).items()})
        return distribution_metrics(rec, truth), baseline
