"""`secagg`: the revealed sum equals the survivors' exact sum within the grid's bound, for every
graph, threshold and dropout set; the failures (out of range, below threshold, tampered or
inconsistent shares, a server asking for both seeds) are clear errors; the server's view holds
no input; t - 1 colluders learn nothing of a seed, t recover it and unmask one client's input."""

from __future__ import annotations

import json
import math
import struct

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from attacks.protocols.secagg_collusion import unmask_input
from protocols import PROTOCOLS, ProtocolError, get_protocol, secure_sum
from protocols.secagg import crypto, shamir
from protocols.secagg.graph import default_degree, default_threshold, neighbours
from protocols.secagg.quantize import Grid


def exact_sum(xs, who=None) -> np.ndarray:
    who = range(len(xs)) if who is None else who
    stacked = np.stack([xs[k].to(torch.float64).reshape(-1).numpy() for k in who])
    return np.array([math.fsum(col) for col in stacked.T]).reshape(tuple(xs[0].shape))


def assert_within_bound(result, xs, who=None) -> None:
    ref = exact_sum(xs, who)
    err = np.abs(result.total.numpy() - ref)
    assert np.all(err <= result.error_bound + np.abs(ref) * 2.0**-53), (float(err.max()), result.error_bound)


def masked_input(result, sender: str) -> bytes:
    """The masked vector ``sender`` uploaded, as the server received it."""
    return next(t for t in result.received("server") if t.sender == sender and t.step == "input").blobs[0]


def seed_shares(result, seed: str, owner: int) -> list[tuple[int, bytes]]:
    """The round-4 shares of ``owner``'s self-mask seed (seed="b") or pairwise-key seed ("s") that the
    server received: [(Shamir index, share)] (each answer: kind byte 0 = b / 1 = s, owner, index, share)."""
    kind_wanted = {"b": 0, "s": 1}[seed]
    return [(x, b[7:]) for t in result.received("server") if t.step == "reveal" for b in t.blobs
            for kind, who, x in [struct.unpack("<BIH", b[:7])] if kind == kind_wanted and who == owner]


def assert_top_byte_uniform(y: np.ndarray) -> None:
    """The top byte of a uint32 vector is uniform: chi-square over 256 bins, 255 dof, p ~ 1e-6 cut-off."""
    counts = np.bincount((y >> 24).astype(np.int64), minlength=256)
    expected = y.size / 256
    assert ((counts - expected) ** 2 / expected).sum() < 370


def expected_outcome(protocol, num_clients: int, dropout: dict[int, set[int]]):
    """(survivors U3, None) when the sum must succeed, else (None, the error's 'missing' clients)."""
    nbrs, holders, t = protocol.setup(num_clients)
    drop_at = {}
    for r in sorted(dropout, reverse=True):
        for k in dropout[r]:
            drop_at[k] = r
    alive = {r: {k for k in range(num_clients) if drop_at.get(k, 5) > r} for r in (1, 2, 3, 4)}
    owners = sorted(alive[3]) + sorted(alive[2] - alive[3])  # the survivors' b, then the dropped clients' s
    for r in (1, 2, 3, 4):
        if len(alive[r]) < t:
            return None, set(range(num_clients)) - alive[r]
        if r == 3:  # Server.check_recoverable: every seed to rebuild keeps t holders among the survivors
            for u in owners:
                if len(set(holders[u]) & alive[3]) < t:
                    return None, set(holders[u]) - alive[3] - {u}
    # Round 4: t holders must answer for every seed.
    for u in owners:
        answering = set(holders[u]) & alive[4]
        if len(answering) < t:
            return None, set(holders[u]) - answering - ({u} if u not in alive[3] else set())
    return sorted(alive[3]), None


# --- sums --------------------------------------------------------------------------------------


@st.composite
def cases(draw):
    k = draw(st.integers(1, 12))
    graph = draw(st.sampled_from(["complete", "kregular"]))
    degree = draw(st.integers(2, max(2, k - 1))) if graph == "kregular" else None
    m = len(neighbours(graph, k, degree, 0)[0]) + 1
    threshold = draw(st.one_of(st.none(), st.integers(1, m)))
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=0, max_size=3)))
    magnitude = draw(st.sampled_from([0.0, 1e-6, 1.0, 1e3, 4096.0]))
    elements = st.floats(-magnitude, magnitude, allow_nan=False) if magnitude else st.just(0.0)
    xs = [torch.from_numpy(draw(arrays(np.float64, shape, elements=elements))) for _ in range(k)]
    dropout = {}
    for r in (1, 2, 3, 4):
        who = draw(st.sets(st.integers(0, k - 1), max_size=max(0, k // 3)))
        if who:
            dropout[r] = who
    bits = draw(st.sampled_from([32, 64]))
    return xs, dict(graph=graph, degree=degree, threshold=threshold, dropout=dropout, bits=bits)


@settings(max_examples=60, deadline=None)
@given(case=cases())
def test_sum_of_survivors_within_bound_or_clear_error(case):
    xs, params = case
    protocol = get_protocol("secagg", **params)
    survivors, missing = expected_outcome(protocol, len(xs), params["dropout"])
    if survivors is None:
        with pytest.raises(ProtocolError, match="fewer than the threshold") as err:
            protocol.aggregate(xs)
        assert "missing: " + ", ".join(f"client{k}" for k in sorted(missing)) in str(err.value)
        return
    result = protocol.aggregate(xs)
    assert result.details["survivors"] == survivors
    assert result.total.dtype == torch.float64 and result.total.shape == xs[0].shape
    assert result.error_bound == len(survivors) * 2.0 ** -(result.details["frac_bits"] + 1)
    assert_within_bound(result, xs, survivors)


@settings(max_examples=15, deadline=None)
@given(xs=st.integers(1, 12).flatmap(lambda k: st.lists(
    arrays(np.int64, (5,), elements=st.integers(-(2**27), 2**27)), min_size=k, max_size=k)),
    bits=st.sampled_from([32, 64]))
def test_integer_counts_are_exact(xs, bits):
    result = get_protocol("secagg", bits=bits).aggregate([torch.from_numpy(x) for x in xs])
    assert result.total.dtype == torch.int64 and result.error_bound == 0.0
    assert torch.equal(result.total, torch.from_numpy(np.sum(xs, axis=0)))


def test_grid_bound_is_k_half_steps_and_holds():
    gen = torch.Generator().manual_seed(0)
    xs = [(torch.rand(5000, generator=gen, dtype=torch.float64) * 2 - 1) * 4000 for _ in range(10)]
    result = get_protocol("secagg").aggregate(xs)
    # bits 32, clip_range 4096, K = 10: the finest f with 10 * (4096 * 2^f + 1) <= 2^31 - 1 is 15.
    assert result.details["frac_bits"] == 15 and result.error_bound == 10 * 2.0**-16
    assert_within_bound(result, xs)
    assert float(np.abs(result.total.numpy() - exact_sum(xs)).max()) > result.error_bound / 20  # the bound is tight-ish


def test_entry_points_and_registry():
    assert "secagg" in PROTOCOLS
    total = secure_sum("secagg", [torch.tensor([1.5, -2.0]), torch.tensor([0.25, 4.0])])
    assert torch.allclose(total, torch.tensor([1.75, 2.0], dtype=torch.float64), atol=1e-4)


# --- range: never wraps ----------------------------------------------------------------------


def test_out_of_range_raises_never_wraps():
    p = get_protocol("secagg", clip_range=10.0)
    with pytest.raises(ProtocolError, match=r"a client's contribution is outside the secagg clip range") as caught:
        p.aggregate([torch.zeros(3), torch.tensor([0.0, 10.5, 0.0])])
    assert "10.5" not in str(caught.value)  # the range (10), not the client's value
    edge = torch.full((3,), 10.0, dtype=torch.float64)  # the range's edge, K times: no wrap
    assert_within_bound(p.aggregate([edge] * 7), [edge] * 7)
    assert_within_bound(p.aggregate([-edge] * 7), [-edge] * 7)
    with pytest.raises(ProtocolError, match="frac_bits: 40 is too fine for 10 clients"):
        get_protocol("secagg", frac_bits=40).aggregate([torch.zeros(2)] * 10)
    with pytest.raises(ProtocolError, match="do not fit a 32-bit ring"):
        get_protocol("secagg", clip_range=2.0**30).aggregate([torch.zeros(2)] * 4)
    big = torch.tensor([2**31 // 3], dtype=torch.int64)
    with pytest.raises(ProtocolError, match="outside the secagg integer range"):
        get_protocol("secagg").aggregate([big, big, big, big])
    edge = torch.tensor([2**62], dtype=torch.int64)  # (2^63 - 1) // 2 + 1: one past the range for K = 2
    with pytest.raises(ProtocolError, match="outside the secagg integer range"):
        get_protocol("secagg", bits=64).aggregate([edge, edge])
    assert get_protocol("secagg", bits=64).aggregate([edge - 1, edge - 1]).total.item() == 2**63 - 2
    lowest = torch.tensor([-(2**63)], dtype=torch.int64)  # |int64 min| must not overflow the range check
    with pytest.raises(ProtocolError, match="outside the secagg integer range"):
        get_protocol("secagg", bits=64).aggregate([lowest, lowest])
    with pytest.raises(ProtocolError, match="NaN"):
        get_protocol("secagg").aggregate([torch.tensor([float("nan")])])


def test_bad_parameters():
    for params, message in [({"bits": 16}, "bits: expected one of 32, 64"), ({"clip_range": -1}, "clip_range"),
                            ({"graph": "ring"}, "graph: unknown graph 'ring'"), ({"threshold": 0}, "threshold"),
                            ({"dropout": {5: [0]}}, "round keys must be 1, 2, 3 or 4"),
                            ({"faults": {"crash": 1}}, "faults"), ({"frac_bits": 99}, "frac_bits")]:
        with pytest.raises(ProtocolError, match=message):
            get_protocol("secagg", **params)
    with pytest.raises(ProtocolError, match="threshold: t = 9 exceeds the 5 share holders"):
        get_protocol("secagg", graph="kregular", degree=4, threshold=9).aggregate([torch.zeros(2)] * 10)
    with pytest.raises(ProtocolError, match="reveal_to: secagg opens the sum to the server"):
        get_protocol("secagg").aggregate([torch.zeros(2)] * 3, reveal_to="clients")
    # The CLI passes JSON: string round keys are accepted.
    p = get_protocol("secagg", dropout=json.loads('{"3": [1]}'))
    assert p.aggregate([torch.ones(2)] * 4).details["survivors"] == [0, 2, 3]


@pytest.mark.parametrize("faults, message", [
    ({"late": 3}, "faults: late expects a list of client indices, got 3"),
    ({"ask_both": [1]}, r"faults: ask_both expects one client index, got \[1\]"),
    ({"tamper_share": [0, 0]}, "tamper_share expects \\[owner, holder\\], two client indices"),
    ({"tamper_share": ["a", "b"]}, "tamper_share expects"),
    ({"replay_share": [1, "some"]}, "replay_share expects"),
])
def test_a_fault_of_the_wrong_shape_is_refused_when_the_protocol_is_made(faults, message):
    # before: a TypeError in the middle of a sum, or no fault at all
    with pytest.raises(ProtocolError, match=message):
        get_protocol("secagg", faults=faults)


@pytest.mark.parametrize("params, message", [
    ({"faults": {"tamper_share": [0, 9]}}, "faults: tamper_share: client index 9 is out of range for 4 clients; valid: 0..3"),
    ({"faults": {"bad_share": [7, 0]}}, "faults: bad_share: client index 7 is out of range for 4 clients"),
    ({"faults": {"late": [9]}}, "faults: late: client index 9 is out of range for 4 clients"),
    ({"faults": {"ask_both": 4}}, "faults: ask_both: client index 4 is out of range for 4 clients"),
    ({"faults": {"tamper_share": [0, 3]}, "graph": "kregular", "degree": 2}, "faults: tamper_share: client 3 holds no share of client 0"),
])
def test_a_fault_that_could_not_happen_in_the_sum_is_refused_rather_than_skipped(params, message):
    # before: the sum ran as if no fault had been asked for, with the same bytes and result
    with pytest.raises(ProtocolError, match=message):
        get_protocol("secagg", graph_seed=0, **params).aggregate([torch.ones(3)] * 4)


# --- dropout ---------------------------------------------------------------------------------


@pytest.mark.parametrize("graph", ["complete", "kregular"])
@pytest.mark.parametrize("round_", [1, 2, 3, 4])
def test_three_of_ten_drop_at_each_round(graph, round_):
    gen = torch.Generator().manual_seed(round_)
    xs = [torch.randn(300, generator=gen, dtype=torch.float64) * 50 for _ in range(10)]
    # kregular, degree 8: 9 share holders per client, of which 3 may drop with t = 6.
    params = {"graph": graph, "degree": 8, "threshold": 6} if graph == "kregular" else {"graph": graph}
    result = get_protocol("secagg", dropout={round_: [2, 5, 7]}, **params).aggregate(xs)
    # Dropping at round 4 (unmasking) comes after the masked input arrived: those inputs are in the sum.
    survivors = list(range(10)) if round_ == 4 else [0, 1, 3, 4, 6, 8, 9]
    assert result.details["survivors"] == survivors
    assert result.details["threshold"] == (7 if graph == "complete" else 6)
    assert_within_bound(result, xs, survivors)


@pytest.mark.parametrize("round_", [1, 2, 3, 4])
def test_n_minus_t_plus_one_dropped_is_a_clear_error(round_):
    xs = [torch.ones(4)] * 10  # t = 7: 4 dropped leave 6
    with pytest.raises(ProtocolError, match=rf"secagg round {round_} \(.*\): only 6 of 10 clients remain, fewer than "
                                            r"the threshold t = 7; missing: client1, client3, client4, client8"):
        get_protocol("secagg", dropout={round_: [1, 3, 4, 8]}).aggregate(xs)


def test_dropout_rate_is_reported_and_summed_over_survivors():
    p = get_protocol("secagg", dropout_rate=0.2, dropout_seed=1, threshold=3)
    xs = [torch.full((5,), float(k)) for k in range(10)]
    seen = set()
    for _ in range(5):
        result = p.aggregate(xs)
        seen.add(len(result.details["dropped"]))
        assert_within_bound(result, xs, result.details["survivors"])
    assert max(seen) > 0


# --- faults ----------------------------------------------------------------------------------


def test_tampered_share_is_detected_by_its_receiver():
    with pytest.raises(ProtocolError,
                       match="client4 rejects the encrypted share from client2 .*modified, re-addressed or replayed"):
        get_protocol("secagg", faults={"tamper_share": [2, 4]}).aggregate([torch.ones(3)] * 6)


def test_inconsistent_share_is_detected_and_outvoted_or_reported():
    xs = [torch.full((3,), float(k)) for k in range(6)]
    # Client 3 sends client 0 garbage shares (validly encrypted); t = 5 of 6 holders. Six shares of client 3's
    # self-mask seed arrive: the first five fail the commitment check, another five pass; client 0 is named.
    result = get_protocol("secagg", faults={"bad_share": [3, 0]}).aggregate(xs)
    assert result.details["faulty_shares"] == {"client3": {"self-mask seed": ["client0"]}}
    assert_within_bound(result, xs)
    # Exactly t shares (client 5 drops at unmasking): nothing to outvote, a clear error.
    with pytest.raises(ProtocolError, match="inconsistent Shamir shares: no 5 of the shares of client3's self-mask "
                                            "seed from client0, client1, client2, client3, client4 rebuild a seed "
                                            "that matches its commitment"):
        get_protocol("secagg", faults={"bad_share": [3, 0]}, dropout={4: [5]}).aggregate(xs)
    # A garbage share of a dropped client's pairwise-key seed fails the public-key check.
    with pytest.raises(ProtocolError, match="client3's pairwise-key seed .* matches its advertised public key"):
        get_protocol("secagg", faults={"bad_share": [3, 0]}, dropout={3: [3]}).aggregate(xs)
    assert get_protocol("secagg").aggregate(xs).details["faulty_shares"] == {}


def test_honest_clients_refuse_to_reveal_both_seeds_of_one_client():
    with pytest.raises(ProtocolError, match="refuses to unmask: the server asked for both the pairwise-key seed share "
                                            "and the self-mask seed share of client2"):
        get_protocol("secagg", faults={"ask_both": 2}).aggregate([torch.ones(3)] * 6)


def test_late_client_is_left_out_and_stays_masked():
    gen = torch.Generator().manual_seed(5)
    xs = [torch.rand(4000, generator=gen, dtype=torch.float64) for _ in range(6)]
    p = get_protocol("secagg", faults={"late": [1]})
    result = p.aggregate(xs)
    assert result.details["survivors"] == [0, 2, 3, 4, 5]
    assert_within_bound(result, xs, [0, 2, 3, 4, 5])
    # The server holds client 1's late masked input and reconstructed its pairwise seed, but not its
    # self-mask seed: removing every pairwise mask still leaves a uniform-looking vector.
    y = np.frombuffer(masked_input(result, "client1"), dtype="<u4")
    server = p.last_run["server"]
    seed = shamir.combine(seed_shares(result, "s", 1), server.threshold)
    s_private, s_public = crypto.keypair_from_seed(seed)
    assert s_public == server.keys[1][32:]
    z = y.copy()
    for v in server.neighbours[1]:
        shared = crypto.agree(s_private, server.keys[v][32:])
        mask = crypto.expand(crypto.pair_key(shared, b"pair-mask", 1, v), z.size, z.dtype)
        z = z - mask if 1 < v else z + mask
    q = p.last_run["grid"].encode(xs[1])
    assert not np.array_equal(z, q) and abs(np.corrcoef(z.astype(np.float64), xs[1].numpy())[0, 1]) < 0.1


# --- the server's view -------------------------------------------------------------------------


def test_server_view_is_ciphertexts_keys_and_masked_vectors():
    xs = [torch.full((20000,), 3.25, dtype=torch.float64) + k for k in range(5)]
    p = get_protocol("secagg")
    result = p.aggregate(xs)
    received = result.received("server")
    assert {(t.step, t.kind) for t in received} == {("setup", "public_key"), ("share", "ciphertext"),
                                                    ("input", "ciphertext"), ("reveal", "share")}
    for t in received:
        assert t.tensor is None and t.blobs and sum(map(len, t.blobs)) == t.nbytes
    grid = p.last_run["grid"]
    for k, x in enumerate(xs):
        q = grid.encode(x)
        y = np.frombuffer(next(t for t in received if t.sender == f"client{k}" and t.step == "input").blobs[0], "<u4")
        assert not np.array_equal(y, q) and q.tobytes()[:64] not in b"".join(b for t in received for b in t.blobs)
        assert_top_byte_uniform(y)  # a constant input, masked
    # Keys are fresh per sum (OS randomness), not seeded: the same inputs under the same seeds mask differently.
    torch.manual_seed(0)
    np.random.seed(0)
    a = p.aggregate(xs).received("server")
    torch.manual_seed(0)
    np.random.seed(0)
    b = p.aggregate(xs).received("server")
    assert all(ta.blobs != tb.blobs for ta, tb in zip(a, b) if ta.step in ("setup", "input"))


def test_masked_vector_is_uncorrelated_with_its_input():
    gen = torch.Generator().manual_seed(2)
    xs = [torch.linspace(-4000, 4000, 30000, dtype=torch.float64)]
    xs += [torch.randn(30000, generator=gen) for _ in range(3)]
    result = get_protocol("secagg").aggregate(xs)
    y = np.frombuffer(masked_input(result, "client0"), "<u4")
    assert abs(np.corrcoef(y.astype(np.float64), xs[0].numpy())[0, 1]) < 0.05  # |r| ~ 0.006 expected


@pytest.mark.parametrize("params", [{}, {"graph": "kregular", "degree": 2}, {"workers": 2},
                                    {"workers": 2, "offline": True}],
                         ids=["complete", "kregular", "workers", "workers-offline"])
def test_the_server_alone_rebuilds_every_self_mask_and_still_sees_only_pairwise_masked_inputs(params):
    # By design the server rebuilds every survivor's self-mask seed b_u from the round-4 shares it receives.
    # What then hides y_u is the pairwise masks alone: with them removed from its view's y_u, the server
    # must still hold a uniform vector (top byte, chi-square at p ~ 1e-6) unrelated to the input (a ramp
    # for client 0, a constant for the others), in process and in the worker processes alike.
    n, K = 30000, 6
    xs = [torch.linspace(-4000, 4000, n, dtype=torch.float64)] + [torch.full((n,), 3.25 + k, dtype=torch.float64)
                                                                  for k in range(1, K)]
    p = get_protocol("secagg", **params)
    try:
        if "workers" in params:
            p.start_workers()  # wait for them: both sums run in the worker processes
        p.aggregate(xs)  # the offline pool prepares on the first sum and masks from it on the second
        result = p.aggregate(xs)
    finally:
        p.close()
    d = result.details
    assert d["workers"] == params.get("workers", 1) and d["offline"] == ("prepared" if "offline" in params else None)
    grid = Grid(d["bits"], d["frac_bits"], d["clip_range"], K, False)
    if p.last_run is not None:  # in process; workers keep the clients' state (and the grid) to themselves
        assert p.last_run["grid"] == grid
    t = d["threshold"]
    for u, x in enumerate(xs):
        b_shares = seed_shares(result, "b", u)
        assert len(b_shares) >= t  # the server holds u's self-mask seed ...
        y = np.frombuffer(masked_input(result, f"client{u}"), "<u4").copy()
        y -= crypto.expand(crypto.self_mask_key(shamir.combine(b_shares, t)), y.size, y.dtype)
        q = grid.encode(x)
        assert np.mean(y == q) < 0.01  # ... and what is left is not the input
        assert_top_byte_uniform(y)
        if u == 0:
            assert abs(np.corrcoef(y.astype(np.float64), x.numpy())[0, 1]) < 0.05


def test_what_the_server_rebuilds_is_a_fresh_self_mask_seed_and_never_a_pairwise_key_seed():
    # The server rebuilds each survivor's self-mask seed b_u (round 4). Tried as u's pairwise-key seed too, it
    # must neither give u's advertised s public key nor strip u's pairwise masks; and b_u must be fresh per
    # client and per sum (a b_u the server could guess would unmask a late client, whose b it never gets).
    K, n = 5, 3000
    gen = torch.Generator().manual_seed(4)
    xs = [torch.rand(n, generator=gen, dtype=torch.float64) * 10 for _ in range(K)]
    p = get_protocol("secagg")
    rebuilt = []
    for _ in range(2):
        result = p.aggregate(xs)
        server, grid = p.last_run["server"], p.last_run["grid"]
        for u in range(K):
            b = shamir.combine(seed_shares(result, "b", u), server.threshold)
            rebuilt.append(b)
            assert len(b) == 16 and crypto.keypair_from_seed(b)[1] != server.keys[u][32:]
            peers = {v: server.keys[v][32:] for v in server.neighbours[u]}
            as_if_pairwise = unmask_input(masked_input(result, f"client{u}"), u, b, peers, b, grid)
            assert np.mean(np.abs(as_if_pairwise - xs[u].numpy()) < 1e-3) < 0.01
    assert len(set(rebuilt)) == 2 * K


@pytest.mark.parametrize("request_, message", [
    (dict(survivors=[0, 2, 3, 4], dropped=[1], num_survivors=4), "lists it as dropped"),  # client 1 asked
    (dict(survivors=[0, 1, 2], dropped=[3, 4], num_survivors=3), "lists 3 survivors, fewer than the threshold"),
], ids=["listed-as-dropped", "below-threshold"])
def test_an_honest_client_refuses_an_unmasking_request_that_could_unmask_an_input(request_, message):
    # The server asks client 1 (round 4) after an honest sum of 5 clients (t = 4): naming client 1 itself as
    # dropped would have it reveal its own pairwise-key seed share although its masked input is in; fewer
    # survivors than t would let the server pick who counts as dropped.
    p = get_protocol("secagg")
    p.aggregate([torch.ones(10, dtype=torch.float64)] * 5)
    client1 = p.last_run["clients"][1]
    assert client1.threshold == 4
    with pytest.raises(ProtocolError, match=f"client1 refuses to unmask: the server {message}"):
        client1.unmask(**request_)
    assert set(client1.unmask([0, 1, 2, 3, 4], [], 5)["b"]) == {0, 1, 2, 3, 4}  # the honest request


def _s_shares_held(p, owner: int, holders: list[int]) -> list[tuple[int, bytes]]:
    """What a coalition of clients learned in round 2: their decrypted shares of owner's pairwise-key seed."""
    clients = p.last_run["clients"]
    return [(clients[v].shares_held[owner][0], clients[v].shares_held[owner][1]) for v in holders]


@pytest.mark.parametrize("graph,keys", [("complete", "per-sum"), ("kregular", "per-sum"), ("complete", "session")])
def test_coalition_of_t_minus_1_learns_nothing_t_unmask_one_input(graph, keys):
    gen = torch.Generator().manual_seed(9)
    xs = [torch.rand(3000, generator=gen, dtype=torch.float64) * 100 for _ in range(9)]
    p = get_protocol("secagg", graph=graph, degree=4, keys=keys)
    for _ in range(2 if keys == "session" else 1):  # session: the second sum, under the first sum's c keys
        result = p.aggregate(xs)
    target, server = 4, p.last_run["server"]
    t = server.threshold
    holders = [v for v in server.holders[target] if v != target]
    advertised_s_pk = next(t_ for t_ in result.received("server") if t_.sender == f"client{target}"
                           and t_.step == "setup").blobs[0][32:]
    # t - 1 colluding holders: the combination is not the seed (and Shamir says it is independent of it).
    wrong = shamir.combine(_s_shares_held(p, target, holders[:t - 1]), t - 1)
    assert wrong != p.last_run["clients"][target].s_seed
    assert crypto.keypair_from_seed(wrong)[1] != advertised_s_pk
    # t colluding holders recover the seed ...
    seed = shamir.combine(_s_shares_held(p, target, holders[:t]), t)
    assert seed == p.last_run["clients"][target].s_seed
    assert crypto.keypair_from_seed(seed)[1] == advertised_s_pk
    # ... and with the server's view (the survivors' self-mask shares it got in round 4, the public keys,
    # the masked input) they unmask the target's input exactly, on the grid.
    b_shares = seed_shares(result, "b", target)
    masked = next(t_ for t_ in result.received("server") if t_.sender == f"client{target}" and t_.step == "input")
    recovered = unmask_input(masked.blobs[0], target, seed, {v: server.keys[v][32:] for v in server.neighbours[target]},
                             shamir.combine(b_shares, t), p.last_run["grid"])
    assert np.abs(recovered - xs[target].numpy()).max() <= 2.0 ** -(p.last_run["grid"].frac_bits + 1)


# --- graph and bytes ---------------------------------------------------------------------------


def test_kregular_graph_is_regular_symmetric_and_defaults():
    for n, k in [(10, 4), (11, 4), (12, 5), (100, 14), (7, 6)]:
        nb = neighbours("kregular", n, k, 3)
        assert all(len(s) == min(k, n - 1) for s in nb)
        assert all(u in nb[v] for u in range(n) for v in nb[u])
    assert default_degree(100) == 14 and default_degree(1000) == 20 and default_degree(5) == 4
    assert default_threshold(10) == 7 and default_threshold(1) == 1 and default_threshold(15) == 11


def test_shamir_split_combine_and_threshold():
    """MPyC's Shamir over GF(2^130 - 5): any t of m shares give each seed back, one independent polynomial
    per seed; t - 1 shares do not; a 128-bit seed always fits the field; shares are fresh per split."""
    from mpyc import gmpy

    assert gmpy.is_prime(shamir.P) and shamir.P > 2**128 and shamir.SHARE_BYTES == 17
    seeds = [crypto.fresh_seed(), crypto.fresh_seed()]
    holders = (2, 5, 7, 8, 11, 13, 20)
    for t in (1, 3, 7):
        shares = shamir.split(seeds, t, holders)
        assert [shares[v][0] for v in holders] == list(range(1, len(holders) + 1))
        for which in (0, 1):
            points = [(x, ys[which]) for x, ys in shares.values()]
            assert all(len(y) == shamir.SHARE_BYTES for _, y in points)
            assert shamir.combine(points[::-1], t) == seeds[which]  # the t lowest indices, in any order
            assert shamir.combine(points[-t:], t) == seeds[which]
            if t > 1:
                assert shamir.combine(points[:t - 1], t - 1) != seeds[which]
        assert (shares != shamir.split(seeds, t, holders)) == (t > 1)  # fresh coefficients (t = 1: the seed)
    with pytest.raises(ValueError):
        shamir.combine([(1, bytes(17))], 2)
    # Garbage that interpolates past 128 bits is no seed (17 bytes: no commitment or key check passes).
    assert len(shamir.combine([(1, (2**129).to_bytes(17, "big"))], 1)) == 17


@pytest.mark.parametrize("dtype", [np.uint32, np.uint64])
def test_add_prg_is_expand_in_place(dtype):
    key = crypto.hkdf(crypto.fresh_seed(), b"test", crypto.PRG_KEY_BYTES)
    y = np.arange(1000, dtype=dtype)
    want = y + crypto.expand(key, y.size, dtype)
    assert crypto.add_prg(y, key) is y and np.array_equal(y, want)
    crypto.add_prg(y, key, subtract=True)
    assert np.array_equal(y, np.arange(1000, dtype=dtype))
    big = np.zeros(5000, dtype=dtype)  # the per-thread buffer grows and is reused
    assert np.array_equal(crypto.add_prg(big, key), crypto.expand(key, 5000, dtype))
    other = crypto.hkdf(crypto.fresh_seed(), b"test", crypto.PRG_KEY_BYTES)
    y = np.arange(1000, dtype=dtype)
    crypto.add_prgs(y, [(key, False), (other, True)])  # several masks, in order
    assert np.array_equal(y, np.arange(1000, dtype=dtype) + crypto.expand(key, 1000, dtype)
                          - crypto.expand(other, 1000, dtype))


def test_the_prg_is_aes_128_ctr_with_16_byte_keys():
    """The mask PRG is AES-128-CTR (16-byte keys from HKDF; AES-256 until #18): the keystream of a zero
    IV, read little-endian; a 32-byte key is refused rather than silently running AES-256."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    seed = crypto.fresh_seed()
    key = crypto.self_mask_key(seed)
    assert len(key) == crypto.PRG_KEY_BYTES == 16
    stream = Cipher(algorithms.AES128(key), modes.CTR(bytes(16))).encryptor().update(bytes(64))
    assert np.array_equal(crypto.expand(key, 16, np.uint32), np.frombuffer(stream, "<u4"))
    shared = crypto.agree(crypto.new_keypair()[0], crypto.new_keypair()[1])
    assert len(crypto.pair_key(shared, b"pair-mask", 3, 1)) == 16
    assert crypto.pair_key(shared, b"pair-mask", 3, 1) == crypto.pair_key(shared, b"pair-mask", 1, 3)
    assert len(crypto.pair_key(shared, b"share-encryption", 1, 3)) == 32  # ChaCha20-Poly1305
    for wrong in (bytes(32), bytes(24)):
        with pytest.raises(ValueError, match="AES-128-CTR"):
            crypto.expand(wrong, 4, np.uint32)
        with pytest.raises(ValueError, match="AES-128-CTR"):
            crypto.add_prg(np.zeros(4, np.uint32), wrong)


def test_upload_per_value_and_sparse_graph_bytes():
    n = 92000
    xs = [torch.zeros(n, dtype=torch.float64)] * 10
    result = get_protocol("secagg").aggregate(xs)
    assert max(result.bytes_up) / n <= 4.02  # 4 B masked value + keys and shares
    # Everything but the masked vector grows with the degree under kregular, with K under complete.
    small = [torch.zeros(10, dtype=torch.float64)] * 40
    over = {}
    for graph in ("complete", "kregular"):
        r = get_protocol("secagg", graph=graph, degree=6).aggregate(small)
        over[graph] = max(r.bytes_up) - 40
    assert over["kregular"] < over["complete"] / 4


def test_every_byte_is_booked():
    result = get_protocol("secagg", dropout={3: [1]}).aggregate([torch.ones(7)] * 5)
    parties = {"server"} | {f"client{k}" for k in range(5)}
    assert all(t.sender in parties and t.receiver in parties and t.sender != t.receiver for t in result.transfers)
    assert sum(result.bytes_up) + sum(t.nbytes for t in result.transfers if t.sender == "server") \
        == sum(t.nbytes for t in result.transfers)
    assert set(result.phases) == {"protect", "aggregate", "reveal"}


def test_a_federation_that_keeps_no_payloads_gets_the_same_sum_and_bytes_without_the_masked_vectors():
    """Under a transcript that keeps "none", secagg does not copy its masked vectors into the transfers
    (nobody keeps them); the sum and every transfer's size are those of a run that keeps them."""
    from privfgl.federation import Federation, Transcript

    uploads = [{"w": torch.full((3, 5), float(k))} for k in range(4)]
    runs = {}
    for keep in ("all", "none"):
        fed = Federation(4, get_protocol("secagg"), Transcript(keep))
        runs[keep] = (fed.aggregate(0, "model_update", uploads), fed.cost())
        inputs = [t for t in fed.protocol.aggregate([torch.ones(15)] * 4).transfers if t.step == "input"]
        assert [t.nbytes for t in inputs] == [60] * 4
        assert all(bool(t.blobs) == (keep == "all") for t in inputs)
    assert torch.equal(runs["all"][0]["w"], runs["none"][0]["w"])
    assert runs["all"][1] == runs["none"][1]


# --- the run ---------------------------------------------------------------------------------


def test_federation_fedavg_weights_become_the_survivors_weights():
    """FedAvg's pre-weighted uploads (n_k * w_k and n_k in one message): with client 1 dropped at the
    masked-input round the revealed sums give the survivors' weighted mean, with no method change."""
    from privfgl.federation import Federation, Transcript

    fed = Federation(4, get_protocol("secagg", dropout={3: [1]}, threshold=3), Transcript("all"))
    w = [torch.full((2, 3), float(k + 1)) for k in range(4)]
    n = [10.0, 20.0, 30.0, 40.0]
    uploads = [{"w": w[k] * n[k], "n": torch.tensor(n[k])} for k in range(4)]
    sums = fed.aggregate(0, "model_update", uploads)
    survivors = [0, 2, 3]
    expected = sum(w[k] * n[k] for k in survivors) / sum(n[k] for k in survivors)
    assert torch.allclose(sums["w"] / sums["n"], expected.double(), atol=1e-3)
    view = fed.transcript.view("server")
    assert {m.name for m in view} == {"model_update", "model_update:setup", "model_update:share", "model_update:reveal",
                                      "model_update:sum"}
    assert all(m.tensors is None for m in view if m.name != "model_update:sum")
    assert fed.cost()["bytes_up_per_client"][1] < fed.cost()["bytes_up_per_client"][0]  # client 1 sent no masked input



def test_fedavg_cli_matches_plain(planetoid_root, tmp_path):
    from privfgl.cli import main

    acc = {}
    for protocol in ("plain", "secagg"):
        out = tmp_path / f"{protocol}.json"
        code = main(["run", "--method", "fedavg", "--dataset", "cora", "--partition", "louvain", "--clients", "10",
                     "--rounds", "3", "--protocol", protocol, "--data-root", str(planetoid_root), "--offline",
                     "--no-progress", "--out", str(out)])
        assert code == 0
        acc[protocol] = json.loads(out.read_text())["metrics"]["test_acc"]
    assert abs(acc["secagg"] - acc["plain"]) <= 0.005


def test_secagg_collusion_audit_on_a_run(cora):
    """The audit on a FedAvg run's last sum: t - 1 colluding holders learn nothing, t unmask the target."""
    from attacks.audit import run_attacks
    from attacks.protocols.secagg_collusion import SecAggCollusion
    from privfgl.experiment import RunConfig, run

    cfg = RunConfig(method="fedavg", dataset="cora", partition="louvain", clients=5, rounds=2, seed=0,
                    protocol="secagg", progress=False)
    _, setup = run(cfg, data=cora)
    below = run_attacks(setup, cfg, [SecAggCollusion(colluders="t-1")])
    at = run_attacks(setup, cfg, [SecAggCollusion(colluders="t")])
    assert [f.target for f in below] == [f"client{k}" for k in range(5)]
    for f in below:
        assert f.metrics["seed_recovered"] is False and f.metrics["recovered"] is False
        assert f.metrics["colluders"] == f.metrics["threshold"] - 1 == 3
    for f in at:
        assert f.metrics["seed_recovered"] and f.metrics["recovered"], f.metrics
        assert f.metrics["max_abs_error"] <= 2.0**-16 and f.baseline["recovered"] is False
