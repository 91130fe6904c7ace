"""CrypTen's randomness (issue #40): torch's CPU generator keeps 32 seed bits, so every CrypTen draw
(PRZS masks, Beaver triples, local and global elements) comes from a ChaCha20 stream under a 256-bit
os.urandom key instead. The keys have full width and are independent, neighbouring parties' PRZS
streams agree, no torch generator is ever drawn from, and the results are those of before."""
from __future__ import annotations

import os
from collections import Counter

import numpy as np
import pytest
import torch
from scipy import stats

from protocols import crypten_compat as cc
from protocols import ProtocolError, get_protocol
from protocols.crypten_backend import DEALER, secure_compute
from protocols.keystream import ChaChaStream

RING = (-(2**63), 2**63 - 1)


def torch_ring(seed: int, n: int = 8) -> torch.Tensor:
    return torch.randint(*RING, (n,), generator=torch.Generator().manual_seed(seed), dtype=torch.long)


def test_torch_ignores_a_seeds_high_bits_but_keys_differing_only_in_high_bits_give_different_streams():
    # CrypTen's bug: its 64-bit seeds, through torch's manual_seed, give the streams of their low 32 bits.
    assert torch.equal(torch_ring(12345), torch_ring(12345 + (7 << 32)))
    low = os.urandom(4)
    a, b = low + bytes(28), low + bytes(27) + b"\x80"  # equal below bit 248
    assert not np.array_equal(ChaChaStream(a).ring_numpy(8), ChaChaStream(b).ring_numpy(8))
    assert np.array_equal(ChaChaStream(a).ring_numpy(8), ChaChaStream(a).ring_numpy(8))  # a key is its stream


def run_keys(num_parties: int = 4, dealer: str = "party") -> list[dict[str, bytes]]:
    results, _, _ = cc.run_parties(num_parties, lambda party: cc.party_generator_keys(), dealer=dealer)
    return results


def full_width(key: bytes) -> bool:
    """32 bytes, about half of the 256 bits set (6 standard deviations), no 4-byte word repeated: what a
    key padded from, or repeating, a short seed fails."""
    words = [key[i:i + 4] for i in range(0, 32, 4)]
    return len(key) == 32 and 80 <= sum(bin(byte).count("1") for byte in key) <= 176 and len(set(words)) == 8


def test_every_party_holds_fresh_full_width_keys_and_prev_next_pairs_agree():
    runs = [run_keys(), run_keys()]
    keys = []
    for parties in runs:
        n = len(parties)
        for rank, own in enumerate(parties):
            assert own["prev"] == parties[(rank - 1) % n]["next"]  # the PRZS pair with the previous party
            assert own["global"] == parties[0]["global"]
        keys += [own[name] for own in parties for name in ("next", "local", "dealer")] + [parties[0]["global"]]
    assert all(full_width(k) for k in keys)
    assert len(set(keys)) == len(keys)  # nothing repeats across parties, generators or runs


def test_two_parties_streams_are_uniform_and_independent():
    parties = run_keys()
    a, b = (ChaChaStream(parties[r]["local"]).ring_numpy(1 << 14) for r in (0, 1))
    assert stats.chisquare(np.bincount(a.view(np.uint8), minlength=256)).pvalue > 1e-4
    low_a, low_b = a & 15, b & 15

    def joint_p(x, y):  # chi-square of the 16 x 16 joint table of two streams' low nibbles
        table = np.bincount(16 * x + y, minlength=256).reshape(16, 16)
        return stats.chi2_contingency(table).pvalue

    assert joint_p(low_a, low_b) > 1e-4
    assert joint_p(low_a, (low_a + (b & 1)) & 15) < 1e-6  # the same test catches a dependent stream


def test_przs_zero_sharings_sum_to_zero_and_a_shared_value_to_its_encoding():
    value = torch.tensor([1.5, -2.25, 1e6], dtype=torch.float64)

    def program(party):
        zero = party.share(torch.zeros(3) if party.rank == 0 else None, src=0, shape=(3,))
        shared = party.share(value if party.rank == 2 else None, src=2, shape=(3,))
        return zero._tensor.share, shared._tensor.share

    results, _, _ = cc.run_parties(4, program)
    assert torch.equal(sum(r[0] for r in results), torch.zeros(3, dtype=torch.long))
    assert torch.equal(sum(r[1] for r in results), cc.encode(value, 16))
    assert all(not torch.equal(r[0], torch.zeros(3, dtype=torch.long)) for r in results)  # each share masked


def spy_on_torch_generators(monkeypatch) -> Counter:
    """Counts torch.randint / torch.rand calls that pass a torch.Generator."""
    drawn: Counter = Counter()
    for name in ("randint", "rand"):
        original = getattr(torch, name)

        def spy(*args, _original=original, _name=name, **kwargs):
            if isinstance(kwargs.get("generator"), torch.Generator):
                drawn[_name] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(torch, name, spy)
    return drawn


def mixed(total):
    return {"square": total * total, "positive": total > 0, "inverse": (total * total + 1).reciprocal()}


@pytest.mark.parametrize("dealer", ["party", "client0"])
def test_crypten_never_draws_from_a_torch_generator(monkeypatch, dealer):
    assert cc.torch_rng_bindings() == []
    drawn = spy_on_torch_generators(monkeypatch)
    values = [torch.randn(6, dtype=torch.float64) for _ in range(3)]
    secure_compute(values, mixed, {"square": "server", "positive": "server", "inverse": "clients"}, dealer=dealer)
    get_protocol("crypten").aggregate(values)
    assert not drawn
    secure_compute(values, mixed, {"square": "server", "positive": "server", "inverse": "clients"},
                   rng="torch-32bit-unsafe", dealer=dealer)
    assert drawn["randint"] > 0  # the spy sees CrypTen's own generators when they are used
    with pytest.raises(cc.RngError, match="Generator"):
        cc.random_ring_element((2,), generator=torch.Generator())


@pytest.mark.parametrize("dealer", ["party", "client0"])
@pytest.mark.parametrize("clients", [1, 3])
def test_results_stay_within_the_fixed_point_error(dealer, clients):
    gen = torch.Generator().manual_seed(clients)
    values = [torch.rand(20, generator=gen, dtype=torch.float64) * 2 - 1 for _ in range(clients)]  # s*s + 1 in [1, 10]
    s = sum(values)
    out = secure_compute(values, mixed, {"square": "clients", "positive": "server", "inverse": "server"},
                         dealer=dealer).outputs
    assert (out["square"] - s * s).abs().max() < 1e-3
    assert torch.equal(out["positive"], (s > 0).double())
    assert (out["inverse"] - 1 / (s * s + 1)).abs().max() < 1e-3


def test_the_dealer_party_receives_only_requests_and_deals_to_every_party():
    values = [torch.randn(6, dtype=torch.float64) for _ in range(3)]
    result = secure_compute(values, mixed, {"square": "server", "positive": "server", "inverse": "clients"})
    to_dealer = [t for t in result.transfers if t.receiver == DEALER]
    from_dealer = {t.receiver for t in result.transfers if t.sender == DEALER}
    assert {t.sender for t in to_dealer} == {"client0"}  # rank 0's requests; no share reaches the dealer
    assert all(b.startswith(b"\x80") for t in to_dealer for b in t.blobs)  # pickled (name, sizes), not ring bytes
    assert from_dealer == {"client0", "client1", "client2", "server"}
    assert result.details["dealer"] == "party" and get_protocol("crypten").dealer == "party"


def first_product_masks(dealer: str):
    """One s*s among 3 clients; what client 0 holds itself: its local and dealer streams' keys; and the
    first opening (ε‖δ) it receives."""
    values = [torch.randn(5, dtype=torch.float64) for _ in range(3)]

    def program(party):
        keys = cc.party_generator_keys()
        x = sum(party.share(values[k] if party.rank == k else None, src=k, shape=(5,)) for k in range(3))
        party.step = "compute"
        party.reveal(x * x, 3)
        return keys

    results, log, _ = cc.run_parties(4, program, dealer=dealer)
    shares = [np.frombuffer(next(p for step, s, r, p in log if step == "compute" and s == k and r == (1 if k == 0 else 0)),
                            dtype="<i8") for k in range(4)]
    opened = sum(s.astype(np.int64) for s in shares)
    return sum(values).numpy(), results[0], opened


@pytest.mark.parametrize("dealer", ["party", "client0"])
def test_client0_reads_the_multiplied_value_only_when_it_deals(dealer):
    s, keys, opened = first_product_masks(dealer)
    scale = 2.0**16
    guesses = [opened + ChaChaStream(keys[name]).ring_numpy(opened.size) for name in ("local", "dealer") if name in keys]
    read = [g[:5] / scale for g in guesses if np.abs(g).max() < 2**40]
    if dealer == "client0":
        assert len(read) == 1 and np.abs(read[0] - s).max() < 1e-4  # ε + a: client 0's own mask a
    else:
        assert read == []  # its local stream and its share of the dealer's masks remove nothing


@pytest.mark.parametrize("bitlength", [1, 12, 63])
def test_k_bit_draws_fill_exactly_k_bits(bitlength):
    draws = ChaChaStream.fresh().bits((1 << 12,), bitlength).numpy()
    assert draws.min() >= 0 and draws.max() < 2**bitlength
    top = (draws >> (bitlength - 1)) & 1  # the highest of the k bits: set half the time
    assert abs(top.mean() - 0.5) < 5 * 0.5 / np.sqrt(draws.size)


@pytest.mark.parametrize("params, message", [
    ({"rng": "bogus"}, "rng: expected one of chacha20, torch-32bit-unsafe, got 'bogus'"),
    ({"unsafe_seed_window": 5}, "unsafe_seed_window: only with rng=torch-32bit-unsafe"),
    ({"rng": "torch-32bit-unsafe", "unsafe_seed_window": 0}, "unsafe_seed_window: expected an int in 1..2^32"),
    ({"dealer": "server"}, "dealer: expected one of party, client0, got 'server'"),
])
def test_bad_rng_or_dealer_settings_are_refused_in_one_line(params, message):
    with pytest.raises(ProtocolError) as error:
        get_protocol("crypten", **params)
    assert str(error.value).startswith(message) and "\n" not in str(error.value)
