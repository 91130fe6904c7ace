"""Local (standalone) training: every client trains only on its own subgraph; nothing is sent."""
from __future__ import annotations

from privfgl.methods.base import Setup
from privfgl.training import init_params, make_trainers


def run_local(setup: Setup) -> None:
    """Each client: its own seeded model, `local_epochs` epochs per round, evaluated every round."""
    m = setup.method
    timer = setup.federation.timer
    init = [init_params(setup.model, setup.num_features, setup.num_classes, seed=m.seed * 1000 + k)
            for k in range(len(setup.clients))]
    trainers = make_trainers(setup.clients, setup.model, init, m.engine, setup.device)
    for r in setup.rounds("local"):
        with timer.phase("local_train"):
            trainers.train(m.local_epochs)
        with timer.phase("evaluate"):
            setup.tracker.evaluate(r, trainers.predict(), predict_on=trainers.predict_on)
