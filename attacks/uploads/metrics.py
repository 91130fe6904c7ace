"""Scores of reconstructions against ground truth (used by the scorers only, never by attacks).

Features are binary bag-of-words rows [m, f]; predictions are scores [m, f] (higher = more likely 1).
"""
from __future__ import annotations

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment
from sklearn.metrics import average_precision_score, roc_auc_score


def _np(t) -> np.ndarray:
    return t.detach().cpu().double().numpy() if isinstance(t, torch.Tensor) else np.asarray(t, dtype=float)


def feature_metrics(pred, true) -> dict[str, float]:
    """auc_per_feature: mean over features present in some but not all rows of the AUC over rows
    (a constant per feature, e.g. the marginal prior, scores 0.5); auc / ap: over all entries;
    f1_at_density: F1 when the top-k scores are called 1, k = the true number of ones; cosine:
    mean row cosine similarity."""
    p, t = _np(pred), _np(true) > 0.5
    cols = [j for j in range(t.shape[1]) if 0 < t[:, j].sum() < t.shape[0]]
    auc_pf = float(np.mean([roc_auc_score(t[:, j], p[:, j]) for j in cols])) if cols else float("nan")
    flat_t, flat_p = t.ravel(), p.ravel()
    k = int(flat_t.sum())
    called = np.zeros_like(flat_t)
    called[np.argsort(-flat_p, kind="stable")[:k]] = True
    tp = int((called & flat_t).sum())
    f1 = 2 * tp / (called.sum() + k) if k else float("nan")
    num = (p * t).sum(1)
    den = np.linalg.norm(p, axis=1) * np.linalg.norm(t, axis=1)
    cos = float(np.mean(np.where(den > 0, num / np.maximum(den, 1e-300), 0.0)))
    both = 0 < k < flat_t.size
    return {"auc_per_feature": auc_pf,
            "auc": float(roc_auc_score(flat_t, flat_p)) if both else float("nan"),
            "ap": float(average_precision_score(flat_t, flat_p)) if both else float("nan"),
            "f1_at_density": float(f1), "cosine": cos}


def match_rows(pred, true) -> np.ndarray:
    """For an unordered reconstruction: index into `pred` [r, f] for every row of `true` [m, f]
    (Hungarian assignment on cosine similarity; -1 for rows left without a partner when r < m)."""
    p, t = _np(pred), _np(true)
    pn = p / np.maximum(np.linalg.norm(p, axis=1, keepdims=True), 1e-12)
    tn = t / np.maximum(np.linalg.norm(t, axis=1, keepdims=True), 1e-12)
    rows, cols = linear_sum_assignment(-(pn @ tn.T))
    out = -np.ones(t.shape[0], dtype=int)
    out[cols] = rows
    return out


def unordered_scores(features: torch.Tensor, labels: torch.Tensor | None, true_x: torch.Tensor,
                     true_y: torch.Tensor) -> dict[str, float]:
    """Scores of an unordered reconstruction (rows [r, f], labels [r] or None) against the target's
    rows true_x [m, f] and labels true_y [m]: every target row gets its own reconstructed row
    (match_rows: Hungarian on feature cosine; labels play no part), then feature_metrics and
    label_acc. A target row left without a partner (r < m) scores as an all-zero row and a wrong label."""
    idx = torch.from_numpy(match_rows(features, true_x)) if features.shape[0] else torch.full((true_x.shape[0],), -1)
    matched = idx >= 0
    rows = torch.zeros(true_x.shape, dtype=torch.float32)
    rows[matched] = features[idx[matched]].float()
    out = {**feature_metrics(rows, true_x), "matched_rows": int(matched.sum())}
    if labels is not None:
        out["label_acc"] = float(((labels[idx.clamp(min=0)] == true_y) & matched).double().mean()) \
            if true_y.numel() and features.shape[0] else 0.0
    return out


def matched_sample_baseline(prior: torch.Tensor, rows: int, true_x: torch.Tensor, seed: int = 0) -> dict[str, float]:
    """The trivial baseline of an unordered reconstruction with `rows` rows: as many rows drawn from
    the feature marginals (Bernoulli(prior [f])), matched to the target rows true_x [m, f] the same
    way (unordered_scores). The matching picks the luckiest draws, so this scores above the constant
    prior (per-feature AUC about 0.55 on Cora with 100 rows for 27 targets, where the prior scores 0.5)."""
    g = torch.Generator().manual_seed(seed)
    sample = (torch.rand(max(rows, 1), prior.numel(), generator=g, dtype=torch.float64) < prior.double()).float()
    return unordered_scores(sample, None, true_x, torch.zeros(0, dtype=torch.long))


def permuted_words_baseline(features: torch.Tensor, true_x: torch.Tensor, seed: int = 0) -> dict[str, float]:
    """The null of an unordered reconstruction that keeps its rows' shape: the same rows [r, f] with
    their feature columns (words) shuffled, matched and scored as the reconstruction (unordered_scores).
    An attack that knows nothing about which words a node holds scores the same; a dense
    reconstruction of noise can beat the marginal sample (matched_sample_baseline) but not this."""
    g = torch.Generator().manual_seed(seed)
    shuffled = features[:, torch.randperm(features.shape[1], generator=g)] if features.shape[0] else features
    return unordered_scores(shuffled, None, true_x, torch.zeros(0, dtype=torch.long))


def label_accuracy(pred, true) -> float:
    p, t = _np(pred), _np(true)
    return float((p == t).mean()) if t.size else float("nan")


def distribution_metrics(pred, true) -> dict[str, float]:
    """cosine similarity and Jensen-Shannon divergence (bits, in [0, 1]) of two distributions [C]."""
    p, q = _np(pred), _np(true)
    p, q = np.clip(p, 0, None), np.clip(q, 0, None)
    p, q = p / max(p.sum(), 1e-300), q / max(q.sum(), 1e-300)
    m = (p + q) / 2

    def kl(a, b):
        nz = a > 0
        return float((a[nz] * np.log2(a[nz] / b[nz])).sum())
    cos = float(p @ q / max(np.linalg.norm(p) * np.linalg.norm(q), 1e-300))
    return {"cosine": cos, "js": 0.5 * kl(p, m) + 0.5 * kl(q, m)}
