"""Every backend: secure sum == exact sum within error_bound, views, bytes, and input errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from protocol_cases import BACKENDS

from protocols import PROTOCOLS, ProtocolError, crypten_backend, get_protocol, secure_sum
from protocols.secagg import crypto as secagg_crypto
from tests.view_checks import assert_no_input_in_blobs, input_encodings

KEYS = list(BACKENDS)
SECURE_KEYS = [k for k in KEYS if k != "plain"]
# secagg's sums are tested in test_secagg.py; its server view is held to the same rule as the others here.
SECAGG = {"secagg": {}, "secagg-64": {"bits": 64}}


def exact_sum(xs: list[torch.Tensor]) -> np.ndarray:
    """Correctly rounded float64 sum per element (math.fsum), shaped like the inputs."""
    stacked = np.stack([x.to(torch.float64).reshape(-1).numpy() for x in xs])
    sums = np.array([math.fsum(col) for col in stacked.T], dtype=np.float64)
    return sums.reshape(tuple(xs[0].shape))


def assert_within_bound(result, xs: list[torch.Tensor]) -> None:
    ref = exact_sum(xs)
    got = result.total.numpy()
    assert got.shape == ref.shape
    err = np.abs(got - ref)
    # fsum is itself rounded once: allow half an ulp of the reference on top of the bound.
    slack = np.abs(ref) * 2.0**-53
    assert np.all(err <= result.error_bound + slack), (float(err.max()), result.error_bound)


@st.composite
def client_tensors(draw, max_abs: float, max_clients: int = 20):
    """1..max_clients float64 tensors of one shape (scalars included) whose sum stays in range."""
    k = draw(st.integers(1, max_clients))
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=0, max_size=3)))
    magnitude = draw(st.one_of(st.sampled_from([0.0, 1e-9, 1e-3, 1.0, 1e3, max_abs]), st.floats(0.0, max_abs)))
    limit = magnitude / k
    elements = st.floats(-limit, limit, allow_nan=False, allow_infinity=False) if limit > 0 else st.just(0.0)
    xs = [torch.from_numpy(draw(arrays(np.float64, shape, elements=elements))) for _ in range(k)]
    if draw(st.booleans()):  # client-side pre-weighting: client k sends w_k * x_k
        weights = draw(st.lists(st.floats(0, 1), min_size=k, max_size=k))
        xs = [w * x for w, x in zip(weights, xs)]
    return xs


@pytest.mark.parametrize("key", KEYS)
@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_sum_matches_exact_within_bound(protocol_cache, key, data):
    xs = data.draw(client_tensors(BACKENDS[key][2]))
    result = protocol_cache(key).aggregate(xs)
    assert result.total.dtype == torch.float64
    assert_within_bound(result, xs)


@pytest.mark.parametrize("key", KEYS)
def test_mixed_signs_and_float32_inputs(protocol_cache, key):
    gen = torch.Generator().manual_seed(7)
    xs = [torch.randn(3, 7, generator=gen) * 10 for _ in range(6)]  # float32
    xs[2] = -xs[1]  # exact cancellation
    xs[4] = torch.zeros(3, 7)
    result = protocol_cache(key).aggregate(xs)
    assert result.total.shape == (3, 7)
    assert_within_bound(result, xs)


@pytest.mark.parametrize("key", KEYS)
def test_permutation_invariance(protocol_cache, key):
    gen = torch.Generator().manual_seed(1)
    xs = [torch.rand(50, generator=gen, dtype=torch.float64) * 2 - 1 for _ in range(5)]
    protocol = protocol_cache(key)
    a = protocol.aggregate(xs)
    b = protocol.aggregate(xs[::-1])
    assert torch.max(torch.abs(a.total - b.total)) <= a.error_bound + b.error_bound


@pytest.mark.parametrize("key", KEYS)
def test_single_client_returns_its_input(protocol_cache, key):
    x = torch.tensor([[0.25, -3.5], [2.0**-10, 7.0]], dtype=torch.float64)
    result = protocol_cache(key).aggregate([x])
    assert torch.max(torch.abs(result.total - x)) <= result.error_bound
    if key in ("plain", "crypten", "crypten-p24", "bfv-default", "bfv-sum"):
        assert torch.equal(result.total, x)  # on the fixed-point grid: exact


@pytest.mark.parametrize("key", ["plain", "crypten", "bfv-default", "bfv-sum"])
@settings(max_examples=30, deadline=None)
@given(
    xs=st.integers(1, 20).flatmap(
        lambda k: st.lists(
            arrays(np.int64, (6,), elements=st.integers(-(2**20), 2**20)), min_size=k, max_size=k
        )
    )
)
def test_integer_counts_are_exact(protocol_cache, key, xs):
    tensors = [torch.from_numpy(x) for x in xs]
    result = protocol_cache(key).aggregate(tensors)
    assert result.total.dtype == torch.int64
    assert result.error_bound == 0.0
    assert torch.equal(result.total, torch.from_numpy(np.sum(xs, axis=0)))


def test_secure_sum_entry_point_all_backends():
    xs = [torch.tensor([1.5, -2.0]), torch.tensor([0.25, 4.0])]
    for name in PROTOCOLS:
        total = secure_sum(name, xs)
        assert total.dtype == torch.float64
        assert torch.allclose(total, torch.tensor([1.75, 2.0], dtype=torch.float64), atol=1e-5)


# --- what the server observed, and the byte counts ------------------------------------------


def test_plain_view_holds_each_client_tensor(protocol_cache):
    xs = [torch.arange(6, dtype=torch.float32).reshape(2, 3) * k for k in range(1, 4)]
    result = protocol_cache("plain").aggregate(xs)
    uploads = result.received("server")
    assert [t.sender for t in uploads] == ["client0", "client1", "client2"]
    for t, x in zip(uploads, xs):
        assert t.kind == "plaintext"
        assert torch.equal(t.tensor, x)
        assert t.nbytes == x.numel() * x.element_size() == 24
    assert result.bytes_up == [24, 24, 24]
    assert result.opened_by == ("server",)


def client_grids(protocol, result) -> set[int]:
    """The fixed-point scales 2^-f a client of this sum may have encoded its input on: crypten's
    precision_bits (16 by default), the grid the backend reports (ckks, bfv, secagg: frac_bits)."""
    return {16, getattr(protocol, "precision_bits", 16), result.details.get("frac_bits", 16)}


@pytest.fixture
def view_protocol(protocol_cache):
    """Builds a secure backend by key: a BACKENDS key (cached) or a SECAGG key (closed after the test)."""
    built = []

    def get(key: str):
        if key in BACKENDS:
            return protocol_cache(key)
        built.append(get_protocol("secagg", **SECAGG[key]))
        return built[-1]

    yield get
    for protocol in built:
        protocol.close()


def four_distinct_inputs() -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    return [torch.rand(40, generator=gen, dtype=torch.float64) + 5 * k for k in range(4)]


@pytest.mark.parametrize("key", SECURE_KEYS + list(SECAGG))
def test_secure_view_holds_no_client_values(view_protocol, key):
    xs = four_distinct_inputs()
    protocol = view_protocol(key)
    result = protocol.aggregate(xs)
    assert "server" in result.opened_by
    received = result.received("server")
    assert received, "the server must have received messages"
    kinds = ("ciphertext", "share", "parameters") + (("public_key",) if key in SECAGG else ())
    for t in received:
        if t.step == "reveal" and t.kind == "aggregate":  # HE: the key holder's decrypted sum
            assert torch.equal(t.tensor, result.total.reshape(-1))
            continue
        assert t.kind in kinds and t.tensor is None
        assert t.nbytes > 0 and t.blobs and sum(map(len, t.blobs)) == t.nbytes
        assert all(isinstance(b, bytes) for b in t.blobs)
    # What the labels promise, the bytes keep: no client's input can be read from anything the server
    # received (its public HE context included), as float64, float32 or a fixed-point encoding.
    assert_no_input_in_blobs(received + [result.server_context or b""], xs, client_grids(protocol, result))
    inputs = {t.sender for t in received if t.step in ("input", "reveal") and t.kind != "aggregate"}
    assert inputs >= {"client1", "client2", "client3"}
    assert all(b > 0 for b in result.bytes_up)
    assert all(b >= 0 for b in result.bytes_down)
    assert set(result.phases) == {"protect", "aggregate", "reveal"}
    assert all(t >= 0 for t in result.phases.values())


# The check above can fail: it reads every input from a view that holds it.


def test_the_input_check_reads_every_plain_upload(protocol_cache):
    xs = four_distinct_inputs()
    received = protocol_cache("plain").aggregate(xs).received("server")
    for x in xs:
        with pytest.raises(AssertionError, match="client 0's input can be read.*float64"):
            assert_no_input_in_blobs(received, [x])


@pytest.mark.parametrize("encoding", ["float64", "float32", "float64 round(x*2^16)/2^16", "int64 round(x*2^16)",
                                      "int32 round(x*2^17)"])
def test_the_input_check_finds_each_encoding_inside_other_bytes_and_as_a_whole_blob(encoding):
    x = four_distinct_inputs()[1]
    encoded = input_encodings(x, (16, 17))[encoding].tobytes()
    noise = np.random.default_rng(0).bytes
    with pytest.raises(AssertionError, match="contiguous bytes"):  # at an odd offset inside a longer blob
        assert_no_input_in_blobs([noise(5000), noise(3) + encoded + noise(5)], [x], (16, 17))
    with pytest.raises(AssertionError, match="equals it at 100% of the positions"):  # the blob is the vector
        assert_no_input_in_blobs([encoded], [x], (16, 17), windows=0)
    assert_no_input_in_blobs([noise(len(encoded)), noise(3) + noise(len(encoded))], [x], (16, 17))


def test_the_input_check_finds_a_fixed_point_encoding_at_a_scale_it_was_not_told():
    x = four_distinct_inputs()[2]
    for width, f in ((8, 13), (4, 9), (8, 40)):
        encoded = np.rint(x.numpy() * 2.0**f).astype(f"<i{width}").tobytes()
        with pytest.raises(AssertionError, match=rf"int{8 * width} round\(x\*2\^{f}\)"):
            assert_no_input_in_blobs([encoded], [x], fixed_point_bits=())


def test_the_input_check_reads_crypten_shares_that_are_not_random(monkeypatch):
    # Every random share 0: client k's summed share, sent to the server at the reveal, is its encoding.
    monkeypatch.setattr(crypten_backend, "random_ring_elements", lambda n, rng: np.zeros(n, dtype=np.int64))
    xs = four_distinct_inputs()
    result = get_protocol("crypten").aggregate(xs)
    assert torch.allclose(result.total, sum(xs))  # the sum is still right
    with pytest.raises(AssertionError, match=r"int64 round\(x\*2\^16\)"):
        assert_no_input_in_blobs(result.received("server"), xs)


@pytest.mark.parametrize("key", list(SECAGG))
def test_the_input_check_reads_secagg_vectors_left_unmasked(view_protocol, monkeypatch, key):
    # No mask is added (nor removed): the masked vector y the server receives is the grid encoding q.
    monkeypatch.setattr(secagg_crypto, "add_prgs", lambda y, masks: y)
    xs = four_distinct_inputs()
    protocol = view_protocol(key)
    result = protocol.aggregate(xs)
    assert torch.allclose(result.total, sum(xs))  # the sum is still right
    with pytest.raises(AssertionError, match=r"int(32|64) round\(x\*2\^"):
        assert_no_input_in_blobs(result.received("server"), xs, client_grids(protocol, result))


@pytest.mark.parametrize("key", KEYS)
def test_reveal_to_clients_keeps_the_sum_from_the_server(protocol_cache, key):
    xs = [torch.tensor([1.0, 2.0]), torch.tensor([0.5, -1.0]), torch.tensor([4.0, 0.0])]
    result = protocol_cache(key).aggregate(xs, reveal_to="clients")
    assert set(result.opened_by) >= {"client0", "client1", "client2"}
    assert torch.allclose(result.total, torch.tensor([5.5, 1.0], dtype=torch.float64), atol=1e-4)
    if key == "plain":
        return  # the server holds every input anyway
    assert "server" not in result.opened_by
    assert not any(t.receiver == "server" and (t.tensor is not None or t.step == "reveal") for t in result.transfers)
    # Nor can the server read the sum, or any input, from the bytes it received.
    assert_no_input_in_blobs(result.received("server"), [*xs, result.total], client_grids(protocol_cache(key), result))


@pytest.mark.parametrize("key", KEYS)
def test_every_byte_is_booked_to_its_sender_and_receiver(protocol_cache, key):
    xs = [torch.rand(50, dtype=torch.float64) for _ in range(3)]
    result = protocol_cache(key).aggregate(xs)
    parties = {"server", "client0", "client1", "client2"}
    assert all(t.sender in parties and t.receiver in parties and t.sender != t.receiver for t in result.transfers)
    assert sum(result.bytes_up) + sum(t.nbytes for t in result.transfers if t.sender == "server") \
        == sum(t.nbytes for t in result.transfers)


@pytest.mark.parametrize("key", SECURE_KEYS)
def test_secure_upload_grows_with_size(protocol_cache, key):
    protocol = protocol_cache(key)
    small = protocol.aggregate([torch.zeros(10), torch.zeros(10)]).bytes_up[1]
    large = protocol.aggregate([torch.zeros(20000), torch.zeros(20000)]).bytes_up[1]
    assert large > small > 0


# --- errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize("key", KEYS)
def test_input_errors(protocol_cache, key):
    protocol = protocol_cache(key)
    with pytest.raises(ProtocolError, match="non-empty list"):
        protocol.aggregate([])
    with pytest.raises(ProtocolError, match=r"contributions\[2\] has shape \(3,\) but contributions\[0\] has shape \(2,\)"):
        protocol.aggregate([torch.zeros(2), torch.zeros(2), torch.zeros(3)])
    with pytest.raises(ProtocolError, match=r"a client's contribution contains NaN"):
        protocol.aggregate([torch.zeros(2), torch.tensor([0.0, float("nan")])])
    with pytest.raises(ProtocolError, match=r"a client's contribution contains NaN or Inf"):
        protocol.aggregate([torch.tensor([float("-inf"), 0.0]), torch.zeros(2)])
    with pytest.raises(ProtocolError, match="hold no values"):
        protocol.aggregate([torch.zeros(0), torch.zeros(0)])
    with pytest.raises(ProtocolError, match="dtype torch.bool"):
        protocol.aggregate([torch.zeros(2, dtype=torch.bool)])
    with pytest.raises(ProtocolError, match="mixes floating and integer"):
        protocol.aggregate([torch.zeros(2), torch.zeros(2, dtype=torch.int64)])
    with pytest.raises(ProtocolError, match=r"contributions\[1\]: expected a torch.Tensor"):
        protocol.aggregate([torch.zeros(2), [1.0, 2.0]])


@pytest.mark.parametrize("key", SECURE_KEYS)
def test_out_of_range_raises_never_wraps(protocol_cache, key):
    protocol = protocol_cache(key)
    limit = BACKENDS[key][3]
    with pytest.raises(ProtocolError, match=r"a client's contribution is outside the .* range \|x\| <= "):
        protocol.aggregate([torch.zeros(3, dtype=torch.float64), torch.tensor([0.0, 1e30, 0.0], dtype=torch.float64)])
    # Just inside the range is accepted ...
    inside = torch.full((3,), limit * 0.99, dtype=torch.float64)
    assert_within_bound(protocol.aggregate([inside]), [inside])
    # ... and each value in range with the sum just outside it (by 2 %) raises too.
    part = torch.full((3,), limit * 0.51, dtype=torch.float64)
    with pytest.raises(ProtocolError, match=r"their sum is outside the .* range \|sum\| <= "):
        protocol.aggregate([part, part])


def printed(value: float) -> set[str]:
    """The ways a message could print `value` (f-string formats and repr)."""
    return {f"{value:{spec}}" for spec in ("", "g", ".6g", ".4g", ".3g", ".2g", ".3e", ".2f")} | {repr(value)}


@pytest.mark.parametrize("key", [*SECURE_KEYS, *SECAGG])
def test_a_range_error_names_the_range_but_no_clients_value(protocol_cache, key):
    """A range error reaches logs, and under secagg's mode=multiprocess the server (the client process
    sends it there): it names the input and the valid range, never a client's max |x|, the sum's, nor
    which client (issue #40)."""
    protocol = protocol_cache(key) if key in BACKENDS else get_protocol("secagg", **SECAGG[key])
    secret = 7.6543219e29  # one client's max |x|, outside every backend's range
    xs = [torch.zeros(3, dtype=torch.float64), torch.tensor([0.0, -secret, 1.0], dtype=torch.float64)]
    with pytest.raises(ProtocolError) as caught:
        protocol.aggregate(xs)
    message = str(caught.value)
    assert "range" in message and "|x| <= " in message
    assert not {p for p in printed(secret) if p in message}, message
    assert "contributions[1]" not in message and "client1" not in message
    if key in BACKENDS:  # each input in range, their sum out of it: the sum's size is not printed either
        limit = BACKENDS[key][3]
        part = torch.tensor([limit * 0.6125, 0.0], dtype=torch.float64)
        with pytest.raises(ProtocolError) as caught:
            protocol.aggregate([part, part])
        message = str(caught.value)
        assert "|sum| <= " in message and not {p for p in printed(limit * 1.225) if p in message}, message


def test_plain_integer_overflow_raises(protocol_cache):
    x = torch.tensor([2**62, 1], dtype=torch.int64)
    with pytest.raises(ProtocolError, match="overflows int64"):
        protocol_cache("plain").aggregate([x, x])


def test_plain_float_overflow_raises_never_returns_inf(protocol_cache):
    big = torch.tensor([1e308, 1.0], dtype=torch.float64)
    with pytest.raises(ProtocolError, match="float64 sum overflows"):
        protocol_cache("plain").aggregate([big, big])


@pytest.mark.parametrize("key", ["plain", "crypten", "bfv-sum"])
def test_unsigned_values_beyond_int64_raise_never_wrap(protocol_cache, key):
    x = torch.tensor([2**63, 1], dtype=torch.uint64)
    with pytest.raises(ProtocolError, match=r"values >= 2\^63"):
        protocol_cache(key).aggregate([x, x])


def test_unknown_backend_and_bad_params():
    with pytest.raises(ProtocolError, match="unknown backend 'paillier'; valid: plain, crypten, ckks, bfv"):
        get_protocol("paillier")
    with pytest.raises(ProtocolError, match="unknown backend"):
        secure_sum("nope", [torch.zeros(1)])
    with pytest.raises(ProtocolError, match=r"unknown parameter\(s\) precision; valid: mode, precision_bits, seed"):
        get_protocol("crypten", precision=16)
    with pytest.raises(ProtocolError, match="precision_bits: expected an int in 0..48"):
        get_protocol("crypten", precision_bits=60)
    with pytest.raises(ProtocolError, match="precision_bits"):
        get_protocol("crypten", precision_bits="16")
    with pytest.raises(ProtocolError, match="mode: unknown crypten mode 'threads'"):
        get_protocol("crypten", mode="threads")
    with pytest.raises(ProtocolError, match="timeout_s"):
        get_protocol("crypten", mode="multiprocess", timeout_s=0)
    with pytest.raises(ProtocolError, match="preset: unknown ckks preset 'fast'; valid: default, sum"):
        get_protocol("ckks", preset="fast")
    with pytest.raises(ProtocolError, match="preset: unknown bfv preset"):
        get_protocol("bfv", preset="tiny")
    with pytest.raises(ProtocolError, match="frac_bits: expected an int in 0..30"):
        get_protocol("bfv", frac_bits=31)
    with pytest.raises(ProtocolError, match=r"plain: unknown parameter\(s\) preset; valid: none"):
        get_protocol("plain", preset="sum")
