"""The attack interface: the runtime runs the protocol, the attacker reconstructs from its view.

    attack(view, aux) -> reconstruction        adversary side: only these two inputs
    score(reconstruction, truth) -> Finding    auditor side: truth comes from the runtime

`declare_aux` and `truth` are the runtime's side: they read the setup and hand over only what they
name (aux: the declared auxiliary knowledge, e.g. a client's public graph; truth: the private data
scored against). Every finding carries the attack's trivial baseline next to its score.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import torch

from attacks.view import AdversaryView


@dataclass(frozen=True)
class Knowledge:
    """Public facts about the run that every aux may draw on: the model and optimizer settings
    (the protocol is public), the data dimensions and population priors (feature marginals [f],
    label distribution [C], e.g. from a public copy of the dataset). `noised_messages`: the messages
    whose per-client uploads carry DP noise (the run's public `--dp` spec, mode local or
    distributed); an attack may then estimate the noise level from the upload itself."""
    method: str
    model: str
    layers: int
    hidden: int
    num_features: int
    num_classes: int
    lr: float
    weight_decay: float
    local_epochs: int
    optimizer: str
    dropout: float
    feature_prior: torch.Tensor
    label_prior: torch.Tensor
    noised_messages: tuple[str, ...] = ()


@dataclass(frozen=True)
class Finding:
    """One row of the run record's `attacks` list."""
    name: str
    target: str
    metrics: dict
    baseline: dict
    details: dict = field(default_factory=dict)

    def as_record(self) -> dict:
        return {"name": self.name, "target": self.target, "metrics": self.metrics, "baseline": self.baseline,
                **({"details": self.details} if self.details else {})}


class NoInput(Exception):
    """The adversary's view holds nothing this attack can use for this target (e.g. only ciphertexts)."""


class NoTruth(Exception):
    """The run kept no ground truth for this target (e.g. an older round's clipped uploads): the attack
    ran, but its result cannot be scored. Recorded per target; the audit goes on."""


SAMPLE_GRAPH_METHODS = ("fedgpl",)  # clients hold sample graphs (graph-level tasks), not a node graph of their own


def needs_node_clients(attack: str, method: str) -> None:
    """NoInput when the run's clients hold no node graph of their own (FedGPL's task clients)."""
    if method in SAMPLE_GRAPH_METHODS:
        raise NoInput(f"{attack} reads a client's node graph and node-level model; {method}'s clients hold sample "
                      "graphs (its split messages: split-features, split-labels, split-topology, split-decoder)")


class Attack(ABC):
    """An attack on one kind of message. Subclasses define the four steps below."""

    name: str

    @abstractmethod
    def targets(self, view: AdversaryView, knowledge: Knowledge, num_clients: int) -> list[str]:
        """What to attack, e.g. ["client0", ..., "aggregate:client0", ...] (from the view's shape only)."""

    @abstractmethod
    def declare_aux(self, setup, knowledge: Knowledge, target: str):
        """Runtime side: the declared auxiliary knowledge for `target` (copies, no references)."""

    @abstractmethod
    def attack(self, view: AdversaryView, aux):
        """Adversary side: the reconstruction from the view and the aux only. Raises NoInput."""

    @abstractmethod
    def truth(self, setup, target: str):
        """Runtime side: the private ground truth `target` is scored against."""

    @abstractmethod
    def score(self, reconstruction, truth, aux) -> tuple[dict, dict]:
        """(metrics, baseline) of the reconstruction against the truth."""


def client_index(target: str) -> int:
    """3 for "client3" and "aggregate:client3"."""
    return int(target.rsplit("client", 1)[1])
