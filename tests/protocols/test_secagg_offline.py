"""secagg's offline phase (issue #18, ``workers`` > 1, ``offline=True``): after each sum the workers prepare
the next sum of the same shape (rounds 1-2 and the clients' mask vectors) in the background. A sum that uses
the preparation reveals the same sum and books the same Transfers (parties, steps, kinds, bytes) as the
one-process protocol; a shape change, or dropout / fault injection at rounds 1-2, falls back to the four
rounds; close() stops a preparation in progress."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
import torch

from protocols import ProtocolError, get_protocol
from protocols.secagg.protocol import OFFLINE_NICE, _check_dropout, _check_faults
from tests.processes import alive as _alive


def signature(result) -> list[tuple]:
    return [(t.sender, t.receiver, t.step, t.kind, t.nbytes, tuple(map(len, t.blobs))) for t in result.transfers]


def same(a, b) -> None:
    """The same sum (exact in the ring) and the same server's view (as test_secagg_workers.same)."""
    assert torch.equal(a.total, b.total) and a.total.dtype == b.total.dtype
    assert signature(a) == signature(b)
    assert a.error_bound == b.error_bound and a.survivors == b.survivors
    assert a.details["dropped"] == b.details["dropped"]
    assert a.details["faulty_shares"] == b.details["faulty_shares"]


def inputs(K: int, n: int, integer: bool, seed: int) -> list[torch.Tensor]:
    rng = np.random.default_rng(seed)
    if integer:
        return [torch.from_numpy(rng.integers(-1000, 1000, n)) for _ in range(K)]
    return [torch.from_numpy(rng.normal(0, 2.0, n)) for _ in range(K)]


@pytest.fixture(scope="module")
def offline2():
    with get_protocol("secagg", workers=2, offline=True) as p:
        p.start_workers()
        yield p


def settle(p, **params):
    """Wait for p's preparation (if any) and set its dropout / faults; returns a one-process twin."""
    p._wait_prep()
    p.dropout = _check_dropout(params.get("dropout"))
    p.faults = _check_faults(params.get("faults"))
    p.threshold = params.get("threshold")
    return get_protocol("secagg", **params)


def test_a_sequence_of_sums_uses_the_preparation_and_matches_one_process(offline2):
    serial = settle(offline2)
    seen = []
    for i in range(5):
        xs = inputs(6, 700, i % 2 == 1, i)  # float and integer sums: the same ring, the same preparation
        a, b = serial.aggregate(xs), offline2.aggregate(xs)
        same(a, b)
        assert b.details["workers"] == 2
        seen.append(b.details["offline"])
    assert seen[1:] == ["prepared"] * 4 and seen[0] in ("prepared", "fallback")
    assert a.details["offline"] is None


def test_a_shape_change_falls_back_and_the_next_sum_is_prepared_again(offline2):
    serial = settle(offline2)
    for K, n, expect in ((6, 300, None), (6, 300, "prepared"), (6, 301, "fallback"), (6, 301, "prepared"),
                         (5, 301, "fallback"), (1, 301, "fallback"), (1, 301, "prepared"), (7, 40, "fallback"),
                         (7, 40, "prepared")):
        xs = inputs(K, n, False, K * n)
        a, b = serial.aggregate(xs), offline2.aggregate(xs)
        same(a, b)
        assert expect is None or b.details["offline"] == expect


@pytest.mark.parametrize("params", [
    {"dropout": {3: [1]}},
    {"dropout": {4: [2]}},
    {"dropout": {3: [0], 4: [5]}, "faults": {"late": [3]}, "threshold": 3},
])
def test_dropout_at_rounds_3_and_4_works_with_a_prepared_session(offline2, params):
    serial = settle(offline2, **params)
    xs = inputs(6, 500, False, 11)
    for _ in range(3):
        a, b = serial.aggregate(xs), offline2.aggregate(xs)
        same(a, b)
    assert b.details["offline"] == "prepared" and b.details["dropped"]


@pytest.mark.parametrize("params", [
    {"dropout": {1: [0]}},
    {"dropout": {2: [3]}},
    {"faults": {"bad_share": [1, 4]}},
])
def test_fault_injection_at_rounds_1_and_2_falls_back(offline2, params):
    xs = inputs(6, 400, False, 12)
    settle(offline2)
    offline2.aggregate(xs)  # a clean sum: the next one is being prepared
    assert offline2._prep is not None
    serial = settle(offline2, **params)
    for _ in range(2):
        a, b = serial.aggregate(xs), offline2.aggregate(xs)
        same(a, b)
        assert b.details["offline"] == "fallback"
        assert offline2._prep is None  # nothing is prepared while rounds 1-2 have faults
    settle(offline2)


def test_tamper_share_falls_back_with_the_one_process_error(offline2):
    xs = inputs(6, 50, False, 13)
    settle(offline2)
    offline2.aggregate(xs)
    serial = settle(offline2, faults={"tamper_share": [1, 5]})
    with pytest.raises(ProtocolError) as one:
        serial.aggregate(xs)
    with pytest.raises(ProtocolError) as two:
        offline2.aggregate(xs)
    assert str(one.value) == str(two.value)
    settle(offline2)
    same(get_protocol("secagg").aggregate(xs), offline2.aggregate(xs))


def test_random_dropout_draws_like_one_process():
    params = {"dropout_rate": 0.2, "dropout_seed": 5, "threshold": 3}
    serial = get_protocol("secagg", **params)
    with get_protocol("secagg", workers=2, offline=True, **params) as p:
        p.start_workers()
        xs = inputs(8, 200, False, 14)
        used = set()
        for _ in range(8):
            a, b = serial.aggregate(xs), p.aggregate(xs)
            same(a, b)
            used.add(b.details["offline"])
        assert "fallback" in used


def test_a_refused_prepared_sum_raises_the_one_process_error_and_goes_on(offline2):
    xs = inputs(6, 60, False, 15)
    serial = settle(offline2)
    offline2.aggregate(xs)
    big = [x * 1e4 for x in xs]  # outside the clip range: refused in round 3, after a prepared round 1-2
    with pytest.raises(ProtocolError) as one:
        serial.aggregate(big)
    with pytest.raises(ProtocolError) as two:
        offline2.aggregate(big)
    assert str(one.value) == str(two.value)
    for _ in range(2):
        same(serial.aggregate(xs), offline2.aggregate(xs))


def test_close_stops_the_preparation_without_hanging_or_leaking():
    xs = inputs(10, 20000, False, 16)
    p = get_protocol("secagg", workers=2, offline=True)
    p.start_workers()
    p.aggregate(xs)
    prep, procs = p._prep, list(p._pool._procs)
    assert prep is not None
    t0 = time.perf_counter()
    p.close()  # most likely while the next sum is being prepared
    assert time.perf_counter() - t0 < 10
    assert not prep.running and p._prep is None and p._pool is None
    assert all(proc.poll() is not None for proc in procs) and not any(_alive(proc.pid) for proc in procs)
    same(get_protocol("secagg").aggregate(xs), p.aggregate(xs))  # a later sum starts afresh
    p.close()


def test_offline_is_off_by_default_and_checked():
    with get_protocol("secagg", workers=2) as p:
        assert p.offline is False
        assert p.aggregate(inputs(3, 10, False, 0)).details["offline"] is None and p._prep is None
    with pytest.raises(ProtocolError, match="offline: expected True or False"):
        get_protocol("secagg", offline=1)
    with get_protocol("secagg", offline=True) as p:  # workers=1: nothing to prepare in the background
        r = p.aggregate(inputs(3, 10, False, 0))
        assert r.details["offline"] == "fallback" and p._prep is None


def test_a_worker_dying_during_the_preparation_falls_back_to_a_fresh_pool():
    import os
    import signal

    xs = inputs(6, 200, False, 17)
    reference = get_protocol("secagg").aggregate(xs)
    with get_protocol("secagg", workers=2, offline=True) as p:
        p.start_workers()
        same(reference, p.aggregate(xs))
        old = p._pool
        os.kill(old._procs[1].pid, signal.SIGKILL)  # while (or after) the next sum is prepared
        old._procs[1].wait()
        result = p.aggregate(xs)
        same(reference, result)
        assert p._pool is not old and result.details["offline"] == "fallback"
        same(reference, p.aggregate(xs))


def test_the_preparing_workers_yield_the_cpu_to_the_caller(offline2):
    # offline: the workers prepare the next sum while the caller trains, so they run OFFLINE_NICE nicer
    # than this process; workers without the offline phase only work while the caller waits: as nice as it
    mine = os.getpriority(os.PRIO_PROCESS, 0)
    assert OFFLINE_NICE > 0
    assert [os.getpriority(os.PRIO_PROCESS, pid) for pid in offline2._pool.pids] == [min(mine + OFFLINE_NICE, 19)] * 2
    with get_protocol("secagg", workers=2) as online:
        online.start_workers()
        assert [os.getpriority(os.PRIO_PROCESS, pid) for pid in online._pool.pids] == [mine] * 2
