"""Where a method's client-side steps run: ``ClientSteps`` runs them in this process;
privfgl.federation.ray.clients.ActorSteps runs the same steps on the clients' Ray actors (``--engine ray``).

A step is a module-level function ``step(k, state, data, *args) -> result``:
- ``k``: the client's index;
- ``state``: the client's private dict, kept where the client is from one step to the next (its model,
  optimizer, noise source, caches);
- ``data``: its subgraph (torch_geometric Data).

The contract, which keeps a method's record the same in process and on actors:
- a step reads only its own client's state and data, and the arguments the server sends;
- every random draw comes from a stream in its state, seeded per client (``client_seed``), or from a DP
  noise source; never from the process's global RNG, which actors do not share;
- what ``each`` returns crosses to the server's process, so it must be public: sizes, a flag, nothing
  derived from the client's private data. Messages go through ``uploads`` (a sum's inputs) or
  ``messages`` (booked on the channel); evaluation through ``evaluate`` (counts only).

A group step ``step(ks, states, datas, *args)`` (``group``) runs the clients hosted in one place together: all
K in process, an actor's members on Ray (the stacked engine). It must give each client what its own run alone
would, bit for bit (its computation on client k's rows never mixes in another client's), so that the grouping
does not change the record.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import numpy as np
import torch
from torch_geometric.data import Data

Tensors = dict[str, torch.Tensor]
Step = Callable[..., object]


def client_seed(seed: int, k: int, purpose: int) -> int:
    """Client k's seed for its stream `purpose` (a small constant per use) of the run seeded `seed`, from
    NumPy's SeedSequence: the same wherever the client runs, independent across clients and purposes
    (training.dropout_seeds is purpose 0xD20)."""
    return int(np.random.SeedSequence([seed, int(k), purpose]).generate_state(1)[0])


def rng_state(seed: int) -> torch.Tensor:
    """A fresh CPU generator state seeded `seed` (a client's stream for ``global_rng``)."""
    return torch.Generator().manual_seed(seed).get_state()


@contextlib.contextmanager
def global_rng(state: dict | list, key: str | int = "rng") -> Iterator[None]:
    """torch's global CPU generator set to the client's own stream state[key] (``rng_state``) for the block,
    then restored, the stream advanced: for the draws only the global generator serves (F.dropout, vmap's
    randomness="different"), so that they are the client's own wherever it runs."""
    saved = torch.get_rng_state()
    torch.set_rng_state(state[key])
    try:
        yield
    finally:
        state[key] = torch.get_rng_state()
        torch.set_rng_state(saved)


class ClientSteps:
    """The clients' steps in this process, over their subgraphs; each client's state is a dict here."""

    remote = False

    def __init__(self, clients: list[Data]):
        self.clients = clients
        self.num_clients = len(clients)
        self.states: list[dict] = [{} for _ in clients]

    def each(self, step: Step, *args) -> dict[int, object]:
        """Client k -> step(k, its state, its data, *args), for every client."""
        return {k: step(k, self.states[k], c, *args) for k, c in enumerate(self.clients)}

    def train(self, step: Step, *args) -> None:
        """``each`` whose results stay with the clients (nothing returns to the server)."""
        self.each(step, *args)

    def group(self, step: Step, *args) -> None:
        """step(ks, states, datas, *args) over every client at once (nothing returns to the server)."""
        step(list(range(self.num_clients)), self.states, self.clients, *args)

    def uploads(self, step: Step, *args) -> list[Tensors]:
        """Every client's message step(k, state, data, *args), the inputs of one Federation.aggregate."""
        return [step(k, self.states[k], c, *args) for k, c in enumerate(self.clients)]

    def messages(self, federation, round: int, name: str, step: Step, *args) -> dict[int, Tensors]:
        """Clients whose step(k, state, data, *args) returns a message (not None) send it to the server in
        the clear: booked on the channel (Federation.upload); client -> what the server received."""
        out = {}
        for k, c in enumerate(self.clients):
            message = step(k, self.states[k], c, *args)
            if message is not None:
                out[k] = federation.upload(round, k, name, message)
        return out

    def evaluate(self, tracker, round: int, predict: Step, *args, stage: str = "train",
                 predict_on: Step | None = None) -> dict:
        """Every client's logits predict(k, state, data, *args) [n_k, C] into the tracker. predict_on(k, state,
        data, graph) -> client k's logits on an evaluation setting's graph (a run with --evaluate settings)."""
        logits = [predict(k, self.states[k], c, *args) for k, c in enumerate(self.clients)]
        on = None if predict_on is None else (
            lambda graphs: [predict_on(k, self.states[k], c, g) for (k, c), g in zip(enumerate(self.clients), graphs)])
        return tracker.evaluate(round, logits, stage, predict_on=on)
