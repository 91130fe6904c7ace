"""Ray, on a cluster of two nodes simulated on this machine (ray.cluster_utils.Cluster, one CPU each, started
once for the module).

`privfgl sweep --ray [ADDRESS]`: each (cell, seed) a Ray task: the records equal the --jobs records but for
timing, the driver writes them, a resumed sweep runs only the missing runs, and a failed run is reported as
--jobs reports it.

`--engine ray`: the clients are actors spread over the nodes; FedAvg gives the in-process record under plain,
secagg and ckks, the bytes booked are the bytes that crossed, the driver holds no client data, and an actor
killed inside a secagg sum is a dropout."""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
import torch

from experiments.determinism import differences
from privfgl.cli import main
from privfgl.federation.ray.run import RAY_METHODS
from privfgl.methods import METHODS
from privfgl.sweep import Cell, load_sweep, missing, run_sweep
from privfgl.sweep.ray_tasks import resources
from privfgl.sweep.runner import record_path

TINY = """
[sweep]
name = "tiny"
seeds = [0, 1]

[base]
method = "fedavg"
dataset = "cora"
partition = "louvain"
clients = 3
rounds = 2
transcript = "none"

[[cells]]
label = "fedavg"

[[cells]]
label = "local"
method = "local"
"""
BROKEN = '\n[[cells]]\nlabel = "no data"\ndata_root = "{root}"\n'  # passes every check; its run finds no Cora


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, planetoid_root):
    """The head's address of a 2-node Ray cluster (1 CPU each). Its nodes start with a data root that holds
    no dataset: the runs find Cora only through the driver's PRIVFGL_DATA, which --ray passes to them."""
    from ray.cluster_utils import Cluster
    env = pytest.MonkeyPatch()
    env.setenv("PRIVFGL_DATA", str(tmp_path_factory.mktemp("no-data")))
    env.setenv("PRIVFGL_CACHE", str(tmp_path_factory.mktemp("no-cache")))
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        env.setenv("PRIVFGL_DATA", str(planetoid_root))
        env.setenv("PRIVFGL_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield cluster.address
    finally:
        import ray
        ray.shutdown()
        cluster.shutdown()
        env.undo()


def tiny(folder: Path, text: str = TINY):
    """TINY in `folder`, its data root $PRIVFGL_DATA (the workers' too)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sweep.toml").write_text(text)
    return load_sweep(folder / "sweep.toml", results=folder / "results", overrides={"download": False})


@pytest.fixture(scope="module")
def on_ray(cluster, tmp_path_factory):
    """TINY (2 cells x 2 seeds) run with --ray on the cluster."""
    sweep = tiny(tmp_path_factory.mktemp("ray"))
    assert run_sweep(sweep, ray=cluster, progress=False) == []
    return sweep


def test_records_on_a_ray_cluster_equal_the_jobs_records_but_for_timing(on_ray, tmp_path):
    jobs = tiny(tmp_path)
    assert run_sweep(jobs, jobs=2, progress=False) == []
    for cell, seed in jobs.tasks:
        a = json.loads(record_path(jobs.results, cell, seed).read_text())
        b = json.loads(record_path(on_ray.results, cell, seed).read_text())
        assert differences(a, b) == [], (cell.label, seed)  # every key but `time` (wall-clock seconds)
        assert b["config"]["threads"] == 1 and b["sweep"]["seed"] == seed
    assert not list(on_ray.results.rglob("*.tmp"))


def test_a_resumed_ray_sweep_runs_only_the_missing_runs_and_reports_a_failed_one(cluster, on_ray, tmp_path, capsys):
    text = TINY + BROKEN.format(root=tmp_path / "empty")
    expected = run_sweep(tiny(tmp_path / "in-process", text), progress=False)  # --jobs' lines
    assert len(expected) == 2 and all(line.startswith("no data, seed ") for line in expected)

    sweep = tiny(tmp_path / "resumed", text)
    shutil.copytree(on_ray.results, sweep.results)  # a sweep killed after 3 of its runs
    record_path(sweep.results, sweep.cells[1], 0).unlink()
    kept = {p: p.stat().st_mtime_ns for p in sweep.results.rglob("*.json")}
    capsys.readouterr()
    start = time.time_ns()
    assert sorted(run_sweep(sweep, ray=cluster, progress=True)) == sorted(expected)  # in the order they end
    err = capsys.readouterr().err
    assert "3 already recorded" in err and "3 to run" in err and "3/3" in err  # the bar counts the cluster's runs
    assert {p: p.stat().st_mtime_ns for p in kept} == kept  # nothing recorded is run or written again
    rerun = record_path(sweep.results, sweep.cells[1], 0)
    assert rerun.stat().st_mtime_ns > start
    assert differences(json.loads(rerun.read_text()),
                       json.loads(record_path(on_ray.results, sweep.cells[1], 0).read_text())) == []
    assert [(c.label, s) for c, s in missing(sweep)] == [("no data", 0), ("no data", 1)]


def test_a_tasks_resources_are_its_runs():
    base = {"method": "fedavg", "dataset": "cora", "clients": 3, "rounds": 2}
    assert resources(Cell("cpu", base), 0) == (1, 0)  # one torch thread, as a --jobs run
    assert resources(Cell("threads", {**base, "threads": 3}), 0) == (3, 0)
    assert resources(Cell("gpu", {**base, "device": "cuda"}), 0) == (1, 1)


def test_bad_ray_arguments_are_one_line(tmp_path, planetoid_root, capsys):
    config = tmp_path / "sweep.toml"
    config.write_text(TINY)
    args = ["sweep", str(config), "--results", str(tmp_path / "results"), "--data-root", str(planetoid_root),
            "--offline", "--no-progress"]
    for extra, message in [(["--ray", "--jobs", "2"], "--ray with --jobs 2"),
                           (["--ray", "127.0.0.1:1"], "--ray 127.0.0.1:1: no Ray cluster answers there"),
                           (["--ray", "head-without-port"], "--ray head-without-port: valid: the cluster head's HOST:PORT")]:
        start = time.monotonic()
        code = main([*args, *extra])
        err = capsys.readouterr().err
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
        assert time.monotonic() - start < 15
    assert not (tmp_path / "results").exists()


def test_sigterm_stops_a_ray_sweep_and_leaves_no_record(cluster, tmp_path):
    """`kill` on `privfgl sweep --ray ADDRESS`: the sweep's own SIGTERM handling (not Ray's stack dump and
    abort), its tasks cancelled, no record or temporary file for the runs cut short."""
    import os
    import signal
    import subprocess
    import sys
    config = tmp_path / "long.toml"
    config.write_text(TINY.replace("rounds = 2", "rounds = 5000"))
    proc = subprocess.Popen([sys.executable, "-c", "from privfgl.cli import entry; entry()", "sweep", str(config),
                             "--results", str(tmp_path / "res"), "--ray", cluster, "--no-progress", "--offline"],
                            env=dict(os.environ), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (tmp_path / "res").is_dir() and time.monotonic() < deadline:  # the runs start after the folder
        time.sleep(0.2)
    time.sleep(6)  # the tasks are in their runs
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and err.strip().endswith("privfgl: interrupted"), err
    assert not [p for p in (tmp_path / "res").rglob("*") if p.is_file()]


# --- --engine ray: the clients on actors ------------------------------------------------------------------
RUN = dict(method="fedavg", dataset="cora", partition="louvain", clients=3, rounds=2, progress=False, threads=1,
           download=False)
NONDETERMINISTIC_BYTES = ("cost.bytes_up", "cost.bytes_down", "cost.by_link", "cost.bytes_up_per_client")


@pytest.fixture(scope="module")
def pool(cluster):
    """Warm client actors shared by the module's runs (ActorPool): each run resets them (ClientHost.reset)."""
    from privfgl.federation.ray.clients import ActorPool
    pool = ActorPool(cluster)
    yield pool
    pool.close()


def _in_process_and_on_actors(cluster, pool, per_actor: int = 2, reference: dict | None = None, **settings):
    from privfgl.experiment import config_for, run
    in_process, _ = run(config_for({**RUN, **settings, **(reference or {})}))
    on_actors, setup = run(config_for({**RUN, **settings, "engine": "ray", "ray_address": cluster,
                                       "clients_per_actor": per_actor}), ray_pool=pool)
    return in_process, on_actors, setup


@pytest.mark.parametrize("protocol", ["plain", "secagg", "ckks", "crypten"])
def test_fedavg_with_its_clients_on_actors_gives_the_in_process_record(cluster, pool, protocol):
    """crypten's parties are the actors (one client each) and the server's own actor, over gloo: the record
    of crypten mode=multiprocess, whose parties are OS processes over gloo."""
    crypten = protocol == "crypten"
    in_process, on_actors, setup = _in_process_and_on_actors(
        cluster, pool, per_actor=1 if crypten else 2, protocol=protocol,
        reference={"protocol_params": {"mode": "multiprocess"}} if crypten else None)
    differ = [d for d in differences(in_process, on_actors) if not d.startswith(("config.", "ray", "cost.wire_check"))]
    if protocol == "ckks":  # SEAL's compressed ciphertexts vary in size from run to run, in process too
        differ = [d for d in differ if not d.startswith(NONDETERMINISTIC_BYTES)]
    assert differ == []
    assert on_actors["metrics"]["test_acc"] == in_process["metrics"]["test_acc"]
    check = on_actors["cost"]["wire_check"]
    if crypten:  # the shares cross inside gloo, between the actors: nothing for the driver to count
        assert check["equal"] is None and "gloo" in check["why"]
    else:
        assert check["equal"] and check["links"] == 3 and check["booked_bytes"] == check["serialized_bytes"] > 0
    placed = on_actors["ray"]
    assert (placed["actors"], placed["dead_clients"]) == (3 if crypten else 2, [])
    assert placed["nodes"] == 2  # the actors spread over the cluster's two nodes
    assert [u["clients"] for u in placed["actor_usage"]] == ([[0], [1], [2]] if crypten else [[0, 1], [2]])
    # The driver holds no client data: no subgraph, no labels in its tracker, no plaintext upload in the
    # server's view under a secure protocol, and the clients' models refuse to leave their actors.
    assert setup.clients == [] and setup.tracker.clients == [] and not hasattr(setup.tracker, "y")
    received = [m for m in setup.federation.transcript.view("server", round=RUN["rounds"] - 1)
                if m.sender.startswith("client")]  # the last round's (the transcript keeps its payloads)
    if protocol == "plain":
        assert [m.tensors is not None for m in received if m.name == "model_update"] == [True] * 3
    else:  # nothing in the clear but the opened sum (the ckks key holder sends it on)
        assert received and all(m.tensors is None for m in received if m.kind != "aggregate")
    if protocol == "ckks":
        assert not hasattr(setup.federation.protocol, "_secret_key")  # the key holder's key is on client 0's actor


def test_a_warm_actor_keeps_nothing_of_its_last_run(cluster, pool):
    """ActorPool: a later run takes the same actors, and each one dropped the last run's clients, states and
    keys before it loaded the new run's clients (ClientHost.reset)."""
    import ray
    from privfgl.experiment import config_for, run
    on_ray = {**RUN, "engine": "ray", "ray_address": cluster, "clients_per_actor": 2}
    first, _ = run(config_for({**on_ray, "protocol": "ckks"}), ray_pool=pool)
    second, _ = run(config_for({**on_ray, "clients": 4, "method": "local"}), ray_pool=pool)
    assert second["ray"]["warm_actors"] and [u["clients"] for u in second["ray"]["actor_usage"]] == [[0, 1], [2, 3]]
    _, actors = pool.idle[2][1:]
    held = ray.get([a.__ray_call__.remote(lambda host: (host.members, sorted(host.clients), host.key_holder,
                                                        host.pending, host.received is None)) for a in actors])
    assert [(m, c, key, pending) for m, c, key, pending, _ in held] == [([0, 1], [0, 1], None, {}),
                                                                         ([2, 3], [2, 3], None, {})]


def test_message_dp_noise_is_drawn_on_the_actors_and_accounted_in_the_driver(cluster, pool):
    """Local mode: every upload the server sees carries N(0, (σC)²) per coordinate, drawn on the client's
    actor (the signal is clipped to ‖·‖ ≤ C = 1, so the width is the noise's). ε is the in-process run's
    (the same releases, the same accountant)."""
    from privfgl.experiment import config_for, run
    for mode in ("local",):
        dp = f"gaussian:sigma=50,clip=1,on=update,mode={mode}"
        on_ray = {**RUN, "dp": dp, "engine": "ray", "ray_address": cluster, "clients_per_actor": 2}
        record, setup = run(config_for(on_ray), ray_pool=pool)
        in_process, _ = run(config_for({**RUN, "dp": dp}))
        assert record["privacy"]["epsilon"] == in_process["privacy"]["epsilon"] > 0
        assert record["privacy"]["dp"]["noise_source"] == "os"
        uploads = [torch.cat([t.reshape(-1) for t in m.tensors.values()])
                   for m in setup.federation.transcript.view("server", round=RUN["rounds"] - 1)
                   if m.name == "model_update"]
        assert len(uploads) == RUN["clients"]
        for u in uploads:
            assert 0.97 * 50 < float(u.std()) < 1.03 * 50


@pytest.mark.parametrize("flags, says", [
    (["--method", "opfgl", "--protocol", "ckks"], "opfgl's class counts through bfv beside the run's ckks"),
    (["--method", "opfgl", "--method-param", "server_efficient=true"], "opfgl server_efficient=true opens the sums"),
    (["--protocol", "crypten", "--clients-per-actor", "2"], "crypten's parties are the client actors, one client"),
    (["--dp", "gaussian:sigma=1,clip=1,on=update,mode=central,seed=3"], "a DP noise seed: each actor draws"),
    (["--clients-per-actor", "0"], "invalid clients_per_actor 0"),
    (["--protocol", "ckks", "--protocol-param", "preset=sum"], "ckks preset 'sum' is symmetric"),
    (["--method", "fedomd", "--method-param", "trace=5"], "fedomd trace=N prints the clients' activations"),
    (["--method", "fedgpl", "--partition", "tasks", "--protocol", "crypten", "--method-param", "tau_in=crypten"],
     "fedgpl tau_in=crypten computes τ on CrypTen shares"),
    (["--method", "fedgpl", "--partition", "tasks", "--method-param", "eval_dropout=true"],
     "fedgpl eval_dropout=true draws the trunk's evaluation dropout"),
    (["--method", "fedgpl", "--partition", "tasks", "--dp", "laplace:epsilon=1,clip=1,on=split,mode=local"],
     "fedgpl's split DP (--dp on=m1|m2|m3|m4|split) is not built"),
])
def test_what_the_ray_engine_does_not_run_is_refused_in_one_line(flags, says, capsys):
    assert main(["run", "--engine", "ray", "--dataset", "cora", "--clients", "3", "--offline", *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1


def test_an_audit_on_actors_is_scored_by_the_auditors_actor_as_in_process(cluster, tmp_path):
    """The attacks read the driver's view; the auditor's actor loads the truth and scores them: the findings
    are the in-process audit's (float reductions may sum in another order: within 1e-5)."""
    audit = ["audit", "--dataset", "cora", "--clients", "3", "--rounds", "2", "--offline", "--no-progress",
             "--threads", "1", "--optimizer", "sgd", "--dropout", "0", "--attack", "label-inference", "--attack",
             "link-stealing"]
    assert main([*audit, "--out", str(tmp_path / "in.json")]) == 0
    on_ray = ["--engine", "ray", "--ray-address", cluster, "--clients-per-actor", "2"]
    assert main([*audit, *on_ray, "--out", str(tmp_path / "ray.json")]) == 0
    in_process, on_actors = (json.loads((tmp_path / f).read_text())["attacks"] for f in ("in.json", "ray.json"))
    assert [(f["name"], f["target"]) for f in on_actors] == [(f["name"], f["target"]) for f in in_process]
    assert len(in_process) == 6 + 6 and all("no_input" not in f["metrics"] for f in in_process)
    for a, b in zip(in_process, on_actors):
        assert a["metrics"].keys() == b["metrics"].keys() and a["baseline"] == pytest.approx(b["baseline"], abs=1e-5)
        for key, value in a["metrics"].items():
            assert b["metrics"][key] == (pytest.approx(value, abs=1e-5) if isinstance(value, float) else value), key


@pytest.mark.parametrize("flags, says", [
    (["--protocol", "secagg", "--attack", "secagg-collusion"],
     "attack 'secagg-collusion' is not built: it is scored against each client's plaintext upload"),
    (["--dp", "gaussian:sigma=1,clip=1,on=update,mode=distributed", "--protocol", "secagg", "--attack",
      "dp-collusion"], "attack 'dp-collusion' is not built: it is scored against the clients' clipped uploads"),
    (["--method", "fedgpl", "--partition", "tasks", "--attack", "split-features"],
     "method 'fedgpl' is not built: its attacks read the sample graphs"),
])
def test_an_audit_on_actors_refuses_what_it_cannot_score_in_one_line(flags, says, capsys):
    assert main(["audit", "--engine", "ray", "--dataset", "cora", "--clients", "3", "--offline", *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1


def test_local_training_on_actors_gives_the_in_process_record(cluster, pool):
    in_process, on_actors, _ = _in_process_and_on_actors(cluster, pool, method="local")
    assert [d for d in differences(in_process, on_actors) if not d.startswith(("config.", "ray", "cost.wire"))] == []


# Each method written as client steps (privfgl.federation.client_steps), with the settings its test runs: seeded
# noise where it has noise (each client draws from its own stream, so the draws are the same on any actor).
STEP_METHODS = {
    "dp-sgd": {"method_params": {"seed": 5}, "protocol": "secagg", "local_epochs": 1, "hidden": 16},
    "gap": {"method_params": {"seed": 5, "encoder_rounds": 2}, "protocol": "secagg"},
    "gap-node": {"method": "gap", "method_params": {"unit": "node", "degree": 4, "seed": 5, "encoder_rounds": 1,
                                                    "sample_rate": 0.5},  # Poisson coins from each client's own stream
                 "protocol": "secagg", "local_epochs": 1, "hidden": 16},  # per-node clipping is the slow part
    "fedomd": {"method_params": {"patience": 0}, "protocol": "secagg"},
    "fedspray": {"method_params": {"dropout": 0.5}, "protocol": "secagg"},  # dropout: each client's own stream
    "fedgpl": {"partition": "tasks", "method_params": {"dim": 16, "hidden": 16, "max_per_class": 12,
                                                        "pretrain_epochs": 1}, "protocol": "secagg"},
    "fedlog": {"method_params": {"s": 4, "hidden": 32, "embed_dim": 16, "generator_epochs": 3, "generator_gnns": 2,
                                 "generator_hidden": "32", "batch_size": 128, "warmup_epochs": 5},
               "protocol": "secagg"},
    "opfgl": {"rounds": 1, "method_params": {"condense_iters": 100, "max_iters": 200, "eval_every": 50},
              "protocol": "secagg"},
    "lapgraph": {"method_params": {"seed": 5, "rank": 4}, "protocol": "secagg"},  # each actor trains on the release
}


def test_every_method_runs_on_actors_and_this_module_runs_each():
    """fedprox is FedAvg's skeleton with the proximal term on each actor's trainers (its anchor: the model the
    actor received), the one method run here only in process."""
    on_actors = {STEP_METHODS[m].get("method", m) for m in STEP_METHODS} | {"fedavg", "local", "dp-fedavg"}
    assert set(RAY_METHODS) == set(METHODS) and set(METHODS) - on_actors == {"fedprox"}


@pytest.mark.parametrize("method", sorted(STEP_METHODS))
def test_a_method_of_client_steps_gives_the_in_process_record_on_actors(cluster, pool, method, monkeypatch):
    """The same record as in process (but for the config and the ray block), the bytes booked are the bytes
    that crossed, and the driver holds none of the clients' data: what a step returns to the driver (``each``;
    messages and uploads go through the channel and the protocol) holds no tensor or array, only scalars."""
    from privfgl.federation.ray.clients import ActorSteps
    returned, each = [], ActorSteps.each
    monkeypatch.setattr(ActorSteps, "each", lambda self, step, *args: returned.append(each(self, step, *args))
                        or returned[-1])
    in_process, on_actors, setup = _in_process_and_on_actors(cluster, pool, **{"method": method, **STEP_METHODS[method]})
    assert [d for d in differences(in_process, on_actors) if not d.startswith(("config.", "ray", "cost.wire"))] == []
    assert on_actors["cost"]["wire_check"]["equal"] in (True, None)
    assert setup.clients == [] and setup.tracker.clients == []

    def scalars_only(value) -> bool:
        if isinstance(value, dict):
            return all(scalars_only(v) for v in value.values())
        if isinstance(value, (list, tuple)):
            return all(scalars_only(v) for v in value)
        return value is None or isinstance(value, (bool, int, float, str))
    assert all(scalars_only(result) for result in returned), returned


# The HE protocols for two methods whose sums and messages are their own steps: each sum's inputs stay on the
# actors and cross as ciphertexts. (Under crypten each run starts its own actors: both passed by hand, and
# FedAvg's crypten test below covers the shared path; docs/cluster.md.)
OTHER_PROTOCOLS = [("fedgpl", "ckks"), ("fedlog", "bfv")]


@pytest.mark.parametrize("method, protocol", OTHER_PROTOCOLS)
def test_a_method_of_client_steps_gives_the_in_process_record_on_actors_under(cluster, pool, method, protocol):
    settings = {"method": method, **STEP_METHODS[method], "protocol": protocol, "rounds": 1}  # HE is slow
    in_process, on_actors, setup = _in_process_and_on_actors(cluster, pool, **settings)
    differ = [d for d in differences(in_process, on_actors) if not d.startswith(("config.", "ray", "cost.wire"))]
    assert [d for d in differ if not d.startswith(NONDETERMINISTIC_BYTES)] == []  # SEAL's ciphertext sizes vary
    assert on_actors["metrics"]["test_acc"] == in_process["metrics"]["test_acc"]
    assert on_actors["cost"]["wire_check"]["equal"] and setup.clients == [] and setup.tracker.clients == []
    received = [m for m in setup.federation.transcript.view("server") if m.sender.startswith("client")]
    inputs = [m for m in received if m.kind == "ciphertext"]
    assert inputs and all(m.tensors is None for m in inputs)  # a sum's inputs cross as ciphertexts
    # in the clear only FedGPL's split messages, clear by design (docs/fedgpl.md), never a sum's input
    assert {m.name for m in received if m.kind == "plaintext"} <= {"prompted_graph", "embedding_grads"}


def test_dp_fedavg_flips_each_clients_coin_and_noise_on_its_actor(cluster, pool):
    """Distributed DP under secagg with sampling at q = 0.5: the coins and the noise shares are drawn on the
    actors (nothing of who took part reaches the driver), the release is accounted at q as in process."""
    from privfgl.experiment import config_for, run
    settings = {**RUN, "method": "dp-fedavg", "protocol": "secagg", "method_params": {"q": 0.5},
                "dp": "gaussian:sigma=1,clip=1,on=update,mode=distributed"}
    in_process, _ = run(config_for(settings))
    on_actors, setup = run(config_for({**settings, "engine": "ray", "ray_address": cluster, "clients_per_actor": 2}),
                           ray_pool=pool)
    assert on_actors["privacy"]["epsilon"] == in_process["privacy"]["epsilon"] > 0
    dp = on_actors["privacy"]["dp"]
    assert dp["accounted_sample_rate"] == 0.5 and dp["noise_source"] == dp["sampling_source"] == "os"
    assert setup.extras["sampled_clients"] == []  # the coins stayed on the actors


def test_opfgl_draws_each_clients_dp_noise_share_on_its_actor(cluster, pool):
    """O-pFGL's node-level DP under ckks (distributed shares, a seeded dp_seed): every client draws its share
    from its own stream on its actor, so the record is the in-process one, and no share reaches the driver."""
    params = {"condense_iters": 100, "max_iters": 200, "eval_every": 50, "dp_epsilon": 4.0, "dp_clip": 2.0,
              "dp_degree": 3, "dp_seed": "3"}
    in_process, on_actors, setup = _in_process_and_on_actors(cluster, pool, method="opfgl", rounds=1,
                                                             protocol="ckks", method_params=params)
    differ = [d for d in differences(in_process, on_actors) if not d.startswith(("config.", "ray", "cost.wire"))]
    assert [d for d in differ if not d.startswith(NONDETERMINISTIC_BYTES)] == []  # SEAL's ciphertext sizes vary
    assert on_actors["privacy"]["dp"]["mode"] == "distributed" and on_actors["privacy"]["epsilon"] > 0
    assert setup.extras["dp"].client_noise == () and setup.clients == []
    assert on_actors["cost"]["wire_check"]["equal"]


# Last in the module: the pool's actors of this run do not come back (one of them died).
def test_a_client_actor_killed_inside_a_secagg_sum_is_a_dropout(cluster, pool):
    from privfgl.experiment import config_for, run
    record, _ = run(config_for({**RUN, "protocol": "secagg", "protocol_params": {"kill_at": {3: [2]}, "threshold": 2},
                                "engine": "ray", "ray_address": cluster, "clients_per_actor": 2}), ray_pool=pool)
    assert record["ray"]["dead_clients"] == [2]
    partial = record["cost"]["participation"]["partial_sums"]
    assert [(p["round"], p["survivors"], p["dropped"]) for p in partial] == [(0, [0, 1], [2]), (1, [0, 1], [2])]
    assert record["cost"]["wire_check"]["equal"]
    assert 0 < record["metrics"]["test_acc"] <= 1
