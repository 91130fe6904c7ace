"""GAP's settings (`--method-param KEY=VALUE`), defaults and validation.

    unit            edge (edge-level DP, default) or node (node-level DP: degree bound, DP-SGD for the encoder
                    and the classifier, every step and hop under one accountant; privfgl/methods/gap/node.py)
    edge            (unit=edge) undirected (default: the unit is one undirected edge {u, v}, both of its directions;
                    per-hop L2 sensitivity √2) or directed (one directed edge u→v; sensitivity 1, GAP's
                    `sensitivity=1`; on an undirected graph it protects one direction of a relation only)
    epsilon         the target ε of the whole run (default 8): σ is the smallest noise multiplier whose
                    `hops` Gaussian releases, composed by opacus' accountant, spend at most ε at `delta`
    delta           1e-5 (the rule: below 1/|E| of every client's graph, and for unit=node below 1/n of every
                    client's nodes, checked at the run)
    degree          (unit=node) D = 10: every node keeps at most D neighbours (privfgl's local degree bound)
    clip            (unit=node) C = 1.0: the L2 bound on every per-node gradient
    sample_rate     (unit=node) q = 1.0: each DP-SGD step takes each training node independently with
                    probability q (Poisson sampling, the client's own coins), accounted as the subsampled
                    Gaussian at rate q; 1 is full batch
    accountant      rdp (default) or prv
    hops            K = 2 aggregation hops (0: no graph, an MLP on the encoder's embeddings, ε = 0)
    encoder_rounds  FedAvg rounds of the encoder before the aggregation (default 50)
    encoder_layers  2 Linear layers in the encoder (before its one-layer training head)
    seed            os (default: OS entropy) or an integer (reproducible noise; the record warns)
The run's --hidden, --dropout, --lr, --weight-decay, --optimizer, --local-epochs and --rounds (the
classifier's FedAvg rounds) apply.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from privfgl.methods.params import bad_param, resolve
from privfgl.privacy.accounting import ACCOUNTANTS
from privfgl.privacy.noise import OS

UNITS = ("edge", "node")
EDGES = ("undirected", "directed")


@dataclass(frozen=True)
class GapParams:
    unit: str = "edge"
    edge: str = "undirected"
    epsilon: float = 8.0
    delta: float = 1e-5
    accountant: str = "rdp"
    hops: int = 2
    encoder_rounds: int = 50
    encoder_layers: int = 2
    degree: int = 10
    clip: float = 1.0
    sample_rate: float = 1.0
    seed: str = OS

    @property
    def sensitivity(self) -> float:
        """Per-hop L2 sensitivity of the neighbour-sum to one unit (aggregation.py; node.py for unit=node)."""
        if self.unit == "node":
            return math.sqrt(self.degree)
        return math.sqrt(2.0) if self.edge == "undirected" else 1.0

    @property
    def noise_seed(self) -> int | str:
        """The NoiseSource setting: "os" or the integer seed."""
        return OS if self.seed == OS else int(self.seed)


def _check(p: GapParams) -> None:
    if p.unit not in UNITS:
        raise bad_param("gap", "unit", p.unit, ", ".join(UNITS))
    if p.edge not in EDGES:
        raise bad_param("gap", "edge", p.edge, ", ".join(EDGES))
    if not p.epsilon > 0:
        raise bad_param("gap", "epsilon", p.epsilon, "a number > 0")
    if not 0 < p.delta < 1:
        raise bad_param("gap", "delta", p.delta, "a number in (0, 1)")
    if p.accountant not in ACCOUNTANTS:
        raise bad_param("gap", "accountant", p.accountant, ", ".join(ACCOUNTANTS))
    if not 0 <= p.hops <= 10:
        raise bad_param("gap", "hops", p.hops, "an integer in 0..10")
    if p.encoder_rounds < 0:
        raise bad_param("gap", "encoder_rounds", p.encoder_rounds, "an integer >= 0")
    if p.encoder_layers < 1:
        raise bad_param("gap", "encoder_layers", p.encoder_layers, "an integer >= 1")
    if p.degree < 1:
        raise bad_param("gap", "degree", p.degree, "an integer >= 1")
    if not p.clip > 0:
        raise bad_param("gap", "clip", p.clip, "a number > 0")
    if not 0 < p.sample_rate <= 1:
        raise bad_param("gap", "sample_rate", p.sample_rate, "a number in (0, 1]")
    if p.unit != "node" and p.sample_rate != 1:
        raise bad_param("gap", "sample_rate", p.sample_rate, "1 at unit=edge (no DP-SGD steps to sample)")
    if p.seed != OS:
        try:
            int(p.seed)
        except ValueError:
            raise bad_param("gap", "seed", p.seed, f"{OS} or an integer") from None


def resolve_params(method_params: dict) -> GapParams:
    """GapParams from `--method-param` settings; ValueError names a bad or unknown key."""
    given = dict(method_params)
    if "seed" in given and not isinstance(given["seed"], str):
        if isinstance(given["seed"], bool) or not isinstance(given["seed"], int):
            raise bad_param("gap", "seed", given["seed"], f"{OS} or an integer")
        given["seed"] = str(given["seed"])
    return resolve("gap", GapParams, given, {}, _check)
