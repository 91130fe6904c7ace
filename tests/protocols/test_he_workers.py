"""ckks / bfv with ``workers`` > 1: the clients' uploads are encrypted in a pool of processes; the
sum, the bound and what the server receives (SEAL ciphertexts of the same sizes, the same transfers)
are those of the one-process mode."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from protocols import ProtocolError, get_protocol


def test_parallel_encryption_gives_the_same_server_view_and_sum():
    rng = np.random.default_rng(0)
    xs = [torch.from_numpy(rng.uniform(-1, 1, 5000)) for _ in range(3)]
    ints = [torch.from_numpy(rng.integers(-1000, 1000, 300)) for _ in range(3)]
    for name, params, inputs in (("ckks", {"preset": "sum"}, xs), ("bfv", {"preset": "sum"}, ints)):
        serial = get_protocol(name, **params)
        with get_protocol(name, workers=2, **params) as parallel:
            for _ in range(2):  # the pool is started once and reused
                a, b = serial.aggregate(inputs), parallel.aggregate(inputs)
                assert [(t.sender, t.receiver, t.step, t.kind, len(t.blobs)) for t in a.transfers] == \
                       [(t.sender, t.receiver, t.step, t.kind, len(t.blobs)) for t in b.transfers]
                for ta, tb in zip(a.received("server"), b.received("server")):  # compressed sizes vary by a few bytes
                    assert abs(ta.nbytes - tb.nbytes) <= 0.01 * ta.nbytes
                assert a.error_bound == b.error_bound
                exact = torch.stack(inputs).sum(0)
                if name == "bfv":
                    assert torch.equal(b.total, exact)
                else:
                    assert float((b.total - exact).abs().max()) <= b.error_bound
                    assert torch.equal(a.total, b.total)  # both the exact sum of the grid values
            assert parallel._pool is not None
        assert parallel._pool is None  # closed with the protocol
    with pytest.raises(ProtocolError, match="workers: expected an int >= 1"):
        get_protocol("ckks", workers=0)
