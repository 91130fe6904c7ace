"""Participation inference: which clients took part in each sampled DP-FedAvg round.

DP-FedAvg samples every client with probability q per round; the unsampled clients upload zeros.
Amplification by sampling (ε accounted at rate q) assumes the sample is secret. From the server's
view only:
- under plain, every client's upload is in the clear: the attack guesses "took part" exactly where
  the upload is not all zeros (exact in central mode; in local mode the noise hides the zeros and
  every client looks sampled);
- under a secure protocol (crypten, ckks, bfv) the uploads are opaque and only their sum is opened:
  nothing tells the clients apart, and the attack guesses by the prior (everyone sampled if q ≥ 1/2,
  nobody otherwise).
Scored per (round, client) against the coins DP-FedAvg actually drew (setup.extras["sampled_clients"],
auditor side only): accuracy, F1 of "took part", and the fraction of rounds whose sampled set is
exactly right; the baseline is the prior's guess scored the same way.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from attacks.base import Attack, Knowledge, NoInput
from attacks.view import AdversaryView
from privfgl.federation import client_name
from privfgl.methods.dp_fedavg import dp_fedavg_params

MESSAGE = "model_update"


@dataclass(frozen=True)
class ParticipationAux:
    """Public: the method, its sampling rate q (method params) and the number of clients."""
    method: str
    q: float
    num_clients: int


@dataclass(frozen=True)
class ParticipationGuess:
    """round -> the guessed sampled set [K]; `read`: the rounds guessed from the uploads (the others: the prior)."""
    rounds: dict[int, list[bool]]
    read: tuple[int, ...]


def prior_guess(q: float, num_clients: int) -> list[bool]:
    """The best guess without any view: the more likely outcome of each client's coin."""
    return [q >= 0.5] * num_clients


def participation_metrics(guess: dict[int, list[bool]], truth: dict[int, list[bool]]) -> dict:
    """accuracy and F1 of "took part" over every (round, client), and the fraction of rounds guessed exactly."""
    rounds = sorted(guess)
    pred = torch.tensor([guess[r] for r in rounds], dtype=torch.bool)
    true = torch.tensor([truth[r] for r in rounds], dtype=torch.bool)
    tp, fp, fn = int((pred & true).sum()), int((pred & ~true).sum()), int((~pred & true).sum())
    return {"accuracy": float((pred == true).double().mean()),
            "f1": 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 1.0,
            "exact_rounds": float((pred == true).all(dim=1).double().mean()), "rounds": len(rounds)}


class Participation(Attack):
    """`participation`: the sampled clients of every DP-FedAvg round in the view."""

    name = "participation"

    def targets(self, view: AdversaryView, knowledge: Knowledge, num_clients: int) -> list[str]:
        return ["sampled_clients"]

    def declare_aux(self, setup, knowledge: Knowledge, target: str) -> ParticipationAux:
        q = dp_fedavg_params(setup.method.params)["q"] if knowledge.method == "dp-fedavg" else 1.0
        return ParticipationAux(knowledge.method, q, len(setup.clients))

    def attack(self, view: AdversaryView, aux: ParticipationAux) -> ParticipationGuess:
        if aux.method != "dp-fedavg":
            raise NoInput(f"participation reads dp-fedavg's sampled rounds, not {aux.method}")
        guess, read = {}, []
        for r in sorted({m.round for m in view.messages if m.name.split(":")[0] == MESSAGE}):
            uploads = [view.payload(MESSAGE, r, client_name(k)) for k in range(aux.num_clients)]
            if all(u is not None for u in uploads):
                guess[r] = [any(bool(t.ne(0).any()) for t in u.values()) for u in uploads]
                read.append(r)
            elif not any(m.kind == "plaintext" and m.tensors is None for m in view.find(MESSAGE, r)):
                guess[r] = prior_guess(aux.q, aux.num_clients)  # opaque uploads: nothing to read
            # else: plaintext uploads whose payloads the transcript did not keep; the round is left out
        if not guess:
            raise NoInput(f"no dp-fedavg uploads with kept payloads in the {view.party}'s view")
        return ParticipationGuess(guess, tuple(read))

    def truth(self, setup, target: str) -> dict[int, list[bool]]:
        return dict(enumerate(setup.extras["sampled_clients"]))

    def score(self, guess: ParticipationGuess, truth: dict[int, list[bool]], aux: ParticipationAux
              ) -> tuple[dict, dict]:
        prior = {r: prior_guess(aux.q, aux.num_clients) for r in guess.rounds}
        base = participation_metrics(prior, truth)
        kind = f"the prior: every client guessed {'sampled' if aux.q >= 0.5 else 'not sampled'} (q={aux.q})"
        return ({**participation_metrics(guess.rounds, truth), "rounds_read": len(guess.read)},
                {**base, "kind": kind})
