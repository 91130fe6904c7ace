"""Per-round evaluation and model selection.

Each client evaluates the model it holds on its own validation and test nodes. Per-client metrics
are averaged weighted by the client's node count (as OpenFGL and the O-pFGL code do); the pooled
("micro") accuracy over all test nodes and the unweighted mean over clients ("macro": `test_acc_macro`,
`minority_acc_macro`) are reported beside it. `test_acc` of a run is the test
accuracy at the round with the best weighted validation accuracy, as OpenFGL reports it; the last
round's metrics are kept too. `select="val_loss"` selects the round with the lowest pooled
validation cross-entropy instead (FedSpray's code); the entries and the summary then carry `val_loss`.

Minority accuracy (test nodes whose label is not their client's majority training class, FedSpray's
metric) is also split by the node's homophily h_i (FedSpray Eq. 1: the share of its neighbours in
the client's graph with its label; evaluation only, it reads every label): `minority_by_homophily`
{"low": h < 0.5, "high": h >= 0.5, "isolated": no neighbour} -> {"n", "acc"}, pooled over clients.

Evaluation settings beyond the clients' own graphs (FedLoG's, privfgl.data.settings; `--evaluate`):
the method's `predict_on(graphs)` gives client k's model's eval-mode logits [n_k, C] on graphs[k]
(only the test_mask rows are read), one call per setting, at every round that becomes the best and
at the last (the only rounds reported; the method passes predict_on every round). The entry's `settings` is
{name: {"test_acc", "n_test", "per_client": [{"client", "n_test", "correct", "test_acc"}]}}, with
"seen" (the clients' own test nodes) first. test_acc is pooled over clients ("micro": correct /
test nodes, each client counted on its own graph) or, for a setting tested on one shared graph
(new-client), the unweighted mean of the clients' accuracies; None without test nodes. The summary
keeps the best-validation round's under `settings` and the last round's under `last.settings`;
selection still reads only the seen validation nodes.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch_geometric.data import Data

from privfgl.data.settings import EvalSetting
from privfgl.metrics import accuracy, confusion_by_client, macro_f1, node_homophily, weighted_mean


class RoundTracker:
    """Evaluates every client each round and remembers the best-validation round.

    clients: per-client Data with y, train_mask, val_mask, test_mask. settings: the evaluation
    settings beyond the clients' own test nodes (none: the seen setting alone, no `settings` block).
    last_round: the round index of the run's final evaluation; with it, the settings are computed
    only at rounds that become the best and from last_round on (the only ones the summary reports).
    """

    SELECTIONS = ("val_acc", "val_loss")

    def __init__(self, clients: list[Data], num_classes: int, select: str = "val_acc",
                 settings: list[EvalSetting] = (), last_round: int | None = None):
        if select not in self.SELECTIONS:
            raise ValueError(f"unknown model selection {select!r}; valid: {', '.join(self.SELECTIONS)}")
        self.select = select
        self.clients = clients
        self.num_classes = num_classes
        self.num_clients = len(clients)
        self.node_counts = [int(c.num_nodes) for c in clients]
        self.weights = torch.tensor([float(n) for n in self.node_counts])
        self.views = [ClientEvaluation(c, num_classes) for c in clients]
        self.settings = list(settings)
        self.last_round = last_round  # the final evaluation's round (None: unknown, settings every round)
        self.history: list[dict] = []
        self.best: dict | None = None

    @classmethod
    def from_counts(cls, node_counts: list[int], num_classes: int, select: str = "val_acc",
                    last_round: int | None = None) -> "RoundTracker":
        """A tracker that holds no client data: the clients evaluate themselves (``ClientEvaluation``)
        and it gets their tallies only (``evaluate_tallies``; clients that are Ray actors)."""
        tracker = cls([], num_classes, select, (), last_round)
        tracker.num_clients = len(node_counts)
        tracker.node_counts = [int(n) for n in node_counts]
        tracker.weights = torch.tensor([float(n) for n in tracker.node_counts])
        return tracker

    def evaluate(self, round: int, logits: list[torch.Tensor], stage: str = "train",
                 predict_on: Callable[[list[Data]], list[torch.Tensor]] | None = None) -> dict:
        """Metrics of this round from every client's logits [n_k, C] on its own nodes; updates the
        best round (ties keep the earlier round). predict_on(graphs) -> client k's eval-mode logits
        [n_k, C] on graphs[k] (len(graphs) == K; only the rows of graphs[k].test_mask are read);
        needed when the run has settings, called once per setting."""
        with_loss = self.select == "val_loss"
        tallies = [view.tally(out, with_loss) for view, out in zip(self.views, logits, strict=True)]
        return self.evaluate_tallies(round, tallies, stage, predict_on)

    def evaluate_tallies(self, round: int, tallies: list[dict], stage: str = "train",
                         predict_on: Callable[[list[Data]], list[torch.Tensor]] | None = None) -> dict:
        """``evaluate`` from every client's ``ClientEvaluation.tally`` (in client order)."""
        val = torch.stack([t["val"] for t in tallies])
        test = torch.stack([t["test"] for t in tallies])
        val_acc, test_acc, test_f1 = accuracy(val), accuracy(test), macro_f1(test)
        n_val, n_test = val.sum((1, 2)), test.sum((1, 2))
        test_correct = test.diagonal(dim1=1, dim2=2).sum(1)
        n_minority = torch.tensor([t["n_minority"] for t in tallies])
        minority_correct = torch.tensor([t["minority_correct"] for t in tallies])
        pooled = test.sum(0)
        by_homophily = {}
        for name in HOMOPHILY_BINS:
            n = sum(t["by_homophily"][name][0] for t in tallies)
            hit = sum(t["by_homophily"][name][1] for t in tallies)
            by_homophily[name] = {"n": n, "acc": hit / n if n else None}
        entry = {"round": round, "stage": stage,
                 "val_acc": weighted_mean(val_acc, self.weights), "test_acc": weighted_mean(test_acc, self.weights),
                 "test_acc_micro": float(accuracy(pooled)),
                 "test_f1_macro": weighted_mean(test_f1, self.weights), "test_f1_macro_micro": float(macro_f1(pooled)),
                 "minority_acc": float(minority_correct.sum()) / float(n_minority.sum()) if int(n_minority.sum()) else None,
                 "minority_by_homophily": by_homophily,
                 "per_client": [{"client": k, "n_nodes": n, "n_val": int(n_val[k]),
                                 "n_test": int(n_test[k]), "val_acc": float(val_acc[k]),
                                 "test_acc": float(test_acc[k]), "test_f1_macro": float(test_f1[k]),
                                 "test_correct": int(test_correct[k]), "test_n_minority": int(n_minority[k]),
                                 "test_minority_correct": int(minority_correct[k])}
                                for k, n in enumerate(self.node_counts)]}
        if self.select == "val_loss":
            total = int(n_val.sum())
            entry["val_loss"] = sum(t["val_loss_sum"] for t in tallies) / total if total else float("inf")
            better = self.best is None or entry["val_loss"] < self.best["val_loss"]
        else:
            better = self.best is None or entry["val_acc"] > self.best["val_acc"]
        if self.settings:
            if predict_on is None:
                raise ValueError(f"this run evaluates the settings {', '.join(s.name for s in self.settings)}, "
                                 "but the method passed no predict_on to RoundTracker.evaluate")
            # only a round that becomes the best or is the last is ever reported: others skip the settings
            if better or self.last_round is None or round >= self.last_round:
                entry["settings"] = {"seen": _setting_metrics([(int(n), int(c)) for n, c in zip(n_test, test_correct)]),
                                     **self._settings(predict_on)}
        self.history.append(entry)
        if better:
            self.best = entry
        return entry

    def _settings(self, predict_on: Callable[[list[Data]], list[torch.Tensor]] | None) -> dict:
        """Each setting's metrics, from one predict_on call per setting (settings on the same
        graphs differ in test_mask, and a method may compute only the test_mask rows)."""
        out = {}
        for s in self.settings:
            counts = [(int(g.test_mask.sum()), int((o.argmax(-1)[g.test_mask] == g.y[g.test_mask]).sum()))
                      for g, o in zip(s.graphs, predict_on(s.graphs), strict=True)]
            out[s.name] = _setting_metrics(counts, shared=s.average == "clients")
        return out

    def summary(self) -> dict:
        """The run's metrics block: best-validation round's test metrics plus the last round's."""
        if self.best is None:
            raise RuntimeError("no round was evaluated")
        last = self.history[-1]
        best = self.best
        clients = best["per_client"]
        return {
            "test_acc": best["test_acc"], "test_acc_micro": best["test_acc_micro"],
            "test_acc_macro": _mean([c["test_acc"] for c in clients if c["n_test"]]),
            "minority_acc_macro": _mean([c["test_minority_correct"] / c["test_n_minority"]
                                         for c in clients if c["test_n_minority"]]),
            "test_f1_macro": best["test_f1_macro"],
            "test_f1_macro_micro": best["test_f1_macro_micro"], "val_acc": best["val_acc"],
            "minority_acc": best["minority_acc"], "minority_by_homophily": best["minority_by_homophily"],
            "best_round": best["round"], "best_stage": best["stage"],
            "last": {k: last[k] for k in ("round", "stage", "val_acc", "test_acc", "test_f1_macro", "minority_acc",
                                          "settings") if k in last},
            "curve": [{k: e[k] for k in ("round", "stage", "val_acc", "test_acc")} for e in self.history],
            "per_client": best["per_client"],
            **({"val_loss": best["val_loss"], "selected_by": "val_loss"} if self.select == "val_loss" else {}),
            **({"settings": best["settings"]} if self.settings else {}),
        }


HOMOPHILY_BINS = ("low", "high", "isolated")  # h < 0.5, h >= 0.5, no neighbour


def majority_training_class(client: Data, num_classes: int) -> int:
    """The client's most frequent class among its training nodes (ties: the lowest class); -1
    without training nodes (then all its test nodes are minority nodes)."""
    counts = torch.bincount(client.y[client.train_mask], minlength=num_classes)
    return int(counts.argmax()) if int(counts.sum()) else -1


def homophily_bins(client: Data) -> torch.Tensor:
    """Per node of ``client``: 0 if its homophily h_i < 0.5, 1 if h_i >= 0.5, 2 without a neighbour
    (a client without ``edge_index`` has only isolated nodes). int64 [n]."""
    h = node_homophily(client.y, getattr(client, "edge_index", None), int(client.num_nodes))
    return torch.where(h.isnan(), 2, torch.where(h < 0.5, 0, 1)).long()


class ClientEvaluation:
    """What one client reads to evaluate its own model: its labels, masks, majority training class and
    homophily bins. ``tally`` turns its logits into counts, the only thing the tracker needs from it."""

    def __init__(self, client: Data, num_classes: int):
        self.num_classes = num_classes
        self.y, self.val_mask, self.test_mask = client.y, client.val_mask, client.test_mask
        self.minority = self.test_mask & (self.y != majority_training_class(client, num_classes))
        bins = homophily_bins(client)
        self.minority_by_bin = {name: self.minority & (bins == code) for code, name in enumerate(HOMOPHILY_BINS)}

    def tally(self, logits: torch.Tensor, with_loss: bool = False) -> dict:
        """Counts of this client's predictions (logits [n, C]): "val"/"test" confusion matrices [C, C]
        (rows true, columns predicted), minority test nodes and the correct ones (also per homophily bin:
        name -> (n, correct)), and with_loss the summed validation cross-entropy "val_loss_sum"."""
        pred = logits.argmax(-1)
        zeros = torch.zeros(pred.numel(), dtype=torch.long)
        conf = lambda mask: confusion_by_client(pred[mask], self.y[mask], zeros[mask], 1, self.num_classes)[0]
        correct = pred == self.y
        out = {"val": conf(self.val_mask), "test": conf(self.test_mask),
               "n_minority": int(self.minority.sum()), "minority_correct": int(correct[self.minority].sum()),
               "by_homophily": {name: (int(mask.sum()), int(correct[mask].sum()))
                                for name, mask in self.minority_by_bin.items()}}
        if with_loss:
            out["val_loss_sum"] = float(F.cross_entropy(logits[self.val_mask].double(), self.y[self.val_mask],
                                                        reduction="sum")) if bool(self.val_mask.any()) else 0.0
        return out


def _setting_metrics(counts: list[tuple[int, int]], shared: bool = False) -> dict:
    """{"test_acc", "n_test", "per_client"} from each client's (test nodes, correct). Pooled over
    clients, or with `shared` (every client tested on one graph) the unweighted mean of the
    clients' accuracies, n_test that graph's test nodes."""
    per_client = [{"client": k, "n_test": n, "correct": c, "test_acc": c / n if n else None}
                  for k, (n, c) in enumerate(counts)]
    if shared:
        n_test = counts[0][0] if counts else 0
        acc = _mean([c["test_acc"] for c in per_client if c["n_test"]])
    else:
        n_test = sum(n for n, _ in counts)
        acc = sum(c for _, c in counts) / n_test if n_test else None
    return {"test_acc": acc, "n_test": n_test, "per_client": per_client}


def _mean(values: list[float]) -> float | None:
    """The unweighted mean (a macro average over clients); None for no values."""
    return sum(values) / len(values) if values else None
