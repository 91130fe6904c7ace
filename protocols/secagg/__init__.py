"""`secagg`: pairwise-masking secure aggregation with dropout (Bonawitz et al., CCS 2017) and its
sparse-graph variant SecAgg+ (Bell et al., CCS 2020), honest-but-curious server.

One concept per module: ``quantize`` (the public fixed-point grid in Z_{2^b}), ``crypto`` (X25519,
HKDF, the AES-128-CTR PRG, the ChaCha20-Poly1305 share encryption: all from `cryptography`),
``shamir`` (MPyC's Shamir over GF(2^130 - 5)), ``graph`` (complete or k-regular, the
defaults for degree and threshold), ``client`` and ``server`` (the four rounds), ``protocol``
(the Protocol object, the transfers, dropout and fault injection), ``pool`` and ``worker`` (with
``workers`` > 1: worker processes that run the clients' side). docs/secure-aggregation.md states
the threat model and the measured cost.
"""
from protocols.secagg.protocol import SecAggProtocol

__all__ = ["SecAggProtocol"]
