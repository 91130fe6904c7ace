"""`dp-audit`: one entry point that audits every DP mechanism privfgl has, from the adversary's view.

`--attack dp-audit[:KEY=VALUE,...]` (issue #41). Each mechanism has a *design*, an Attack class that
inserts the canaries suited to its DP unit and scores them with attacks/dp/estimators.py:
- DP-FedAvg (client level): canary clients, attacks/dp/fedavg_audit.py.
- Node-level DP-SGD: gradient canaries realising the node sensitivity Δ, attacks/dp/sgd_audit.py.
- FedGPL's split messages (row level): canary rows, attacks/dp/split_audit.py.
- Message DP (`--dp ...,on=MESSAGE`, any other method): canary contributions, attacks/dp/message_audit.py.
- O-pFGL's DP class statistics (`dp_epsilon=...`): canary nodes, attacks/dp/opfgl_audit.py.
- GAP's noisy hop aggregations (`--method gap`): canary edges, attacks/dp/gap_audit.py.
- Node-level GAP's DP-SGD steps (`stage=steps`; the node-level DP-MLP, `hops=0`, without it): gradient
  canaries of sensitivity C, attacks/dp/gap_step_audit.py.
- LapGraph's noisy adjacency (`--method lapgraph`): canary pairs, attacks/dp/lapgraph_audit.py.

`prepare(setup, method)` (before the run) picks the first design whose `fits(setup, method)` holds and
that takes every given KEY (so `stage=steps` passes GAP's hop design over) and builds it from the
KEY=VALUE params; every other step is the design's. Params every design takes:
`seed`, `confidence`; the rest are the design's own (its docstring; an unknown one is refused in one line).

`family=m` (default 1): this audit is one of m audits of one mechanism, read as one test. Beside the bound at
`confidence` (c), the finding then gives the bound at c_m = 1 − (1 − c)/m (Bonferroni): if the mechanism meets
its claim, all m such bounds are ≤ their ε together with probability ≥ c, whatever the dependence between the
runs, where m bounds at c each would put at least one over ε in up to m·(1 − c) of the families. Same
canaries, scores and design, only the level differs; the family's bound is never above the per-audit one.
"""
from __future__ import annotations

import copy
import inspect

from attacks.base import Attack, Knowledge, NoInput
from attacks.dp.fedavg_audit import CanaryClientAudit
from attacks.dp.gap_audit import CanaryEdgeAudit
from attacks.dp.gap_step_audit import GapStepAudit
from attacks.dp.lapgraph_audit import CanaryPairAudit
from attacks.dp.message_audit import CanaryContributionAudit
from attacks.dp.opfgl_audit import CanaryNodeAudit
from attacks.dp.params import confidence_level, family_size
from attacks.dp.sgd_audit import GradientCanaryAudit
from attacks.dp.split_audit import CanaryRowAudit
from attacks.view import AdversaryView

# the first that fits a run is used: the generic message-DP design last
DESIGNS: tuple[type[Attack], ...] = (CanaryClientAudit, GradientCanaryAudit, CanaryRowAudit, CanaryNodeAudit,
                                     CanaryEdgeAudit, GapStepAudit, CanaryPairAudit, CanaryContributionAudit)
SUPPORTED = ("--method dp-fedavg with --dp gaussian:...,on=update; --method dp-sgd (federated); --method fedgpl "
             "with --dp laplace|gaussian:...,on=m1|m2|m3|m4|split; --method opfgl with dp_epsilon and "
             "dp_mode=distributed; --method gap (hops >= 1; unit=node: stage=steps, or hops=0); --method lapgraph; "
             "any other method with --dp gaussian|laplace:...,on=MESSAGE,mode=local|distributed")


def design_keys(design: type[Attack]) -> set[str]:
    """The KEY=VALUE params a design's constructor takes (a **params constructor: its own and its base
    design's, to which it passes them on)."""
    params = inspect.signature(design.__init__).parameters
    keys = {k for k, v in params.items() if v.kind not in (v.VAR_KEYWORD, v.VAR_POSITIONAL)} - {"self"}
    if any(v.kind == v.VAR_KEYWORD for v in params.values()):
        keys |= design_keys(design.__mro__[1])
    return keys


class DPAudit(Attack):
    """`dp-audit`: dispatches to the design of the run's DP mechanism (DESIGNS)."""

    name = "dp-audit"

    def __init__(self, **params):
        confidence_level(params.get("confidence", 0.95))
        self.family = family_size(params.pop("family", 1))
        self.params = params
        self.design: Attack | None = None
        # Before any run (CLI parse time): some design must take every given param and accept their values.
        candidates = [d for d in DESIGNS if set(params) <= design_keys(d)]
        if not candidates:
            raise ValueError(f"dp-audit: no design takes all of {', '.join(sorted(params))}; valid: "
                             + "; ".join(f"{d.__name__}: {', '.join(sorted(design_keys(d)))}" for d in DESIGNS))
        errors = []
        for design in candidates:
            try:
                design(**params)
            except ValueError as e:
                errors.append(e)
        if len(errors) == len(candidates):
            raise errors[0]

    def prepare(self, setup, method: str) -> None:
        """Pick and build the design, then let it insert its canaries. ValueError (one line) on a run
        no design fits."""
        first = None  # the first design that fits: the one a refusal names
        for design in DESIGNS:
            if design.fits(setup, method):
                if set(self.params) <= design_keys(design):
                    self.design = design(**self.params)
                    self.design.prepare(setup, method)
                    return
                first = first or design
        if first is None:
            raise ValueError(f"dp-audit: no canary design fits --method {method}; valid: {SUPPORTED}")
        foreign = sorted(set(self.params) - design_keys(first))
        raise ValueError(f"dp-audit: {', '.join(foreign)} not used on --method {method}; valid: "
                         f"{', '.join(sorted(design_keys(first)))}")

    def _design(self) -> Attack:
        if self.design is None:
            raise NoInput("dp-audit: no canaries took part (prepare was not called before the run)")
        return self.design

    def targets(self, view: AdversaryView, knowledge: Knowledge, num_clients: int) -> list[str]:
        return self._design().targets(view, knowledge, num_clients)

    def declare_aux(self, setup, knowledge: Knowledge, target: str):
        return self._design().declare_aux(setup, knowledge, target)

    def attack(self, view: AdversaryView, aux):
        return self._design().attack(view, aux)

    def truth(self, setup, target: str):
        return self._design().truth(setup, target)

    def score(self, reconstruction, truth, aux) -> tuple[dict, dict]:
        design = self._design()
        metrics, baseline = design.score(reconstruction, truth, aux)
        if self.family > 1:
            metrics.update(family_metrics(design, metrics, reconstruction, truth, aux, self.family))
        return metrics, baseline


def family_metrics(design: Attack, per_audit: dict, reconstruction, truth, aux, family: int) -> dict:
    """The finding's family entries: the design's bound from the same scores at the Bonferroni level
    c_m = 1 − (1 − c)/m (c: the design's `confidence`, m: `family`), or the per-audit bound where that is smaller
    (a design may pick its guesses by the level, so a luckier pick could lift the bound at c_m; the smaller of the
    two is still valid at c_m, because the first is), with that bound's verdict and ratio."""
    at_family = copy.copy(design)  # the design, at the family's level; the run's design is left as it was
    at_family.confidence = 1 - (1 - design.confidence) / family
    metrics, _ = at_family.score(reconstruction, truth, aux)
    lower = min(metrics, per_audit, key=lambda m: m["epsilon_lower_bound"])
    return {"family": family, "confidence_family": at_family.confidence,
            "epsilon_lower_bound_family": lower["epsilon_lower_bound"], "caught_family": lower["caught"],
            "bound_over_accountant_family": lower["bound_over_accountant"]}
