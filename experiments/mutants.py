r"""Mutants the test suite must catch: each is one deliberate breakage of a privacy claim (a noise scale,
a clip, a threshold, a range check, what a party's view holds, an attack's score or baseline), applied to a
copy of the working tree, with the test files that must then fail. A mutant the tests let pass is a test
that cannot fail where it matters; the first run of this list (2026-11-27) found 16 of 64, and the tests
that now catch them were added the same day (docs/testing.md).

Prints one row per mutant (caught or SURVIVED, seconds) and exits 1 if any survived. Not part of `make
test` (about 20 minutes on 2 cores): run it after changing a protocol, a mechanism, an accountant or an
attack's scoring, and add a mutant when you add such a claim.

    PRIVFGL_DATA=... python experiments/mutants.py [--only SA5,H4] [--list]

Why not mutmut or cosmic-ray: their operators are syntactic (flip an operator or a constant) and would
make thousands of mutants over the whole package; these are the semantic breakages the privacy claims
rest on (e.g. "the self-mask seed is the pairwise-key seed"), each checked against the narrow tests
that own the claim.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED_PLANETOID = REPO.parent / "shared" / "datasets" / "planetoid"  # as tests/conftest.py finds it
SKIP = shutil.ignore_patterns(".git", ".venv", "runs", ".pytest_cache", ".hypothesis", "__pycache__", "*.egg-info")

# (id, what breaks, file, text, replacement, test files that must fail)
MUTANTS: list[tuple[str, str, str, str, str, list[str]]] = [
    ('P1', 'Laplace noise at 0.7 of its scale', 'privfgl/privacy/mechanisms.py',
     'return source.laplace(shape, self.scale)',
     'return source.laplace(shape, 0.7 * self.scale)',
     ['tests/privacy/test_privacy_mechanisms.py']),
    ('P2', 'a distributed Gaussian share with std·share, not std·√share', 'privfgl/privacy/mechanisms.py',
     'self.std * share ** 0.5',
     'self.std * share',
     ['tests/privacy/test_privacy_mechanisms.py']),
    ('P3', 'the OS-entropy source seeded', 'privfgl/privacy/noise.py',
     'self._gen = None if secure else torch.Generator().manual_seed(int(seed))',
     'self._gen = torch.Generator().manual_seed(0 if seed is None else int(seed))',
     ['tests/privacy/test_privacy_mechanisms.py', 'tests/privacy/test_dp_randomness.py']),
    ('P4', "the record says 'os' for seeded noise", 'privfgl/privacy/noise.py',
     'out = {f"{kind}_source": OS if self.secure else "seeded"',
     'out = {f"{kind}_source": OS',
     ['tests/privacy/test_dp_randomness.py', 'tests/privacy/test_privacy_runs.py']),
    ('P5', 'Box-Muller output clamped', 'privfgl/privacy/noise.py',
     'torch.cos(2.0 * math.pi * u2)',
     'torch.cos(2.0 * math.pi * u2).clamp(-0.8, 0.8) / 0.8 * 0.95',
     ['tests/privacy/test_privacy_mechanisms.py']),
    ('P6', 'joint clipping at 1.5× the bound', 'privfgl/privacy/clipping.py',
     'factor = _factor(total, bound)\n',
     'factor = _factor(total, 1.5 * bound)\n',
     ['tests/privacy/test_privacy_mechanisms.py', 'tests/privacy/test_privacy_message_dp.py']),
    ('P7', 'message DP without client clipping', 'privfgl/privacy/message_dp.py',
     'clipped = [clip_tensors(c, self.spec.clip, self.spec.clip_norm) for c in contributions]',
     'clipped = [{k: v.double() for k, v in c.items()} for c in contributions]',
     ['tests/privacy/test_privacy_message_dp.py']),
    ('P8', 'distributed noise shares of 0.5/K', 'privfgl/privacy/message_dp.py',
     'share = 1.0 if self.spec.mode == "local" else 1.0 / self.num_clients',
     'share = 1.0 if self.spec.mode == "local" else 0.5 / self.num_clients',
     ['tests/privacy/test_privacy_message_dp.py']),
    ('P9', 'local/distributed releases not accounted', 'privfgl/privacy/message_dp.py',
     '        if self.spec.mechanism == "gaussian":\n            self.accountant.add_gaussian(self.spec.sigma, sample_rate)',
     '        if self.spec.mode != "central":\n            return total\n        if self.spec.mechanism == "gaussian":\n            self.accountant.add_gaussian(self.spec.sigma, sample_rate)',
     ['tests/test_dp_methods.py']),
    ('P10', 'Laplace releases accounted at ε/2', 'privfgl/privacy/message_dp.py',
     'self.accountant.add_laplace(self.spec.epsilon)',
     'self.accountant.add_laplace(self.spec.epsilon / 2)',
     ['tests/privacy/test_privacy_message_dp.py']),
    ('P11', 'a count of Gaussian releases taken as one', 'privfgl/privacy/accounting.py',
     'self.gaussian[key] = self.gaussian.get(key, 0) + count',
     'self.gaussian[key] = self.gaussian.get(key, 0) + 1',
     ['tests/privacy/test_privacy_accounting.py']),
    ('P12', 'single-step releases dropped from ε', 'privfgl/privacy/accounting.py',
     'steps = [s for s in steps if s[2] > 0]',
     'steps = [s for s in steps if s[2] > 1]',
     ['tests/privacy/test_privacy_accounting.py']),
    ('S1', 'Laplace split rows clipped in L2', 'privfgl/privacy/split_dp.py',
     'self.norm = 1 if spec.mechanism == "laplace" else 2',
     'self.norm = 2',
     ['tests/fedgpl/test_split.py']),
    ('S2', 'split noise on the unclipped rows', 'privfgl/privacy/split_dp.py',
     'return (clipped + self.mechanism.noise(',
     'return (rows.detach().double() + self.mechanism.noise(',
     ['tests/fedgpl/test_split.py']),
    ('S3', 'Gaussian split noise at half its variance', 'privfgl/privacy/split_dp.py',
     'self.mechanism.noise(clipped.shape, self.source)',
     'self.mechanism.noise(clipped.shape, self.source, *([0.5] if self.norm == 2 else []))',
     ['tests/fedgpl/test_split.py']),
    ('S4', 'one split release per round, not per message', 'privfgl/privacy/split_dp.py',
     'for _ in self.spec.messages:',
     'for _ in self.spec.messages[:1]:',
     ['tests/fedgpl/test_split.py']),
    ('D1', 'DP-SGD without the per-node clip', 'privfgl/privacy/dpsgd.py',
     'total = clip_rows(flat, clip).sum(0)',
     'total = flat.double().sum(0)',
     ['tests/privacy/test_privacy_dpsgd.py']),
    ('D2', 'DP-SGD noise for Δ = C, not C(2N_D − 1)', 'privfgl/methods/dp_sgd.py',
     'mech = GaussianMechanism(p["sigma"], node_sensitivity(p["clip"], p["degree"], hops))',
     'mech = GaussianMechanism(p["sigma"], p["clip"])',
     ['tests/privacy/test_privacy_runs.py']),
    ('D3', 'DP-SGD steps = rounds (local epochs ignored)', 'privfgl/methods/dp_sgd.py',
     'DPSGDReport(p, hops, m.rounds * m.local_epochs, source)',
     'DPSGDReport(p, hops, m.rounds, source)',
     ['tests/attacks/test_membership.py']),
    ('D4', 'degree bound keeps an edge either end chose', 'privfgl/privacy/dpsgd.py',
     '[:, chosen[:pairs] & chosen[pairs:]]',
     '[:, chosen[:pairs] | chosen[pairs:]]',
     ['tests/privacy/test_privacy_dpsgd.py', 'tests/privacy/test_degree_bounding.py']),
    ('ST1', 'O-pFGL ΔS1 = B·m, not B(2m − 1)', 'privfgl/privacy/stats.py',
     '"S1": b * (2 * m - 1)',
     '"S1": b * m',
     ['tests/privacy/test_privacy_stats.py']),
    ('SA1', 'Shamir polynomial of degree t − 2', 'protocols/secagg/shamir.py',
     'random_split(FIELD, secrets_, threshold - 1, len(holders))',
     'random_split(FIELD, secrets_, max(0, threshold - 2), len(holders))',
     ['tests/protocols/test_secagg.py']),
    ('SA2', 'the server accepts t − 1 key advertisements', 'protocols/secagg/server.py',
     'if len(arrived) < self.threshold:',
     'if len(arrived) < self.threshold - 1:',
     ['tests/protocols/test_secagg.py']),
    ('SA3', 'a client unmasks for t − 1 survivors', 'protocols/secagg/client.py',
     'if num_survivors < self.threshold:',
     'if num_survivors < self.threshold - 1:',
     ['tests/protocols/test_secagg.py']),
    ('SA4', 'a client listed as dropped reveals its s share', 'protocols/secagg/client.py',
     'if self.index in dropped:',
     'if False:',
     ['tests/protocols/test_secagg.py']),
    ('SA5', 'self-mask seed = pairwise-key seed', 'protocols/secagg/client.py',
     'self.b_seed = crypto.fresh_seed()',
     'self.b_seed = self.s_seed',
     ['tests/protocols/test_secagg.py']),
    ('SA6', 'quantisation range check at 2× the limit', 'protocols/secagg/quantize.py',
     'if m > self.limit:',
     'if m > 2 * self.limit:',
     ['tests/protocols/test_secagg.py', 'tests/protocols/test_protocols_sums.py']),
    ('SA7', 'ring capacity doubled', 'protocols/secagg/quantize.py',
     'cap = min(half, 2**53)',
     'cap = 2 * min(half, 2**53)',
     ['tests/protocols/test_secagg.py', 'tests/protocols/test_protocols_sums.py']),
    ('SA8', 'integer limit not divided by K', 'protocols/secagg/quantize.py',
     'return Grid(bits, 0, half // num_clients, num_clients, True)',
     'return Grid(bits, 0, half, num_clients, True)',
     ['tests/protocols/test_secagg.py', 'tests/protocols/test_protocols_sums.py']),
    ('SA9', 'recoverability checked at t − 1', 'protocols/secagg/server.py',
     'if len(live) < t:',
     'if len(live) < t - 1:',
     ['tests/protocols/test_secagg.py', 'tests/protocols/test_secagg_multiprocess.py']),
    ('H1', 'CKKS grid reveal not rounded', 'protocols/tenseal_backend.py',
     'return torch.from_numpy(np.round(decoded.astype(np.float64) * scale) / scale), rounding',
     'return torch.from_numpy(decoded.astype(np.float64)), rounding',
     ['tests/protocols/test_protocols_he.py', 'tests/attacks/test_he_key_recovery.py']),
    ('H2', 'CKKS decryption bound without the factor K', 'protocols/tenseal_backend.py',
     'return num_clients * self.fresh_noise_per_slot() + fp',
     'return self.fresh_noise_per_slot() + fp',
     ['tests/protocols/test_protocols_he.py']),
    ('H3', 'CKKS bound without its dominant noise term', 'protocols/tenseal_backend.py',
     'noise = 8 * math.sqrt(2) * NOISE_SIGMA * n + 6 *',
     'noise = 6 *',
     ['tests/protocols/test_protocols_he.py']),
    ('H4', "BFV's exact range re-check removed", 'protocols/tenseal_backend.py',
     'if np.abs(exact).max() > self.max_plain:',
     'if False:',
     ['tests/protocols/test_protocols_he.py']),
    ('H5', 'BFV client limit doubled', 'protocols/tenseal_backend.py',
     'self.max_clients = int((self.data_modulus / (2 * t) - 1) // per_client)',
     'self.max_clients = int((self.data_modulus / t - 1) // per_client)',
     ['tests/protocols/test_protocols_he.py', 'tests/attacks/test_he_key_recovery.py', 'tests/protocols/test_protocols_sums.py']),
    ('C1', 'CrypTen share key fixed', 'protocols/crypten_backend.py',
     'algorithms.ChaCha20(os.urandom(32), bytes(16))',
     'algorithms.ChaCha20(bytes(32), bytes(16))',
     ['tests/protocols/test_protocols_crypten.py', 'tests/protocols/test_protocols_sums.py']),
    ('C2', 'multiprocess CrypTen sum opened to every party', 'protocols/crypten_compat.py',
     'opened = total.reveal(dst=server)\n    return opened if rank == server else None',
     'opened = total.reveal()\n    return opened',
     ['tests/protocols/test_protocols_crypten.py']),
    ('C3', 'CrypTen range one bit too wide', 'protocols/crypten_backend.py',
     'return float(2 ** (62 - precision_bits))',
     'return float(2 ** (63 - precision_bits))',
     ['tests/protocols/test_protocols_sums.py']),
    ('A1', 'feature AUC with labels swapped', 'attacks/metrics.py',
     '"auc": float(roc_auc_score(flat_t, flat_p)) if both',
     '"auc": float(roc_auc_score(~flat_t, flat_p)) if both',
     ['tests/attacks/test_unordered_scoring.py', 'tests/attacks/test_attacks.py']),
    ('A2', 'link-stealing AUC with labels swapped', 'attacks/link_stealing.py',
     'return {"auc": float(roc_auc_score(y, v))',
     'return {"auc": float(roc_auc_score(1 - y, v))',
     ['tests/attacks/test_link_stealing.py']),
    ('A3', 'membership AUC with labels swapped', 'attacks/membership.py',
     'metrics = {"variant": aux.variant, "auc": float(roc_auc_score(t, s))',
     'metrics = {"variant": aux.variant, "auc": float(roc_auc_score(~t.astype(bool), s))',
     ['tests/attacks/test_membership.py']),
    ('A4', 'words-permuted baseline not permuted', 'attacks/metrics.py',
     'shuffled = features[:, torch.randperm(features.shape[1], generator=g)] if features.shape[0] else features',
     'shuffled = features',
     ['tests/attacks/test_support_dictionary.py']),
    ('AB1', 'Bonferroni correction dropped', 'attacks/dp_audit_bound.py',
     'alpha=alpha / ts.size, threshold=t)',
     'alpha=alpha, threshold=t)',
     ['tests/attacks/test_audit_bound.py']),
    ('AB2', 'α not split between the two rates', 'attacks/dp_audit_bound.py',
     'fpr_u = clopper_pearson_upper(fp, fp + tn, alpha / 2)',
     'fpr_u = clopper_pearson_upper(fp, fp + tn, alpha)',
     ['tests/attacks/test_audit_bound.py']),
    ('AB3', 'split-half bound counted on the selection half', 'attacks/dp_audit_bound.py',
     'return bound_from_counts(*_counts(s[test], m[test], chosen)',
     'return bound_from_counts(*_counts(s[pick], m[pick], chosen)',
     ['tests/attacks/test_audit_bound.py']),
    ('F1', 'the server sees sums revealed to clients only', 'privfgl/federation/runtime.py',
     '        for party in result.opened_by:\n            self.channel.observe(party',
     '        for party in dict.fromkeys((*result.opened_by, SERVER)):\n            self.channel.observe(party',
     ['tests/test_federation.py', 'tests/test_secure_fedavg.py', 'tests/test_opfgl.py']),
    ('F2', "plaintext inputs attached to ciphertext messages in the server's view", 'privfgl/federation/runtime.py',
     'if t.kind == "plaintext" and t.sender in clients and contributions is not None:',
     'if t.sender in clients and t.receiver == SERVER and contributions is not None:',
     ['tests/test_federation.py', 'tests/test_secure_fedavg.py', 'tests/protocols/test_protocols_sums.py']),
    ('F3', 'the server records client-to-client messages', 'privfgl/federation/channel.py',
     '        self.transcript.record(message.receiver, message)\n',
     "        self.transcript.record(message.receiver, message)\n        if message.receiver != 'server':\n            self.transcript.record('server', message)\n",
     ['tests/test_federation.py', 'tests/test_secure_fedavg.py']),
    ('F4', 'the view keeps live tensors, not copies', 'attacks/view.py',
     'memo[id(v)] = v.detach().clone()',
     'memo[id(v)] = v',
     ['tests/attacks/test_attacks.py', 'tests/test_federation.py']),
    ('O1', 'O-pFGL distributed noise share 1/K²', 'privfgl/methods/opfgl/dp.py',
     'share = 1.0 / len(clients)',
     'share = 1.0 / len(clients) ** 2',
     ['tests/test_opfgl.py', 'tests/attacks/test_dp_audits.py']),
    ('O2', 'O-pFGL central mode adds no noise', 'privfgl/methods/opfgl/dp.py',
     'if mode == "central":\n        total = mech.release(total, source)',
     'if False:\n        total = mech.release(total, source)',
     ['tests/test_opfgl.py', 'tests/attacks/test_dp_audits.py', 'tests/privacy/test_dp_randomness.py']),
    ('N1', 'OS uniforms cut to 21 bits', 'privfgl/privacy/noise.py',
     'bits = np.frombuffer(os.urandom(8 * n), dtype=np.uint64) >> np.uint64(11)\n        return torch.from_numpy((bits.astype(np.float64) + 0.5) * 2.0 ** -53)',
     'bits = np.frombuffer(os.urandom(8 * n), dtype=np.uint64) >> np.uint64(43)\n        return torch.from_numpy((bits.astype(np.float64) + 0.5) * 2.0 ** -21)',
     ['tests/privacy/test_privacy_mechanisms.py']),
    ('T1', "central DP not marked 'trusted server'", 'privfgl/privacy/trust.py',
     'trusted = mode == "central"',
     'trusted = False',
     ['tests/privacy/test_trust.py']),
    ('SA10', 'self-mask seed constant (zeros)', 'protocols/secagg/client.py',
     'self.b_seed = crypto.fresh_seed()',
     'self.b_seed = bytes(16)',
     ['tests/protocols/test_secagg.py']),
    ('P13', 'sampling amplification claimed under plain', 'privfgl/methods/dp_fedavg.py',
     '    if protocol == "plain":\n        return 1.0, NO_AMPLIFICATION',
     '    if protocol == "plain":\n        return q, NO_AMPLIFICATION',
     ['tests/privacy/test_dp_randomness.py', 'tests/privacy/test_privacy_runs.py']),
    ('P14', 'distributed noise under plain not refused', 'privfgl/privacy/spec.py',
     'if spec.mode == "distributed" and protocol == "plain":',
     'if False:',
     ['tests/privacy/test_privacy_spec.py', 'tests/test_cli.py']),
    ('P15', 'seed=os not secure', 'privfgl/privacy/spec.py',
     'secure = seed_text.lower() == OS',
     'secure = False',
     ['tests/privacy/test_privacy_spec.py', 'tests/privacy/test_dp_randomness.py']),
    ('SA11', 'share encryption not bound to the sum', 'protocols/secagg/client.py',
     'return sender_s_public + receiver_s_public',
     'return b""',
     ['tests/protocols/test_secagg_session_keys.py']),
    ('SA12', "the server asks for the dropped clients' self-mask shares", 'protocols/secagg/server.py',
     'out[v] = (sorted(mine & survivors), s_wanted)',
     'out[v] = (sorted(mine & shared), s_wanted)',
     ['tests/protocols/test_secagg.py']),
    ('D5', 'degree bound off by one', 'privfgl/privacy/dpsgd.py',
     'chosen[order] = rank < max_degree',
     'chosen[order] = rank <= max_degree',
     ['tests/privacy/test_privacy_dpsgd.py', 'tests/privacy/test_degree_bounding.py']),
    ('SP1', 'split rows clipped to 1.5 C', 'privfgl/privacy/split_dp.py',
     'return rows * (bound / size.clamp_min(bound)).unsqueeze(-1)',
     'return rows * (1.5 * bound / size.clamp_min(1.5 * bound)).unsqueeze(-1)',
     ['tests/fedgpl/test_split.py']),
    ('AC1', 'collusion baseline = truth', 'attacks/secagg_collusion.py',
     'guess = np.sum(truth, axis=0) / len(truth)',
     'guess = np.array(real, copy=True)',
     ['tests/protocols/test_secagg.py::test_secagg_collusion_audit_on_a_run', 'tests/attacks/test_attacks.py']),
    ('AC2', 'collusion score from the baseline', 'attacks/secagg_collusion.py',
     'err = float(np.abs(rec.upload - real).max())\n        metrics.update(max_abs_error=err, cosine=_cosine(rec.upload, real)',
     'err = float(np.abs(guess - real).max())\n        metrics.update(max_abs_error=err, cosine=_cosine(guess, real)',
     ['tests/protocols/test_secagg.py::test_secagg_collusion_audit_on_a_run', 'tests/attacks/test_attacks.py']),
    ('ER1', 'edge-recovery metrics = the degree baseline', 'attacks/edge_recovery.py',
     'metrics = {**pair_scores(rec.scores), **matched(rec.scores.double()), "nodes": n,',
     'metrics = {**pair_scores(deg[:, None] * deg[None, :]), **matched(deg[:, None] * deg[None, :]), "nodes": n,',
     ['tests/attacks/test_edge_recovery.py']),
]


def run_mutant(tree: Path, mutant, timeout_s: int) -> tuple[str, float]:
    """Apply the mutant in `tree`, run its tests, restore the file: ("caught" | "SURVIVED" | an error, s)."""
    _, _, path, old, new, tests = mutant
    target = tree / path
    source = target.read_text()
    if source.count(old) != 1:
        return f"text not found once in {path} (the code moved: update the mutant)", 0.0
    target.write_text(source.replace(old, new))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(tree),  # worker processes import the copy too
           "PRIVFGL_DATA": os.environ.get("PRIVFGL_DATA", str(SHARED_PLANETOID)), "CI": "true"}  # no data: fail
    start = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests],
                              cwd=tree, env=env, capture_output=True, text=True, timeout=timeout_s)
        outcome = {0: "SURVIVED", 1: "caught"}.get(done.returncode, f"pytest exit {done.returncode}")
    except subprocess.TimeoutExpired:
        outcome = f"timeout after {timeout_s} s"
    finally:
        target.write_text(source)
    return outcome, time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description="Run the mutants the test suite must catch.")
    ap.add_argument("--only", help="comma-separated mutant ids (default: all)")
    ap.add_argument("--list", action="store_true", help="print the mutants and exit")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per mutant (default 900)")
    args = ap.parse_args()
    chosen = MUTANTS
    if args.only:
        wanted = set(args.only.split(","))
        unknown = wanted - {m[0] for m in MUTANTS}
        if unknown:
            ap.error(f"--only: unknown mutant(s) {', '.join(sorted(unknown))}; valid: {', '.join(m[0] for m in MUTANTS)}")
        chosen = [m for m in MUTANTS if m[0] in wanted]
    print("| id | what breaks | file | tests | outcome | s |")
    print("|---|---|---|---|---|---|")
    if args.list:
        for m in chosen:
            print(f"| {m[0]} | {m[1]} | {m[2]} | {' '.join(m[5])} | | |")
        return 0
    failed = []
    with tempfile.TemporaryDirectory(prefix="privfgl-mutants-") as tmp:
        tree = Path(tmp) / "tree"
        shutil.copytree(REPO, tree, ignore=SKIP)  # the working tree as it is, uncommitted changes included
        for m in chosen:
            outcome, seconds = run_mutant(tree, m, args.timeout)
            print(f"| {m[0]} | {m[1]} | {m[2]} | {' '.join(m[5])} | {outcome} | {seconds:.0f} |", flush=True)
            if outcome != "caught":
                failed.append(m[0])
    print(f"{len(chosen) - len(failed)} of {len(chosen)} caught" + (f"; not caught: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
