"""The run record's `privacy.trust` block: who must not collude with whom, whether the server is
trusted for DP, and where the noise came from. Every sentence here is checked by an audit attack
or a test named in README "Threat model"; what no attack has tried is marked as an assumption."""
from __future__ import annotations

PROTOCOL_TRUST = {
    "plain": {
        "server_sees": "every client's upload in the clear",
        "non_collusion": [],
        "assumption": "none: nothing is hidden from the server",
    },
    "crypten": {
        "server_sees": "one uniform share of each upload and, at the reveal, each client's summed share: the sum",
        "non_collusion": ["a coalition that lacks any one of the K+1 share holders (K clients, the server) learns "
                          "nothing beyond the sum and its members' inputs (tested: share bytes of K-1 parties are "
                          "indistinguishable across inputs)"],
        "assumption": "honest-but-curious parties; every share and every CrypTen draw (PRZS masks, Beaver "
                      "triples) from a ChaCha20 keystream under a 256-bit os.urandom key (crypten-seed-search "
                      "finds no seed)",
        "compute": "compute (a function on secret shares, e.g. FedGPL tau_in=crypten) opens its outputs to the "
                   "parties named only; every multiplied value is masked by a Beaver triple from the dealer, a "
                   "party that is neither a client nor the server: the server must not collude with the dealer",
    },
    "ckks": {
        "server_sees": "the clients' ciphertexts, the aggregate ciphertexts it computed, the public parameters, "
                       "and the revealed sum",
        "non_collusion": ["the server and the key holder (client0)"],
        "assumption": "RLWE hardness at 128-bit parameters; the revealed sum is exact on a public grid (reveal="
                      "grid), so it carries no decryption noise (he-key-recovery at chance)",
    },
    "bfv": {
        "server_sees": "the clients' ciphertexts, the aggregate ciphertexts it computed, the public parameters, "
                       "and the revealed (exact) sum",
        "non_collusion": ["the server and the key holder (client0)"],
        "assumption": "RLWE hardness at 128-bit parameters; BFV decrypts exactly (he-key-recovery at chance)",
    },
    "secagg": {
        "server_sees": "the clients' public keys, their Shamir shares encrypted under pairwise keys (ChaCha20-Poly1305), "
                       "each client's masked input (uniform in Z_2^b), the survivors' self-mask seeds and the "
                       "dropped clients' pairwise-key seeds (round 4), and the sum",
        "non_collusion": ["the server and t or more clients (t: the Shamir threshold, default floor(2m/3)+1 of the m "
                          "share holders per client): t holders' shares give a client's pairwise-key seed, which with "
                          "the server's view unmasks its input (tested)"],
        "assumption": "honest-but-curious server and clients; X25519/HKDF/AES-CTR keys fresh from os.urandom per sum; "
                      "the k-regular graph (SecAgg+) is public",
    },
}
CLIENT0_DEALER = ("compute with dealer=client0 (CrypTen's TFP): client 0 deals the Beaver triples and reads every "
                  "multiplied value itself; the server must not collude with client 0")
UNSAFE_RNG = ("NONE: rng=torch-32bit-unsafe seeds CrypTen's torch generators with 32 effective bits; the server "
              "searches the dealer's seed and reads every multiplied value (crypten-seed-search; audit mode)")
SYMMETRIC_KEY_NOTE = ("under a symmetric-key preset every client holds the secret key: the server must not "
                      "collude with any client")


def tolerated_colluders(protocol, num_clients: int) -> int:
    """The most clients that may collude with the server while the protocol still reveals only the sum
    (and the colluders' own inputs), by its non-collusion set above: secagg t − 1 (t its Shamir
    threshold over m share holders per client; no coalition of t − 1 holds t shares of any client's
    seed, whatever the graph); crypten K − 1 (any coalition that lacks one of the K + 1 share holders);
    ckks/bfv K − 1 (every client but the key holder, client0), 0 under a symmetric-key preset (every
    client holds the key); plain 0 (the server sees every upload anyway). Distributed DP sizes its noise
    shares against this coalition (message_dp.py)."""
    name = protocol.name
    if name == "secagg":
        return protocol.setup(num_clients)[2] - 1
    if name in ("ckks", "bfv"):
        preset = getattr(protocol, "preset", None)
        return 0 if preset is not None and preset.symmetric else num_clients - 1
    if name == "crypten":
        return num_clients - 1
    return 0


def trust_block(protocol, dp: dict | None, spec=None) -> dict:
    """`privacy.trust` for a run under `protocol` (the built backend) with DP report `dp` (the
    record's privacy.dp, or None) and the message-DP spec `spec` (or None)."""
    name = protocol.name
    block = {"protocol": name, **{k: (list(v) if isinstance(v, list) else v) for k, v in PROTOCOL_TRUST[name].items()}}
    preset = getattr(protocol, "preset", None)
    if name in ("ckks", "bfv") and preset is not None and preset.symmetric:
        block["non_collusion"] = block["non_collusion"] + [SYMMETRIC_KEY_NOTE]
    if name == "crypten":
        if not hasattr(protocol, "compute"):  # multiprocess: sums only
            block.pop("compute")
        elif getattr(protocol, "dealer", "party") == "client0":
            block["compute"] = CLIENT0_DEALER
        if getattr(protocol, "rng", "chacha20") == "torch-32bit-unsafe":
            block["assumption"] = UNSAFE_RNG
    if name == "ckks":
        block["reveal"] = protocol.reveal
        if protocol.reveal == "raw-unsafe":
            block["assumption"] = ("NONE: reveal=raw-unsafe hands the server the raw decryption, from which it "
                                   "recovers the secret key and every upload (audit mode)")
    if dp is None:
        block["dp"] = None
        return block
    mode = dp.get("mode")
    source = dp.get("noise_source", "seeded" if "seed" in dp else "os")
    trusted = mode == "central"
    dp_trust = {"trusted_server": trusted, "noise_source": source}
    if trusted:
        dp_trust["why"] = ("central DP: the server sees the exact sum before it adds the noise; ε protects what it "
                           "releases, not what it sees" + (" — and under plain it sees every raw upload"
                                                           if name == "plain" else ""))
    elif mode == "distributed" and "distributed" in dp:  # message DP: shares sized against colluders
        d = dp["distributed"]
        c = d["colluders"]
        eps = d["epsilon_against"][f"server+{c} clients" if c else "server"]
        dp_trust["why"] = (f"distributed DP: each upload carries {d['share_variance_fraction']:.4g} of the noise "
                           f"variance (1/(K - {c})), so any {d['honest_shares']} honest clients' shares sum to the "
                           f"full noise: ε = {eps:.4g} holds against the server "
                           + (f"with up to {c} colluding clients (each removes its own share)" if c else "alone")
                           + ", given that the secure protocol hides every upload")
        dp_trust.update(colluders=c, colluders_tolerated_by_protocol=d["colluders_tolerated_by_protocol"],
                        epsilon_against=d["epsilon_against"])
        if "warning" in d:
            dp_trust["colluders_warning"] = d["warning"]
    elif mode == "distributed":
        dp_trust["why"] = "distributed DP: each upload carries 1/K of the noise; ε against the server needs the " \
                          "secure protocol to hide every upload, and holds against the server alone (a client " \
                          "that colludes with it removes its own share)"
    elif mode == "local":
        dp_trust["why"] = "local DP: every upload is noised before it leaves the client"
    elif dp.get("method") == "dp-sgd":
        dp_trust["why"] = "DP-SGD: each client noises its own gradients; what it uploads is already a DP output"
    elif dp.get("method") == "gap" and str(dp.get("unit", "")).startswith("one node"):
        dp_trust["why"] = ("GAP at node level: each client noises its own hop aggregations once and every DP-SGD step "
                           "of its encoder and classifier; what it uploads is post-processing of those releases")
    elif dp.get("method") == "gap":
        dp_trust["why"] = ("GAP: each client noises its own hop aggregations once; what it uploads is post-processing "
                           "of them and of its features and labels, which edge-level DP does not protect")
    elif dp.get("method") == "lapgraph":
        dp_trust["why"] = ("LapGraph: each client releases a Laplace-noised copy of its own adjacency once; what it "
                           "uploads is post-processing of it and of its features and labels, which edge-level DP "
                           "does not protect")
    if source != "os":
        dp_trust["warning"] = ("seeded noise: anyone who knows the seed (it is in this record) can regenerate and "
                               "subtract it; ε holds only against an adversary who does not know the seed")
    if spec is not None and getattr(spec, "unprotected", ()):
        dp_trust["unprotected_messages"] = list(spec.unprotected)
    block["dp"] = dp_trust
    return block
