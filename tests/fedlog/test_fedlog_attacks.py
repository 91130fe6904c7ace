"""What FedLoG's uploads leak to the server (attacks.uploads.fedlog_uploads): under plain, the generator
upload gives each client's exact training vocabulary and the class support its label distribution;
under a secure protocol the per-client uploads are opaque and only the sums can be read."""
import pytest

from attacks import parse_attack, run_attacks
from privfgl.experiment import RunConfig, run

SMALL = {"s": 4, "hidden": 32, "embed_dim": 16, "generator_epochs": 3, "generator_gnns": 2,
         "generator_hidden": "32", "batch_size": 256, "global_per_step": "share"}


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("PRIVFGL_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def audit(cora, protocol):
    cfg = RunConfig(method="fedlog", dataset="cora", partition="metis", clients=3, rounds=2, split=(0.4, 0.3, 0.3),
                    protocol=protocol, method_params=SMALL, progress=False, transcript="all")
    _, setup = run(cfg, data=cora)
    findings = run_attacks(setup, cfg, [parse_attack("gradient-inversion"), parse_attack("stats-reconstruction")])
    return {(f.name, f.target): f for f in findings}


def test_under_plain_the_generator_gives_each_clients_vocabulary_and_the_support_its_labels(cora):
    found = audit(cora, "plain")
    for k in range(3):
        words = found[("gradient-inversion", f"client{k}")]
        assert words.metrics["word_auc"] == pytest.approx(1.0, abs=1e-12)  # roc_auc_score sums the curve in floats
        assert words.metrics["detected_precision"] == 1.0
        assert words.metrics["detected_recall"] == 1.0 and words.baseline["word_auc"] < 0.9
        stats = found[("stats-reconstruction", f"client{k}")]
        assert stats.metrics["label_l1"] < 1e-9 < stats.baseline["label_l1"]


def test_under_crypten_the_client_uploads_are_opaque_and_only_sums_are_read(cora):
    found = audit(cora, "crypten")
    for k in range(3):
        for name in ("gradient-inversion", "stats-reconstruction"):
            assert "no_input" in found[(name, f"client{k}")].metrics
        union = found[("gradient-inversion", f"aggregate:client{k}")]
        assert union.metrics["detected_recall"] == 1.0  # the sum holds the union of the holders' words
        assert union.metrics["detected_precision"] < 1.0
