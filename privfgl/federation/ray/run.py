"""`privfgl run|audit ... --engine ray`: a run whose clients are Ray actors (docs/cluster.md).

The server's steps run here, in the driver; each actor hosts `clients_per_actor` clients (stacked engine),
loads the graph itself and keeps its clients' subgraphs, models, optimizer state and their side of the
protocol. The driver's Setup holds no client data: `clients` is empty, the tracker gets evaluation counts.
"""
from __future__ import annotations

import dataclasses
import resource
import sys
import time

import protocols
from privfgl.errors import ConfigError
from privfgl.evaluation import RoundTracker
from privfgl.federation import Federation, Transcript
from privfgl.federation.messages import SERVER
from privfgl.federation.ray.sums import REMOTE_PROTOCOLS, RemoteCrypten, RemoteHE
from protocols.secagg.protocol import round_clients

# Client steps on actors: run_local, fedavg.run_rounds, and the methods written as client steps
# (privfgl.federation.client_steps).
RAY_METHODS = ("local", "fedavg", "fedprox", "dp-fedavg", "dp-sgd", "gap", "fedomd", "fedspray", "fedgpl", "fedlog",
               "opfgl", "lapgraph")
RAY_REFUSED = {  # what else a user may ask for, and why it is not built with the clients on actors
    "dp_seed": "a DP noise seed: each actor draws its own clients' noise, and one seed would give every actor the "
               "same draws; valid: seed=os (the default)",
    "evaluate": "evaluation settings beyond seen (--evaluate) need the clients' graphs in the driver",
    "canaries": "the auditor's canary nodes (--canaries) are inserted by the driver",
    "absent_rate": "--absent-rate is not built with the clients on Ray actors (use --absent)",
    "fedomd_trace": "fedomd trace=N prints the clients' activations and loss terms, which stay on their actors; "
                    "valid with the clients on Ray actors: trace=0 (the default)",
}


def check_ray_run(cfg) -> None:
    """One-line ConfigError for what --engine ray does not run (before any actor starts)."""
    if cfg.method not in RAY_METHODS:
        raise ConfigError(f"--engine ray: method {cfg.method!r} is not built with the clients on Ray actors; valid: "
                          f"{', '.join(RAY_METHODS)} (docs/cluster.md lists the others and why)")
    if cfg.protocol not in REMOTE_PROTOCOLS:
        raise ConfigError(f"--engine ray: protocol {cfg.protocol!r} is not built with the clients on Ray actors; "
                          f"valid: {', '.join(REMOTE_PROTOCOLS)}")
    params = cfg.protocol_params
    if cfg.protocol == "secagg" and params.get("mode", "inprocess") != "inprocess":
        raise ConfigError("--engine ray: secagg mode=multiprocess runs its own party processes; with the clients on "
                          "Ray actors leave mode unset")
    if cfg.protocol == "crypten" and (params.get("mode", "inprocess") != "inprocess" or cfg.clients_per_actor != 1):
        raise ConfigError("--engine ray: crypten's parties are the client actors, one client each (a CrypTen party is "
                          "one rank of one process): leave mode unset and --clients-per-actor 1")
    if cfg.protocol in ("ckks", "bfv") and params.get("preset", "default") != "default":
        raise ConfigError(f"--engine ray: {cfg.protocol} preset {params['preset']!r} is symmetric (every client holds "
                          "the secret key); valid with the clients on Ray actors: preset=default")
    if cfg.protocol == "ckks" and params.get("reveal", "grid") != "grid":
        raise ConfigError("--engine ray: ckks reveal=raw-unsafe is an in-process audit mode; valid: reveal=grid")
    if cfg.dp is not None:
        from privfgl.privacy import check_dp_for_run  # noqa: PLC0415
        spec = check_dp_for_run(cfg.dp, cfg.method, cfg.protocol, cfg.seed)
        if spec is not None and not spec.secure:
            raise ConfigError(f"--engine ray: {RAY_REFUSED['dp_seed']}")
    if cfg.method == "fedgpl":
        _check_fedgpl(cfg)
    if tuple(cfg.evaluate) != ("seen",):
        raise ConfigError(f"--engine ray: {RAY_REFUSED['evaluate']}")
    if cfg.canaries:
        raise ConfigError(f"--engine ray: {RAY_REFUSED['canaries']}")
    if cfg.absent_rate:
        raise ConfigError(f"--engine ray: {RAY_REFUSED['absent_rate']}")
    if cfg.method == "fedomd":
        from privfgl.methods.fedomd.params import resolve_params  # noqa: PLC0415
        if resolve_params(cfg.method_params).trace:
            raise ConfigError(f"--engine ray: {RAY_REFUSED['fedomd_trace']}")
    if isinstance(cfg.clients_per_actor, bool) or not isinstance(cfg.clients_per_actor, int) \
            or cfg.clients_per_actor < 1:
        raise ConfigError(f"invalid clients_per_actor {cfg.clients_per_actor!r}; valid: an integer >= 1")
    if cfg.method == "opfgl":  # its own params: server_efficient, counts_protocol
        from privfgl.methods.opfgl.run import ray_refusal  # noqa: PLC0415
        why = ray_refusal(cfg.method_params, cfg.protocol)
        if why is not None:
            raise ConfigError(f"--engine ray: {why}")
    if "kill_at" in params:
        if cfg.protocol != "secagg":
            raise ConfigError("kill_at: only secagg's rounds can kill a client actor (fault injection)")
        try:
            round_clients("kill_at", params["kill_at"], "{3: [1]}")
        except protocols.ProtocolError as e:
            raise ConfigError(str(e)) from None


def _check_fedgpl(cfg) -> None:
    """FedGPL's settings that are not built with the clients on actors."""
    from privfgl.methods.fedgpl.params import resolve_params  # noqa: PLC0415
    from privfgl.privacy import check_dp_for_run  # noqa: PLC0415
    from privfgl.privacy.spec import SPLIT_MESSAGES  # noqa: PLC0415
    try:
        p = resolve_params(cfg.method_params)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if p.tau_in == "crypten":
        raise ConfigError("--engine ray: fedgpl tau_in=crypten computes τ on CrypTen shares with every party in one "
                          "process (fed.compute); with the clients on Ray actors it is not built; valid: tau_in=clear")
    if p.eval_dropout:
        raise ConfigError("--engine ray: fedgpl eval_dropout=true draws the trunk's evaluation dropout from the "
                          "process's global RNG, which the actors do not share; valid: eval_dropout=false")
    spec = check_dp_for_run(cfg.dp, cfg.method, cfg.protocol, cfg.seed)
    if spec is not None and set(spec.messages) & set(SPLIT_MESSAGES):
        raise ConfigError("--engine ray: fedgpl's split DP (--dp on=m1|m2|m3|m4|split) is not built with the clients "
                          "on Ray actors (one SplitDP object noises and accounts the clients' and the server's rows "
                          "together); valid: --dp on the prompt sums only, or no --dp")


def driver_protocol(cfg, params: dict):
    """The protocol object the driver holds: the real one for plain and secagg (the server's side; secagg's
    clients' side runs on the actors), a keyless stand-in for ckks/bfv (the key holder is client 0's actor)."""
    params = dict(params)
    kill_at = params.pop("kill_at", None)
    if cfg.protocol in ("ckks", "bfv"):
        return RemoteHE(cfg.protocol, params)
    if cfg.protocol == "crypten":
        return RemoteCrypten(params)
    protocol = protocols.get_protocol(cfg.protocol, **params)
    if kill_at:
        protocol.ray_kill_at = {r: sorted(who) for r, who in round_clients("kill_at", kill_at).items()}
    return protocol


def run_ray(cfg, audit: tuple | None = None, pool=None) -> tuple[dict, object]:
    """The run record of `cfg` with its clients on Ray actors, and the driver's Setup. audit: (attacks, adversary)
    to run on the view by the auditor's actor (privfgl.federation.ray.auditor); the findings go to the record's
    `attacks`. pool: a privfgl.federation.ray.clients.ActorPool whose warm actors the run takes and gives back
    (a driver's later runs on the same Ray skip the actors' start)."""
    from privfgl.experiment import _versions, effective_protocol_params, run_participation, seed_everything  # noqa: PLC0415
    from privfgl.federation.ray.clients import ActorClients  # noqa: PLC0415
    from privfgl.methods import METHODS, MethodConfig, Setup  # noqa: PLC0415
    from privfgl.results import make_record  # noqa: PLC0415
    from privfgl.sweep.ray_tasks import LOCAL, connect  # noqa: PLC0415
    from privfgl.privacy import MessageDP, check_dp_for_run  # noqa: PLC0415
    from privfgl.privacy.trust import tolerated_colluders  # noqa: PLC0415
    from privfgl.training import ModelConfig  # noqa: PLC0415

    start = time.perf_counter()
    check_ray_run(cfg)
    # A Ray this process already joined (a test's cluster) is used as it is; else one is started or joined,
    # with Ray imported after connect has set its environment (token authentication on a local Ray).
    started_ray = not ("ray" in sys.modules and sys.modules["ray"].is_initialized())
    if started_ray:
        connect(cfg.ray_address or LOCAL)
    import ray  # noqa: PLC0415
    threads = cfg.threads or 1
    clients = None
    try:
        protocol_params = effective_protocol_params(cfg)
        protocol = driver_protocol(cfg, protocol_params)
        seed_everything(cfg.seed)
        spec = check_dp_for_run(cfg.dp, cfg.method, cfg.protocol, cfg.seed)
        message_dp, dp = None, None
        if spec is not None:  # the accountant and the central noise here; clipping and client noise on the actors
            colluders = tolerated_colluders(protocol, cfg.clients)  # ckks/bfv: the stand-in has no preset: K - 1
            message_dp, dp = MessageDP(spec, cfg.clients, colluders), (spec, colluders)
        clients = ActorClients(cfg, cfg.clients_per_actor, threads, dp=dp, pool=pool)
        federation = Federation(cfg.clients, protocol, Transcript(cfg.transcript), dp=message_dp,
                                absent=run_participation(cfg.absent, 0.0, cfg.clients, cfg.seed))
        model = ModelConfig(cfg.model, cfg.hidden, cfg.layers, cfg.dropout, cfg.lr, cfg.weight_decay, cfg.optimizer)
        method = MethodConfig(cfg.rounds, cfg.local_epochs, cfg.finetune_epochs, cfg.mu, "auto", cfg.evaluation,
                              cfg.seed, cfg.progress, dict(cfg.method_params))
        tracker = RoundTracker.from_counts(clients.node_counts, clients.num_classes,
                                           last_round=cfg.rounds - 1 + cfg.finetune_epochs)
        public = clients.public
        setup = Setup([], clients.num_classes, model, method, federation, tracker, cfg.device,
                      extras={"dataset_name": public["dataset_name"], "num_nodes": public["num_nodes"],
                              "protocol_params": protocol_params, **public["extras"]},
                      remote=clients)
        seed_everything(cfg.seed)
        try:
            METHODS[cfg.method](setup)
        finally:
            protocol.close()
        wire = wire_check(federation, clients)
        findings = None
        if audit is not None:
            from privfgl.federation.ray.auditor import audit_on_ray  # noqa: PLC0415
            findings = audit_on_ray(setup, cfg, *audit, clients.timeout_s)
        usage = [u for _, u in sorted(clients.gather("usage", clients.alive_actors()).items())]
    finally:
        if clients is not None:
            clients.close()
        if started_ray:
            ray.shutdown()
    total_s = time.perf_counter() - start
    config = {**dataclasses.asdict(cfg), "threads": threads, "allocator_used": None, "split": list(cfg.split),
              "evaluate": list(cfg.evaluate), "dataset_name": setup.extras["dataset_name"],
              "protocol_params": protocol_params,
              "protocol_params_method_defaults": {k: v for k, v in protocol_params.items()
                                                  if k not in cfg.protocol_params},
              "versions": {**_versions(), "ray": ray.__version__}}
    record = make_record(config, setup, total_s)
    record["cost"]["wire_check"] = wire
    record["ray"] = {"actors": len(clients.actors), "clients_per_actor": cfg.clients_per_actor,
                     "warm_actors": clients.warm,  # taken from an ActorPool: their start is not in this run
                     "dead_clients": sorted(clients.dead), "torch_threads_per_actor": threads,
                     "nodes": len({u["node"] for u in usage}),
                     "actor_usage": usage,  # per living actor: its node, clients and peak RSS (MB)
                     "driver_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
    if findings is not None:
        record["attacks"] = findings
    return record, setup


def wire_check(federation: Federation, clients) -> dict:
    """The bytes the channel booked against the serialized bytes the driver received from the actors, per
    link, for every message the server received from a client. RuntimeError on any difference: a record
    whose bytes are not what crossed is wrong."""
    if federation.protocol.name == "crypten":  # the parties' shares cross inside gloo, between the actors
        return {"links": 0, "booked_bytes": None, "serialized_bytes": None, "equal": None,
                "why": "crypten: the summed shares travel inside torch.distributed (gloo) between the parties' "
                       "actors, not through the driver"}
    booked = {link: n for link, n in federation.channel.links.items() if link[1] == SERVER}
    measured = {link: n for link, n in clients.wire.items() if link[1] == SERVER}
    links = sorted(set(booked) | set(measured))
    diff = {f"{a}->{b}": (booked.get((a, b), 0), measured.get((a, b), 0)) for a, b in links
            if booked.get((a, b), 0) != measured.get((a, b), 0)}
    if diff:
        raise RuntimeError(f"--engine ray: the channel booked bytes that did not cross (booked, serialized): {diff}")
    return {"links": len(links), "booked_bytes": int(sum(booked.values())),
            "serialized_bytes": int(sum(measured.values())), "equal": True}
