"""he-key-recovery: the server recovers the CKKS secret key from a raw reveal, and nothing from the
default grid reveal, from BFV, or from sums it never sees; from its view alone, also on disk."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import protocols
from attacks import NoInput, parse_attack, run_attacks
from attacks.protocols.he_key_recovery import HEAux, HEKeyRecovery, HETruth, KeyRecovery, _Files, _sealapi, recover
from attacks.view import adversary_view, load_view, save_view
from privfgl.experiment import RunConfig, run
from privfgl.federation import Federation, Transcript, flatten


FAST_OPFGL = {"condense_iters": 10, "max_iters": 20, "eval_every": 10, "patience": 1, "hre_k": 1, "f_th": 0.9}


@pytest.fixture(scope="module")
def sbm_graph():
    from privfgl.data.synthetic import contextual_sbm
    return contextual_sbm(num_nodes=90, num_classes=3, num_features=400, homophily=0.85, seed=0)


class _Setup:
    """What the audit's runtime side reads: the federation (ground truth) and the client count."""

    def __init__(self, fed: Federation):
        self.federation, self.clients = fed, [None] * fed.num_clients


def audit_one_sum(name: str, values: int = 9000, clients: int = 3, **params) -> tuple[dict, dict]:
    """One FedAvg-like sum of `values` floats per client under `name`; the audit's (metrics, baseline)."""
    fed = Federation(clients, protocols.get_protocol(name, **params), Transcript("all"))
    gen = torch.Generator().manual_seed(0)
    fed.aggregate(0, "model_update", [{"w": torch.randn(values, generator=gen, dtype=torch.float64)}
                                      for _ in range(clients)])
    attack, view, setup = HEKeyRecovery(), adversary_view(fed.transcript), _Setup(fed)
    (target,) = attack.targets(view, None, clients)
    aux = attack.declare_aux(setup, None, target)
    return attack.score(attack.attack(view, aux), attack.truth(setup, target), aux)


@pytest.mark.parametrize("preset", ["sum", "default"])
def test_raw_ckks_reveal_gives_the_server_the_key_and_every_upload(preset):
    metrics, baseline = audit_one_sum("ckks", preset=preset, reveal="raw-unsafe")
    assert metrics["key_fraction"] == 1.0 and metrics["consistent"] is True
    assert metrics["uploads_recovered"] == 3 and metrics["max_abs_error"] < 1e-6
    assert baseline["key_fraction"] < 1e-12 and baseline["cosine"] < 0.9
    # the baseline (every client guessed as the mean upload) recovers none and errs by far more
    assert baseline["uploads_recovered"] == 0 and baseline["max_abs_error"] > 1e3 * metrics["max_abs_error"]


@pytest.mark.parametrize("preset", ["sum", "default"])
def test_grid_ckks_reveal_leaves_the_attack_at_chance(preset):
    metrics, baseline = audit_one_sum("ckks", preset=preset)
    assert metrics["key_fraction"] < 1e-3 and metrics["consistent"] is False
    assert metrics["uploads_recovered"] == 0
    assert abs(metrics["cosine"]) < 0.05 < baseline["cosine"]


def test_bfv_decrypts_exactly_so_the_same_attack_fails():
    metrics, _ = audit_one_sum("bfv", preset="sum")
    assert metrics["scheme"] == "bfv" and metrics["key_fraction"] < 1e-3
    assert metrics["uploads_recovered"] == 0


def test_the_bfv_attack_solves_the_true_decryption_equation():
    """With the real key, (c0 - Δm) + c1·s decrypts to 0: the attack's equation is right, and only the
    unknown decryption noise (rounded away by BFV) stops it."""
    bfv = protocols.get_protocol("bfv", preset="sum")
    result = bfv.aggregate([torch.tensor([3, 4, 5]), torch.tensor([1, 1, 1])])
    sa = _sealapi()
    files = _Files()
    try:
        (aggregate,) = [t for t in result.transfers if t.step == "aggregate"]
        ct = sa.Ciphertext()
        ct.load(bfv._context, files.write(aggregate.blobs[0]))
        plain = sa.Plaintext()
        sa.BatchEncoder(bfv._context).encode([4, 5, 6] + [0] * (bfv.slots - 3), plain)
        sa.Evaluator(bfv._context).sub_plain_inplace(ct, plain)
        out = sa.Plaintext()
        bfv._decryptor.decrypt(ct, out)
        assert out.is_zero()
    finally:
        files.close()


def opfgl_run(graph, **params):
    """O-pFGL under ckks preset "sum": class_stats is 3 classes x 2 x (2 x 400) values = 3 chunks."""
    cfg = RunConfig(method="opfgl", dataset="sbm", partition="louvain", clients=3, rounds=1, protocol="ckks",
                    protocol_params={"preset": "sum", **params}, transcript="all", progress=False,
                    method_params=FAST_OPFGL)
    return run(cfg, data=graph)[1]


@pytest.fixture(scope="module")
def opfgl_runs(sbm_graph):
    return {"grid": opfgl_run(sbm_graph), "raw": opfgl_run(sbm_graph, reveal="raw-unsafe")}


def attack_findings(setup, spec: str = "he-key-recovery") -> dict[str, dict]:
    cfg = RunConfig(method="opfgl", dataset="sbm", protocol="ckks")
    return {f.target: f.metrics for f in run_attacks(setup, cfg, [parse_attack(spec)])}


def test_opfgl_statistics_under_ckks_resist_the_attack(opfgl_runs):
    findings = attack_findings(opfgl_runs["grid"])
    assert set(findings) == {"class_stats", "class_counts"}  # floats under ckks, counts under bfv
    assert findings["class_stats"]["scheme"] == "ckks" and findings["class_counts"]["scheme"] == "bfv"
    assert all(m["key_fraction"] < 1e-3 and m["uploads_recovered"] == 0 for m in findings.values())


def test_opfgl_statistics_fall_under_the_raw_reveal(opfgl_runs):
    stats = attack_findings(opfgl_runs["raw"], "he-key-recovery:message=class_stats")["class_stats"]
    assert stats["key_fraction"] == 1.0 and stats["uploads_recovered"] == 3


def test_a_sum_the_server_never_sees_gives_no_input():
    """O-pFGL's server_efficient variant opens its sums to the clients only (reveal_to="clients")."""
    fed = Federation(3, protocols.get_protocol("ckks", preset="sum", reveal="raw-unsafe"), Transcript("all"))
    fed.aggregate(0, "class_stats", [{"S1": torch.rand(5000, dtype=torch.float64)} for _ in range(3)],
                  reveal_to="clients")
    attack, view, setup = HEKeyRecovery(), adversary_view(fed.transcript), _Setup(fed)
    with pytest.raises(NoInput, match="not revealed"):
        attack.attack(view, attack.declare_aux(setup, None, "class_stats"))


def test_an_auditors_own_script_recovers_the_uploads_from_the_saved_view(tmp_path):
    """The view on disk holds what the server received, as bytes: enough for the attack, with no
    privfgl object in between (recover() takes bytes and numbers only)."""
    fed = Federation(2, protocols.get_protocol("ckks", preset="sum", reveal="raw-unsafe"), Transcript("all"))
    xs = [{"w": torch.linspace(-1, 1, 4100, dtype=torch.float64) * (k + 1)} for k in range(2)]
    fed.aggregate(0, "model_update", xs)
    save_view(adversary_view(fed.transcript), tmp_path)
    view = load_view(tmp_path)
    (params,) = view.find("model_update:context")
    (aggregate,) = view.find("model_update:aggregate")
    revealed = flatten(view.payload("model_update:sum", 0, "server"))[0].numpy()
    uploads = [list(view.find("model_update", 0, f"client{k}")[0].blobs) for k in range(2)]
    found = recover(params.blobs[0], list(aggregate.blobs), revealed, uploads)
    for k in range(2):
        assert abs(found.uploads[k] - xs[k]["w"].numpy()).max() < 1e-6


def test_an_upload_counts_as_recovered_only_within_1e_5_of_its_largest_value():
    """The score's threshold, relative to max(1, the upload's largest magnitude): a decryption off by
    9e-6 of it counts (CKKS noise and the grid's rounding stay below), 2e-5 does not; the baseline
    (the mean upload) does not either."""
    real = [np.linspace(-100, 100, 50), np.linspace(-0.5, 0.5, 50)]
    got = [real[0] + 9e-4, real[1] + 2e-5]          # 9e-6 × 100; 2e-5 × max(1, 0.5)
    rec = KeyRecovery("ckks", np.zeros((1, 4), np.uint64), got, True)
    truth = HETruth(None, [65537], real)
    metrics, baseline = HEKeyRecovery().score(rec, truth, HEAux("model_update", 0, 2, 0))
    assert [c["recovered"] for c in metrics["per_client"]] == [True, False]
    assert metrics["uploads_recovered"] == 1 and baseline["uploads_recovered"] == 0
