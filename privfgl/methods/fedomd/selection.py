"""FedOMD's evaluation protocol (spec B5 #7, #12): the global model on every party's own nodes,
averaged over parties with equal weights (macro, the paper's "average over parties"), model
selection and early stopping on one validation criterion (`select`):

- `val_acc` (default): the highest macro validation accuracy over parties, ties broken by the lower
  pooled validation loss; early stopping after `patience` rounds without such an improvement;
- `val_loss`: the lowest pooled validation cross-entropy ([11]'s choice; the spec leaves the metric
  open), early stopping after `patience` rounds without a lower one.

`PartyMacroTracker` replaces the run's RoundTracker for a FedOMD run, so the record's `test_acc`
is the macro average over parties at the selected round; the record also keeps `test_acc_micro`
(pooled over all test nodes), `test_acc_weighted` (weighted by node count, as the other methods'
`test_acc`), `val_loss` (pooled, of every round), `rounds_run`, `stopped_early` and `selection`.
"""
from __future__ import annotations

import torch

from privfgl.evaluation import RoundTracker
from privfgl.metrics import weighted_mean

SELECTIONS = ("val_acc", "val_loss")
SELECTION_TEXT = {"val_acc": "max macro val_acc (ties: lower pooled val_loss)", "val_loss": "min pooled val_loss"}


class PartyMacroTracker(RoundTracker):
    """RoundTracker with equal client weights (`val_acc` and `test_acc` are macro over parties), the
    pooled validation loss of every round, selection by `select` (SELECTIONS) and early stopping."""

    def __init__(self, clients, num_classes: int, patience: int = 0, select: str = "val_acc"):
        if select not in SELECTIONS:
            raise ValueError(f"fedomd: unknown model selection {select!r}; valid: {', '.join(SELECTIONS)}")
        super().__init__(clients, num_classes, select="val_loss")  # computes the pooled val_loss of every round
        self.criterion = select
        self.node_weights = self.weights
        self.weights = torch.ones(self.num_clients)
        self.patience = patience
        self.rounds_run = 0
        self.stopped_early = False

    @classmethod
    def from_counts(cls, node_counts: list[int], num_classes: int, patience: int = 0,
                    select: str = "val_acc") -> "PartyMacroTracker":
        """A tracker that holds no client data (the clients are Ray actors that evaluate themselves): their
        node counts only, and their tallies each round (``evaluate_tallies``)."""
        tracker = cls([], num_classes, patience, select)
        tracker.num_clients = len(node_counts)
        tracker.node_counts = [int(n) for n in node_counts]
        tracker.node_weights = torch.tensor([float(n) for n in tracker.node_counts])
        tracker.weights = torch.ones(tracker.num_clients)
        return tracker

    def _better(self, entry: dict, best: dict | None) -> bool:
        if best is None:
            return True
        if self.criterion == "val_loss":
            return entry["val_loss"] < best["val_loss"]
        return entry["val_acc"] > best["val_acc"] or \
            (entry["val_acc"] == best["val_acc"] and entry["val_loss"] < best["val_loss"])

    def evaluate_tallies(self, round: int, tallies: list[dict], stage: str = "train", predict_on=None) -> dict:
        """RoundTracker's entry (macro weights), with the node-weighted test accuracy beside it and the best
        round by `select`; ``evaluate`` (the clients' logits, in process) comes here with their tallies."""
        best = self.best
        entry = super().evaluate_tallies(round, tallies, stage, predict_on)  # (its val_loss choice of self.best
        # is replaced here)
        accs = torch.tensor([c["test_acc"] for c in entry["per_client"]])
        entry["test_acc_weighted"] = weighted_mean(accs, self.node_weights)
        self.best = entry if self._better(entry, best) else best
        self.rounds_run = round + 1
        return entry

    def should_stop(self) -> bool:
        """True once `patience` rounds have passed without an improvement of the selection criterion."""
        if not self.patience or self.best is None:
            return False
        stop = self.history[-1]["round"] - self.best["round"] >= self.patience
        self.stopped_early = self.stopped_early or stop
        return stop

    def summary(self) -> dict:
        out = super().summary()
        best, last = self.best, self.history[-1]
        out.update({"test_acc_weighted": best["test_acc_weighted"], "val_loss": best["val_loss"],
                    "selected_by": self.criterion,
                    "average": "macro over parties", "selection": SELECTION_TEXT[self.criterion],
                    "rounds_run": self.rounds_run, "stopped_early": self.stopped_early})
        out["last"]["val_loss"] = last["val_loss"]
        for point, entry in zip(out["curve"], self.history):
            point["val_loss"] = entry["val_loss"]
        return out
