"""Backends under test: key -> (backend, params, magnitude for property tests, true range limit)."""

from protocols.tenseal_backend import BFV_PLAIN_MODULUS

BFV_LIMIT = (BFV_PLAIN_MODULUS - 1) // 2 / 2.0**24  # frac_bits 24: about 32768

BACKENDS: dict[str, tuple[str, dict, float, float]] = {
    "plain": ("plain", {}, 1e12, float("inf")),
    "crypten": ("crypten", {"precision_bits": 16}, 2.0**40, 2.0**46),
    "crypten-p24": ("crypten", {"precision_bits": 24}, 2.0**30, 2.0**38),
    "ckks-default": ("ckks", {"preset": "default"}, 2.0**19, 2.0**20),
    "ckks-sum": ("ckks", {"preset": "sum"}, 2.0**15, 2.0**16),
    "ckks-raw": ("ckks", {"preset": "sum", "reveal": "raw-unsafe"}, 2.0**15, 2.0**16),
    "bfv-default": ("bfv", {"preset": "default"}, 2.0**14, BFV_LIMIT),
    "bfv-sum": ("bfv", {"preset": "sum"}, 2.0**14, BFV_LIMIT),
}
