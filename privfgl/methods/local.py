"""Local (standalone) training: every client trains only on its own subgraph; nothing is sent."""
from __future__ import annotations

from privfgl.methods.base import Setup
from privfgl.training import dropout_seeds, init_params


def run_local(setup: Setup) -> None:
    """Each client: its own seeded model and dropout stream, `local_epochs` epochs per round, evaluated every
    round (in this process, or on the clients' Ray actors)."""
    m = setup.method
    timer, K = setup.federation.timer, setup.federation.num_clients
    init = [init_params(setup.model, setup.num_features, setup.num_classes, seed=m.seed * 1000 + k)
            for k in range(K)]
    trainers = setup.trainers(init, dropout_seeds(m.seed, range(K)))
    for r in setup.rounds("local"):
        with timer.phase("local_train"):
            trainers.train(m.local_epochs)
        with timer.phase("evaluate"):
            trainers.evaluate(setup.tracker, r)
