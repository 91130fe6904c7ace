"""Per-round evaluation and model selection.

Each client evaluates the model it holds on its own validation and test nodes. Per-client metrics
are averaged weighted by the client's node count (as OpenFGL and the O-pFGL code do); the pooled
("micro") accuracy over all test nodes is reported beside it. `test_acc` of a run is the test
accuracy at the round with the best weighted validation accuracy, as OpenFGL reports it; the last
round's metrics are kept too.
"""
from __future__ import annotations

import torch
from torch_geometric.data import Data

from privfgl.metrics import aggregate_metrics, client_metrics, public


class RoundTracker:
    """Evaluates every client each round and remembers the best-validation round.

    clients: per-client Data with y, train_mask, val_mask, test_mask.
    """

    def __init__(self, clients: list[Data], num_classes: int):
        self.clients = clients
        self.num_classes = num_classes
        self.weights = [float(c.num_nodes) for c in clients]
        self.majority = []
        for c in clients:
            counts = torch.bincount(c.y[c.train_mask], minlength=num_classes)
            self.majority.append(int(counts.argmax()) if int(counts.sum()) else None)
        self.history: list[dict] = []
        self.best: dict | None = None

    def evaluate(self, round: int, logits: list[torch.Tensor], stage: str = "train") -> dict:
        """Metrics of this round; updates the best round (ties keep the earlier round)."""
        val, test = [], []
        for c, out, maj in zip(self.clients, logits, self.majority):
            val.append(client_metrics(out, c.y, c.val_mask, self.num_classes))
            test.append(client_metrics(out, c.y, c.test_mask, self.num_classes, maj if maj is not None else -1))
        v, t = aggregate_metrics(val, self.weights), aggregate_metrics(test, self.weights)
        micro = sum(m["correct"] for m in test) / max(t["n"], 1)
        entry = {"round": round, "stage": stage, "val_acc": v["acc"], "test_acc": t["acc"], "test_acc_micro": micro,
                 "test_f1_macro": t["f1_macro"], "test_f1_macro_micro": t["f1_macro_micro"],
                 "minority_acc": t.get("minority_acc"),
                 "per_client": [{"client": k, "n_nodes": int(c.num_nodes), "n_val": vm["n"], "n_test": tm["n"],
                                 "val_acc": vm["acc"], **{f"test_{x}": y for x, y in public(tm).items() if x != "n"}}
                                for k, (c, vm, tm) in enumerate(zip(self.clients, val, test))]}
        self.history.append(entry)
        if self.best is None or entry["val_acc"] > self.best["val_acc"]:
            self.best = entry
        return entry

    def summary(self) -> dict:
        """The run's metrics block: best-validation round's test metrics plus the last round's."""
        if self.best is None:
            raise RuntimeError("no round was evaluated")
        last = self.history[-1]
        best = self.best
        return {
            "test_acc": best["test_acc"], "test_acc_micro": best["test_acc_micro"], "test_f1_macro": best["test_f1_macro"],
            "test_f1_macro_micro": best["test_f1_macro_micro"], "val_acc": best["val_acc"],
            "minority_acc": best["minority_acc"], "best_round": best["round"], "best_stage": best["stage"],
            "last": {k: last[k] for k in ("round", "stage", "val_acc", "test_acc", "test_f1_macro", "minority_acc")},
            "curve": [{k: e[k] for k in ("round", "stage", "val_acc", "test_acc")} for e in self.history],
            "per_client": best["per_client"],
        }
