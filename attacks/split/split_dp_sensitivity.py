"""`split-dp-sensitivity`: an empirical sensitivity audit of FedGPL's split DP, with the auditor's access.

Not an attack from a view: removing a sample needs the data. What it certifies is the server's view of
a client's noised uploads (M1 and M3 rows): that one sample moves a round's release by no more than
the sensitivity the accountant (privacy/split_dp.py) used for it.

From the run's final state of client K (prompt, head, optimiser) and the server's trunk and optimiser
(copies), the client's training is replayed for `rounds` rounds, twice, with the run's
`split_dp_composition` and the same code (split_step, update_from_released), noise off (the rows are
clipped only):
- once on all its training samples, in a fixed minibatch order per round (seeded by `seed`);
- once without one sample (`sample`-th of the first round's first minibatch, by default the one
  whose influence reaches the most later rows), conditioned on the first replay's transcript, as
  adaptive composition conditions each release on the earlier ones: it receives the same M2 and M4
  rows (the removed sample's rows dropped), and its round-end update (released) is handed the first
  replay's released messages.
Per noised upload and round: measured = the L1 (Laplace) or L2 (Gaussian) distance between the two
replays' clipped rows of the round, the removed sample's own rows counted against their absence;
accounted = the sensitivity SplitDP used for the replayed round (C; sequential: C + 2C(N − 1)) times
the sample's own rows (a sample is one unit of M3 and n_g row units of M1: group privacy).
Finding: measured / accounted per message (max over rounds) and `ratio`, the max of all; ≤ 1 is what
the accounting claims. Baseline: the removed sample's own rows alone over accounted, what truly
disjoint minibatches give.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch_geometric.data import Batch

import protocols
from attacks.base import Attack, Knowledge, NoInput, client_index
from attacks.view import AdversaryView
from privfgl.federation import Federation, Transcript
from privfgl.methods.fedgpl.params import resolve_params
from privfgl.methods.fedgpl.released import update_from_released
from privfgl.methods.fedgpl.run import _graphs
from privfgl.methods.fedgpl.split import M1, M3, split_step
from privfgl.privacy.split_dp import SPLIT_MESSAGES, SplitDP

LABELS = {M1: "m1", M3: "m3"}


@dataclass(frozen=True)
class SensitivityAux:
    """The auditor's access for one client: copies of its SplitClient and of the SplitServer, its
    training sample graphs, the run's split DP spec and composition, the batch size."""
    client: object
    server: object
    graphs: list
    spec: object
    composition: str
    batch_size: int


class _Recording:
    """The first replay's server: the real one, keeping what it answered (M2 before the sender's clip,
    M4) and the M1 batch vector of every minibatch."""

    def __init__(self, server):
        self.server, self.answers = server, []

    def forward(self, m1, num_graphs):
        x, h = self.server.forward(m1, num_graphs)
        self.answers.append({"H": h.detach().clone(), "batch": m1["batch"].clone()})
        return x, h

    def backward(self, x, h, m3):
        g = self.server.backward(x, h, m3)
        self.answers[-1]["M4"] = g.clone()
        return g


class _Replaying:
    """The second replay's server: answers with the first replay's M2 and M4, the removed sample's rows
    (position `drop` of the minibatch, or None) dropped."""

    def __init__(self, answers: list[dict], drops: list[int | None]):
        self.answers, self.drops, self.i = answers, drops, -1
        self.batches: list[torch.Tensor] = []  # the M1 batch vector of every minibatch it received

    def forward(self, m1, num_graphs):
        self.i += 1
        self.batches.append(m1["batch"].clone())
        a, drop = self.answers[self.i], self.drops[self.i]
        keep = torch.arange(a["H"].shape[0]) != drop if drop is not None else slice(None)
        return m1["x"].detach().float(), a["H"][keep].clone().requires_grad_(False)

    def backward(self, x, h, m3):
        a, drop = self.answers[self.i], self.drops[self.i]
        return a["M4"][a["batch"] != drop] if drop is not None else a["M4"]


def _replay(aux: SensitivityAux, chunks: list[list[list[int]]], server, released_logs: list | None):
    """One replay: per round, the chunks' minibatches through split_step (noise off) and the round-end
    update. Returns (clipped upload rows per round: [(name, rows)] in send order, the sensitivity per
    noised message per round, the released logs per round)."""
    client = copy.deepcopy(aux.client)
    dp = SplitDP(aux.spec, keep_rounds="all", composition=aux.composition, noise=False)
    fed = Federation(1, protocols.get_protocol("plain"), Transcript("none"))
    from_released = aux.composition == "released"
    sensitivities, logs = [], []
    for r, round_chunks in enumerate(chunks):
        client.anchor = [q.detach().clone() for q in client.parameters()] if client.mu else None
        log = [] if from_released else None
        for chunk in round_chunks:
            split_step(fed, r, 0, client, server, Batch.from_data_list([aux.graphs[i] for i in chunk]), dp, None, log)
        if from_released:
            update_from_released(client, released_logs[r] if released_logs is not None else log)
        logs.append(log)
        sensitivities.append({name: dp.sensitivity(name) for name in aux.spec.messages})
        dp.end_round()
    return dp.audit_clipped, sensitivities, logs


def _by_sample(rows: list[tuple[str, torch.Tensor]], name: str, chunks: list[list[int]],
               batches: list[torch.Tensor]) -> dict[int, torch.Tensor]:
    """Sample id -> its clipped rows of message `name` in one round (M3: one row; M1: its node rows)."""
    sent = [t for n, t in rows if n == name]
    out = {}
    for t, chunk, batch in zip(sent, chunks, batches):
        for pos, i in enumerate(chunk):
            out[i] = t[pos:pos + 1] if name == M3 else t[batch == pos]
    return out


class SplitDPSensitivity(Attack):
    """`split-dp-sensitivity`: measured vs accounted sensitivity of a round of split DP (auditor side)."""

    name = "split-dp-sensitivity"

    def __init__(self, clients: list[int] | None = None, rounds: int = 2, sample: int = 0, seed: int = 0):
        if rounds < 1 or sample < 0:
            raise ValueError(f"split-dp-sensitivity: rounds={rounds}, sample={sample}; valid: rounds >= 1, sample >= 0")
        self.clients, self.rounds, self.sample, self.seed = clients or [0], rounds, sample, seed

    def targets(self, view: AdversaryView, knowledge: Knowledge, num_clients: int) -> list[str]:
        return [f"client{k}" for k in self.clients]

    def declare_aux(self, setup, knowledge: Knowledge, target: str) -> SensitivityAux:
        spec = setup.extras.get("split_dp_spec")
        if knowledge.method != "fedgpl" or spec is None:
            raise NoInput("split-dp-sensitivity audits FedGPL's split DP: the run needs --method fedgpl with "
                          "--dp ...,on=m1|m3|split,mode=local")
        if not any(m in (M1, M3) for m in spec.messages):
            raise NoInput(f"--dp noises {', '.join(SPLIT_MESSAGES[m] for m in spec.messages)}: no client upload "
                          "(M1, M3) to audit")
        p = resolve_params(setup.method.params)
        k = client_index(target)
        graphs = _graphs(setup.extras["fedgpl_samples"][k], 0)
        if self.sample >= min(p.batch_size, len(graphs)):
            raise ValueError(f"split-dp-sensitivity: sample={self.sample}; valid: 0 to "
                             f"{min(p.batch_size, len(graphs)) - 1} (a position in the first minibatch)")
        return SensitivityAux(copy.deepcopy(setup.extras["fedgpl_clients"][k]),
                              copy.deepcopy(setup.extras["fedgpl_server"]), graphs, spec, p.split_dp_composition,
                              p.batch_size)

    def attack(self, view: AdversaryView, aux: SensitivityAux) -> dict:
        """Auditor side (ignores the view): the two replays' measured and accounted sensitivities."""
        n, B = len(aux.graphs), aux.batch_size
        gen = torch.Generator().manual_seed(self.seed)
        chunks = [[perm[i:i + B] for i in range(0, n, B)]
                  for perm in (torch.randperm(n, generator=gen).tolist() for _ in range(self.rounds))]
        removed = chunks[0][0][self.sample]
        recording = _Recording(copy.deepcopy(aux.server))
        full, accounted, logs = _replay(aux, chunks, recording, None)
        drops = [chunk.index(removed) if removed in chunk else None for rc in chunks for chunk in rc]
        smaller = [[[i for i in chunk if i != removed] for chunk in rc] for rc in chunks]
        replaying = _Replaying(recording.answers, drops)
        neighbour, _, _ = _replay(aux, smaller, replaying, logs)
        norm = 1 if aux.spec.mechanism == "laplace" else 2
        out: dict = {"removed_sample": removed, "norm": f"L{norm}", "rounds": []}
        start = 0
        for r, round_chunks in enumerate(chunks):
            round_batches = [a["batch"] for a in recording.answers[start:start + len(round_chunks)]]
            nb_batches = replaying.batches[start:start + len(round_chunks)]
            start += len(round_chunks)
            per_message = {}
            for name in (m for m in aux.spec.messages if m in (M1, M3)):
                a = _by_sample(full[r], name, round_chunks, round_batches)
                b = _by_sample(neighbour[r], name, smaller[r], nb_batches)
                diffs = torch.cat([(a[i] - b.get(i, torch.zeros_like(a[i]))).flatten() for i in a]).double()
                own = a[removed].double() if removed in a else torch.zeros(0)
                measure = (lambda t: float(t.abs().sum())) if norm == 1 else (lambda t: float(t.norm()))
                group = max(own.shape[0], 1)
                per_message[LABELS[name]] = {"measured": measure(diffs), "own_rows": measure(own.flatten()),
                                             "accounted": accounted[r][name] * group, "group": group}
            out["rounds"].append(per_message)
        return out

    def truth(self, setup, target: str) -> None:
        """The measurement is its own truth (the replays read the data)."""
        return None

    def score(self, reconstruction: dict, truth, aux: SensitivityAux) -> tuple[dict, dict]:
        metrics: dict = {"composition": aux.composition, "norm": reconstruction["norm"],
                         "removed_sample": reconstruction["removed_sample"], "per_round": reconstruction["rounds"]}
        baseline: dict = {}
        for label in reconstruction["rounds"][0]:
            rounds = [r[label] for r in reconstruction["rounds"]]
            metrics[f"ratio_{label}"] = max(r["measured"] / r["accounted"] for r in rounds)
            baseline[f"ratio_{label}"] = max(r["own_rows"] / r["accounted"] for r in rounds)
        metrics["ratio"] = max(v for k, v in metrics.items() if k.startswith("ratio_"))
        baseline["ratio"] = max(baseline.values())
        metrics["within_accounted"] = metrics["ratio"] <= 1 + 1e-6
        return metrics, baseline
