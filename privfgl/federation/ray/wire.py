"""Named tensors as they cross between the driver and the client actors: a public header (names, shapes,
dtypes) and the data, the tensors' little-endian element bytes back to back. The data's length is the
``payload_nbytes`` the channel books for the message."""
from __future__ import annotations

import numpy as np
import torch

Header = list[tuple[str, tuple[int, ...], str]]


def encode_tensors(tensors: dict[str, torch.Tensor]) -> tuple[Header, bytes]:
    header, parts = [], []
    for name in sorted(tensors):
        a = tensors[name].detach().cpu().contiguous().numpy()
        header.append((name, tuple(a.shape), a.dtype.str))
        parts.append(a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes())
    return header, b"".join(parts)


def decode_tensors(header: Header, data: bytes) -> dict[str, torch.Tensor]:
    out, start = {}, 0
    for name, shape, dtype in header:
        dt = np.dtype(dtype).newbyteorder("<")
        n = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        out[name] = torch.from_numpy(np.frombuffer(data, dtype=dt, count=n // dt.itemsize, offset=start)
                                     .astype(dt.newbyteorder("="), copy=True).reshape(shape))
        start += n
    if start != len(data):
        raise ValueError(f"a message of {len(data)} bytes holds {start} bytes of tensors")
    return out
