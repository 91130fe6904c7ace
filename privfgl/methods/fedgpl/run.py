"""FedGPL's rounds (spec B.6) and its baselines, on the federation runtime.

Per round: every client runs one local epoch of split steps (M1-M4 per minibatch, split.py; the
server fine-tunes its trunk after each batch unless frozen), stepping its optimiser after each, or,
under split DP with split_dp_composition=released (the default), keeping its prompt and head fixed
for the round and updating them at its end from the released messages (released.py); then the
prompts and heads are federated:
- hidta (FedGPL): round 0 is FedAvg over all clients ([C]); later rounds are HiDTA (hidta.py):
  phase 1 reveals each task group's sum of θ (one secure sum of task-slotted vectors over all
  clients; group membership is public), the server computes τ̂ from the task models; phase 2
  (paper mode) reveals each group's Σ c_j θ_j and Σ c_j; every client of task t receives
  θ_t^new. The server never sees a client's θ under a secure protocol. With tau_in=crypten phase 1
  runs on CrypTen shares instead: the server learns τ̂ only, the clients the task models.
- fedavg / fedprox: one secure sum of {θ_k, 1} over all clients (FedProx adds μ/2·||θ − θ_g||²).
- local: no federation of prompts and heads (the clients still share the server's trunk).
Dropout (secagg's `dropout`, the runtime's participation mask): every sum carries its own weights
(1 or c_j per client, in the same message), so the means are the survivors'; a task group with no
surviving client keeps its start model θ_t (and θ'_t in phase 2). Every client, a dropped one
included, then loads its task's new model, as FedAvg's clients load the next global model.
Evaluation (the measurement harness, outside the channel and any noise): after each round every
client scores its own samples with its prompt, head and the server's trunk (dropout off); the round
with the best mean validation accuracy is reported (the train-query part of B.8 is the validation
split, never test).

Every client's side is a client step (privfgl.federation.client_steps) that runs where the client is: in
this process, or on its Ray actor (`--engine ray`); run_fedgpl is the server's loop. Per minibatch the server
drives one client's split step (M1 and M3 are the client's messages, M2 and M4 step arguments), client by
client. Each client shuffles its minibatches from its own stream (client_seed). With the clients on actors
the harness's evaluation runs on each actor with a copy of the server's trunk (a step argument, booked
nowhere, as in process), and the trunk is pretrained by a Ray task of its own (server_trunk).
"""
from __future__ import annotations

import time

import torch
from torch_geometric.data import Data
from torch_geometric.loader import DataLoader

from privfgl.federation.client_steps import client_seed
from privfgl.methods.base import Setup
from privfgl.methods.fedgpl import hidta
from privfgl.methods.fedgpl.params import FedGPLParams, resolve_params, samples_path, trunk_path
from privfgl.methods.fedgpl.pretrain import PretrainConfig, pretrained_trunk
from privfgl.methods.fedgpl.prompt import Head, make_prompt
from privfgl.methods.fedgpl.released import PROMPTS_UPDATED, update_from_released
from privfgl.methods.fedgpl.samples import TASKS, ClientSamples, client_datasets, reduce_features
from privfgl.methods.fedgpl.samples_file import file_sha256, read_samples
from privfgl.methods.fedgpl.split import (M1, M2, M3, M4, SplitClient, SplitServer, client_m1, client_m3, client_m4,
                                          server_m2, server_m4)
from privfgl.methods.fedgpl.trunk import Trunk
from privfgl.privacy.split_dp import SplitDP

UPDATE = "prompt_update"
TAU = "hidta_tau"  # tau_in=crypten: phase 1 computed on CrypTen shares (hidta.transferability_shared)
TAU_TRUST = {
    "clear": "HiDTA phase 1 opens each task group's sum of θ to the server, which computes τ in the clear: the "
             "server learns the task models θ'_t (B.7 option (a))",
    "crypten": "τ computed in CrypTen on secret shares of the task-group sums (B.7 option (b)); revealed: τ only, "
               "to the server; the task models θ'_t are opened to the clients only. The Beaver triples that mask "
               "them come from the crypten dealer (trust.compute: a dealer party by default, client0 under "
               "dealer=client0): the server must not collude with it",
}
SPLIT_TRUST = ("the server receives every client's prompted sample graphs (M1: node features, noised only under "
               "--dp on=m1|split; edge_index and batch vector always in the clear) and per-sample embedding "
               "gradients (M3: they reveal the labels unless noised); --protocol covers only the prompt/head sums")

SPLIT_DP_TRUST = {
    "released": "split DP composes in parallel over a round's minibatches: the client's prompt and head are fixed "
                "for the round and updated at its end from the released M2/M3/M4 only (head on labels estimated "
                "from the M3 it sent; prompt {prompt})",
    "sequential": "split DP composes sequentially: the client steps on clean gradients after every minibatch, so "
                  "each round is accounted as one release whose sensitivity covers every row of it",
    "parallel-unsafe": "UNSOUND split DP accounting (split_dp_composition=parallel-unsafe): the client steps on "
                       "clean gradients between minibatches, so one sample moves later rows by many times the clip "
                       "bound; the recorded ε does not bound the release",
}


def build_clients(data: Data, num_clients: int, method_params: dict, seed: int, dataset: str = ""
                  ) -> tuple[list[Data], list[ClientSamples], torch.Tensor]:
    """The clients' sample datasets (spec B.8; privfgl's own, or samples=file:PATH's); per client, the Data
    the round tracker scores: y [S], train/val/test masks [S] over its samples (num_nodes = S, no edges; with
    selection=test the validation mask is the test mask, as the authors' code selects) and `samples` (its
    ClientSamples, what its steps train on); and the reduced node features of the whole graph [N, dim] (the
    public copy attacks may declare as a dictionary; a samples file's own table when it has one)."""
    p = resolve_params(method_params)
    path = samples_path(p)
    if path is None:
        samples = client_datasets(data, num_clients, dim=p.dim, max_per_class=p.max_per_class,
                                  dirichlet_alpha=p.dirichlet_alpha, seed=seed)
        features = reduce_features(data.x, p.dim, seed)  # the same reduction the samples carry
    else:
        blob = read_samples(path, dataset, int(data.y.max()) + 1, num_clients, p.dim, int(data.num_nodes))
        samples = [_file_client(c) for c in blob["clients"]]
        features = blob["features"] if "features" in blob else reduce_features(data.x, p.dim, seed)
    tracked = []
    for s in samples:
        d = Data(y=s.y.clone(), num_nodes=len(s.y))
        d.train_mask, d.val_mask, d.test_mask = s.split == 0, s.split == (2 if p.selection == "test" else 1), s.split == 2
        d.samples = s
        tracked.append(d)
    return tracked, samples, features


def _file_client(c: dict) -> ClientSamples:
    """A samples file's client (samples_file.py) as ClientSamples: parts train-support -> 0 (train),
    train-query -> 1 (val), test-support and test-query -> 2 (test)."""
    node_ptr, edge_ptr = c["node_ptr"].tolist(), c["edge_ptr"].tolist()
    graphs = [Data(x=c["x"][node_ptr[i]:node_ptr[i + 1]], edge_index=c["edge_index"][:, edge_ptr[i]:edge_ptr[i + 1]],
                   y=c["y"][i:i + 1]) for i in range(len(node_ptr) - 1)]
    return ClientSamples(task=c["task"], graphs=graphs, y=c["y"].clone(), split=c["part"].clamp(max=2))


def _flat(client: SplitClient) -> torch.Tensor:
    return torch.cat([p.detach().double().reshape(-1) for p in client.parameters()])


def _load(client: SplitClient, flat: torch.Tensor) -> None:
    offset = 0
    with torch.no_grad():
        for p in client.parameters():
            p.copy_(flat[offset:offset + p.numel()].reshape(p.shape).to(p.dtype))
            offset += p.numel()


def _graphs(samples: ClientSamples, part: int | None) -> list[Data]:
    keep = range(len(samples.y)) if part is None else (samples.split == part).nonzero().flatten().tolist()
    out = []
    for i in keep:
        g = samples.graphs[i]
        d = Data(x=g.x, edge_index=g.edge_index, y=samples.y[i:i + 1])
        if getattr(g, "node_ids", None) is not None:
            d.node_ids = g.node_ids
        out.append(d)
    return out


@torch.no_grad()
def predict(client: SplitClient, trunk, samples: ClientSamples, eval_dropout: bool = False,
            batch_size: int = 256) -> torch.Tensor:
    """Logits [S, C] for the client's samples (harness: no channel, no noise). Only validation and test
    samples are scored (no metric reads the training rows, which stay 0). Dropout off unless
    eval_dropout (the authors' code evaluates with it on)."""
    trunk.train(eval_dropout)
    client.prompt.eval()
    scored = (samples.split != 0).nonzero().flatten()
    graphs = _graphs(samples, None)
    logits = torch.zeros(len(samples.y), client.head.linear.out_features)
    start = 0
    # a generator of its own: iterating a DataLoader draws a seed (unused here) from its generator, or without one
    # from the process's global RNG, the server's trunk dropout's stream (in process: a shift of the server's masks)
    for batch in DataLoader([graphs[i] for i in scored.tolist()], batch_size=batch_size, generator=torch.Generator()):
        x, e, b = client.prompt(batch.x, batch.edge_index, batch.batch, int(batch.num_graphs))
        logits[scored[start:start + batch.num_graphs]] = client.head(trunk(x, e, b, int(batch.num_graphs)))
        start += batch.num_graphs
    trunk.train()
    client.prompt.train()
    return logits


def _task_slot(theta: torch.Tensor, w: float, t: int, T: int) -> dict:
    """A client's upload for a task-group sum: (w·θ, w) in its task's slot t, zeros elsewhere."""
    sums, counts = torch.zeros(T, theta.numel(), dtype=torch.float64), torch.zeros(T, dtype=torch.float64)
    sums[t], counts[t] = w * theta, w
    return {"theta": sums, "weight": counts}


# ---- the client steps (privfgl.federation.client_steps) ------------------------------------------
LOADER_STREAM = 0xF6B  # client_seed purpose of a client's minibatch shuffling


def _start(k: int, state: dict, data: Data, p: FedGPLParams, num_classes: int, seed: int) -> int:
    """Client k's prompt and head (the common θ^(0): the seeded initialisation every party can make), its
    optimiser, scheduler and shuffling stream; returns its task (public: group membership)."""
    samples = data.samples
    client = _initial_client(p, num_classes, seed)
    train = _graphs(samples, 0) + (_graphs(samples, 1) if p.selection == "test" else [])  # test: support + query
    state.update(client=client, samples=samples, train=train,
                 scheduler=torch.optim.lr_scheduler.StepLR(client.optimizer, step_size=10, gamma=0.95),
                 shuffle=torch.Generator().manual_seed(client_seed(seed, k, LOADER_STREAM)))
    return TASKS.index(samples.task)


def _initial_client(p: FedGPLParams, num_classes: int, seed: int) -> SplitClient:
    prompt = make_prompt(p.prompt, p.dim, seed, p.node_ratio, p.edge_ratio, p.candidates, p.gamma, p.tokens)
    head = Head(p.hidden, num_classes, seed=seed)
    optimizer = torch.optim.Adam([{"params": prompt.parameters(), "lr": p.lr_prompt, "weight_decay": p.wd_prompt},
                                  {"params": head.parameters(), "lr": p.lr_head, "weight_decay": p.wd_head}])
    return SplitClient(prompt, head, optimizer, mu=p.mu if p.fed == "fedprox" else 0.0)


def _begin_round(k: int, state: dict, data: Data, batch_size: int, from_released: bool) -> int:
    """The round's minibatches, shuffled from the client's own stream; returns their number (public: the
    server receives one M1 per minibatch)."""
    c = state["client"]
    c.anchor = [q.detach().clone() for q in c.parameters()] if c.mu else None
    state["batches"] = list(DataLoader(state["train"], batch_size=batch_size, shuffle=True, generator=state["shuffle"]))
    state["released"] = [] if from_released else None
    return len(state["batches"])


def _m1(k: int, state: dict, data: Data, target: int, i: int, r: int, dp, truth, canaries):
    """Client `target`'s M1 of its minibatch i (the other clients send nothing)."""
    if k != target:
        return None
    m1, state["pending"] = client_m1(r, k, state["client"], state["batches"][i], dp, truth, canaries)
    return m1


def _m3(k: int, state: dict, data: Data, target: int, r: int, m2: dict, dp, canaries):
    if k != target:
        return None
    return client_m3(r, k, state["client"], m2, state["pending"], dp, canaries)


def _m4(k: int, state: dict, data: Data, target: int, m4: dict) -> None:
    if k == target:
        client_m4(state["client"], m4, state.pop("pending"), state["released"])


def _end_round(k: int, state: dict, data: Data) -> None:
    """The round-end update from the released messages (split DP, released), then the scheduler's step."""
    if state["released"] is not None:
        update_from_released(state["client"], state["released"])
    state["scheduler"].step()


def _theta(k: int, state: dict, data: Data) -> dict:
    """{θ_k, 1}: client k's upload of a FedAvg-style sum."""
    return {"theta": _flat(state["client"]), "n": torch.ones(1, dtype=torch.float64)}


def _slotted(k: int, state: dict, data: Data, tasks: list[int], now: torch.Tensor | None) -> dict:
    """Client k's (c_k·θ_k, c_k) in its task's slot (tasks[k], public); c_k = 1 (now None), or Eq. 6's factor
    against its task model θ'_t = now[t]."""
    theta, t = _flat(state["client"]), tasks[k]
    w = 1.0 if now is None else hidta.client_factor(theta, now[t])
    return _task_slot(theta, w, t, len(TASKS))


def _crypten_slotted(k: int, state: dict, data: Data, tasks: list[int], sizes: list[int],
                     start: torch.Tensor | None) -> dict:
    """tau_in=crypten: client k's θ_k / |task| in its task's slot (and, in code mode, θ_t / |task|)."""
    t = tasks[k]
    upload = {"theta": _task_slot(_flat(state["client"]), 1.0 / sizes[t], t, len(TASKS))["theta"]}
    if start is not None:
        upload["start"] = torch.zeros_like(upload["theta"])
        upload["start"][t] = start[t] / sizes[t]
    return upload


def _load_task_model(k: int, state: dict, data: Data, tasks: list[int], new: torch.Tensor) -> None:
    _load(state["client"], new[tasks[k]])


def _predict(k: int, state: dict, data: Data, trunk, eval_dropout: bool) -> torch.Tensor:
    return predict(state["client"], trunk, state["samples"], eval_dropout)


def federate(setup: Setup, p: FedGPLParams, r: int, clients, tasks: list[int], start: torch.Tensor) -> torch.Tensor:
    """The round's federated phase; every client loads its task's new θ; returns the task models the next
    round starts from ([T, P]; for fedavg every row is the global θ)."""
    fed, T = setup.federation, len(TASKS)
    if p.fed == "local":
        return start
    if p.fed in ("fedavg", "fedprox") or r == 0:
        total = fed.aggregate(r, UPDATE, clients.uploads(_theta))
        new = (total["theta"] / total["n"]).expand(T, -1).clone()
    else:
        if p.tau_in == "crypten":
            now, tau = _tau_in_crypten(setup, p, r, clients, tasks, start)
        else:
            group = fed.aggregate(r, UPDATE, clients.uploads(_slotted, tasks, None))
            now = group["theta"] / group["weight"].clamp_min(1.0).unsqueeze(1)   # θ'_t: task means
            # a task group none of whose clients is in the sum (dropout) keeps its start model
            now = torch.where((group["weight"] > 0).unsqueeze(1), now, start)
            tau = hidta.transferability(now, start, p.hidta_mode)
        setup.extras.setdefault("fedgpl_tau", []).append(tau.tolist())
        if p.hidta_mode == "code":
            if p.tau_in == "crypten":  # the clients hold the task models, the server τ: it sends τ to them
                fed.broadcast(r, TAU + ":weights", {"tau": tau})
            new = tau @ now
        else:  # the clients' factors c_j against their task's θ'_t (client side)
            weighted = fed.aggregate(r, UPDATE + ":weighted", clients.uploads(_slotted, tasks, now))
            new = hidta.combine(tau, weighted["theta"], weighted["weight"])
            # a task whose row weighs no surviving client (dropout) keeps θ'_t
            new = torch.where((tau @ weighted["weight"] > 0).unsqueeze(1), new, now)
    clients.train(_load_task_model, tasks, new)
    return new


def _tau_in_crypten(setup: Setup, p: FedGPLParams, r: int, clients, tasks: list[int],
                    start: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """HiDTA's phase 1 on CrypTen shares (tau_in=crypten, B.7 option (b)): client j shares θ_j / |task(j)|
    in its task's slot (group sizes are public), so the shared sum is the task models θ'_t; τ̂ is computed on
    the shares (hidta.transferability_shared) and opened to the server alone, θ'_t to the clients alone
    (they need it for Eq. 6's c_j, and in code mode for θ^new = τ̂ θ'). The start models θ_t are a public
    input in paper mode (the server computed them from S_q, C_q); in code mode the clients computed them
    (θ^new, which with τ̂ would give θ'_t away), so each client shares its task's θ_t / |task| as well.
    Returns (θ'_t as the clients opened it, τ̂ as the server opened it); the auditor-only error against the
    clear τ̂ on the same uploads is kept. In process only (with the clients on Ray actors it is refused)."""
    fed, T = setup.federation, len(TASKS)
    sizes = [max(1, tasks.count(t)) for t in range(T)]
    private_start = p.hidta_mode == "code"
    uploads = clients.uploads(_crypten_slotted, tasks, sizes, start if private_start else None)
    bits = getattr(fed.protocol, "precision_bits", 16)

    def on_shares(sums: dict) -> dict:
        now = sums["theta"]
        tau = hidta.transferability_shared(now, sums["start"] if private_start else start, p.hidta_mode, bits)
        return {"tau": tau, "task_models": now}

    sent, t0 = sum(fed.channel.sent.values()), time.perf_counter()
    opened = fed.compute(r, TAU, uploads, on_shares, {"tau": "server", "task_models": "clients"},
                         options=hidta.MPC_CONFIG)
    cost = setup.extras.setdefault("fedgpl_tau_cost", {"rounds": 0, "bytes": 0, "seconds": 0.0, "max_abs_error": 0.0})
    cost["rounds"] += 1
    cost["bytes"] += sum(fed.channel.sent.values()) - sent
    cost["seconds"] += time.perf_counter() - t0
    # auditor only (the harness knows every upload): the clear τ̂ on the same uploads, never sent anywhere
    exact = sum(u["theta"] for u in uploads)
    error = float((opened["tau"] - hidta.transferability(exact, start, p.hidta_mode)).abs().max())
    cost["max_abs_error"] = max(cost["max_abs_error"], error)
    return opened["task_models"], opened["tau"]


def server_trunk(setup: Setup, p: FedGPLParams) -> tuple[Trunk, dict]:
    """The server's trunk: GraphCL on the unlabelled train/val sample graphs (assumed public, as in [C]), cached.
    With the clients on Ray actors the driver holds no sample graph: a Ray task of its own builds the pool,
    pretrains (or loads the cache) and returns the weights."""
    m = setup.method
    if trunk_path(p) is not None:
        return trunk_from_file(trunk_path(p), p)
    config = PretrainConfig(epochs=p.pretrain_epochs, hidden=p.hidden, dropout=p.dropout)
    if setup.remote is None:
        samples = setup.extras["fedgpl_samples"]
        key = f"{setup.extras['dataset_name']}-d{p.dim}-mpc{p.max_per_class}-k{len(samples)}{_samples_tag(p)}"
        pool = [g for s in samples for g in _graphs(s, 0) + _graphs(s, 1)]
        return pretrained_trunk(pool, p.dim, key, config, seed=m.seed, progress=m.progress)
    key = f"{setup.extras['dataset_name']}-d{p.dim}-mpc{p.max_per_class}-k{setup.federation.num_clients}{_samples_tag(p)}"
    weights, info = setup.remote.task(_pretrain_task, key, config, m.seed)
    trunk = Trunk(p.dim, config.hidden, config.dropout)  # as pretrained_trunk makes it (the same global draws)
    trunk.load_state_dict(weights)
    return trunk, info


def trunk_from_file(path: str, p: FedGPLParams) -> tuple[Trunk, dict]:
    """trunk=file:PATH: the Trunk with the file's weights (privfgl's keys, or the authors' conv_layers.0/1 keys);
    ValueError, one line, when the file is not such a state_dict. Info as pretrained_trunk's, cache "file"."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        state = {k.replace("conv_layers.0.", "conv1.").replace("conv_layers.1.", "conv2."): v for k, v in state.items()}
        trunk = Trunk(p.dim, p.hidden, p.dropout)
        trunk.load_state_dict(state)
    except Exception as e:  # noqa: BLE001 - any unusable file is one line
        raise ValueError(f"fedgpl: trunk file {path}: not a state_dict of a {p.dim} -> {p.hidden} -> {p.hidden} "
                         f"TransformerConv trunk ({type(e).__name__}); valid: trunk=file:PATH of such a state_dict, "
                         "or trunk=graphcl") from None
    return trunk, {"cache": "file", "path": path, "sha256": file_sha256(path), "losses": [], "seconds": 0.0}


def _samples_tag(p: FedGPLParams) -> str:
    """The pretraining cache key's part naming a samples file (its SHA-256's first 16 hex digits)."""
    path = samples_path(p)
    return "" if path is None else f"-samples{file_sha256(path)[:16]}"


def _pretrain_task(cfg, key: str, config: PretrainConfig, seed: int) -> tuple[dict, dict]:
    """A Ray task: the run's sample graphs built from its config, the trunk pretrained on their train/val
    graphs; returns its weights and the cache's info."""
    from privfgl.experiment import build_clients as build  # noqa: PLC0415
    from privfgl.methods.fedgpl.params import resolve_params as params  # noqa: PLC0415
    samples = build(cfg).extras["fedgpl_samples"]
    pool = [g for s in samples for g in _graphs(s, 0) + _graphs(s, 1)]
    trunk, info = pretrained_trunk(pool, params(cfg.method_params).dim, key, config, seed=seed)
    return trunk.state_dict(), info


def run_fedgpl(setup: Setup) -> None:
    """FedGPL's server loop; every client step runs where the client is (setup.steps(): in process or on its
    Ray actor). Per minibatch the server drives one client's split step (M1-M4), client by client."""
    p = resolve_params(setup.method.params)
    fed, m, timer = setup.federation, setup.method, setup.federation.timer
    spec = setup.extras.get("split_dp_spec")
    dp = SplitDP(spec, keep_rounds=setup.federation.transcript.keep, composition=p.split_dp_composition) \
        if spec is not None else None
    from_released = dp is not None and p.split_dp_composition == "released"  # else: clean steps per minibatch
    if dp is not None:
        setup.extras["dp"] = dp
    num_classes = setup.num_classes
    with timer.phase("pretrain"):
        trunk, info = server_trunk(setup, p)
        setup.extras["caches"] = {"pretrain": {k: v for k, v in info.items() if k != "losses"}}
    server = SplitServer(trunk, None if p.freeze_trunk else torch.optim.Adam(trunk.parameters(), lr=p.lr_trunk))
    setup.extras["fedgpl_trunk"] = trunk  # the server's own model: an attack on the server's side may declare it
    setup.extras["fedgpl_server"] = server  # auditor side: split-dp-sensitivity replays a round on copies
    if p.freeze_trunk:
        trunk.requires_grad_(False)
    # clients: one common initial prompt and head (the server's broadcast of θ^(0))
    clients = setup.steps(allow_dead=False)
    tasks = [t for _, t in sorted(clients.each(_start, p, num_classes, m.seed).items())]
    if not clients.remote:  # auditor side (in process): split-dp-sensitivity replays a round on copies
        setup.extras["fedgpl_clients"] = [state["client"] for state in clients.states]
    task_models = _flat(_initial_client(p, num_classes, m.seed)).expand(len(TASKS), -1).clone()
    truth: list[dict] = setup.extras.setdefault("fedgpl_truth", [])  # auditor-only, kept like the transcript
    keep = fed.transcript.keep
    # the auditor's log and canaries reach the client steps in process only (audits are refused on actors)
    log = truth if keep != "none" and not clients.remote else None
    canaries = setup.extras.get("split_canaries")
    for r in setup.rounds("fedgpl"):
        if keep != "all":
            truth.clear()
        with timer.phase("split_train"):
            batches = clients.each(_begin_round, p.batch_size, from_released)
            for k in range(len(tasks)):  # client by client, minibatch by minibatch, as the server serves them
                for i in range(batches[k]):
                    m1 = clients.messages(fed, r, M1, _m1, k, i, r, dp, log, canaries)[k]
                    m2, held = server_m2(r, k, server, m1, dp, canaries)
                    m2 = fed.send(r, k, M2, m2)
                    m3 = clients.messages(fed, r, M3, _m3, k, r, m2, dp, canaries)[k]
                    m4 = fed.send(r, k, M4, server_m4(r, k, server, held, m3, dp, canaries))
                    clients.train(_m4, k, m4)
            clients.train(_end_round)
        if dp is not None:
            dp.end_round()
        if p.evaluate_at == "local":  # the clients' models after their local epoch (the authors' code)
            with timer.phase("evaluate"):
                clients.evaluate(setup.tracker, r, _predict, trunk, p.eval_dropout)
        with timer.phase("federate"):
            task_models = federate(setup, p, r, clients, tasks, task_models)
        if p.evaluate_at == "federated":
            with timer.phase("evaluate"):
                clients.evaluate(setup.tracker, r, _predict, trunk, p.eval_dropout)
    setup.extras["trust"] = {"split": SPLIT_TRUST}
    if dp is not None:
        setup.extras["trust"]["split_dp"] = SPLIT_DP_TRUST[p.split_dp_composition].format(
            prompt="updated from M4" if p.prompt in PROMPTS_UPDATED else f"{p.prompt}: kept at its initial value "
            "(its gradient needs the clean features)")
    setup.extras["metrics"] = {"split_bytes_per_client_round": split_bytes(setup),
                               **({"samples_file": {"path": samples_path(p), "sha256": file_sha256(samples_path(p))}}
                                  if samples_path(p) is not None else {}),
                               "per_task": per_task_accuracy(setup, tasks),
                               "tau_last": setup.extras.get("fedgpl_tau", [None])[-1]}
    if p.fed == "hidta":
        setup.extras["trust"]["hidta_tau"] = TAU_TRUST[p.tau_in]
        setup.extras["metrics"]["tau_in"] = p.tau_in
        cost = setup.extras.get("fedgpl_tau_cost")
        if cost is not None and cost["rounds"]:
            n = cost["rounds"]
            setup.extras["metrics"]["tau_crypten"] = {
                "rounds": n, "bytes_per_round": cost["bytes"] / n, "seconds_per_round": cost["seconds"] / n,
                "max_abs_error": cost["max_abs_error"],  # auditor-measured: max |τ̂ (CrypTen) − τ̂ (clear)|
                "revealed": "τ only, to the server; the task models θ'_t to the clients only"}


def split_bytes(setup: Setup) -> dict[str, float]:
    """Bytes per client per round of each split message (M1, M3 received by the server; M2, M4 by clients)."""
    fed, rounds = setup.federation, max(setup.method.rounds, 1)
    K = fed.num_clients
    out = {}
    for label, name in (("M1", M1), ("M2", M2), ("M3", M3), ("M4", M4)):
        total = sum(m.nbytes for party in fed.transcript.parties() for m in fed.transcript.view(party, name=name)
                    if m.receiver == party)
        out[label] = total / K / rounds
    return out


def per_task_accuracy(setup: Setup, tasks: list[int]) -> dict:
    """Spec B.8's metric: test accuracy and macro-F1 averaged within each task, then over the tasks;
    at the round chosen on validation ("acc", "f1"), at the last round ("last_acc"), and the task-mean
    test accuracy of every round ("test_curve": what the authors' code selects its round from)."""
    def by_task(per_client: list[dict], key: str) -> dict:
        values = {name: [c[key] for c, t in zip(per_client, tasks) if t == i] for i, name in enumerate(TASKS)}
        means = {name: sum(v) / len(v) for name, v in values.items() if v}
        return {**means, "mean_over_tasks": sum(means.values()) / len(means)}
    history = setup.tracker.history
    return {"acc": by_task(setup.tracker.best["per_client"], "test_acc"),
            "f1": by_task(setup.tracker.best["per_client"], "test_f1_macro"),
            "last_acc": by_task(history[-1]["per_client"], "test_acc"),
            "test_curve": [by_task(e["per_client"], "test_acc")["mean_over_tasks"] for e in history]}
