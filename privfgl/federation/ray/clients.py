"""The driver's handle on the client actors (``ActorClients``), and the two things a method gets from it:
``RemoteTrainers`` (the clients' local models, on the actors) and ``RemoteUploads`` (a sum's inputs, which
stay on the actors until the protocol sends them).

Every call to an actor waits at most ``timeout_s``. An actor that dies (its process killed, its node lost)
takes its clients with it: from then on they are absent from every sum (the runtime's participation mask,
as ``--absent``), and a sum in progress under secagg recovers the survivors' sum. Under plain, ckks and bfv a
client that dies before it sent its input is left out of that sum too; the ckks/bfv key holder's death (client
0) ends the run with one line. A call that times out ends the run with one line.

``wire``: bytes per (sender, receiver) the driver actually received from the actors in the protocol's
messages to the server, counted on the serialized bytes, for the check against what the channel booked
(privfgl.federation.ray.run.wire_check).
"""
from __future__ import annotations

import os
from collections import Counter

from privfgl.federation.ray.actor import ClientHost
from privfgl.federation.ray.wire import decode_tensors, encode_tensors
from privfgl.training import LocalTrainers, ModelConfig, Params
from protocols.base import PartyFailure

TIMEOUT_S = float(os.environ.get("PRIVFGL_RAY_TIMEOUT_S", 300))  # one call to the actors
ACTOR_CPU = 0.01  # the CPU share an actor reserves for placement (its torch threads are its run's)


class ActorClients:
    """K clients on ceil(K / per_actor) actors (actor a hosts clients a*per_actor .. (a+1)*per_actor - 1),
    spread over the cluster's nodes by a SPREAD placement group."""

    def __init__(self, cfg, per_actor: int, threads: int = 1, timeout_s: float = TIMEOUT_S, dp=None,
                 pool: "ActorPool | None" = None):
        """pool: take warm actors from it (and give them back at ``close``), else start new ones."""
        import ray  # noqa: PLC0415
        self.ray = ray
        self.cfg = cfg
        self.num_clients = cfg.clients
        self.timeout_s = timeout_s
        groups = [list(range(a, min(a + per_actor, cfg.clients))) for a in range(0, cfg.clients, per_actor)]
        # crypten's parties join a process group for one run: their actors are not reused
        self.pool = pool if cfg.protocol != "crypten" else None
        warm = self.pool.take(len(groups)) if self.pool is not None else None
        self.dead: set[int] = set()  # clients whose actor died
        self.members = groups
        self.wire: Counter[tuple[str, str]] = Counter()
        self._sent: list[tuple[int, object]] = []  # (actor, ref) of calls sent without waiting
        self.warm = warm is not None
        if warm is not None:
            self.placement, self.actors = warm
            described = self.gather("reset", range(len(groups)), per_actor=lambda a: (cfg, groups[a], threads, dp))
        else:
            self.placement, self.actors = self._start(groups, cfg, threads, dp, timeout_s)
            described = self.gather("describe", range(len(self.actors)))
        self.actor_of = {k: a for a, members in enumerate(groups) for k in members}
        if len(described) < len(self.actors):
            raise PartyFailure(f"--engine ray: client actors {self._missing(described)} died while loading their data")
        first = described[0]
        self.num_features = first["num_features"]
        self.num_classes = first["num_classes"]
        self.public = first
        self.node_counts = [described[self.actor_of[k]]["node_counts"][k] for k in range(cfg.clients)]
        self.last_tallies: dict[int, dict] = {}

    @staticmethod
    def _start(groups, cfg, threads: int, dp, timeout_s: float):
        """A placement group of one bundle per actor, which Ray spreads over the nodes as evenly as it can
        ("SPREAD"; a token CPU share each, so that any number of actors fits on a small cluster), and the
        actors, one per bundle."""
        import ray  # noqa: PLC0415
        from ray.util.placement_group import placement_group  # noqa: PLC0415
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy  # noqa: PLC0415
        placement = placement_group([{"CPU": ACTOR_CPU}] * len(groups), strategy="SPREAD")
        if not placement.wait(timeout_s):
            raise PartyFailure(f"--engine ray: the cluster could not place {len(groups)} client actors within "
                               f"{timeout_s:g} s")
        host = ray.remote(num_cpus=ACTOR_CPU, max_restarts=0)(ClientHost)
        return placement, [host.options(scheduling_strategy=PlacementGroupSchedulingStrategy(placement, a))
                           .remote(cfg, members, threads, dp) for a, members in enumerate(groups)]

    # --- calls -------------------------------------------------------------------------------------------
    def gather(self, method: str, actors, *args, per_actor=None) -> dict[int, object]:
        """Call `method` on each actor in `actors` (per_actor(a) -> its arguments, else `args`); actor ->
        its result, for the actors that answered. An actor that died is marked dead (its clients absent from
        now on); a call that does not return within timeout_s raises PartyFailure. Calls sent with ``send``
        before are waited for first (an actor runs its calls in order)."""
        refs = self._submit(method, actors, args, per_actor)
        sent, self._sent = self._sent, []
        self._wait(sent + list(refs.items()), method)
        self._results(sent)  # the sent calls' errors and deaths, before this call's
        return self._results(list(refs.items()))

    def send(self, method: str, actors, *args) -> None:
        """Call `method` on the actors without waiting (training, a broadcast): its errors and deaths surface
        at the next ``gather``, which the next step of every round makes."""
        self._sent += list(self._submit(method, actors, args, None).items())

    def _submit(self, method: str, actors, args, per_actor) -> dict:
        return {a: getattr(self.actors[a], method).remote(*(per_actor(a) if per_actor else args)) for a in actors}

    def _wait(self, calls: list, method: str) -> None:
        ray = self.ray
        refs = [ref for _, ref in calls]
        _, pending = ray.wait(refs, num_returns=len(refs), timeout=self.timeout_s)
        if pending:
            slow = sorted({a for a, r in calls if r in pending})
            raise PartyFailure(f"--engine ray: client actor(s) {slow} (clients {self._clients_of(slow)}) sent no "
                               f"answer to {method} within {self.timeout_s:g} s")

    def _results(self, calls: list) -> dict[int, object]:
        """actor -> the result of its call in `calls` ((actor, ref) pairs; the last, if several)."""
        ray, out = self.ray, {}
        for a, ref in calls:
            try:
                out[a] = ray.get(ref)
            except ray.exceptions.RayActorError:
                self.dead.update(self.members[a])
        return out

    def alive_actors(self) -> list[int]:
        return [a for a, members in enumerate(self.members) if not set(members) <= self.dead]

    def actors_for(self, clients) -> dict[int, list[int]]:
        """actor -> the given clients it hosts (living actors only)."""
        out: dict[int, list[int]] = {}
        for k in clients:
            if k not in self.dead:
                out.setdefault(self.actor_of[k], []).append(k)
        return out

    def _clients_of(self, actors) -> list[int]:
        return [k for a in actors for k in self.members[a]]

    def _missing(self, answered) -> list[int]:
        return [a for a in range(len(self.actors)) if a not in answered]

    def broadcast(self, method: str, params: Params) -> None:
        """The server's model to every living actor, as bytes; booked per client it hosts."""
        header, data = encode_tensors(params)
        self.send(method, self.alive_actors(), header, data)

    # --- what a method gets ------------------------------------------------------------------------------
    def trainers(self, model: ModelConfig, method, init: list[Params], seeds: list[int] | None) -> "RemoteTrainers":
        return RemoteTrainers(self, model, method, init, seeds)

    def evaluate(self, tracker, round: int, got: dict, stage: str) -> dict:
        """The actors' answers `got` (actor -> client -> its evaluation counts) into the tracker; a dead client's
        counts are those of its last evaluation."""
        for per_client in got.values():
            self.last_tallies.update(per_client)
        missing = [k for k in range(self.num_clients) if k not in self.last_tallies]
        if missing:
            raise PartyFailure(f"--engine ray: clients {missing} died before their first evaluation")
        return tracker.evaluate_tallies(round, [self.last_tallies[k] for k in range(self.num_clients)], stage)

    def steps(self, allow_dead: bool) -> "ActorSteps":
        return ActorSteps(self, allow_dead)

    def task(self, fn, *args):
        """fn(the run's config, *args) in a Ray task of its own, no client's actor: server-side work that builds
        from the config what the method takes as public (FedGPL's pretraining pool); its result, within
        timeout_s."""
        ray = self.ray
        ref = ray.remote(num_cpus=ACTOR_CPU, max_retries=0)(fn).remote(self.cfg, *args)
        try:
            return ray.get(ref, timeout=self.timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise PartyFailure(f"--engine ray: the task {getattr(fn, '__name__', fn)} sent no answer within "
                               f"{self.timeout_s:g} s") from None

    def close(self) -> None:
        """Stop the actors, or give them back to the pool when every one of them lives."""
        if self.pool is not None and not self.dead:
            self.pool.give(self.placement, self.actors)
        else:
            stop(self.ray, self.placement, self.actors)


def stop(ray, placement, actors) -> None:
    from ray.util.placement_group import remove_placement_group  # noqa: PLC0415
    for actor in actors:
        try:
            ray.kill(actor)
        except Exception:  # noqa: BLE001 - already gone
            pass
    remove_placement_group(placement)


class ActorPool:
    """Client actors kept warm between the runs of one driver (a benchmark's runs, a test module's, a
    notebook's): a run of n actors takes the pool's n actors if it holds them (on the same Ray job), and
    each actor drops everything of its last run and loads the new run's clients (``ClientHost.reset``),
    so that the run skips the actors' start (their processes and imports). It gives them back at its end
    if all of them live. crypten's runs start their own. The pool holds the driver's Ray connection for its
    runs (actors live as long as the job that made them): it joins `address` (None: a local Ray) unless
    this process is already connected; ``close`` stops the actors, and the connection it made."""

    def __init__(self, address: str | None = None):
        import sys  # noqa: PLC0415

        from privfgl.sweep.ray_tasks import LOCAL, connect  # noqa: PLC0415
        self.connected = not ("ray" in sys.modules and sys.modules["ray"].is_initialized())
        if self.connected:
            connect(address or LOCAL)  # before Ray is imported: its environment (token authentication)
        self.idle: dict[int, tuple] = {}  # actor count -> (Ray job, placement group, actors)

    def take(self, n: int):
        """(placement group, actors) of n warm actors of this Ray job, or None."""
        import ray  # noqa: PLC0415
        warm = self.idle.pop(n, None)
        if warm is None or warm[0] != ray.get_runtime_context().get_job_id():
            return None  # none, or from an earlier Ray job: gone with it
        return warm[1], warm[2]

    def give(self, placement, actors) -> None:
        import ray  # noqa: PLC0415
        job = ray.get_runtime_context().get_job_id()
        old = self.idle.pop(len(actors), None)
        if old is not None and old[0] == job:
            stop(ray, old[1], old[2])
        self.idle[len(actors)] = (job, placement, actors)

    def close(self) -> None:
        import ray  # noqa: PLC0415
        if ray.is_initialized():
            job = ray.get_runtime_context().get_job_id()
            for owner, placement, actors in self.idle.values():
                if owner == job:
                    stop(ray, placement, actors)
            if self.connected:
                ray.shutdown()
        self.idle = {}


class ActorSteps:
    """A method's client steps (privfgl.federation.client_steps) on the clients' actors: the same calls as
    ClientSteps, run where each client is. Unless `allow_dead` (a method that weighs the survivors), a client
    whose actor died ends the run with one line."""

    remote = True

    def __init__(self, clients: ActorClients, allow_dead: bool = False):
        self.clients, self.num_clients, self.allow_dead = clients, clients.num_clients, allow_dead

    def _check(self, what: str) -> None:
        if self.clients.dead and not self.allow_dead:
            raise PartyFailure(f"--engine ray: the actor of client(s) {sorted(self.clients.dead)} died during {what}; "
                               "this method does not run on without them")

    def _step_name(self, step) -> str:
        return getattr(step, "__name__", "a step")

    def each(self, step, *args) -> dict[int, object]:
        """Client -> step(k, state, data, *args) (public results only), for the living clients."""
        got = self.clients.gather("each", self.clients.alive_actors(), step, args)
        self._check(self._step_name(step))
        return {k: v for per_actor in got.values() for k, v in per_actor.items()}

    def train(self, step, *args) -> None:
        """``each`` without waiting or results: its errors surface at the next call that waits."""
        self.clients.send("each", self.clients.alive_actors(), step, args)

    def group(self, step, *args) -> None:
        """A group step over each actor's living clients at once; waits (its errors surface here)."""
        self.clients.gather("group", self.clients.alive_actors(), step, args)
        self._check(self._step_name(step))

    def uploads(self, step, *args) -> RemoteUploads:
        return RemoteUploads(self.clients, "step_upload", step, args)

    def messages(self, federation, round: int, name: str, step, *args) -> dict[int, Params]:
        """The clients' clear messages as serialized bytes, counted on the wire and booked on the channel."""
        from privfgl.federation.messages import SERVER  # noqa: PLC0415
        from protocols.base import client as client_name  # noqa: PLC0415
        got = self.clients.gather("each_message", self.clients.alive_actors(), step, args)
        self._check(self._step_name(step))
        out = {}
        for k, (header, data) in sorted(kv for per_actor in got.values() for kv in per_actor.items()):
            self.clients.wire[(client_name(k), SERVER)] += len(data)
            out[k] = federation.upload(round, k, name, decode_tensors(header, data))
        return out

    def evaluate(self, tracker, round: int, predict, *args, stage: str = "train", predict_on=None) -> dict:
        """The clients' evaluation counts into the tracker; a dead client's are those of its last evaluation.
        predict_on is not called: evaluation settings beyond seen are refused on actors (run.check_ray_run)."""
        got = self.clients.gather("each_tally", self.clients.alive_actors(), predict, args,
                                  tracker.select == "val_loss")
        self._check("evaluation")
        return self.clients.evaluate(tracker, round, got, stage)


class RemoteTrainers(LocalTrainers):
    """The clients' models on their actors. Their parameters never come to the driver: get_params and
    predict refuse; evaluation returns the clients' counts; uploads stay on the actors until summed."""

    def __init__(self, clients: ActorClients, model: ModelConfig, method, init: list[Params],
                 seeds: list[int] | None):
        """init: each client's initial parameters (public: the server's model, or a seeded initialisation)."""
        self.clients, self.num_clients = clients, clients.num_clients
        seeds = None if seeds is None else dict(enumerate(seeds))
        engine = "auto" if method.engine == "ray" else method.engine
        encoded = {id(p): encode_tensors(p) for p in init}  # one encoding per distinct model (FedAvg: one)

        def arguments(a: int):
            return model, engine, {k: encoded[id(init[k])] for k in clients.members[a]}, seeds

        clients.gather("start_training", clients.alive_actors(), per_actor=arguments)

    def _refuse(self, what: str):
        raise RuntimeError(f"--engine ray: {what} stays on the client's actor; it leaves only through the protocol")

    def get_params(self, k: int) -> Params:
        self._refuse("a client's model")

    def set_params(self, k: int, params: Params) -> None:
        self._refuse("a client's model")

    def predict(self):
        self._refuse("a client's predictions")

    def predict_on(self, graphs):
        self._refuse("a client's predictions")

    def set_all_params(self, params: Params) -> None:
        self.clients.broadcast("set_params", params)

    def train(self, epochs: int, prox_mu: float = 0.0, anchors=None) -> None:
        """Every living client trains; FedProx's anchor is the last global model each received."""
        self.clients.send("train", self.clients.alive_actors(), epochs, prox_mu)

    def evaluate(self, tracker, round: int, stage: str = "train") -> dict:
        """The clients' evaluation counts into the tracker; a dead client's are those of its last evaluation."""
        got = self.clients.gather("tallies", self.clients.alive_actors(), tracker.select == "val_loss")
        return self.clients.evaluate(tracker, round, got, stage)

    def uploads(self, upload, received: Params, data) -> "RemoteUploads":
        return RemoteUploads(self.clients, "make_upload", upload)


class RemoteUploads:
    """One sum's inputs: each living client's message (ClientHost.make_upload or step_upload with `args`),
    computed and kept on its actor (``prepare``). `layout` and `integer` are the messages' public shapes."""

    remote = True

    def __init__(self, clients: ActorClients, call: str, *args):
        self.clients, self.call, self.args = clients, call, args

    def prepare(self, name: str) -> None:
        """The clients compute (and, if DP protects `name`, clip and noise) their messages of sum `name`."""
        clients = self.clients
        answers = clients.gather(self.call, clients.alive_actors(), *self.args, name)
        if not answers:
            raise PartyFailure("--engine ray: every client actor is gone")
        (self.layout, self.integer), *rest = answers.values()
        if any(lay != self.layout for lay, _ in rest):
            raise ValueError("upload: the clients sent messages of different fields")
        self.n = sum(shape.numel() for _, shape in self.layout)

    @property
    def dead(self) -> set[int]:
        return self.clients.dead
