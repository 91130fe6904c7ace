"""ckks and bfv with the parties apart (protocols/he_parties.py, what `--engine ray` runs): the key holder's
encoding, each client's encryptor and the server's addition reveal the sum the in-process protocol reveals,
bit for bit, within the documented bound of the plain sum; out-of-range inputs and what cannot run apart
are refused in one line."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import protocols
from protocols import he_parties
from protocols.base import ProtocolError
from protocols.tenseal_backend import _Server


@pytest.fixture(scope="module")
def key_holders():
    return {"ckks": protocols.get_protocol("ckks"), "bfv": protocols.get_protocol("bfv")}


def apart(protocol, inputs: list[np.ndarray], integer: bool) -> np.ndarray:
    """The sum as the parties apart compute it: encoding from the key holder, each client encodes and
    encrypts its own input, the server (parameters only) adds, the key holder decrypts and finishes."""
    enc = he_parties.encoding(protocol, len(inputs), integer)
    encryptor = enc.encryptor()
    uploads = [encryptor.encrypt(he_parties.encode_input(enc, x)) for x in inputs]
    sums = _Server(enc.parameters).add(uploads)
    return he_parties.finish(protocol, enc, sums, inputs[0].size)


@settings(max_examples=12, deadline=None)
@given(scheme=st.sampled_from(["ckks", "bfv"]), k=st.integers(1, 4), n=st.integers(1, 40),
       seed=st.integers(0, 2**31 - 1), scale=st.sampled_from([1e-3, 1.0, 300.0]))
def test_apart_the_parties_reveal_the_in_process_sum(key_holders, scheme, k, n, seed, scale):
    rng = np.random.default_rng(seed)
    inputs = [rng.normal(0, scale, n) for _ in range(k)]
    protocol = key_holders[scheme]
    total = apart(protocol, inputs, integer=False)
    in_process = protocol.aggregate([torch.from_numpy(x) for x in inputs])
    assert np.array_equal(total, in_process.total.numpy())  # the same grid, the same exact sum of it
    assert np.abs(total - np.sum(inputs, axis=0)).max() <= he_parties.encoding(protocol, k, False).error_bound


@settings(max_examples=6, deadline=None)
@given(k=st.integers(1, 4), n=st.integers(1, 40), seed=st.integers(0, 2**31 - 1))
def test_bfv_counts_apart_are_exact(key_holders, k, n, seed):
    rng = np.random.default_rng(seed)
    counts = [rng.integers(-1000, 1000, n) for _ in range(k)]
    total = apart(key_holders["bfv"], counts, integer=True)
    assert total.dtype == np.int64 and np.array_equal(total, np.sum(counts, axis=0))


def test_each_client_checks_its_input_against_the_range_over_k(key_holders):
    enc = he_parties.encoding(key_holders["ckks"], 4, False)
    assert enc.limit == key_holders["ckks"].max_abs / 4
    with pytest.raises(ProtocolError, match=r"outside the ckks range \|x\| <= .* / 4 clients"):
        he_parties.encode_input(enc, np.array([enc.limit * 1.01]))
    with pytest.raises(ProtocolError, match="NaN or Inf"):
        he_parties.encode_input(enc, np.array([np.nan]))


def test_what_cannot_run_apart_is_refused(key_holders):
    with pytest.raises(ProtocolError, match="symmetric"):
        he_parties.encoding(protocols.get_protocol("ckks", preset="sum"), 3, False)
    with pytest.raises(ProtocolError, match="raw-unsafe"):
        he_parties.encoding(protocols.get_protocol("ckks", reveal="raw-unsafe"), 3, False)
    with pytest.raises(ProtocolError, match="noise limit"):
        he_parties.encoding(key_holders["bfv"], key_holders["bfv"].max_clients + 1, False)
