"""secagg with ``workers`` > 1 (issue #18): worker processes run the clients' side of the four rounds; the
server's view (every Transfer: parties, steps, kinds, bytes), the revealed sum (exact in the ring), the
survivors, the bound and the errors are those of the one-process mode."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocols import PartyFailure, ProtocolError, get_protocol
from tests.processes import alive as _alive


def signature(result) -> list[tuple]:
    """What the server's view holds, without the random bytes: per Transfer its parties, step, kind, bytes
    and the lengths of its blobs."""
    return [(t.sender, t.receiver, t.step, t.kind, t.nbytes, tuple(map(len, t.blobs))) for t in result.transfers]


def same(a, b) -> None:
    assert torch.equal(a.total, b.total)
    assert a.total.dtype == b.total.dtype
    assert signature(a) == signature(b)
    assert a.error_bound == b.error_bound
    assert a.survivors == b.survivors
    assert a.details["dropped"] == b.details["dropped"]
    assert a.details["faulty_shares"] == b.details["faulty_shares"]


@pytest.fixture(scope="module")
def pool2():
    """One workers=2 protocol for the module: its processes start once (its parameters are set per test)."""
    with get_protocol("secagg", workers=2) as p:
        p.start_workers()  # wait for the workers: every sum of this module runs in them
        yield p


def configured(p, **params):
    """Set ``p`` (workers=2, its pool kept) to the parameters of get_protocol("secagg", **params) and return a
    one-process protocol with the same parameters (and its own, identically seeded, dropout generator)."""
    donor = get_protocol("secagg", **params)
    p.__dict__.update({k: v for k, v in donor.__dict__.items() if k not in ("workers", "_pool", "_buffer")})
    return get_protocol("secagg", **params)


def inputs(K: int, n: int, integer: bool, seed: int) -> list[torch.Tensor]:
    rng = np.random.default_rng(seed)
    if integer:
        return [torch.from_numpy(rng.integers(-1000, 1000, n)) for _ in range(K)]
    return [torch.from_numpy(rng.normal(0, 2.0, n)) for _ in range(K)]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(K=st.integers(1, 7), n=st.integers(1, 300), integer=st.booleans(), bits=st.sampled_from([32, 64]),
       graph=st.sampled_from(["complete", "kregular"]), seed=st.integers(0, 2**16))
def test_workers_reveal_the_same_sum_and_send_the_same_messages(pool2, K, n, integer, bits, graph, seed):
    serial = configured(pool2, bits=bits, graph=graph, degree=2 if graph == "kregular" else None)
    xs = inputs(K, n, integer, seed)
    a, b = serial.aggregate(xs), pool2.aggregate(xs)
    same(a, b)
    assert b.details["workers"] == 2 and a.details["workers"] == 1
    assert pool2.last_run is None and serial.last_run is not None  # the clients' secrets stay in the workers
    exact = torch.stack([x.double() for x in xs]).sum(0)
    assert float((b.total.double() - exact).abs().max()) <= b.error_bound + 1e-9


def test_the_fedavg_size_and_a_second_shape_reuse_the_pool(pool2):
    serial = configured(pool2)
    pids = None
    for K, n in ((10, 92232), (10, 5), (4, 92232)):  # the shared buffer is grown once, then reused
        xs = inputs(K, n, False, K + n)
        a, b = serial.aggregate(xs), pool2.aggregate(xs)
        same(a, b)
        assert pids is None or pool2._pool.pids == pids
        pids = pool2._pool.pids
        # Upload per client: the masked vector (4 B per value) plus keys, commitment and shares.
        assert b.bytes_up == a.bytes_up and min(b.bytes_up) >= 4 * n
    assert pool2._pool.torch_loaded == [False, False]  # the workers never import torch
    for pid in pool2._pool.pids:
        with open(f"/proc/{pid}/maps") as f:
            assert "libtorch" not in f.read()


@pytest.mark.parametrize("params", [
    {"dropout": {1: [0], 2: [3], 3: [5], 4: [7]}, "threshold": 4},
    {"dropout_rate": 0.3, "dropout_seed": 1, "threshold": 3},
    {"graph": "kregular", "degree": 4, "dropout": {3: [2]}},
    {"faults": {"bad_share": [1, 4], "late": [6]}},
])
def test_workers_survive_dropouts_and_faults_like_one_process(pool2, params):
    xs = inputs(8, 1000, False, 3)
    serial = configured(pool2, **params)
    for _ in range(2):  # dropout_rate draws per sum: both protocols draw the same
        a, b = serial.aggregate(xs), pool2.aggregate(xs)
        same(a, b)
    assert len(b.survivors) < 8 or b.details["faulty_shares"]


@pytest.mark.parametrize("params, xs_scale, match", [
    ({"faults": {"ask_both": 2}}, 1.0, "refuses to unmask: the server asked for both"),
    ({"faults": {"tamper_share": [1, 5]}}, 1.0, "client5 rejects the encrypted share from client1"),
    ({"dropout": {3: [1, 2, 3, 5]}}, 1.0, r"round 3 \(masked input\): only 4 of 8 clients remain"),
    ({"clip_range": 1.0}, 10.0, r"a client's contribution is outside the secagg clip range"),
])
def test_workers_raise_the_one_process_errors_and_go_on(pool2, params, xs_scale, match):
    xs = [x * xs_scale for x in inputs(8, 50, False, 4)]
    serial = configured(pool2, **params)
    with pytest.raises(ProtocolError, match=match) as one:
        serial.aggregate(xs)
    with pytest.raises(ProtocolError, match=match) as two:
        pool2.aggregate(xs)
    assert str(one.value) == str(two.value) and "\n" not in str(two.value)
    assert type(two.value) is ProtocolError
    configured(pool2)  # the pool is fine after a refused sum
    ok = inputs(8, 50, False, 5)
    same(get_protocol("secagg").aggregate(ok), pool2.aggregate(ok))


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2", None])
def test_bad_workers_values_are_refused_in_one_line(bad):
    with pytest.raises(ProtocolError) as e:
        get_protocol("secagg", workers=bad)
    assert str(e.value) == f"workers: expected an int >= 1 (processes that run the clients' rounds), got {bad!r}"


def test_the_pool_starts_with_the_protocol_stops_on_close_and_restarts():
    xs = inputs(5, 100, False, 6)
    reference = get_protocol("secagg").aggregate(xs)
    p = get_protocol("secagg", workers=3)
    pool = p._pool  # started with the protocol, without waiting
    procs = list(pool._procs)
    assert len(procs) == 3
    p.start_workers()  # waits until they are ready
    assert all(proc.poll() is None for proc in procs) and pool.started
    result = p.aggregate(xs)
    assert result.details["workers"] == 3
    same(reference, result)
    p.close()
    assert p._pool is None and all(proc.poll() is not None for proc in procs)  # stopped and reaped
    result = p.aggregate(xs)  # a later sum starts a fresh pool and, while it starts, runs here
    same(reference, result)
    assert p._pool is not pool and result.details["workers"] in (1, 3)
    assert (p.last_run is None) == (result.details["workers"] == 3)
    p.start_workers()
    assert p.aggregate(xs).details["workers"] == 3
    p.close()
    p.close()  # idempotent


def test_a_sum_before_the_workers_are_ready_runs_in_this_process(monkeypatch):
    from protocols.secagg.pool import WorkerPool

    xs = inputs(4, 50, True, 8)
    with get_protocol("secagg", workers=2) as p:
        monkeypatch.setattr(WorkerPool, "ready", lambda self, wait=True: False)
        result = p.aggregate(xs)
        assert result.details["workers"] == 1 and p.last_run is not None
        monkeypatch.undo()
        same(result, p.aggregate(xs))


def test_a_worker_dying_in_a_sum_raises_party_failure_and_the_next_sum_starts_afresh(monkeypatch):
    from protocols.secagg.pool import PoolClients

    xs = inputs(6, 100, False, 7)
    share = PoolClients.share

    def die_first(self, requests):  # worker 1 is killed between rounds 1 and 2
        victim = self.pool._procs[1]
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait()
        return share(self, requests)

    with get_protocol("secagg", workers=2) as p:
        reference = get_protocol("secagg").aggregate(xs)
        p.start_workers()
        same(reference, p.aggregate(xs))
        with monkeypatch.context() as m:
            m.setattr(PoolClients, "share", die_first)
            with pytest.raises(PartyFailure, match=r"^secagg worker 1 \(pid \d+\) (is gone|cannot be reached) "
                                                   r"\(\w+\); it exited with code -9$"):
                p.aggregate(xs)
        old = p._pool
        same(reference, p.aggregate(xs))  # a fresh pool (the broken one is stopped)
        assert p._pool is not old and not old._procs
        # A worker that died between sums is replaced before the next one, without an error.
        p.start_workers()
        old = p._pool
        os.kill(old._procs[0].pid, signal.SIGKILL)
        old._procs[0].wait()
        same(reference, p.aggregate(xs))
        assert p._pool is not old


def test_workers_exit_with_their_parent_when_it_is_killed(tmp_path):
    """No worker outlives its parent, even one killed without closing the protocol."""
    import subprocess
    import sys
    import time

    script = tmp_path / "parent.py"
    script.write_text(
        "import sys, torch\n"
        f"sys.path.insert(0, {os.getcwd()!r})\n"
        "from protocols import get_protocol\n"
        "p = get_protocol('secagg', workers=2)\n"
        "p.start_workers()\n"
        "p.aggregate([torch.ones(10, dtype=torch.float64)] * 3)\n"
        "print(*p._pool.pids, flush=True)\n"
        "import time; time.sleep(600)\n")
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(x) for x in parent.stdout.readline().split()]
        assert len(pids) == 2
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in pids)


def test_a_worker_that_cannot_start_raises_party_failure(tmp_path, monkeypatch):
    import protocols.secagg.pool as pool

    broken = tmp_path / "worker.py"
    broken.write_text("import sys\nsys.exit(3)\n")
    monkeypatch.setattr(pool, "WORKER", str(broken))
    p = get_protocol("secagg", workers=2)
    gone = r"^secagg worker 0 \(pid \d+\) is gone \(EOFError\); it exited with code 3$"
    with pytest.raises(PartyFailure, match=gone):
        p.start_workers()
    with pytest.raises(PartyFailure, match="exited with code 3"):  # never silently run in process instead
        p.aggregate(inputs(3, 10, False, 0))
    p.close()
