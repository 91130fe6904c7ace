"""Every method stays correct when clients drop (issue #18): a run under `secagg` where client 1 drops at
the masked-input round of every sum (`dropout={3: [1]}`) reveals, round by round, the sums that a `plain`
run with the runtime's participation mask (`Federation.absent = {"*": [1]}`: client 1 sends nothing)
reveals, within secagg's grid bound; both record the same participation; the methods weight by what the
survivors sent (never by K) and their outputs stay finite. Kept small: 3 clients, 2 rounds, t = 2."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from privfgl.data import contextual_sbm
from privfgl.experiment import RunConfig, build_setup, run, seed_everything
from privfgl.federation import SERVER, Federation, Transcript, client_name
from privfgl.federation.runtime import flatten
from privfgl.methods import METHODS
from privfgl.methods.options import unused_option
from protocols import get_protocol

SECAGG_DROP = {"dropout": {3: [1]}, "threshold": 2}  # client 1 drops before its masked input, in every sum
MASK = {"*": [1]}  # the same participation under any protocol: client 1 is left out of every round's sums
SURVIVORS = [0, 2]


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("PRIVFGL_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.fixture(scope="module")
def sbm():
    return contextual_sbm(num_nodes=300, num_classes=3, num_features=40, seed=0)


@pytest.fixture(scope="module")
def task_graph():
    return contextual_sbm(num_nodes=400, num_classes=3, num_features=32, homophily=0.85, seed=0)


# --- the runtime ---------------------------------------------------------------------------------


def test_runtime_mask_under_plain_equals_secagg_dropout():
    gen = torch.Generator().manual_seed(0)
    uploads = [{"w": torch.randn(3, 4, generator=gen, dtype=torch.float64), "n": torch.tensor(float(k + 1))}
               for k in range(4)]
    plain = Federation(4, get_protocol("plain"), Transcript("all"), absent={"*": [1]})
    secure = Federation(4, get_protocol("secagg", dropout={3: [1]}, threshold=3), Transcript("all"))
    a, b = plain.aggregate(0, "m", uploads), secure.aggregate(0, "m", uploads)
    exact = {f: sum(uploads[k][f] for k in (0, 2, 3)) for f in ("w", "n")}
    for f in exact:
        assert torch.allclose(a[f], exact[f].double(), rtol=0, atol=1e-12)
        assert torch.allclose(b[f], exact[f].double(), rtol=0, atol=secure.error_bounds["m"])
    assert plain.survivors(0, "m") == secure.survivors(0, "m") == [0, 2, 3]
    assert plain.cost()["participation"] == secure.cost()["participation"] == {
        "sums": 1, "dropped_inputs": 1, "partial_sums": [{"round": 0, "message": "m", "survivors": [0, 2, 3],
                                                          "dropped": [1]}]}
    # Under the mask client 1 sends nothing; the others' uploads keep their own names and payloads.
    view = plain.transcript.view(SERVER, name="m")
    assert [m.sender for m in view] == ["client0", "client2", "client3"]
    assert torch.equal(view[1].tensors["w"], uploads[2]["w"])
    assert plain.cost()["bytes_up_per_client"][1] == 0
    # A round the mask does not name has everyone; the latest sum of a name is what round=None reads.
    plain.absent = {2: [0, 3]}
    plain.aggregate(1, "m", uploads)
    assert plain.survivors(1, "m") == [0, 1, 2, 3] and plain.cost()["participation"]["sums"] == 2
    plain.aggregate(2, "m", uploads)
    assert plain.survivors(None, "m") == [1, 2]
    with pytest.raises(ValueError, match="leaves out every client"):
        Federation(2, get_protocol("plain"), absent={0: [0, 1]}).aggregate(0, "m", uploads[:2])
    with pytest.raises(ValueError, match="out of range for 4 clients"):
        Federation(4, get_protocol("plain"), absent={"*": [7]}).aggregate(0, "m", uploads)
    with pytest.raises(ValueError, match="round keys"):
        Federation(4, get_protocol("plain"), absent={"x": [1]})


def test_message_dp_reports_the_noise_shortfall_of_a_distributed_release_with_dropout():
    from privfgl.privacy.message_dp import MessageDP
    from privfgl.privacy.spec import parse_dp_spec as parse_dp

    spec = parse_dp("gaussian:sigma=1,clip=1,on=update,mode=distributed,seed=0")
    fed = Federation(4, get_protocol("secagg", dropout={3: [1]}, threshold=3), dp=MessageDP(spec, 4))
    fed.aggregate(0, "model_update", [{"w": torch.ones(3, dtype=torch.float64)} for _ in range(4)])
    dropout = fed.dp.report()["dp"]["dropout"]
    assert dropout["releases"] == [{"round": 0, "message": "model_update", "survivors": 3,
                                    "noise_variance_fraction": 0.75}]
    assert "does not hold" in dropout["warning"]


# --- the methods ---------------------------------------------------------------------------------


def run_method(method: str, data, protocol: str, absent=None, **kw):
    """One small run built like `privfgl run` (build_setup, then the method), with the runtime mask set."""
    base = dict(method=method, dataset="sbm", partition="louvain", clients=3, rounds=2, seed=0, protocol=protocol,
                protocol_params=SECAGG_DROP if protocol == "secagg" else {}, progress=False, transcript="all")
    if unused_option(method, "local_epochs") is None:
        base["local_epochs"] = 1  # quick (the paper methods set their own epochs with method params)
    base.update(kw)
    cfg = RunConfig(**base)
    setup = build_setup(cfg, data)
    setup.federation.absent = absent
    seed_everything(cfg.seed)
    try:
        METHODS[method](setup)
    finally:
        setup.federation.protocol.close()
    return setup


def revealed(setup, round_: int) -> dict[str, torch.Tensor]:
    """The sums the server opened in `round_`: message -> flat float64 vector."""
    out = {}
    for m in setup.federation.transcript.view(SERVER, round=round_):
        if m.name.endswith(":sum") and m.tensors:
            out[m.name[:-4]] = flatten(m.tensors)[0].double()
    return out


CASES = {
    "fedavg": dict(),
    "fedprox": dict(mu=0.1),
    "dp-sgd": dict(method_params={"seed": 0, "sigma": 0.5}),
    "dp-fedavg": dict(dp="gaussian:sigma=1e-6,clip=10,on=update,mode=central,seed=0", method_params={"sampling_seed": 0}),
    "fedomd": dict(split=(0.05, 0.2, 0.2), split_mode="random", method_params={"patience": 0}),
    "fedspray": dict(split=(0.4, 0.3, 0.3)),
    "fedlog": dict(partition="metis", split=(0.4, 0.3, 0.3),
                   method_params={"s": 4, "hidden": 32, "embed_dim": 16, "generator_epochs": 3, "generator_gnns": 2,
                                  "generator_hidden": "32", "batch_size": 128}),
    "opfgl": dict(rounds=1, method_params={"condense_iters": 100, "max_iters": 200, "eval_every": 50}),
    "fedgpl": dict(partition="tasks", method_params={"dim": 16, "hidden": 16, "max_per_class": 24,
                                                     "pretrain_epochs": 1}),
    "gap": dict(method_params={"seed": 0, "encoder_rounds": 2}),
}


@pytest.fixture(scope="module")
def runs(sbm, task_graph, tmp_path_factory):
    """Per method: (plain with client 1 masked out, secagg with client 1 dropping), built lazily."""
    cache = {}

    def get(method):
        if method not in cache:
            data = task_graph if method == "fedgpl" else sbm
            with pytest.MonkeyPatch.context() as mp:
                mp.setenv("PRIVFGL_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))
                cache[method] = (run_method(method, data, "plain", MASK, **CASES[method]),
                                 run_method(method, data, "secagg", **CASES[method]))
        return cache[method]
    return get


@pytest.mark.parametrize("method", list(CASES))
def test_secagg_dropout_equals_plain_with_the_same_participation(runs, method):
    plain, secure = runs(method)
    # Every sum of every round missed client 1, in both runs, and the record says so.
    for setup in (plain, secure):
        fed = setup.federation
        assert fed.participation and all(s == SURVIVORS for s in fed.participation.values())
        record = fed.cost()["participation"]
        assert record["sums"] == len(fed.participation) == record["dropped_inputs"]
        assert all(p["dropped"] == [1] for p in record["partial_sums"])
        messages = {name for _, name in fed.participation}
        assert not [m for m in fed.transcript.view(SERVER) if m.sender == client_name(1)
                    and m.name in messages]  # client 1 sent no input (under secagg: its keys and shares, rounds 1-2)
    assert plain.federation.participation.keys() == secure.federation.participation.keys()
    # Round 0's first sum starts from the same state: the same sum, within secagg's bound. A later sum of the
    # round may read an earlier one (FedOMD's moments about the revealed mean): within a small tolerance.
    a, b = revealed(plain, 0), revealed(secure, 0)
    assert a.keys() == b.keys() and a
    first = next(name for r, name in secure.federation.participation if r == 0)
    for name in a:
        bound = secure.federation.error_bounds[name]
        err = float((a[name] - b[name]).abs().max())
        if name == first:
            assert err <= bound + 1e-12 * float(a[name].abs().max()), name
        else:
            assert torch.allclose(a[name], b[name], rtol=1e-3, atol=1e-3), (name, err)
    # Later rounds: training amplifies the grid error a little; the outcome is the same run.
    acc = [s.tracker.summary()["test_acc"] for s in (plain, secure)]
    assert all(math.isfinite(x) and 0 <= x <= 1 for x in acc)
    assert abs(acc[0] - acc[1]) <= 0.05, acc


def _survivor_mean(setup, name: str, round_: int = 0) -> torch.Tensor:
    uploads = setup.federation.audit_log[(round_, name)]["uploads"]
    return sum(uploads[k] for k in SURVIVORS) / len(SURVIVORS)


def test_dp_sgd_averages_over_the_survivors_not_k(runs):
    plain, _ = runs("dp-sgd")
    got = plain.federation.transcript.view(client_name(0), name="global_model", round=0)[0].tensors
    expected = _survivor_mean(plain, "model_update")
    assert torch.allclose(flatten(got)[0].double(), expected, atol=1e-6)  # float32 global model


def _dp_fedavg_step(setup) -> tuple[torch.Tensor, torch.Tensor]:
    """(the server's step in round 0: round 0's model − the init, the survivors' mean delta)."""
    models = setup.federation.transcript.view(client_name(0), name="global_model", round=0)
    start, new = (flatten(m.tensors)[0].double() for m in (models[0], models[1]))  # the init, then round 0's model
    return new - start, _survivor_mean(setup, "model_update")


def test_dp_fedavg_divides_by_q_times_the_survivors(runs):
    step, deltas = _dp_fedavg_step(runs("dp-fedavg")[0])  # q = 1; noise std 1e-6·10 on the sum (max ≈ 2e-5 here)
    assert float(deltas.abs().max()) > 1e-3 and torch.allclose(step, deltas, atol=1e-4)  # ÷(q·|S|), not ÷(q·K)


def test_dp_fedavg_steps_by_its_server_learning_rate(sbm):
    case = CASES["dp-fedavg"]
    setup = run_method("dp-fedavg", sbm, "plain", MASK, dp=case["dp"],
                       method_params={**case["method_params"], "server_lr": 0.5})
    step, deltas = _dp_fedavg_step(setup)
    assert torch.allclose(step, 0.5 * deltas, atol=1e-4)


def test_fedlog_divides_each_sum_by_its_own_survivors_rates(runs):
    plain, _ = runs("fedlog")
    t, s = plain.federation.transcript, CASES["fedlog"]["method_params"]["s"]
    ups = [m.tensors for m in t.view(SERVER, name="synthetic_update", round=1)]
    assert len(ups) == len(SURVIVORS)
    x_g = t.view(client_name(0), name="global_synthetic", round=1)[0].tensors
    assert x_g["y"].numel()
    for c in x_g["y"].unique().tolist():
        rows = slice(c * s, (c + 1) * s)
        expected = sum(u["x_head"][rows].mean(0) for u in ups) / sum(u["r"][c] for u in ups)
        assert torch.allclose(x_g["x"][x_g["y"] == c].double().mean(0), expected, atol=1e-5)
    assert torch.isfinite(x_g["x"]).all()


def test_fedgpl_keeps_the_start_model_of_a_task_group_with_no_survivor(runs, task_graph, monkeypatch):
    """3 clients, one per task: client 1's task group is empty in every sum after round 0. HiDTA's phase 1
    must see that group's model θ'_t equal to its start model θ_t (not the 0/0 of an empty mean), and every
    other group's moved; τ and the task models stay finite under plain and secagg."""
    from privfgl.methods.fedgpl import hidta
    seen, real = [], hidta.transferability
    monkeypatch.setattr(hidta, "transferability",
                        lambda now, start, mode: seen.append((now.clone(), start.clone())) or real(now, start, mode))
    run_method("fedgpl", task_graph, "plain", MASK, **CASES["fedgpl"])
    assert seen  # phase 1 ran (rounds after the first)
    for now, start in seen:
        kept = [t for t in range(len(now)) if torch.equal(now[t], start[t])]
        assert len(kept) == 1 and torch.isfinite(now).all()  # the masked client's group only
    for setup in runs("fedgpl"):
        assert np.isfinite(np.array(setup.extras["fedgpl_tau"][-1])).all()


def test_opfgl_pools_the_survivors_statistics_bit_identically(runs):
    plain, secure = runs("opfgl")
    a, b = revealed(plain, 0), revealed(secure, 0)
    assert torch.equal(a["class_counts"], b["class_counts"])  # integers: exact
    # The contributor count b of each class is the survivors' (at most 2), never K = 3.
    counts = plain.federation.transcript.view(SERVER, name="class_counts:sum")[0].tensors
    assert int(counts["b"].max()) <= len(SURVIVORS)
    assert plain.tracker.summary()["test_acc"] == secure.tracker.summary()["test_acc"]


def test_opfgl_refuses_sums_with_different_survivors(sbm):
    with pytest.raises(ValueError, match="hold different clients"):
        run_method("opfgl", sbm, "plain", lambda r, name: [1] if name == "class_counts" else [], rounds=1)


def test_a_random_participation_rate_drops_the_same_clients_under_every_protocol(sbm):
    """--absent-rate: each client left out of each round with probability p, drawn from (seed, round), so a
    plain and a secagg run of one seed drop the same clients and reach the same model (within the grid)."""
    records = {}
    for protocol in ("plain", "secagg"):
        cfg = RunConfig(method="fedavg", dataset="sbm", partition="metis", clients=6, rounds=4, seed=3,
                        absent_rate=0.3, protocol=protocol, progress=False, transcript="none")
        records[protocol] = run(cfg, data=sbm)[0]
    plain, secagg = records["plain"]["cost"]["participation"], records["secagg"]["cost"]["participation"]
    assert plain == secagg and plain["dropped_inputs"] > 0
    assert all(0 < len(p["survivors"]) < 6 for p in plain["partial_sums"])
    assert abs(records["plain"]["metrics"]["test_acc"] - records["secagg"]["metrics"]["test_acc"]) <= 0.02
    other_seed = run(RunConfig(method="fedavg", dataset="sbm", partition="metis", clients=6, rounds=4, seed=4,
                               absent_rate=0.3, progress=False, transcript="none"), data=sbm)[0]
    assert other_seed["cost"]["participation"] != plain


def test_secaggs_simulated_dropout_rate_is_drawn_from_the_runs_seed(sbm):
    """`--protocol-param dropout_rate=p` without dropout_seed: the run's seed draws who drops (recorded as a
    filled-in protocol param), so one seed gives one run and another seed another draw."""
    def record(seed):
        cfg = RunConfig(method="fedavg", dataset="sbm", partition="metis", clients=6, rounds=4, seed=seed,
                        protocol="secagg", protocol_params={"dropout_rate": 0.2, "threshold": 3}, progress=False,
                        transcript="none")
        return run(cfg, data=sbm)[0]
    first, again, other = record(3), record(3), record(5)
    assert first["config"]["protocol_params_method_defaults"] == {"dropout_seed": 3}
    assert first["cost"]["participation"] == again["cost"]["participation"] and first["cost"]["participation"]["dropped_inputs"] > 0
    assert first["metrics"]["test_acc"] == again["metrics"]["test_acc"]
    assert other["cost"]["participation"] != first["cost"]["participation"]


def test_a_random_participation_draw_never_leaves_a_round_without_clients():
    """At a high rate some rounds draw every client out: one (the nearest to staying) is kept, so the run
    goes on; the draw is the same for every call of a round."""
    from privfgl.experiment import run_participation
    mask = run_participation({}, 0.95, 3, seed=0)
    masks = [mask(r, "model_update") for r in range(200)]
    assert all(len(m) <= 2 for m in masks) and sum(len(m) == 2 for m in masks) > 100
    assert all(mask(r, "other") == masks[r] for r in range(200))


def test_secagg_workers_run_reveals_the_one_process_runs_sums(runs, sbm, monkeypatch):
    """FedAvg with client 1 dropping, its clients run by 2 worker processes (`workers=2`): every round
    reveals bit for bit the sums of the one-process run, with the same messages and bytes (issue #18)."""
    from protocols.secagg.protocol import SecAggProtocol

    _, serial = runs("fedavg")
    ready_pool, pooled = SecAggProtocol._ready_pool, []

    def wait_for_the_workers(self):  # a run's first sums would run in process while the workers start
        self.start_workers(wait=True)
        pool = ready_pool(self)
        pooled.append(pool is not None)
        return pool

    monkeypatch.setattr(SecAggProtocol, "_ready_pool", wait_for_the_workers)
    parallel = run_method("fedavg", sbm, "secagg", protocol_params={**SECAGG_DROP, "workers": 2})
    assert pooled and all(pooled)
    rounds = sorted({r for r, _ in serial.federation.participation})
    assert rounds and rounds == sorted({r for r, _ in parallel.federation.participation})
    for r in rounds:
        a, b = revealed(serial, r), revealed(parallel, r)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert serial.federation.cost()["participation"] == parallel.federation.cost()["participation"]
    for key in ("bytes_up", "bytes_down", "bytes_up_per_client", "messages"):
        assert serial.federation.cost()[key] == parallel.federation.cost()[key], key
    assert serial.tracker.summary()["test_acc"] == parallel.tracker.summary()["test_acc"]
