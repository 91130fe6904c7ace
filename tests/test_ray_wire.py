"""--engine ray's wire format (privfgl/federation/ray/wire.py): named tensors round-trip through the bytes
that cross, and the bytes are exactly the payload the channel books."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from privfgl.federation.messages import payload_nbytes
from privfgl.federation.ray.wire import decode_tensors, encode_tensors

DTYPES = [torch.float32, torch.float64, torch.int64]


@settings(max_examples=40, deadline=None)
@given(fields=st.dictionaries(st.text("abcdefg.", min_size=1, max_size=8),
                              st.tuples(st.lists(st.integers(0, 5), max_size=3), st.sampled_from(DTYPES)),
                              min_size=1, max_size=5),
       seed=st.integers(0, 2**31 - 1))
def test_tensors_round_trip_and_their_bytes_are_the_booked_payload(fields, seed):
    g = torch.Generator().manual_seed(seed)
    tensors = {name: (torch.randn(shape, generator=g) * 100).to(dtype) for name, (shape, dtype) in fields.items()}
    header, data = encode_tensors(tensors)
    assert len(data) == payload_nbytes(tensors)
    back = decode_tensors(header, data)
    assert set(back) == set(tensors)
    for name, t in tensors.items():
        assert back[name].dtype == t.dtype and torch.equal(back[name], t)


def test_a_message_whose_bytes_do_not_match_its_header_is_refused():
    header, data = encode_tensors({"w": torch.ones(3)})
    with pytest.raises(ValueError, match="holds 12 bytes of tensors"):
        decode_tensors(header, data + b"\0")
    assert np.frombuffer(data, "<f4").tolist() == [1.0, 1.0, 1.0]  # little-endian element bytes
