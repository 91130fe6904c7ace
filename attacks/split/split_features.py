"""`split-features`: the node features a FedGPL client sends in M1 (spec B.3), read by the server.

M1 rows are the client's (SVD-reduced) node features times a per-row prompt factor, tanh(score) for
VPG (x + p for GPF). The attack takes each row's direction as the node's feature direction, up to
sign (the factor may be negative): it orients the row to agree with the population mean feature
vector, and matches it against the dictionary by |cosine|.
Declared aux: the population's mean reduced feature vector and, as a dictionary, the reduced
feature table of the whole dataset (a public copy; the strongest attacker), against which each row
is re-identified by cosine similarity.

Scores, per client, over the M1 rows of the attacked round (up to `rows` of them, seeded sample)
that came from real nodes: mean |cosine| between the reconstruction and the node's true reduced
features (baseline: the population mean's |cosine|), and re-identification against the dictionary:
top-1 accuracy (baseline 1/N) and AUC of the true node's similarity against every other node's
(baseline 0.5).

Sample level: the mean of each sample graph's M1 rows (grouped by M1's batch vector, sent in the
clear) is the direction of the sample's mean prompted feature; averaging a sample's ~50-150 rows
shrinks per-row DP noise (whether enough to beat the baseline is measured, not assumed). Scored per sample
by |cosine| to the mean true features of the sample's rows (baseline: the population mean), and by
re-identification among the round's samples (`sample_reid_top1`, `sample_reid_auc`: the sample's own
mean against the other samples' means; baselines 1/S, 0.5), which discounts the direction all
samples share. This is also what M2 (H, one row per sample) summarises; M2 and M4 are computed by
the server from M1 (and M3), so, by post-processing, a decoder on them cannot learn more than M1 and
M3 give (`split-decoder` is that decoder, for an observer of the downlink alone).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from attacks.base import Attack, Knowledge, NoInput, client_index
from attacks.view import AdversaryView
from privfgl.federation import client_name

M1 = "prompted_graph"


@dataclass(frozen=True)
class FeatureAux:
    client: int
    round: int
    rows: int
    seed: int
    prior_mean: torch.Tensor       # [d]
    dictionary: torch.Tensor       # [N, d]


def m1_rows(view: AdversaryView, k: int, round: int) -> tuple[int, torch.Tensor, torch.Tensor]:
    """(the round attacked, every M1 row client k sent in it, in order [R, d], each row's sample
    index in that round [R]); round -1: the last."""
    sent = [m for m in view.messages if m.name == M1 and m.sender == client_name(k) and m.tensors is not None]
    if not sent:
        raise NoInput(f"no plaintext {M1} from client{k} in the {view.party}'s view")
    r = max(m.round for m in sent) if round < 0 else round
    this = [m for m in sent if m.round == r]
    if not this:
        raise NoInput(f"no {M1} from client{k} in round {r}")
    offsets = torch.tensor([0] + [int(m.tensors["batch"].max()) + 1 for m in this[:-1]]).cumsum(0)
    samples = torch.cat([m.tensors["batch"] + o for m, o in zip(this, offsets)])
    return r, torch.cat([m.tensors["x"] for m in this]).double(), samples


def sample_rows(total: int, rows: int, seed: int) -> torch.Tensor:
    """The indices of at most `rows` of `total` rows (seeded, sorted)."""
    if total <= rows:
        return torch.arange(total)
    return torch.randperm(total, generator=torch.Generator().manual_seed(seed))[:rows].sort().values


def _sample_means(rows: torch.Tensor, samples: torch.Tensor, count: int | None = None) -> torch.Tensor:
    """rows [R, d], sample index per row [R] -> the mean row of each sample [S, d] (0 where none)."""
    count = int(samples.max()) + 1 if count is None else count
    sums = torch.zeros(count, rows.shape[1], dtype=rows.dtype).index_add_(0, samples, rows)
    return sums / torch.bincount(samples, minlength=count).clamp_min(1).unsqueeze(1).to(rows.dtype)


def _unit(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm(dim=-1, keepdim=True).clamp_min(1e-12)


class SplitFeatures(Attack):
    name = "split-features"

    def __init__(self, round: int = -1, rows: int = 2000, clients: list[int] | None = None, seed: int = 0):
        self.round, self.rows, self.clients, self.seed = round, rows, clients, seed

    def targets(self, view: AdversaryView, knowledge: Knowledge, num_clients: int) -> list[str]:
        return [f"client{k}" for k in (self.clients if self.clients is not None else range(num_clients))]

    def declare_aux(self, setup, knowledge: Knowledge, target: str) -> FeatureAux:
        if knowledge.method != "fedgpl":
            raise NoInput(f"split-features reads FedGPL's split messages, not {knowledge.method}'s")
        table = setup.extras["population_features"].double().clone()
        return FeatureAux(client_index(target), self.round, self.rows, self.seed, table.mean(0), table)

    def attack(self, view: AdversaryView, aux: FeatureAux) -> dict:
        r, rows, samples = m1_rows(view, aux.client, aux.round)
        chosen = sample_rows(len(rows), aux.rows, aux.seed)
        u = _unit(rows[chosen])
        u = u * torch.where(u @ aux.prior_mean >= 0, 1.0, -1.0).unsqueeze(1)
        means = _unit(_sample_means(rows, samples))
        means = means * torch.where(means @ aux.prior_mean >= 0, 1.0, -1.0).unsqueeze(1)
        return {"round": r, "rows": chosen, "features": u, "similarity": (u @ _unit(aux.dictionary).T).abs(),
                "samples": samples, "sample_features": means}

    def truth(self, setup, target: str) -> dict:
        k = client_index(target)
        log = setup.extras.get("fedgpl_truth", [])
        entries = [e for e in log if e["client"] == k]
        if not entries:
            raise ValueError(f"split-features: no auditor log for {target} (run with --transcript last or all)")
        by_round: dict[int, list[dict]] = {}
        for e in entries:
            by_round.setdefault(e["round"], []).append(e)
        return {r: {"features": torch.cat([e["features"] for e in es]).double(),
                    "node_ids": torch.cat([e["node_ids"] for e in es]) if es[0]["node_ids"] is not None else None}
                for r, es in by_round.items()}

    def score(self, rec: dict, truth: dict, aux: FeatureAux) -> tuple[dict, dict]:
        true = truth[rec["round"]]
        ids = true["node_ids"][rec["rows"]] if true["node_ids"] is not None else None
        metrics, baseline = score_rows(rec["features"], true["features"][rec["rows"]], aux.prior_mean,
                                       rec["similarity"], ids)
        # sample level: every row of the round, the real ones averaged per sample
        cos, base = score_samples(rec["sample_features"], true["features"], rec["samples"], aux.prior_mean)
        top1, auc, n = sample_reid(rec["sample_features"], true["features"], rec["samples"])
        return ({"round": rec["round"], **metrics, "sample_cosine": cos, "sample_reid_top1": top1,
                 "sample_reid_auc": auc},
                {**baseline, "sample_cosine": base, "sample_reid_top1": 1.0 / n, "sample_reid_auc": 0.5})


def score_rows(rows: torch.Tensor, true: torch.Tensor, prior_mean: torch.Tensor, similarity: torch.Tensor | None = None,
               ids: torch.Tensor | None = None) -> tuple[dict, dict]:
    """Per-row scores of unit reconstructions `rows` [R, d] against the true features `true` [R, d]
    (rows of zeros: made by the prompt, not scored): mean |cosine| (baseline: the population mean's),
    and, given `similarity` [R, N] to a dictionary and the true rows' dictionary `ids` [R],
    re-identification top-1 (baseline 1/N) and AUC of the true entry against every other (baseline 0.5)."""
    real = true.norm(dim=1) > 0                        # rows that came from a real node
    cos = (rows[real] * _unit(true[real])).sum(1).abs()       # a direction, up to sign
    base = (_unit(prior_mean) * _unit(true[real])).sum(1).abs()
    metrics = {"rows_scored": int(real.sum()), "cosine": float(cos.mean())}
    baseline = {"cosine": float(base.mean()), "kind": "the population mean feature vector"}
    if ids is not None and similarity is not None:
        sims = similarity[real]
        ids = ids[real]
        own = sims.gather(1, ids.unsqueeze(1))
        n = sims.shape[1]
        metrics["reid_top1"] = float((sims.argmax(1) == ids).double().mean())
        metrics["reid_auc"] = float(((sims < own).sum(1).double() / (n - 1)).mean())
        baseline.update(reid_top1=1.0 / n, reid_auc=0.5)
    return metrics, baseline


def score_samples(sample_rows: torch.Tensor, true: torch.Tensor, samples: torch.Tensor,
                  prior_mean: torch.Tensor) -> tuple[float, float]:
    """(mean |cosine|, its population-mean baseline) of unit per-sample reconstructions [S, d] against
    each sample's mean true features: the mean of its real rows of `true` [R, d], grouped by the
    sample index per row `samples` [R]; samples without a real row are not scored."""
    real = true.norm(dim=1) > 0
    target = _unit(_sample_means(true[real], samples[real], len(sample_rows)))
    present = target.norm(dim=1) > 0
    return (float((sample_rows[present] * target[present]).sum(1).abs().mean()),
            float((_unit(prior_mean) * target[present]).sum(1).abs().mean()))


def sample_reid(decoded: torch.Tensor, true: torch.Tensor, samples: torch.Tensor) -> tuple[float, float, int]:
    """Each decoded sample [S, d] matched by |cosine| against the mean true features of every sample of
    the round: (top-1 accuracy, AUC of its own sample against the others, the samples scored); what is
    specific to a sample, beyond the direction all samples share (baselines 1/S, 0.5)."""
    real = true.norm(dim=1) > 0
    target = _unit(_sample_means(true[real], samples[real], len(decoded)))
    present = target.norm(dim=1) > 0
    sims = (decoded[present] @ target[present].T).abs()
    n = sims.shape[0]
    own = sims.diagonal().unsqueeze(1)
    top1 = float((sims.argmax(1) == torch.arange(n)).double().mean())
    return top1, float(((sims < own).sum(1).double() / max(n - 1, 1)).mean()), n
