"""Checks on what a party's view holds, shared by the methods' privacy tests."""
import gc

import numpy as np
import torch


def class_rates(setup) -> list[torch.Tensor]:
    """Each client's training-label distribution [C] (what a class-weighted upload may expose)."""
    out = []
    for c in setup.clients:
        counts = torch.bincount(c.y[c.train_mask], minlength=setup.num_classes).double()
        out.append(counts / counts.sum())
    return out


def holds(tensors: dict, vector: torch.Tensor) -> bool:
    """Does any observed tensor contain `vector` (up to float noise) as a row or as itself?"""
    for t in tensors.values():
        t = t.double().reshape(-1, t.shape[-1]) if t.dim() else t.double().reshape(1, 1)
        if t.shape[-1] == vector.numel() and bool(torch.isclose(t, vector, atol=1e-6).all(-1).any()):
            return True
    return False


def reachable(roots, limit: int = 200_000):
    """Every object reachable from `roots` (up to `limit`): what an attack could touch from its inputs."""
    seen, stack = {}, list(roots)
    while stack and len(seen) < limit:
        o = stack.pop()
        if id(o) in seen or isinstance(o, type):
            continue
        seen[id(o)] = o
        stack.extend(gc.get_referents(o))
    return seen.values()


def private_copies(objects, private: dict[str, torch.Tensor]) -> list[str]:
    """The names of the `private` tensors (name -> tensor) whose values some tensor among `objects` holds:
    a copy of the same shape and dtype, equal element by element. Catches what a memory check misses
    (a clone handed to an attack)."""
    by_shape: dict[tuple, list[str]] = {}
    for name, t in private.items():
        by_shape.setdefault((tuple(t.shape), t.dtype), []).append(name)
    found = set()
    for o in objects:
        if isinstance(o, torch.Tensor) and not o.is_meta:
            for name in by_shape.get((tuple(o.shape), o.dtype), ()):
                if name not in found and torch.equal(o.detach().cpu(), private[name].detach().cpu()):
                    found.add(name)
    return sorted(found)


def spying(attack_cls, **params):
    """An instance of `attack_cls` that records the (view, aux) pairs its attack() received."""
    class Spy(attack_cls):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.received = []

        def attack(self, view, aux):
            self.received.append((view, aux))
            return super().attack(view, aux)
    return Spy(**params)


# --- does what a party received hold a client's input? --------------------------------------------
#
# A secure protocol's messages must be unreadable without the other parties: the bytes the server
# received (crypten shares: little-endian int64; secagg masked vectors: uint32/uint64; CKKS/BFV: SEAL
# serialisations) must not contain any client's input in any encoding a sender could have used.

WINDOW_BYTES = 32  # a contiguous run of this many encoded bytes is a window
MIN_DISTINCT_BYTES = 6  # a window with fewer distinct bytes (zeros, a repeated small value) proves nothing


def wire_bytes(received) -> list[bytes]:
    """The byte strings in ``received`` (bytes, protocol Transfers or transcript Messages, mixed): a
    message's blobs, and its payload when it was sent in the clear (kind "plaintext": its tensors'
    little-endian bytes, as they cross the wire). The opened sum (kind "aggregate") is left out: a
    party that opens the sum is meant to see it."""
    from protocols.base import array_bytes

    out = []
    for item in received:
        if isinstance(item, (bytes, bytearray, memoryview)):
            out.append(bytes(item))
            continue
        out.extend(bytes(b) for b in (item.blobs or ()))
        if item.kind == "plaintext":
            payload = getattr(item, "tensors", None) or {}
            if getattr(item, "tensor", None) is not None:
                payload = {"tensor": item.tensor}
            out.extend(array_bytes(t.detach().cpu().reshape(-1)) for t in payload.values())
    return out


def input_encodings(x, fixed_point_bits=(16,)) -> dict[str, np.ndarray]:
    """Client input ``x`` (a tensor or array, any shape) as a sender could put it on the wire, flat and
    little-endian: float64, float32, and for each f in ``fixed_point_bits`` round(x * 2^f) as int64
    (crypten: f = precision_bits, 16 by default; secagg's 64-bit ring; bfv: f = 24), as int32 when it
    fits (secagg's 32-bit ring: the bytes of its uint32 two's complement elements), and as the float64
    value on that grid, round(x * 2^f) / 2^f (what ckks and crypten round a client's input to first)."""
    x = np.asarray(x.detach().cpu() if isinstance(x, torch.Tensor) else x, dtype=np.float64).reshape(-1)
    out = {"float64": x.astype("<f8"), "float32": x.astype("<f4")}
    for f in sorted(set(fixed_point_bits)):
        q = np.rint(x * 2.0**f)
        out[f"float64 round(x*2^{f})/2^{f}"] = (q / 2.0**f).astype("<f8")
        if np.abs(q).max(initial=0) < 2.0**63:
            out[f"int64 round(x*2^{f})"] = q.astype("<i8")
        if np.abs(q).max(initial=0) < 2.0**31:
            out[f"int32 round(x*2^{f})"] = q.astype("<i4")
    return out


def input_found_in(blobs: list[bytes], x, fixed_point_bits=(16,), windows: int = 4,
                   max_fraction: float = 0.01, haystack: bytes | None = None) -> str | None:
    """How input ``x`` can be read from ``blobs`` (a description), or None. Two readings:

    contiguous: for each encoding, up to ``windows`` runs of WINDOW_BYTES encoded bytes (spread over x,
        informative ones only) are searched at every byte offset of every blob; one hit is a leak.
    element-wise: a blob of exactly one encoded value per input element equals the encoding at more than
        ``max_fraction`` of the positions, or, read as int32/int64, is round(x * 2^f) there for one
        power-of-two scale f (whatever f: a fixed-point encoding at an unexpected precision too).
    ``haystack``: the blobs joined by zero bytes, when the caller searches the same blobs for several inputs.
    """
    x = np.asarray(x.detach().cpu() if isinstance(x, torch.Tensor) else x, dtype=np.float64).reshape(-1)
    encodings = input_encodings(x, fixed_point_bits)
    haystack = b"\0".join(blobs) if haystack is None else haystack
    for name, enc in encodings.items():
        width, raw = enc.itemsize, enc.tobytes()
        per_window = WINDOW_BYTES // width
        for i in _informative_windows(raw, width, per_window, windows):
            if raw[i * width:(i + per_window) * width] in haystack:
                return f"{name}: x[{i}:{i + per_window}] occurs as {WINDOW_BYTES} contiguous bytes"
    best = (0.0, "")  # (fraction of positions, encoding) of the closest element-wise reading
    for blob in blobs:
        for name, enc in encodings.items():
            if len(blob) == enc.nbytes:
                fraction = float(np.mean(np.frombuffer(blob, f"<u{enc.itemsize}") == enc.view(f"<u{enc.itemsize}")))
                best = max(best, (fraction, name))
        for width in (4, 8):
            if len(blob) == width * len(x):
                fraction, f = _fixed_point_fraction(np.frombuffer(blob, f"<i{width}"), x)
                best = max(best, (fraction, f"int{8 * width} round(x*2^{f})"))
    if best[0] > max_fraction:
        return f"{best[1]}: a blob equals it at {best[0]:.0%} of the positions"
    return None


def _informative_windows(raw: bytes, width: int, per_window: int, windows: int) -> list[int]:
    """Up to ``windows`` start elements of windows of ``per_window`` elements, spread over the encoding
    ``raw`` (elements of ``width`` bytes): from each of ``windows`` evenly spaced points, the first
    window on from there with MIN_DISTINCT_BYTES distinct bytes."""
    n = len(raw) // width
    starts = []
    for j in range(windows):
        for i in range(j * n // windows, n - per_window + 1, per_window):
            if len(set(raw[i * width:(i + per_window) * width])) >= MIN_DISTINCT_BYTES:
                if i not in starts:
                    starts.append(i)
                break
    return starts


def _fixed_point_fraction(v: np.ndarray, x: np.ndarray) -> tuple[float, int]:
    """The fraction of positions (at most 4096, evenly spaced) where v == round(x * 2^f), for the one
    power-of-two scale f that the median ratio |v / x| suggests (the only candidate if v is a fixed-point
    encoding of x), and f."""
    sample = np.linspace(0, len(x) - 1, min(len(x), 4096)).astype(int)  # evenly spaced: enough to tell
    v, x = v[sample].astype(np.float64), x[sample]
    nonzero = x != 0
    if not nonzero.any():
        return 0.0, 0
    with np.errstate(divide="ignore"):
        log_scale = np.log2(np.median(np.abs(v[nonzero] / x[nonzero])))
    if not 0 <= log_scale <= 62:  # -inf too: v is mostly 0 where x is not
        return 0.0, 0
    f = int(np.rint(log_scale))
    expected = x * 2.0**f
    close = np.abs(v - expected) <= 1 + np.abs(expected) * 2.0**-50
    return float(close.mean()), f


def assert_no_input_in_blobs(received, inputs, fixed_point_bits=(16,), windows: int = 4,
                             max_fraction: float = 0.01) -> None:
    """Fail when any client's input in ``inputs`` (client k's tensor at index k) can be read from what a
    party received (``received``: bytes, Transfers or Messages; see ``wire_bytes``), in any encoding of
    ``input_encodings``; see ``input_found_in`` for how it is searched. Requires bytes to search: a view
    that holds no bytes cannot show that anything is hidden."""
    blobs = wire_bytes(received)
    assert sum(map(len, blobs)) > 0, "nothing to search: the view holds no bytes"
    haystack = b"\0".join(blobs)
    for k, x in enumerate(inputs):
        how = input_found_in(blobs, x, fixed_point_bits, windows, max_fraction, haystack)
        assert how is None, f"client {k}'s input can be read from the received bytes: {how}"
