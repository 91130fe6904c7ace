"""ckks / bfv: the server holds no secret key, presets are 128-bit, chunking, bytes and bounds."""

from __future__ import annotations

import pytest
import tenseal.sealapi as sa
import torch

from protocols import ProtocolError, get_protocol
from protocols.tenseal_backend import BFV_PLAIN_MODULUS, BFV_PRESETS, CKKS_PRESETS

HE_KEYS = ["ckks-default", "ckks-sum", "bfv-default", "bfv-sum"]
MAX_COEFF_BITS_128 = {2048: 54, 4096: 109, 8192: 218, 16384: 438}  # HE standard, classical 128-bit


@pytest.mark.parametrize("key", HE_KEYS)
def test_server_holds_no_secret_key(protocol_cache, key):
    protocol = protocol_cache(key)
    xs = [torch.linspace(-1, 1, 300, dtype=torch.float64) * k for k in range(1, 4)]
    result = protocol.aggregate(xs)
    # The server's objects: a context from the parameter bytes and an evaluator; no key material.
    server_objects = list(vars(protocol.server).values())
    forbidden = (sa.SecretKey, sa.Decryptor, sa.KeyGenerator, sa.Encryptor, sa.PublicKey)
    assert not any(isinstance(obj, forbidden) for obj in server_objects)
    # Nothing the server received contains the secret key's serialization ...
    secret = protocol._serializer.dump(protocol._secret_key)
    assert len(secret) > 1000
    received = protocol.server_setup_bytes
    assert secret not in received and secret[200:264] not in received
    assert len(received) < 200  # parameters only
    # ... and a decryptor needs a secret key valid for these parameters, which the server lacks.
    with pytest.raises((ValueError, RuntimeError)):
        sa.Decryptor(protocol.server.context, sa.SecretKey())
    # The key holder's key does decrypt (so the checks above are about the server, not a broken key).
    assert torch.max(torch.abs(result.total - sum(xs))) <= result.error_bound + 1e-12


@pytest.mark.parametrize("presets", [CKKS_PRESETS, BFV_PRESETS])
def test_presets_are_128_bit(presets):
    for preset in presets.values():
        n = preset.poly_modulus_degree
        assert sum(preset.coeff_mod_bit_sizes) <= MAX_COEFF_BITS_128[n]
        parms = sa.EncryptionParameters(sa.SCHEME_TYPE.BFV if preset.plain_modulus else sa.SCHEME_TYPE.CKKS)
        parms.set_poly_modulus_degree(n)
        parms.set_coeff_modulus(sa.CoeffModulus.Create(n, list(preset.coeff_mod_bit_sizes)))
        if preset.plain_modulus:
            parms.set_plain_modulus(preset.plain_modulus)
        assert sa.SEALContext(parms, True, sa.SEC_LEVEL_TYPE.TC128).parameters_set()


def test_bfv_plain_modulus_supports_batching():
    t = BFV_PLAIN_MODULUS
    assert t < 2**40 and t % 16384 == 1
    assert all(pow(a, t - 1, t) == 1 for a in (2, 3, 5, 7, 11, 13))  # Fermat: prime (as SEAL checks)


@pytest.mark.parametrize("key", HE_KEYS)
def test_long_vectors_are_chunked_densely(protocol_cache, key):
    protocol = protocol_cache(key)
    n = 3 * protocol.slots + 5
    xs = [torch.sin(torch.arange(n, dtype=torch.float64) * (k + 1)) for k in range(3)]
    result = protocol.aggregate(xs)
    uploads = [t for t in result.received("server") if t.step == "input"]
    assert [len(t.blobs) for t in uploads] == [4, 4, 4]
    assert torch.max(torch.abs(result.total - (xs[0] + xs[1] + xs[2]))) <= result.error_bound


def test_bfv_sum_meets_the_byte_and_error_target(protocol_cache):
    protocol = protocol_cache("bfv-sum")
    n = 10 * protocol.slots
    gen = torch.Generator().manual_seed(11)
    xs = [torch.rand(n, generator=gen, dtype=torch.float64) * 2 - 1 for _ in range(10)]
    result = protocol.aggregate(xs)
    per_value = (result.bytes_up[1]) / n
    assert per_value <= 16, per_value
    assert result.error_bound <= 1e-6
    assert float(torch.max(torch.abs(result.total - sum(xs)))) <= 1e-6


@pytest.mark.parametrize(("key", "low", "high"), [("ckks-default", 79, 83), ("ckks-sum", 15.5, 16.5), ("bfv-default", 51, 55), ("bfv-sum", 7.9, 8.2)])
def test_bytes_per_value_match_the_documented_table(protocol_cache, key, low, high):
    protocol = protocol_cache(key)
    n = 4 * protocol.slots
    per_value = protocol.aggregate([torch.zeros(n), torch.ones(n)]).bytes_up[1] / n
    assert low <= per_value <= high


def test_bfv_client_limit_from_noise(protocol_cache):
    protocol = get_protocol("bfv", preset="sum")
    # q0 ~ 2^60, t ~ 2^40: q/(2t) ~ 2^19 over at most 21.5 noise per client.
    assert 20_000 < protocol.max_clients < 25_000
    assert protocol_cache("bfv-default").max_clients > 10**9
    protocol.max_clients = 3
    with pytest.raises(ProtocolError, match="4 clients exceed bfv sum's noise limit of 3"):
        protocol.aggregate([torch.zeros(2)] * 4)


def test_bfv_frac_bits_sets_the_quantisation():
    coarse = get_protocol("bfv", preset="sum", frac_bits=8)
    result = coarse.aggregate([torch.tensor([0.001, 0.5]), torch.tensor([0.001, 0.25])])
    assert result.error_bound == 2 * 2.0**-9
    assert torch.equal(result.total, torch.tensor([0.0, 0.75], dtype=torch.float64))
    assert coarse.aggregate([torch.tensor([1000.0])]).total.item() == 1000.0  # range grows as f shrinks


def test_ckks_error_bound_holds_at_the_range_edge(protocol_cache):
    for key, limit in (("ckks-default", 2.0**20), ("ckks-sum", 2.0**16)):
        k = 20
        gen = torch.Generator().manual_seed(5)
        xs = [(torch.rand(257, generator=gen, dtype=torch.float64) * 2 - 1) * limit / k for _ in range(k)]
        result = protocol_cache(key).aggregate(xs)
        err = float(torch.max(torch.abs(result.total - sum(xs))))
        assert err <= result.error_bound


@pytest.mark.parametrize("preset, grid_bits_at_10", [("default", 20), ("sum", 23)])
def test_ckks_decryption_bound_is_the_documented_closed_form(preset, grid_bits_at_10):
    # K·(B_fresh + N/2)/scale + 2^-45·(K + 1)·max_abs with the CKKS paper's fresh-noise bound (σ = 3.2):
    # 8√2·σN + 6σ√N + 16σ√(hN), h = 2N/3, under public-key encryption, 6σ√N under symmetric. A smaller bound
    # would let the key holder round onto a grid finer than the noise allows; the grid at K = 10 is the
    # docs' (secure-aggregation.md: f = 20 default, 23 sum).
    protocol = get_protocol("ckks", preset=preset)
    p, sigma = CKKS_PRESETS[preset], 3.2
    n = p.poly_modulus_degree
    fresh = 6 * sigma * n**0.5 if p.symmetric else \
        8 * 2**0.5 * sigma * n + 6 * sigma * n**0.5 + 16 * sigma * (2 * n / 3 * n) ** 0.5
    for k in (1, 10, 100):
        expected = k * (fresh + n / 2) / 2.0**p.scale_bits + 2.0**-45 * (k + 1) * p.max_abs
        assert protocol.decryption_bound(k) == pytest.approx(expected, rel=1e-12)
    assert protocol.grid_bits(10) == grid_bits_at_10


def test_bfv_a_sum_that_rounding_pushes_out_of_range_raises_never_wraps():
    # Each value and the float sum are inside |x| <= max_plain/2^f; rounded onto the grid they sum to more
    # than max_plain (K values of a + 0.6 grid steps round to a + 1), which would wrap modulo t.
    protocol = get_protocol("bfv", preset="sum")
    top, f = protocol.max_plain, protocol.frac_bits
    k = next(k for k in range(2, 50) if top % k >= 0.6 * k)
    a = top // k
    x = torch.tensor([(a + 0.6) / 2.0**f], dtype=torch.float64)
    assert k * (a + 0.6) <= top < k * (a + 1)
    with pytest.raises(ProtocolError, match="the quantised sum leaves the bfv sum"):
        protocol.aggregate([x] * k)
