"""`secagg` multi-process (one OS process per party, messages over torch.distributed gloo): the same
sum, bytes and bound as in process; a client process killed mid-round is a dropout (the survivors'
sum while t remain, else a clear error naming the missing); the CLI runs FedAvg with it.
Kept small: one session (3 clients + server) serves the first tests; each kill costs a restart."""

from __future__ import annotations

import json
import math
import os
import signal
import time

import numpy as np
import pytest
import torch

from protocols import ProtocolError, get_protocol


def exact_sum(xs, who=None) -> np.ndarray:
    who = range(len(xs)) if who is None else who
    stacked = np.stack([xs[k].to(torch.float64).reshape(-1).numpy() for k in who])
    return np.array([math.fsum(col) for col in stacked.T]).reshape(tuple(xs[0].shape))


def within_bound(result, xs, who=None) -> bool:
    ref = exact_sum(xs, who)
    return bool(np.all(np.abs(result.total.numpy() - ref) <= result.error_bound + np.abs(ref) * 2.0**-53))


def wire(result) -> list[tuple]:
    return [(t.sender, t.receiver, t.step, t.kind, t.nbytes, tuple(map(len, t.blobs))) for t in result.transfers]


@pytest.fixture(scope="module")
def session():
    s = get_protocol("secagg", mode="multiprocess", threshold=2, timeout_s=3)
    yield s
    s.close()


def test_multiprocess_equals_inprocess(session):
    gen = torch.Generator().manual_seed(0)
    floats = [torch.randn(4, 250, generator=gen, dtype=torch.float64) * 100 for _ in range(3)]
    ints = [torch.randint(-(10**6), 10**6, (7,), generator=gen) for _ in range(3)]
    inproc = get_protocol("secagg", threshold=2)
    pids = None
    for xs in (floats, ints):
        mp_result, ip_result = session.aggregate(xs), inproc.aggregate(xs)
        pids = pids or session.party_pids
        assert session.party_pids == pids and len(pids) == 4  # one session, 3 clients + the server
        assert mp_result.total.shape == xs[0].shape and mp_result.total.dtype == ip_result.total.dtype
        assert wire(mp_result) == wire(ip_result)  # every message, its parties and its bytes
        assert mp_result.bytes_up == ip_result.bytes_up and mp_result.bytes_down == ip_result.bytes_down
        assert mp_result.error_bound == ip_result.error_bound
        assert within_bound(mp_result, xs) and within_bound(ip_result, xs)
        assert np.abs(mp_result.total.numpy() - ip_result.total.numpy()).max() <= 2 * mp_result.error_bound
        assert mp_result.details["survivors"] == [0, 1, 2] and mp_result.details["mode"] == "multiprocess"
        assert set(mp_result.phases) == {"protect", "aggregate", "reveal"}
    assert torch.equal(session.aggregate(ints).total, torch.stack(ints).sum(0))  # integers: exact
    # The masked vectors the server received are not the inputs.
    y = next(t for t in mp_result.received("server") if t.step == "input" and t.sender == "client0").blobs[0]
    assert np.frombuffer(y, "<u4").astype(np.int64).tolist() != (ints[0] % 2**32).tolist()
    with pytest.raises(ProtocolError, match="outside the secagg clip range") as caught:
        session.aggregate([torch.full((3,), 1234567.5, dtype=torch.float64)] * 3)
    assert "1.23457e+06" not in str(caught.value) and "1234567" not in str(caught.value)
    with pytest.raises(ProtocolError, match="reveal_to"):
        session.aggregate(floats, reveal_to="clients")
    with pytest.raises(ProtocolError, match="unknown parameter.*faults"):
        get_protocol("secagg", mode="multiprocess", faults={"ask_both": 0})
    with pytest.raises(ProtocolError, match="unknown secagg mode"):
        get_protocol("secagg", mode="threads")


def test_killed_client_process_is_a_dropout(session):
    xs = [torch.full((5,), float(k + 1), dtype=torch.float64) for k in range(3)]
    session.aggregate(xs)  # warm: the processes exist
    pids = session.party_pids
    session.kill_at = {3: [1]}  # client 1's process SIGKILLs itself before sending its masked input
    t0 = time.monotonic()
    result = session.aggregate(xs)
    assert time.monotonic() - t0 < 3 + 8  # the server's round timeout, then rounds 3-4 without client 1
    assert result.details["survivors"] == [0, 2]
    assert result.details["processes_gone"] == {"client1": "no round-3 message within 3s"}
    assert within_bound(result, xs, [0, 2])
    assert result.details["dropped"] == {"client1": 3}
    # Below the threshold: clients 0 and 2 killed from outside -> one of 3 left, t = 2.
    session.start(3)  # fresh processes (the session would restart on its own before the next sum)
    assert not set(session.party_pids) & set(pids)
    for k in (0, 2):
        os.kill(session.party_pids[k], signal.SIGKILL)
    with pytest.raises(ProtocolError) as err:
        session.aggregate(xs)
    message = str(err.value)
    assert "\n" not in message and "missing: client0, client2" in message and "process gone" in message
    assert message.startswith("secagg round 1 (advertise keys): only 1 of 3 clients remain, fewer than the "
                              "threshold t = 2")


def test_fedavg_cli_multiprocess(planetoid_root, tmp_path):
    from privfgl.cli import main

    out = tmp_path / "run.json"
    code = main(["run", "--method", "fedavg", "--dataset", "cora", "--partition", "louvain", "--clients", "3",
                 "--rounds", "2", "--protocol", "secagg", "--protocol-param", "mode=multiprocess",
                 "--data-root", str(planetoid_root), "--offline", "--no-progress", "--out", str(out)])
    assert code == 0
    record = json.loads(out.read_text())
    assert record["config"]["protocol_params"] == {"mode": "multiprocess"}
    assert 0.3 < record["metrics"]["test_acc"] <= 1.0


def test_kregular_neighbourhood_check_is_the_in_process_one():
    """Under graph=kregular a client's share holders are its neighbourhood: killing both neighbours of client 0
    leaves 4 of 6 clients (>= t = 2) but only 1 holder of client 0's self-mask seed, so the sum cannot be
    unmasked: the server stops after round 3 (Server.check_recoverable, shared with the in-process server)
    with the in-process message naming the missing holders, plus the lost processes. Killing one neighbour
    just survives."""
    params = dict(graph="kregular", degree=2, threshold=2)
    inproc = get_protocol("secagg", **params)
    nbrs, _, t = inproc.setup(6)
    assert t == 2 and nbrs[0] == {1, 4}  # public ring order of graph_seed 0
    xs = [torch.full((4,), float(k + 1), dtype=torch.float64) for k in range(6)]
    with pytest.raises(ProtocolError) as expected:
        get_protocol("secagg", dropout={3: [1, 4]}, **params).aggregate(xs)
    assert str(expected.value) == ("secagg round 3 (masked input): cannot unmask the sum: client0's self-mask seed "
                                   "has 1 share holders left (client0), fewer than the threshold t = 2; missing: "
                                   "client1, client4")
    session = get_protocol("secagg", mode="multiprocess", timeout_s=3, **params)
    try:
        session.kill_at = {3: [1]}  # one neighbour of client 0 gone: its seed keeps holders 0 and 4
        result = session.aggregate(xs)
        assert result.details["survivors"] == [0, 2, 3, 4, 5] and result.details["dropped"] == {"client1": 3}
        assert within_bound(result, xs, [0, 2, 3, 4, 5])
        session.kill_at = {3: [1, 4]}  # both neighbours gone (the session restarts after the lost party)
        with pytest.raises(ProtocolError) as err:
            session.aggregate(xs)
        message = str(err.value)
        assert "\n" not in message
        assert message == f"{expected.value} (process gone: client1, client4)"
    finally:
        session.close()
