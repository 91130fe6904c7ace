"""One run, end to end: data -> partition -> splits -> protocol -> federation -> method -> record."""
from __future__ import annotations

import dataclasses
import math
import os
import platform
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

import protocols
from privfgl.allocator import ALLOCATORS
from privfgl.allocator import apply as apply_allocator
from privfgl.data import client_subgraphs, load_dataset, partition_nodes, split_clients
from privfgl.data.partition_file import is_file_partition, partition_files, read_partition
from privfgl.data.split_file import read_split, split_file_bytes
from privfgl.data.settings import CLOSED_SETTINGS, EVAL_SETTINGS, OPEN_SETTINGS, build_regime, regime_of
from privfgl.data.splits import SPLIT_MODES
from privfgl.errors import ConfigError
from privfgl.evaluation import RoundTracker
from privfgl.federation import Federation, Transcript
from privfgl.federation.runtime import participation_mask
from privfgl.methods import METHODS, MethodConfig, Setup
from privfgl.methods.options import TRAINING_OPTIONS, unsupported_value, unused_option
from privfgl.methods.params import resolve_method_params
from privfgl.methods.opfgl.params import PROTOCOL_DEFAULTS as OPFGL_PROTOCOL_DEFAULTS
from privfgl.methods.fedomd.params import PROTOCOL_DEFAULTS as FEDOMD_PROTOCOL_DEFAULTS
from privfgl.privacy import MessageDP, check_dp_for_run
from privfgl.privacy.trust import tolerated_colluders
from privfgl.privacy.spec import SPLIT_MESSAGES
from privfgl.results import make_record
from privfgl.training import ENGINES, OPTIMIZERS, ModelConfig

# Split defaults per method (train, val, test): 20/40/40 for the baselines as in the O-pFGL setting.
DEFAULT_SPLIT = (0.2, 0.4, 0.4)
EVALUATION_MODES = ("local_model", "global_model")
# Protocol parameters a method needs by default, per protocol (filled in only where unset).
METHOD_PROTOCOL_DEFAULTS = {"opfgl": OPFGL_PROTOCOL_DEFAULTS, "fedomd": FEDOMD_PROTOCOL_DEFAULTS}
# Methods that evaluate on the settings' graphs (--evaluate beyond seen): they pass predict_on to the tracker.
SETTINGS_METHODS = {"local", "fedavg", "fedprox", "dp-fedavg", "fedspray", "opfgl", "fedlog"}
# Methods whose tensors stay on the CPU: --device cuda is refused for them rather than ignored. dp-sgd's
# per-node gradients (torch.func over the whole client graph) and FedLoG's and FedGPL's per-client models
# have never been moved to a device; the others run on --device (tests/test_cuda.py on a GPU).
CPU_ONLY_METHODS = ("dp-sgd", "fedgpl", "fedlog", "gap")
# Methods configured by run options alone: a --method-param for them is a typo, refused rather than ignored.
PARAMLESS_METHODS = ("local", "fedavg", "fedprox")


@dataclass
class RunConfig:
    """Every setting of a run. Validated by `validate()`; recorded verbatim in the run record."""
    method: str = "fedavg"
    dataset: str = "cora"
    partition: str = "louvain"
    clients: int = 10
    rounds: int = 100
    local_epochs: int = 3
    finetune_epochs: int = 0
    mu: float = 0.01
    model: str = "gcn"
    hidden: int = 64
    layers: int = 2
    dropout: float = 0.5
    lr: float = 0.01
    weight_decay: float = 5e-4
    optimizer: str = "adam"  # local optimizer: adam or sgd (privfgl.training.OPTIMIZERS)
    split: tuple[float, float, float] = DEFAULT_SPLIT
    split_mode: str = "stratified"  # or "random" (per client, >= 1 training node; FedOMD's 1/20/20 split)
    split_file: str | None = None  # per-client train/val/test node ids from outside (privfgl.data.split_file);
                                   # replaces the drawn split
    protocol: str = "plain"
    protocol_params: dict = field(default_factory=dict)
    dp: str | None = None  # message DP spec (privfgl.privacy.spec), e.g. "gaussian:sigma=1,clip=1,on=update,mode=central"
    partition_params: dict = field(default_factory=dict)
    method_params: dict = field(default_factory=dict)
    seed: int = 0
    partition_seed: int | None = None  # None: the run's seed (O-pFGL's code fixes it and varies only training)
    device: str = "cpu"
    engine: str = "auto"  # or "ray": the clients on Ray actors (privfgl.federation.ray)
    ray_address: str | None = None  # --engine ray: a running cluster's HOST:PORT (None: a local Ray)
    clients_per_actor: int = 1  # --engine ray: clients each actor hosts (trained with the stacked engine)
    evaluation: str = "local_model"
    evaluate: tuple[str, ...] = ("seen",)  # evaluation settings (privfgl.data.settings); beyond seen: FedLoG's regimes
    data_root: str | None = None
    download: bool = True
    transcript: str = "last"
    progress: bool = True
    threads: int | None = None  # torch's CPU threads for the run (None: as set, torch's default). Float sums
                                # depend on it, so runs are bit-identical per seed only at the same count;
                                # the record's config.threads is the count used.
    absent: dict = field(default_factory=dict)  # participation mask {round: [clients]} ("*": every round), any protocol
    absent_rate: float = 0.0  # each client independently left out of each round with this probability (seeded)
    allocator: str = "auto"  # glibc: keep freed memory (auto: when activations pass 32 MB; privfgl.allocator)
    canaries: int = 0  # auditor's canary nodes per client (privfgl.data.canaries), inserted before the method runs
    canary_seed: int | None = None  # their draw (features, labels, membership coins); None: the run's seed
    method_defaults: dict = field(default_factory=dict)  # what the method filled in (config_for; a record
                                                         # field only: it changes nothing in the run)

    def validate(self) -> None:
        def bad(name, value, valid):
            raise ConfigError(f"invalid {name} {value!r}; valid: {valid}")
        if self.method not in METHODS:
            bad("method", self.method, ", ".join(METHODS))
        if self.protocol not in protocols.PROTOCOLS:
            bad("protocol", self.protocol, ", ".join(protocols.PROTOCOLS))
        if self.evaluation not in EVALUATION_MODES:
            bad("evaluation", self.evaluation, ", ".join(EVALUATION_MODES))
        if self.engine not in ENGINES + ("ray",):
            bad("engine", self.engine, ", ".join(ENGINES + ("ray",)))
        if self.engine == "ray":
            from privfgl.federation.ray.run import check_ray_run
            check_ray_run(self)
        if self.optimizer not in OPTIMIZERS:
            bad("optimizer", self.optimizer, ", ".join(OPTIMIZERS))
        if self.device not in ("cpu", "cuda") and not self.device.startswith("cuda:"):
            bad("device", self.device, "cpu, cuda, cuda:N")
        if self.device != "cpu" and self.method in CPU_ONLY_METHODS:
            gpu_methods = ", ".join(m for m in METHODS if m not in CPU_ONLY_METHODS)
            raise ConfigError(f"--device {self.device}: {self.method} runs on the CPU only; use --device cpu "
                              f"(methods that run on a GPU: {gpu_methods})")
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise ConfigError(f"--device {self.device}: no CUDA device is available here; use --device cpu")
        for name in ("seed", "partition_seed", "canary_seed"):
            value = getattr(self, name)
            if value is not None and not 0 <= value < 2**32:
                unset = "" if name == "seed" else ", or unset for the run's seed"
                bad(name, value, f"an integer from 0 to 2**32 - 1{unset}")
        if self.method in PARAMLESS_METHODS and self.method_params:
            raise ConfigError(f"{self.method}: takes no method params (got {', '.join(sorted(self.method_params))}); "
                              "its settings are run options (e.g. --mu, --local-epochs)")
        try:
            params = resolve_method_params(self.method, self.method_params)  # before the data is read
        except ValueError as e:
            raise ConfigError(str(e)) from None
        if self.method == "opfgl" and self.dp is not None and params.dp_epsilon is not None:
            raise ConfigError("opfgl: dp_epsilon (node-level DP on the statistics) and --dp (client-level message DP) "
                              "are two DP mechanisms for the same upload; use one")
        for option in TRAINING_OPTIONS:  # a run option the method ignores is refused rather than lost
            value, why = getattr(self, option), unused_option(self.method, option)
            if option == "engine" and value == "ray":  # where the clients run, not a training engine
                continue
            if why is not None and value != _RUN_DEFAULTS[option]:
                flag = "--" + option.replace("_", "-")
                raise ConfigError(f"{self.method} does not use {flag} (given {value!r}): {why}; valid: leave {flag} "
                                  "unset")
        for option in (*TRAINING_OPTIONS, "rounds"):
            unsupported = unsupported_value(self.method, option, getattr(self, option))
            if unsupported is not None:
                raise ConfigError(unsupported)
        if self.threads is not None and self.threads < 1:
            bad("threads", self.threads, "an integer >= 1, or unset for torch's default")
        if self.allocator not in ALLOCATORS:
            bad("allocator", self.allocator, ", ".join(ALLOCATORS))
        for name in ("clients", "rounds", "hidden", "layers"):
            if getattr(self, name) < 1:
                bad(name, getattr(self, name), "an integer >= 1")
        for name in ("local_epochs", "finetune_epochs"):
            if getattr(self, name) < 0:
                bad(name, getattr(self, name), "an integer >= 0")
        if not math.isfinite(self.lr) or self.lr <= 0:
            bad("lr", self.lr, "a finite number > 0")
        if not (math.isfinite(self.mu) and math.isfinite(self.weight_decay)) or self.mu < 0 or self.weight_decay < 0:
            bad("mu/weight_decay", (self.mu, self.weight_decay), "finite numbers >= 0")
        if self.split_mode not in SPLIT_MODES:
            bad("split_mode", self.split_mode, ", ".join(SPLIT_MODES))
        if len(self.split) != 3 or any(r <= 0 for r in self.split) or sum(self.split) > 1 + 1e-9:
            bad("split", self.split, "three ratios train,val,test, each > 0 (a run picks its round on validation "
                                     "nodes and scores it on test nodes), summing to at most 1 (e.g. 0.2,0.4,0.4)")
        if (self.method == "fedgpl") != (self.partition == TASK_PARTITION):
            raise ConfigError(f"invalid partition {self.partition!r} for method {self.method}: fedgpl builds its own "
                              f"clients, one task level per third (--partition {TASK_PARTITION}), and only fedgpl does")
        if is_file_partition(self.partition):
            self._validate_file_partition()
        if self.split_file is not None:
            try:
                split_file_bytes(self.split_file)
            except ValueError as e:
                raise ConfigError(str(e)) from None
            if self.method == "fedgpl" or regime_of(self.evaluate) is not None:
                raise ConfigError(f"--split-file {self.split_file}: a split from outside applies to a partition's "
                                  "clients on the seen setting; valid: leave --split-file unset for fedgpl and for "
                                  "--evaluate beyond seen")
        if self.method == "fedgpl" and self.clients % 3:
            bad("clients", self.clients, "a multiple of 3 for fedgpl (node, edge and graph tasks; 9 by default in "
                                         "the paper)")
        if self.method == "fedgpl":
            from privfgl.methods.fedgpl.params import check_protocol, samples_path, trunk_path
            try:
                check_protocol(params, self.protocol, self.protocol_params)
            except ValueError as e:
                raise ConfigError(str(e)) from None
            path = samples_path(params)  # its contents are checked against the dataset when it is read
            if path is not None and not os.path.isfile(path):
                raise ConfigError(f"fedgpl: samples file {path}: no such file; valid: samples=file:PATH naming a "
                                  "file written by privfgl.methods.fedgpl.samples_file")
            if trunk_path(params) is not None and not os.path.isfile(trunk_path(params)):
                raise ConfigError(f"fedgpl: trunk file {trunk_path(params)}: no such file; valid: trunk=file:PATH "
                                  "naming a state_dict of the trunk, or trunk=graphcl")
        self._validate_evaluate()
        self._validate_canaries()
        try:
            mask = participation_mask(self.absent) or {}
        except ValueError as e:
            raise ConfigError(str(e)) from None
        out_of_range = sorted(k for who in mask.values() for k in who if k >= self.clients)
        late = sorted(r for r in mask if r != "*" and not 0 <= r < self.rounds)  # a negative round: none
        if out_of_range or late:
            bad("absent", self.absent, f"rounds 0..{self.rounds - 1} (or '*': every round) and client indices "
                                       f"0..{self.clients - 1}")
        if isinstance(self.absent_rate, bool) or not isinstance(self.absent_rate, (int, float)) \
                or not 0 <= self.absent_rate < 1:
            bad("absent_rate", self.absent_rate, "a probability in [0, 1)")
        check_dp_for_run(self.dp, self.method, self.protocol, self.seed)

    def _validate_file_partition(self) -> None:
        """--partition file:PATH: the file exists (its contents are checked against the graph when it is
        read); no partition parameters; the seen setting only."""
        try:
            partition_files(self.partition)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        if self.partition_params:
            raise ConfigError(f"--partition {self.partition} takes no partition params (got "
                              f"{', '.join(sorted(self.partition_params))}); the file is the whole partition")
        if regime_of(self.evaluate) is not None:
            raise ConfigError(f"--evaluate {','.join(self.evaluate)} partitions the graph into clients + 1 parts; a "
                              f"partition file holds {self.clients} clients; valid: --evaluate seen, or a built-in "
                              "--partition")

    def _validate_canaries(self) -> None:
        def is_int(v) -> bool:
            return isinstance(v, int) and not isinstance(v, bool)
        if not is_int(self.canaries) or self.canaries < 0:
            raise ConfigError(f"invalid canaries {self.canaries!r}; valid: an integer >= 0 (canary nodes per client; "
                              "0 = none)")
        if self.canary_seed is not None and not is_int(self.canary_seed):
            raise ConfigError(f"invalid canary_seed {self.canary_seed!r}; valid: an integer, or unset for the run's seed")
        if self.canary_seed is not None and not self.canaries:
            raise ConfigError(f"canary_seed {self.canary_seed} without canaries: it seeds the canaries' draw; "
                              "valid: with --canaries N (N >= 1), or unset")
        if self.canaries and self.partition == TASK_PARTITION:
            raise ConfigError(f"canaries {self.canaries}: fedgpl's task clients (--partition {TASK_PARTITION}) are "
                              "sampled graphs, not node-classification graphs; canaries need another partition")

    def _validate_evaluate(self) -> None:
        """--evaluate: known names; the open regime alone; a method that predicts on other graphs."""
        if isinstance(self.evaluate, str) or not self.evaluate:
            raise ConfigError(f"invalid evaluate {self.evaluate!r}; valid: a list of settings from "
                              f"{', '.join(EVAL_SETTINGS)} (e.g. seen or unseen-node,missing-class,new-client)")
        for name in self.evaluate:
            if name not in EVAL_SETTINGS:
                raise ConfigError(f"invalid evaluate setting {name!r}; valid: {', '.join(EVAL_SETTINGS)}")
        closed = [s for s in self.evaluate if s in CLOSED_SETTINGS]
        if closed and any(s in OPEN_SETTINGS for s in self.evaluate):
            raise ConfigError(f"--evaluate open-set cannot be combined with {', '.join(closed)}: open-set trains on "
                              "the open regime's data (20% of the nodes cropped), the others on the closed-set "
                              "regime's; run them separately")
        if regime_of(self.evaluate) is None:
            return
        names = ",".join(s for s in self.evaluate if s != "seen")
        if self.method not in SETTINGS_METHODS:
            raise ConfigError(f"--evaluate {names} is not supported by method {self.method}; supported: "
                              f"{', '.join(sorted(SETTINGS_METHODS))}")
        if self.partition == "planted":
            raise ConfigError(f"--evaluate {names} partitions the graph into clients + 1 parts; partition planted "
                              "has only the graph's own clients; use another --partition")


def _versions() -> dict:
    import torch_geometric

    from privfgl.provenance import code_commit
    return {"python": platform.python_version(), "torch": torch.__version__,
            "torch_geometric": torch_geometric.__version__, "privfgl": _privfgl_version(),
            "privfgl_commit": code_commit()}


def _privfgl_version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("privfgl")
    except PackageNotFoundError:
        return "unknown"


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def partition_cache_dir() -> Path:
    """Where partitions are cached as node-id files: $PRIVFGL_CACHE, else the user cache dir."""
    base = os.environ.get("PRIVFGL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "privfgl")
    return Path(base) / "partitions"


def effective_protocol_params(cfg: RunConfig) -> dict:
    """cfg.protocol_params completed by the method's defaults for the run's protocol
    (METHOD_PROTOCOL_DEFAULTS), and secagg's simulated `dropout_rate` drawn from the run's seed unless
    `dropout_seed` is set (one seed, one run); a key the user set is never overridden."""
    defaults = METHOD_PROTOCOL_DEFAULTS.get(cfg.method, {}).get(cfg.protocol, {})
    params = {**defaults, **cfg.protocol_params}
    if cfg.protocol == "secagg" and params.get("dropout_rate") and params.get("dropout_seed") is None:
        params["dropout_seed"] = cfg.seed
    return params


TASK_PARTITION = "tasks"  # FedGPL's client construction instead of a node partition


RUN_FIELD_TYPES = {f.name: f.type for f in dataclasses.fields(RunConfig)}  # annotations as strings (postponed)
_RUN_DEFAULTS = {f.name: f.default for f in dataclasses.fields(RunConfig)}  # a field with a default_factory: MISSING


def config_for(values: dict) -> RunConfig:
    """RunConfig from the settings a user gave (field names as keys), completed by the method's own
    defaults (privfgl.methods.defaults) where the user set nothing; what was filled in is kept in
    `method_defaults`. Unknown keys raise ConfigError naming the valid ones."""
    from privfgl.methods.defaults import apply_method_defaults
    fields = [f.name for f in dataclasses.fields(RunConfig) if f.name != "method_defaults"]
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ConfigError(f"unknown setting(s) {', '.join(unknown)}; valid: {', '.join(fields)}")
    values = {name: _typed_setting(name, value) for name, value in values.items()}
    fallback = {f.name: f.default for f in dataclasses.fields(RunConfig) if f.name in ("method", "dataset",
                                                                                      "partition")}
    done, applied = apply_method_defaults(values, fallback)  # split and evaluate are tuples (_typed_setting)
    return RunConfig(**done, method_defaults=applied)


# What each RunConfig field accepts from a config file or a sweep (the CLI's parser types its flags itself).
_KINDS = {"int": "an integer", "float": "a number", "str": "a string", "bool": "true or false", "dict": "a mapping"}


def _typed_setting(name: str, value):
    """A setting's value checked against its RunConfig field's type: ConfigError (one line) when it does
    not fit. Integers are accepted for numbers; a split may be the CLI's "0.2,0.4,0.4"; evaluate a
    "seen,unseen" string or a list."""
    annotation = str(RUN_FIELD_TYPES[name])
    optional = "None" in annotation
    if value is None and optional:
        return value
    if name == "split":
        parts = value.split(",") if isinstance(value, str) else value
        try:
            if not isinstance(parts, (list, tuple)) or any(isinstance(x, bool) for x in parts):
                raise TypeError
            return tuple(float(x) for x in parts)
        except (TypeError, ValueError):
            _not_a(name, value, "three numbers train,val,test, e.g. [0.2, 0.4, 0.4] or \"0.2,0.4,0.4\"")
    if name == "evaluate":
        items = value.split(",") if isinstance(value, str) else value
        if isinstance(items, (list, tuple)) and all(isinstance(x, str) for x in items):
            return tuple(x.strip() for x in items)
        _not_a(name, value, "a list of evaluation settings, e.g. [\"seen\"]")
    kind = annotation.split(" |")[0].strip()
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    ok = {"int": number and isinstance(value, int), "float": number, "str": isinstance(value, str),
          "bool": isinstance(value, bool), "dict": isinstance(value, dict)}.get(kind, True)
    if not ok:
        _not_a(name, value, _KINDS[kind] + (", or unset" if optional else ""))
    return value


def _not_a(name: str, value, valid: str):
    raise ConfigError(f"invalid {name} {value!r}; valid: {valid}")


@dataclass
class ClientData:
    """The clients' private subgraphs of a run and what is public about the graph they came from."""
    clients: list
    num_classes: int
    num_nodes: int
    dataset_name: str
    settings: list
    extras: dict


def build_clients(cfg: RunConfig, data=None) -> ClientData:
    """The run's clients: the dataset loaded (or `data`), partitioned, split, with the auditor's canaries.
    What a Ray client actor runs for itself (keeping only its own clients)."""
    if data is None:
        data = load_dataset(cfg.dataset, cfg.data_root, download=cfg.download)
    cache = partition_cache_dir()
    data_seed = cfg.seed if cfg.partition_seed is None else cfg.partition_seed
    extras, settings = {}, []
    if cfg.partition == TASK_PARTITION:  # FedGPL's clients: induced sample graphs per task level (spec B.8)
        from privfgl.methods.fedgpl.run import build_clients as fedgpl_clients
        clients, extras["fedgpl_samples"], extras["population_features"] = fedgpl_clients(
            data, cfg.clients, cfg.method_params, data_seed, cfg.dataset)
    else:
        def partition(graph, num_parts: int) -> list[torch.Tensor]:
            return partition_nodes(graph, cfg.partition, num_parts, seed=data_seed, cache_dir=cache,
                                   **cfg.partition_params)
        regime = regime_of(cfg.evaluate)
        if is_file_partition(cfg.partition):  # given from outside: read, checked, fingerprinted for the record
            parts, extras["partition_file"] = read_partition(cfg.partition, int(data.num_nodes), cfg.clients)
            clients = client_subgraphs(data, parts)
        elif regime is None:
            clients = client_subgraphs(data, partition(data, cfg.clients))
        else:  # FedLoG's evaluation settings: K + 1 parts, missing classes removed (privfgl.data.settings)
            built = build_regime(data, regime, partition, cfg.clients, data_seed)
            clients, settings, extras["data_regime"] = built.clients, built.settings, built.metadata()
        if cfg.split_file is not None:  # given from outside: checked against the clients, fingerprinted
            extras["split_file"] = read_split(cfg.split_file, clients)
        else:
            split_clients(clients, *cfg.split, seed=data_seed, mode=cfg.split_mode)
        if cfg.canaries:  # the auditor's canaries (privfgl.data.canaries): which trained stays in extras
            from privfgl.data.canaries import insert_canaries
            clients, extras["canaries"] = insert_canaries(clients, int(data.num_classes), cfg.canaries,
                                                          cfg.seed if cfg.canary_seed is None else cfg.canary_seed)
    return ClientData(clients, int(data.num_classes), int(data.num_nodes), getattr(data, "name", cfg.dataset),
                      settings, extras)


def build_setup(cfg: RunConfig, data=None) -> Setup:
    """Everything a method needs. `data` overrides loading cfg.dataset (e.g. an in-memory graph)."""
    cfg.validate()
    seed_everything(cfg.seed)
    built = build_clients(cfg, data)
    clients, settings, extras = built.clients, built.settings, built.extras
    protocol_params = effective_protocol_params(cfg)
    protocol = protocols.get_protocol(cfg.protocol, **protocol_params)
    dp_spec = check_dp_for_run(cfg.dp, cfg.method, cfg.protocol, cfg.seed)
    if dp_spec is not None and set(dp_spec.messages) <= set(SPLIT_MESSAGES):
        extras["split_dp_spec"], dp_spec = dp_spec, None  # noised by the method's own split steps
    message_dp = MessageDP(dp_spec, cfg.clients, tolerated_colluders(protocol, cfg.clients)) \
        if dp_spec is not None else None
    federation = Federation(cfg.clients, protocol, Transcript(cfg.transcript), dp=message_dp,
                            absent=run_participation(cfg.absent, cfg.absent_rate, cfg.clients, cfg.seed))
    model = ModelConfig(cfg.model, cfg.hidden, cfg.layers, cfg.dropout, cfg.lr, cfg.weight_decay, cfg.optimizer)
    method = MethodConfig(cfg.rounds, cfg.local_epochs, cfg.finetune_epochs, cfg.mu, cfg.engine, cfg.evaluation,
                          cfg.seed, cfg.progress, dict(cfg.method_params))
    tracker = RoundTracker(clients, built.num_classes, settings=settings,
                           last_round=cfg.rounds - 1 + cfg.finetune_epochs)
    return Setup(clients, built.num_classes, model, method, federation, tracker, cfg.device,
                 extras={"dataset_name": built.dataset_name, "num_nodes": built.num_nodes,
                         "protocol_params": protocol_params, **extras})


def run_participation(absent: dict, rate: float, num_clients: int, seed: int):
    """The runtime's participation mask for a run: the given {round: [clients]} and, with rate > 0, each
    client also left out of each round with probability `rate`, drawn per round from (seed, round), so
    that runs with the same seed drop the same clients under every protocol. A draw that would leave
    out every client keeps the one whose draw came closest to staying (a round needs one input; a mask
    the user gave that leaves out everyone still stops the run). None: everyone, always."""
    fixed = participation_mask(absent) or {}
    if not rate:
        return fixed or None

    def mask(round: int, name: str) -> set[int]:
        u = np.random.default_rng([seed, round, 0x9A7]).random(num_clients)
        given = set(fixed.get(round, ())) | set(fixed.get("*", ()))
        drawn = set(np.flatnonzero(u < rate).tolist())
        if len(drawn | given) == num_clients and len(given) < num_clients:
            drawn.discard(max(set(range(num_clients)) - given, key=lambda k: u[k]))
        return drawn | given
    return mask


def run(cfg: RunConfig, data=None, prepare=(), ray_audit: tuple | None = None, ray_pool=None) -> tuple[dict, Setup]:
    """Run one experiment; returns the run record (DESIGN.md schema) and the setup (transcript inside).
    `prepare`: callables given the setup before the method runs (an audit's canary clients:
    attacks.audit.prepare_attacks). `ray_audit`: (attacks, adversary) of an audit under --engine ray, run by
    the auditor's actor before the clients' actors stop (privfgl.federation.ray.auditor). `ray_pool`: warm
    client actors for --engine ray (privfgl.federation.ray.clients.ActorPool)."""
    from privfgl.provenance import code_commit
    start = time.perf_counter()
    cfg.validate()  # before touching the thread count
    code_commit()  # the record names the code this run starts from, not the checkout at its end (read once)
    if cfg.engine == "ray":  # the clients on Ray actors: no client data in this process
        if data is not None or prepare:
            raise ConfigError("--engine ray: the actors load the dataset themselves and audits that prepare the "
                              "run are not built; run it in process")
        from privfgl.federation.ray.run import run_ray
        return run_ray(cfg, ray_audit, ray_pool)
    threads_before = torch.get_num_threads()
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    threads = torch.get_num_threads()
    deterministic_before = (torch.are_deterministic_algorithms_enabled(),
                            torch.is_deterministic_algorithms_warn_only_enabled())
    if cfg.device.startswith("cuda"):
        # Same seed, same run on a GPU too: CUDA kernels that accumulate with atomics (index_add_, the
        # backward of index_select, scatter) may sum in a different order on every call; torch has
        # deterministic variants of most (used), and warns for the others. cuBLAS needs a fixed workspace.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        setup = build_setup(cfg, data)
        for hook in prepare:
            hook(setup)
        allocator = apply_allocator(cfg.allocator, setup.extras["num_nodes"] * max(cfg.hidden, setup.num_classes) * 4)
        seed_everything(cfg.seed)
        try:
            METHODS[cfg.method](setup)
        finally:
            setup.federation.protocol.close()  # e.g. stop crypten's party processes
    finally:
        torch.set_num_threads(threads_before)
        torch.use_deterministic_algorithms(deterministic_before[0], warn_only=deterministic_before[1])
    total_s = time.perf_counter() - start
    params = setup.extras["protocol_params"]
    config = {**dataclasses.asdict(cfg), "threads": threads, "allocator_used": allocator,
              "split": list(cfg.split), "evaluate": list(cfg.evaluate),
              "dataset_name": setup.extras["dataset_name"],
              "protocol_params": params,
              "protocol_params_method_defaults": {k: v for k, v in params.items() if k not in cfg.protocol_params},
              "versions": _versions()}
    record = make_record(config, setup, total_s)
    return record, setup
