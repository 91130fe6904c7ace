"""What every method gets: the clients' private data, the runtime, the local trainers, the tracker."""
from __future__ import annotations

from dataclasses import dataclass, field

from torch_geometric.data import Data
from tqdm.auto import tqdm

from privfgl.evaluation import RoundTracker
from privfgl.federation import Federation
from privfgl.training import LocalTrainers, ModelConfig, Params, make_trainers


@dataclass(frozen=True)
class MethodConfig:
    """Settings shared by the baselines (method-specific ones have defaults that switch them off)."""
    rounds: int = 100
    local_epochs: int = 3
    finetune_epochs: int = 0
    mu: float = 0.01  # FedProx proximal weight
    engine: str = "auto"
    evaluation: str = "local_model"  # or "global_model" (see methods/fedavg.py)
    seed: int = 0
    progress: bool = True
    params: dict = field(default_factory=dict)  # method-specific settings (--method-param KEY=VALUE)


@dataclass
class Setup:
    """A federation ready to run. `clients[k]` is client k's private subgraph (x, y, edge_index,
    masks); methods hand it only to client-side code."""
    clients: list[Data]
    num_classes: int
    model: ModelConfig
    method: MethodConfig
    federation: Federation
    tracker: RoundTracker
    device: str = "cpu"
    extras: dict = field(default_factory=dict)

    remote: object = None  # the clients' Ray actors (privfgl.federation.ray.ActorClients), or None: in process

    @property
    def num_features(self) -> int:
        if self.remote is not None:
            return self.remote.num_features
        return int(self.clients[0].num_features)

    def trainers(self, init: list[Params], seeds: list[int] | None = None) -> LocalTrainers:
        """The clients' local models: in this process (training.make_trainers), or on the clients' actors."""
        if self.remote is not None:
            return self.remote.trainers(self.model, self.method, init, seeds)
        return make_trainers(self.clients, self.model, init, self.method.engine, self.device, seeds)

    def steps(self, allow_dead: bool = False):
        """Where the method's client steps run (privfgl.federation.client_steps): ClientSteps over the clients'
        data here, or ActorSteps on their Ray actors. allow_dead: on actors, a method that weighs the
        survivors runs on when a client's actor dies (else that ends the run with one line)."""
        if self.remote is not None:
            return self.remote.steps(allow_dead)
        from privfgl.federation.client_steps import ClientSteps  # noqa: PLC0415
        return ClientSteps(self.clients)

    def rounds(self, desc: str):
        """range(rounds) with a progress bar on stderr (off when progress=False)."""
        return tqdm(range(self.method.rounds), desc=desc, disable=not self.method.progress, leave=False,
                    unit="round")
