"""Shamir t-of-m sharing of 16-byte seeds, with pycryptodome's `Shamir` (GF(2^128)).

Client u shares each of its two seeds among its m share holders (its closed neighbourhood in the
communication graph, itself included, in increasing index order); the holder at position j gets
the share with Shamir index j + 1. Any t shares give the seed back; t - 1 shares are independent
of it (information-theoretically). Reconstruction uses exactly t shares (the lowest holder
indices that answered), as pycryptodome asks.
"""
from __future__ import annotations

from Crypto.Protocol.SecretSharing import Shamir

SHARE_BYTES = 16


def split(seed: bytes, threshold: int, holders: tuple[int, ...]) -> dict[int, tuple[int, bytes]]:
    """holder -> (Shamir index, 16-byte share) for every holder of ``holders``."""
    shares = Shamir.split(threshold, len(holders), seed)
    return dict(zip(holders, shares))


def combine(shares: list[tuple[int, bytes]], threshold: int) -> bytes:
    """The seed from the first ``threshold`` of ``shares`` ((index, share) pairs, at least t)."""
    if len(shares) < threshold:
        raise ValueError(f"{len(shares)} shares < threshold {threshold}")
    return Shamir.combine(sorted(shares)[:threshold])
