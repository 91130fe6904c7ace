"""`he-key-recovery`: the Li–Micciancio attack on a revealed CKKS decryption, tried on every HE sum.

Li and Micciancio ("On the security of homomorphic encryption on approximate numbers",
EUROCRYPT 2021): a CKKS decryption c0 + c1·s = m + e is approximate, and handing its decoded value
to a party that holds the ciphertext (c0, c1) gives that party linear equations in the secret key s.
The server computed the aggregate ciphertexts itself, so under a raw reveal it can:

1. re-encode twice the revealed real values with a key-free CKKSEncoder at the ciphertext's level
   and scale: that is exactly d + τ(d) in NTT form, d = c0 + c1·s the decryption and τ the
   conjugation X -> X^-1 (the decoder returns only the real parts of the slots, i.e. (d + τ(d))/2;
   doubling makes it an integer polynomial, so the encoder's rounding is exact);
2. in SEAL's bit-reversed NTT order the conjugate of slot i is slot N-1-i, so every slot pair gives
   one equation c1[i]·s[i] + c1[N-1-i]·s[N-1-i] = E[i] - c0[i] - c0[N-1-i] (mod p) in two
   unknowns; two aggregate ciphertexts (chunks) give two equations: solve the 2x2 system per pair
   and per RNS prime, for all of NTT(s);
3. forge a SEAL secret key from those residues (a serialized SecretKey with an uncompressed body)
   and decrypt every client's upload with SEAL's own Decryptor.

BFV decrypts exactly: the same attack takes the revealed integer sum m as the exact decryption
(c0 - Δm) + c1·s = 0 and solves it per NTT slot from one aggregate ciphertext. It fails because
the decryption noise e is not 0: the equations are those of RLWE. The same holds for CKKS under
the default grid reveal, where the revealed value is the exact sum of grid values and the noise
is rounded away by the key holder.

Attacker input: only the server's view (the public parameters it holds, the aggregate ciphertexts it
sent to the key holder, the revealed sum, the clients' ciphertext uploads) and public facts (the
dense packing of the run's flat vectors, BFV's frac_bits). Scores: the fraction of the key's NTT
residues recovered (baseline 1/p, a uniform guess) and, per client, the decrypted upload's max abs
error and cosine against the real upload, and how many uploads are recovered to 1e-5 (relative
above magnitude 1) (baseline: the revealed sum / K as every client's guess).
"""
from __future__ import annotations

import math
import os
import shutil
import struct
import tempfile
from dataclasses import dataclass

import numpy as np

from attacks.base import Attack, Knowledge, NoInput
from attacks.view import AdversaryView
from privfgl.federation import flatten


# An upload counts as recovered when every value is within 1e-5 of the real one (relative to its largest
# magnitude when that exceeds 1): the grid's rounding (<= 2^-21 at the default preset) and CKKS noise pass.
RECOVERED_TOLERANCE = 1e-5


def _sealapi():
    import tenseal.sealapi as sealapi  # noqa: PLC0415 - only audits that use HE load SEAL

    return sealapi


class _Files:
    """SEAL objects load from paths only: one private temporary file per attack."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="privfgl-audit-")
        self.path = os.path.join(self.dir, "blob")

    def write(self, blob: bytes) -> str:
        with open(self.path, "wb") as f:
            f.write(blob)
        return self.path

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


@dataclass(frozen=True)
class KeyRecovery:
    """What the attacker recovered for one aggregated message.

    key_rows: [L, N] uint64, the claimed NTT residues of s modulo each data-level prime.
    uploads:  per client k, the decryption of its upload with the forged key ([n] float64), or None.
    consistent: whether the forged key decrypts the aggregate chunks it was not solved from back to
                the revealed sum (the attacker's own check, with no ground truth); None when every
                chunk was used to solve."""
    scheme: str
    key_rows: np.ndarray
    uploads: list[np.ndarray]
    consistent: bool | None


@dataclass(frozen=True)
class HEAux:
    target: str
    round: int
    num_clients: int
    frac_bits: int  # BFV's public quantisation of float inputs (0 for integer messages)


@dataclass(frozen=True)
class HETruth:
    key_rows: np.ndarray | None  # [L, N] true residues (None when the protocol's key is gone)
    primes: list[int]
    uploads: list[np.ndarray]    # what each client gave the protocol, flat


def _poly(obj, count: int) -> np.ndarray:
    return np.array([obj.at(i) for i in range(count)], dtype=np.uint64)


def _ciphertext(sa, context, files: _Files, blob: bytes):
    ct = sa.Ciphertext()
    ct.load(context, files.write(blob))
    return ct


def _uncompressed(prefix: bytes, members: bytes) -> bytes:
    """A SEAL serialization with no compression: the 16-byte header (magic, header size, version
    from ``prefix``; compr_mode 0; total size) followed by the members."""
    return prefix[:5] + b"\0" + b"\0\0" + struct.pack("<Q", 16 + len(members)) + members


def forge_secret_key(sa, context, files: _Files, rows: np.ndarray, prefix: bytes):
    """A SEAL SecretKey whose NTT residues are ``rows`` for the data-level primes (the special
    prime's row is zero: decryption at the data level never reads it)."""
    key_parms = context.key_context_data().parms()
    n = key_parms.poly_modulus_degree()
    primes = len(key_parms.coeff_modulus())
    data = np.zeros((primes, n), dtype=np.uint64)
    data[: rows.shape[0]] = rows
    flat = data.reshape(-1).astype("<u8")
    array = _uncompressed(prefix, struct.pack("<Q", flat.size) + flat.tobytes())
    plaintext = struct.pack("<4Q", *context.key_context_data().parms_id()) + struct.pack("<Q", flat.size) + struct.pack("<d", 0.0)
    key = sa.SecretKey()
    key.load(context, files.write(_uncompressed(prefix, plaintext + array)))
    return key


def solve_ckks_key(sa, context, aggregates: list, revealed: np.ndarray) -> np.ndarray:
    """NTT residues of s from two aggregate ciphertexts and their revealed real slot values."""
    if len(aggregates) < 2:
        raise NoInput("the CKKS attack needs two aggregate ciphertexts (a vector of more than one chunk)")
    encoder = sa.CKKSEncoder(context)
    slots = encoder.slot_count()
    a, b = aggregates[:2]
    n, levels = a.poly_modulus_degree(), a.coeff_modulus_size()
    primes = [m.value() for m in context.get_context_data(a.parms_id()).parms().coeff_modulus()]
    c = [_poly(ct.dyn_array(), 2 * levels * n).reshape(2, levels, n) for ct in (a, b)]
    e = []
    for i, ct in enumerate((a, b)):
        plain = sa.Plaintext()
        encoder.encode([2.0 * float(v) for v in revealed[i * slots:(i + 1) * slots]], ct.parms_id(), ct.scale, plain)
        e.append(np.array([plain.data(j) for j in range(levels * n)], dtype=np.uint64).reshape(levels, n))
    rows = np.zeros((levels, n), dtype=np.uint64)
    for l, p in enumerate(primes):
        for i in range(n // 2):
            j = n - 1 - i
            eqs = []
            for (c0, c1), ee in zip(c, e):
                eqs.append((int(c1[l, i]), int(c1[l, j]), (int(ee[l, i]) - int(c0[l, i]) - int(c0[l, j])) % p))
            (a1, b1, r1), (a2, b2, r2) = eqs
            det = (a1 * b2 - a2 * b1) % p
            if det == 0:
                continue  # leave 0: a pair the two chunks do not determine (probability ~2/p)
            inv = pow(det, -1, p)
            rows[l, i] = (r1 * b2 - r2 * b1) * inv % p
            rows[l, j] = (a1 * r2 - a2 * r1) * inv % p
    return rows


def solve_bfv_key(sa, context, shifted, revealed_ints: np.ndarray) -> np.ndarray:
    """NTT residues of s assuming the revealed integer sum m is the exact decryption:
    (c0 - Δm) + c1·s = 0, solved per NTT slot. ``shifted``: a copy of the aggregate ciphertext."""
    plain = sa.Plaintext()
    t = context.first_context_data().parms().plain_modulus().value()
    sa.BatchEncoder(context).encode([int(v) % t for v in revealed_ints], plain)
    evaluator = sa.Evaluator(context)
    evaluator.sub_plain_inplace(shifted, plain)
    evaluator.transform_to_ntt_inplace(shifted)
    n, levels = shifted.poly_modulus_degree(), shifted.coeff_modulus_size()
    primes = [m.value() for m in context.get_context_data(shifted.parms_id()).parms().coeff_modulus()]
    c0, c1 = _poly(shifted.dyn_array(), 2 * levels * n).reshape(2, levels, n)
    rows = np.zeros((levels, n), dtype=np.uint64)
    for l, p in enumerate(primes):
        for i in range(n):
            b = int(c1[l, i])
            if b:
                rows[l, i] = (-int(c0[l, i])) * pow(b, -1, p) % p
    return rows


def recover(parameters: bytes, aggregate_blobs: list[bytes], revealed: np.ndarray, uploads: list[list[bytes]],
            frac_bits: int = 0) -> KeyRecovery:
    """The attack on one aggregated message, from bytes and numbers only (usable on a saved view).

    parameters: the serialized EncryptionParameters the server holds; aggregate_blobs: the aggregate
    ciphertexts it computed, in chunk order; revealed: the revealed flat sum; uploads[k]: client k's
    ciphertexts; frac_bits: BFV's public quantisation (revealed floats = integers / 2^frac_bits)."""
    sa = _sealapi()
    files = _Files()
    try:
        parms = sa.EncryptionParameters(sa.SCHEME_TYPE.NONE)
        parms.load(files.write(parameters))
        context = sa.SEALContext(parms, True, sa.SEC_LEVEL_TYPE.TC128)
        scheme = "ckks" if parms.scheme() == sa.SCHEME_TYPE.CKKS else "bfv"
        aggregates = [_ciphertext(sa, context, files, b) for b in aggregate_blobs]
        if scheme == "ckks":
            rows = solve_ckks_key(sa, context, aggregates, revealed)
            decode = sa.CKKSEncoder(context).decode_double
            scale = 1.0
        else:
            ints = np.round(revealed.astype(np.float64) * 2.0**frac_bits).astype(np.int64)
            copy = _ciphertext(sa, context, files, aggregate_blobs[0])
            rows = solve_bfv_key(sa, context, copy, ints[: parms.poly_modulus_degree()])
            decode = sa.BatchEncoder(context).decode_int64
            scale = 2.0**-frac_bits
        key = forge_secret_key(sa, context, files, rows, parameters)
        decryptor = sa.Decryptor(context, key)

        def decrypt(cts) -> np.ndarray:
            parts = []
            for ct in cts:
                plain = sa.Plaintext()
                decryptor.decrypt(ct, plain)
                parts.append(np.asarray(decode(plain), dtype=np.float64))
            return np.concatenate(parts)[: revealed.size] * scale

        # The attacker's own check: the chunks the key was not solved from decrypt to the revealed values.
        used = 2 if scheme == "ckks" else 1
        consistent = None
        if len(aggregates) > used:
            slots = parms.poly_modulus_degree() // (2 if scheme == "ckks" else 1)
            start = used * slots
            opened = decrypt(aggregates)[start:]
            consistent = bool(np.allclose(opened, revealed[start:], rtol=0, atol=1e-3 * (1 + np.abs(revealed).max())))
        recovered = [decrypt([_ciphertext(sa, context, files, b) for b in blobs]) for blobs in uploads]
        return KeyRecovery(scheme, rows, recovered, consistent)
    finally:
        files.close()


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    with np.errstate(over="ignore", invalid="ignore"):
        value = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
    return value if math.isfinite(value) else 0.0


class HEKeyRecovery(Attack):
    """`he-key-recovery` on every HE-aggregated message of the view (or `message=NAME`), at `round`."""

    name = "he-key-recovery"

    def __init__(self, message: str | None = None, round: int = 0):
        self.message, self.round = message, round

    def targets(self, view: AdversaryView, knowledge: Knowledge, num_clients: int) -> list[str]:
        names = [m.name for m in view.messages if m.kind == "ciphertext" and m.round == self.round
                 and m.receiver == view.party and ":" not in m.name]
        names = list(dict.fromkeys(names))
        if self.message is not None:
            names = [n for n in names if n == self.message] or [self.message]
        if not names:
            return ["no-he-message"]
        return names

    def declare_aux(self, setup, knowledge: Knowledge, target: str) -> HEAux:
        protocol = setup.federation.audit_log.get((self.round, target), {}).get("protocol")
        frac_bits = 0
        if protocol is not None and getattr(protocol, "name", "") == "bfv":
            revealed = setup.federation.audit_log[(self.round, target)]["uploads"][0]
            frac_bits = 0 if not revealed.is_floating_point() else protocol.frac_bits
        return HEAux(target, self.round, len(setup.clients), frac_bits)

    def attack(self, view: AdversaryView, aux: HEAux) -> KeyRecovery:
        name, r = aux.target, aux.round
        context = view.find(name + ":context", r)
        aggregate = [m for m in view.find(name + ":aggregate", r) if m.sender == view.party]
        revealed = view.payload(name + ":sum", r, view.party)
        if not context or not aggregate:
            raise NoInput(f"no HE aggregate of {name!r} in round {r} in the {view.party}'s view")
        if revealed is None:
            raise NoInput(f"the sum of {name!r} was not revealed to the {view.party}")
        uploads = []
        for k in range(aux.num_clients):
            found = [m for m in view.find(name, r, f"client{k}") if m.kind == "ciphertext"]
            uploads.append(list(found[0].blobs) if found and found[0].blobs else [])
        flat, _ = flatten(revealed)
        return recover(context[0].blobs[0], list(aggregate[0].blobs), flat.numpy(), uploads, aux.frac_bits)

    def truth(self, setup, target: str) -> HETruth:
        entry = setup.federation.audit_log.get((self.round, target), {})
        uploads = [u.double().numpy() for u in entry.get("uploads", [])]
        protocol = entry.get("protocol")
        key = getattr(protocol, "_secret_key", None)
        if key is None:
            return HETruth(None, [], uploads)
        context = protocol._context
        data_parms = context.first_context_data().parms()
        n, levels = data_parms.poly_modulus_degree(), len(data_parms.coeff_modulus())
        rows = np.array([key.data().data(i) for i in range(levels * n)], dtype=np.uint64).reshape(levels, n)
        return HETruth(rows, [m.value() for m in data_parms.coeff_modulus()], uploads)

    def score(self, rec: KeyRecovery, truth: HETruth, aux: HEAux) -> tuple[dict, dict]:
        metrics: dict = {"scheme": rec.scheme, "consistent": rec.consistent}
        baseline: dict = {}
        if truth.key_rows is not None:
            metrics["key_fraction"] = float(np.mean(rec.key_rows == truth.key_rows))
            baseline["key_fraction"] = 1.0 / min(truth.primes)
        mean_guess = np.sum(truth.uploads, axis=0) / max(len(truth.uploads), 1) if truth.uploads else None
        per_client, base_client = [], []
        for k, (got, real) in enumerate(zip(rec.uploads, truth.uploads)):
            if got.size != real.size:
                continue
            with np.errstate(over="ignore", invalid="ignore"):
                err = float(np.nan_to_num(np.abs(got - real), nan=np.inf).max())
            tolerance = RECOVERED_TOLERANCE * max(1.0, float(np.abs(real).max()))
            base_err = float(np.abs(mean_guess - real).max())
            per_client.append({"client": k, "max_abs_error": err, "cosine": _cosine(got, real),
                               "recovered": err <= tolerance})
            base_client.append({"client": k, "max_abs_error": base_err, "cosine": _cosine(mean_guess, real),
                                "recovered": base_err <= tolerance})
        if per_client:
            metrics["uploads_recovered"] = sum(c["recovered"] for c in per_client)
            baseline["uploads_recovered"] = sum(c["recovered"] for c in base_client)
            metrics["cosine"] = float(np.mean([c["cosine"] for c in per_client]))
            metrics["max_abs_error"] = max(c["max_abs_error"] for c in per_client)
            metrics["per_client"] = per_client
            baseline["cosine"] = float(np.mean([c["cosine"] for c in base_client]))
            baseline["max_abs_error"] = max(c["max_abs_error"] for c in base_client)
            baseline["kind"] = "the revealed sum / K as every client's upload"
        return metrics, baseline
