"""Classification metrics per client and aggregated over clients.

Conventions (DESIGN.md, specs/opfgl.md §1.9): macro-F1 is over ALL C classes of the dataset, as
sklearn's `f1_score(average="macro", labels=range(C), zero_division=0)`: a class absent from a
client's test nodes and never predicted there counts as F1 = 0 (this is why label-skewed FGL papers
report low F1). Per-client values are aggregated with given weights (the runtime uses each client's
node count), and micro (pooled over all test nodes). Minority accuracy: accuracy on test nodes whose label is not the
client's majority training class.
"""
from __future__ import annotations

import torch


def confusion(pred: torch.Tensor, y: torch.Tensor, num_classes: int) -> torch.Tensor:
    """[C, C] counts, rows = true class, columns = predicted class."""
    return torch.bincount(y * num_classes + pred, minlength=num_classes * num_classes).view(num_classes, num_classes)


def macro_f1(conf: torch.Tensor) -> float:
    """Mean F1 over all C classes of a [C, C] confusion matrix; a class with no true and no
    predicted node scores 0 (sklearn, labels=range(C), zero_division=0)."""
    tp = conf.diag().double()
    denom = (conf.sum(1) + conf.sum(0)).double()
    return float((2 * tp / denom.clamp(min=1)).mean())


def client_metrics(logits: torch.Tensor, y: torch.Tensor, mask: torch.Tensor, num_classes: int,
                   majority_class: int | None = None) -> dict:
    """Accuracy, macro-F1 and (if majority_class is given) minority accuracy on nodes in `mask`."""
    pred, true = logits[mask].argmax(-1), y[mask]
    n = int(true.numel())
    correct = int((pred == true).sum())
    out = {"n": n, "correct": correct, "acc": correct / n if n else 0.0,
           "f1_macro": macro_f1(confusion(pred, true, num_classes)), "_conf": confusion(pred, true, num_classes)}
    if majority_class is not None:
        minority = true != majority_class
        out["n_minority"] = int(minority.sum())
        out["minority_correct"] = int((pred[minority] == true[minority]).sum())
    return out


def aggregate_metrics(per_client: list[dict], weights: list[float] | None = None) -> dict:
    """Mean of per-client accuracy/F1 weighted by `weights` (default: each client's n, which makes
    accuracy equal to the pooled accuracy), micro macro-F1 over pooled nodes, pooled minority accuracy."""
    n_total = sum(m["n"] for m in per_client)
    w = [float(m["n"]) for m in per_client] if weights is None else [float(x) for x in weights]
    out = {"n": n_total}
    if n_total == 0 or sum(w) == 0:
        return {**out, "acc": 0.0, "f1_macro": 0.0, "f1_macro_micro": 0.0}
    out["acc"] = sum(m["acc"] * wk for m, wk in zip(per_client, w)) / sum(w)
    out["f1_macro"] = sum(m["f1_macro"] * wk for m, wk in zip(per_client, w)) / sum(w)
    out["f1_macro_micro"] = macro_f1(sum(m["_conf"] for m in per_client))
    if all("n_minority" in m for m in per_client):
        n_min = sum(m["n_minority"] for m in per_client)
        out["minority_acc"] = sum(m["minority_correct"] for m in per_client) / n_min if n_min else None
    return out


def public(m: dict) -> dict:
    """A metrics dict without internal fields (confusion matrices)."""
    return {k: v for k, v in m.items() if not k.startswith("_")}
