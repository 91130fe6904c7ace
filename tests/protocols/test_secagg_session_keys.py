"""`secagg keys=session`: each client keeps its share-encryption (c) key pair across the sums of a
session, while the mask (s) key pairs and every seed stay fresh per sum. Its sums equal the survivors'
exact sums within the grid's bound, like per-sum keys, in process, in workers (with the offline phase)
and in party processes; the c public keys a server sees repeat across sums only in session mode; and
a sealed share the server replays from an earlier sum is rejected in both modes. The replay tests
also attack the claim that the binding to the sum's s public keys is what stops it: without that
binding a session-mode client opens the replayed share, and a server that replays all of a client's
shares and calls it late unmasks that client's earlier input exactly from its own view; with the
binding the holders reject the replay; per-sum keys reject it anyway."""

from __future__ import annotations

import struct

import numpy as np
import pytest
import torch
from hypothesis import given, settings

from attacks.protocols.secagg_collusion import unmask_input
from protocols import ProtocolError, get_protocol
from protocols.secagg import client as secagg_client
from protocols.secagg import crypto, shamir
from protocols.secagg.crypto import PUBLIC_KEY_BYTES
from protocols.secagg.quantize import make_grid
from protocols.secagg.server import Server
from test_secagg import assert_within_bound, cases, expected_outcome


def advertised(result) -> dict[int, tuple[bytes, bytes]]:
    """client -> (c public key, s public key) as the server received them in round 1."""
    out = {}
    for t in result.transfers:
        if t.step == "setup" and t.sender.startswith("client"):
            blob = t.blobs[0]
            out[int(t.sender[len("client"):])] = (blob[:PUBLIC_KEY_BYTES], blob[PUBLIC_KEY_BYTES:])
    return out


@settings(max_examples=25, deadline=None)
@given(case=cases())
def test_session_sums_of_survivors_within_bound_or_the_same_clear_error(case):
    xs, params = case
    protocol = get_protocol("secagg", keys="session", **params)
    survivors, _ = expected_outcome(protocol, len(xs), params["dropout"])
    for _ in range(2):  # the second sum reuses the c key pairs (and the share keys) of the first
        if survivors is None:
            with pytest.raises(ProtocolError, match="fewer than the threshold"):
                protocol.aggregate(xs)
            continue
        result = protocol.aggregate(xs)
        assert result.details["survivors"] == survivors and result.details["keys"] == "session"
        assert_within_bound(result, xs, survivors)


@pytest.mark.parametrize("params", [{}, {"workers": 2}, {"workers": 2, "offline": True}],
                         ids=["inprocess", "workers", "offline"])
def test_c_keys_repeat_across_sums_only_in_session_mode(params):
    xs = [torch.full((50,), float(k)) for k in range(5)]
    for keys in ("per-sum", "session"):
        protocol = get_protocol("secagg", keys=keys, **params)
        try:
            if params:
                protocol.start_workers()
            runs = [protocol.aggregate(xs) for _ in range(3)]
        finally:
            protocol.close()
        for r in runs:
            assert_within_bound(r, xs)
        seen = [advertised(r) for r in runs]
        c_keys = [{u: c for u, (c, _) in s.items()} for s in seen]
        s_keys = [{u: s_pk for u, (_, s_pk) in s.items()} for s in seen]
        for u in range(5):
            assert len({s[u] for s in s_keys}) == 3  # mask keys: fresh every sum, in both modes
            assert len({c[u] for c in c_keys}) == (1 if keys == "session" else 3)
        if params.get("offline"):
            assert runs[-1].details["offline"] == "prepared"


def test_close_ends_the_session():
    xs = [torch.ones(4)] * 4
    protocol = get_protocol("secagg", keys="session")
    before = advertised(protocol.aggregate(xs))
    protocol.close()
    after = advertised(protocol.aggregate(xs))
    assert all(before[u][0] != after[u][0] for u in range(4))


@pytest.mark.parametrize("keys", ["per-sum", "session"])
def test_a_share_replayed_from_the_previous_sum_is_rejected(keys):
    xs = [torch.full((3,), float(k)) for k in range(6)]
    protocol = get_protocol("secagg", keys=keys, faults={"replay_share": [1, 3]})
    assert_within_bound(protocol.aggregate(xs), xs)  # nothing to replay in the first sum
    with pytest.raises(ProtocolError, match="client3 rejects the encrypted share from client1 .*replayed from "
                                            "another sum"):
        protocol.aggregate(xs)


def test_without_the_sum_binding_a_session_client_opens_the_replayed_share(monkeypatch):
    monkeypatch.setattr(secagg_client, "share_context", lambda sender, receiver: b"")
    xs = [torch.full((3,), float(k)) for k in range(6)]
    session = get_protocol("secagg", keys="session", faults={"replay_share": [1, 3]})
    session.aggregate(xs)
    # Client 3 accepts client 1's old shares as this sum's: its share of client 1's self-mask seed is the old
    # seed's, which the server's reconstruction then outvotes (t = 5 of 6) and names.
    result = session.aggregate(xs)
    assert result.details["faulty_shares"] == {"client1": {"self-mask seed": ["client3"]}}
    # Per-sum keys: the old share was sealed under a c key pair that no longer exists; it does not open.
    per_sum = get_protocol("secagg", faults={"replay_share": [1, 3]})
    per_sum.aggregate(xs)
    with pytest.raises(ProtocolError, match="client3 rejects the encrypted share from client1"):
        per_sum.aggregate(xs)


def unmask_earlier_input(first, u: int, s_shares: list, t: int) -> np.ndarray | None:
    """The replay attack's last step, from the server's view alone: rebuild client u's pairwise-key seed from
    s_shares (the round-4 answers of a later sum), check it against u's s public key of the sum ``first``,
    and unmask u's masked vector of that sum with its self-mask seed (whose shares that sum's round 4 gave
    the server by design). Returns u's upload on the grid, or None when the shares are not that seed's."""
    keys = advertised(first)
    seed = shamir.combine(s_shares[:t], t)
    if crypto.keypair_from_seed(seed)[1] != keys[u][1]:
        return None
    answer = struct.Struct("<BIH")
    b_shares = [(x, blob[answer.size:]) for tr in first.transfers if tr.step == "reveal" and tr.kind == "share"
                for blob in tr.blobs for kind, owner, x in [answer.unpack(blob[:answer.size])] if kind == 0 and owner == u]
    masked = next(tr.blobs[0] for tr in first.transfers if tr.step == "input" and tr.sender == f"client{u}")
    d = first.details
    grid = make_grid(d["bits"], d["clip_range"], d["frac_bits"], first.num_clients, False)
    return unmask_input(masked, u, seed, {v: s_pk for v, (_, s_pk) in keys.items() if v != u},
                        shamir.combine(b_shares[:t], t), grid)


@pytest.mark.parametrize("binding", [True, False], ids=["bound", "unbound"])
def test_replay_attack_unmasks_an_earlier_input_only_without_the_sum_binding(monkeypatch, binding):
    """The server replays every holder's sealed share of client 1 from sum 1 in sum 2 and calls client 1 late,
    so that round 4 asks for client 1's pairwise-key seed; it keeps the answers (a malicious server does not
    need its own check to pass). Unbound, those answers are sum 1's seed and unmask client 1's sum-1 input."""
    if not binding:
        monkeypatch.setattr(secagg_client, "share_context", lambda sender, receiver: b"")
    answers = []
    real_unmask = Server.unmask
    monkeypatch.setattr(Server, "unmask", lambda self, total, got: answers.append(got) or real_unmask(self, total, got))
    gen = torch.Generator().manual_seed(0)
    first_inputs = [torch.randn(40, generator=gen, dtype=torch.float64) for _ in range(6)]
    protocol = get_protocol("secagg", keys="session", faults={"replay_share": [1, "all"]})
    first = protocol.aggregate(first_inputs)
    protocol.faults["late"] = [1]
    with pytest.raises(ProtocolError) as refused:  # either the holders reject the replay, or the check fails
        protocol.aggregate([x + 1 for x in first_inputs])
    if binding:
        assert "rejects the encrypted share from client1" in str(refused.value) and len(answers) == 1
        return
    assert "client1's pairwise-key seed" in str(refused.value)
    s_shares = [got["s"][1] for got in answers[-1].values() if 1 in got["s"]]
    recovered = unmask_earlier_input(first, 1, s_shares, first.details["threshold"])
    assert recovered is not None
    assert np.abs(recovered - first_inputs[1].numpy()).max() <= 2.0 ** -(first.details["frac_bits"] + 1)


def test_bad_keys_value_is_one_clear_line():
    with pytest.raises(ProtocolError, match=r"^keys: expected one of per-sum, session \(the lifetime of the "
                                            r"share-encryption key pairs\), got 'forever'$"):
        get_protocol("secagg", keys="forever")


def test_party_processes_keep_their_c_keys_for_the_session():
    xs = [torch.full((20,), float(k)) for k in range(3)]
    session = get_protocol("secagg", mode="multiprocess", threshold=2, timeout_s=5, keys="session")
    try:
        runs = [session.aggregate(xs) for _ in range(2)]
    finally:
        session.close()
    for r in runs:
        assert_within_bound(r, xs)
        assert r.details["keys"] == "session" and r.details["mode"] == "multiprocess"
    first, second = (advertised(r) for r in runs)
    assert all(first[u][0] == second[u][0] and first[u][1] != second[u][1] for u in range(3))
